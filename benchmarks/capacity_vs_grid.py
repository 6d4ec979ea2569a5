"""How many load points does the capacity search spend, against a dense grid on the same server?

One vLLM server; the SLO is calibrated to it (a TPOT p95 bound of `--factor` x what one stream
gets at the start, so the capacity falls inside the grid on any machine, quiet or busy), then,
interleaved A B A: the capacity search, the dense grid (every concurrency 1..--max, each point the
same size the search uses), the capacity search again. Prints the points and wall time of each,
the grid's truth (the highest concurrency that met the SLO) and where each search landed, and the
load average (a shared machine moves the figures; the interleaving spreads the drift).

    .venv/bin/python benchmarks/capacity_vs_grid.py [MODEL_DIR] [--max 16] [--factor 2.5]

A script, not a test: its figures go in the issue note.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from quantkit import models
from quantkit.measure.capacity.bench import measure_point
from quantkit.measure.capacity.live import CapacitySettings, run_capacity
from quantkit.measure.loadgen.generator import Target, run_point
from quantkit.measure.stats.slo import parse_slo
from quantkit.measure.loadgen.workload import PromptSource
from quantkit.serve.config import ServeConfig
from quantkit.serve.server import VLLMServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--max", type=int, default=16)
    ap.add_argument("--factor", type=float, default=2.5)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--tolerance", type=float, default=0.10)
    args = ap.parse_args()
    model_dir = Path(args.model_dir) if args.model_dir else models.resolve("smollm2-135m").path
    settings = CapacitySettings(input_len=args.input_len, output_len=args.output_len, waves=2, min_requests=16,
                                max=args.max, tolerance=args.tolerance, warmup=0)
    with VLLMServer(model_dir, ServeConfig(enforce_eager=True)) as server:
        source = PromptSource(model_dir, args.input_len, seed=99)
        target = Target(api_url=server.api_url, model=server.model_name)
        single = run_point(target, source.prompts(16, 0), args.output_len, concurrency=1)
        slo = parse_slo(f"ttft_p95=10,tpot_p95={args.factor * single.tpot.p95:.4f}")
        print(f"SLO {slo} (TPOT p95 at c=1: {single.tpot.p95 * 1000:.1f} ms); load {os.getloadavg()[0]:.1f}")
        searches = []
        for order in ("A", "B", "A"):
            t0 = time.monotonic()
            if order == "A":
                result = run_capacity(server, model_dir, slo, settings, prompts=source)
                searches.append(result)
                print(f"search: {result.points_spent} points {[p.concurrency for p in result.points]}, "
                      f"{time.monotonic() - t0:.0f} s: capacity {result.search.capacity} ({result.search.reason}); "
                      f"load {os.getloadavg()[0]:.1f}")
            else:
                passed = []
                for c in range(1, args.max + 1):
                    p = measure_point(server, target, source.prompts(settings.requests(c), 1000 + c), args.output_len,
                                      slo=slo, concurrency=c, input_len=args.input_len)
                    passed.append((c, bool(p.slo_met)))
                # the grid's capacity: the highest concurrency below its first failure (a shared
                # machine can fail a load and pass a higher one; the highest pass is printed too)
                first_fail = next((c for c, ok in passed if not ok), None)
                truth = (first_fail - 1 if first_fail else args.max) or None
                highest = max((c for c, ok in passed if ok), default=None)
                print(f"grid: {len(passed)} points, {time.monotonic() - t0:.0f} s: capacity c={truth} (highest pass "
                      f"c={highest}; failed at {[c for c, ok in passed if not ok] or 'none'}); load {os.getloadavg()[0]:.1f}")
        for r in searches:
            print(f"search vs grid truth {truth}: found {r.search.capacity}, within tolerance: "
                  f"{r.search.capacity is not None and truth is not None and abs(r.search.capacity - truth) <= max(1, args.tolerance * truth)}")


if __name__ == "__main__":
    main()
