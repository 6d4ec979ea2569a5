"""What does the tuner cost against the full grid of the same space?

Runs `quantkit tune` twice on one checkpoint, each in a store of its own: the full grid
(`--sampler grid --no-prune`, budget = the grid's size) and the default search (TPE with the
median pruner) at `--budget`. Prints for each: servers started, wall time, capacity points, and the
best configuration with its goodput at capacity; then whether the search found the grid's best
(or one within the capacity tolerance of it), and the load average.

    .venv/bin/python benchmarks/tune_vs_grid.py [MODEL_DIR] [--budget 3]

A script, not a test: its figures go in the issue note.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quantkit import models

SPACE = ["--knobs", "max-num-seqs,max-num-batched-tokens", "--space", "max-num-seqs=2,4,default",
         "--space", "max-num-batched-tokens=128,default"]
WORKLOAD = ["--input-len", "64", "--output-len", "16", "--waves", "2", "--capacity-max", "16", "--enforce-eager"]


def tune(model_dir: Path, home: Path, slo: str, extra: list[str]) -> tuple[dict, float]:
    env = {**os.environ, "QUANTKIT_HOME": str(home)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "quantkit", "tune", str(model_dir), "--slo", slo, *SPACE, *WORKLOAD,
                           *extra, "--json"], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    return json.loads(proc.stdout), time.monotonic() - t0


def show(name: str, result: dict, seconds: float) -> None:
    best = result.get("best") or {}
    points = sum(t.get("points") or 0 for t in result["trials"])
    print(f"{name}: {result['server_starts']} servers, {seconds:.0f} s, {points} capacity points; best "
          f"{best.get('label')} at {best.get('value') or 0:.3f} req/s (gain {result.get('gain') or 0:.2f} x defaults); "
          f"load {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--budget", type=int, default=3)
    ap.add_argument("--slo", default="ttft_p95=3,tpot_p95=0.25")
    args = ap.parse_args()
    model_dir = Path(args.model_dir) if args.model_dir else models.resolve("smollm2-135m").path
    with tempfile.TemporaryDirectory() as tmp:
        grid, grid_s = tune(model_dir, Path(tmp) / "grid", args.slo, ["--sampler", "grid", "--no-prune", "--budget", "6"])
        show("full grid (6 configurations)", grid, grid_s)
        search, search_s = tune(model_dir, Path(tmp) / "tpe", args.slo, ["--budget", str(args.budget)])
        show(f"tuner (TPE + median pruner, budget {args.budget})", search, search_s)
    top = (grid.get("best") or {}).get("value") or 0
    found = (search.get("best") or {}).get("value") or 0
    print(f"tuner's best / grid's best: {found / top:.2f}" if top else "the grid found no configuration meeting the SLO")
    print(f"cost: {search['server_starts']} / {grid['server_starts']} servers, {search_s / grid_s:.2f} of the wall time")


if __name__ == "__main__":
    main()
