"""Benchmark: `quantkit convert` against a bare llm-compressor `oneshot` on the same inputs.

Per method on SmolLM2-135M (the built-in demo model), runs both as whole processes, alternating
A B A B, and prints the median wall time and peak RSS of each, the output size, and the ratio
quantkit / bare (goal: <= 1.05). Calibrated methods use --num-samples/--seq-len (defaults keep the
whole run to minutes on 2 cores; the 64 x 512 recipe defaults take 20-50 min per method here).

usage: .venv/bin/python benchmarks/convert_overhead.py [--methods fp8,w4a16-rtn,gptq,awq,int8]
       [--runs 3] [--num-samples 16] [--seq-len 128]
Needs QUANTKIT_DATA_DIR (C4 offline) — the Makefile sets it to ../shared/data.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one whole process, from GNU time's own accounting."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as fh:
        proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", fh.name, *cmd], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
        wall, rss_kb = fh.read().split()[-2:]
    return float(wall), float(rss_kb) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--methods", default="fp8,w4a16-rtn,gptq,awq,int8")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--num-samples", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args()

    from quantkit import models, settings

    data = settings.data_dir()
    if data is None:
        sys.exit("set QUANTKIT_DATA_DIR (../shared/data) for offline C4")
    model_dir = models.resolve("smollm2-135m").path
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    work = Path(tempfile.mkdtemp(prefix="qk-bench-"))
    rows = []
    try:
        for method in args.methods.split(","):
            ours, bare, ratios = [], [], []
            for run in range(args.runs):
                out_a, out_b = work / f"{method}-qk-{run}", work / f"{method}-bare-{run}"
                a = timed([sys.executable, "-m", "quantkit", "convert", str(model_dir), "--method", method,
                           "-o", str(out_a), "--num-samples", str(args.num_samples), "--seq-len", str(args.seq_len)], env)
                b = timed([sys.executable, str(HERE / "bare_oneshot.py"), str(model_dir), method, str(out_b),
                           str(args.num_samples), str(args.seq_len), str(data / "c4" / "en_train_first1000.jsonl")], env)
                ours.append(a), bare.append(b), ratios.append(a[0] / b[0])
                size = sum(p.stat().st_size for p in out_b.glob("*.safetensors")) / 1e6
                shutil.rmtree(out_a), shutil.rmtree(out_b)
                print(f"{method} run {run + 1}: quantkit {a[0]:.1f} s {a[1]:.0f} MB | bare {b[0]:.1f} s {b[1]:.0f} MB", file=sys.stderr)
            rows.append((method, statistics.median(w for w, _ in ours), max(m for _, m in ours),
                         statistics.median(w for w, _ in bare), max(m for _, m in bare), size,
                         statistics.median(ratios), min(ratios), max(ratios)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"SmolLM2-135M, {args.runs} runs each (A B alternating), calibration {args.num_samples} x {args.seq_len} tokens")
    print(f"{'method':<10} {'quantkit s':>10} {'RSS MB':>7} {'bare s':>8} {'RSS MB':>7} {'size MB':>8} {'ratio med':>9} {'min':>5} {'max':>5}")
    for m, qw, qm, bw, bm, size, r, rmin, rmax in rows:
        print(f"{m:<10} {qw:>10.1f} {qm:>7.0f} {bw:>8.1f} {bm:>7.0f} {size:>8.1f} {r:>9.3f} {rmin:>5.2f} {rmax:>5.2f}")


if __name__ == "__main__":
    main()
