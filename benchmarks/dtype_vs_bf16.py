"""Does the dtype quantkit picks for this CPU serve faster than bf16? (issue 38)

One checkpoint (default: the demo model), one vLLM server per dtype, one after another in the same
run: bfloat16, the dtype quantkit chooses here (`serve/hardware_fit.serving_dtype`: bfloat16 where
the CPU computes it natively, float32 elsewhere) and float32 if that is not the choice. Each server
gets the same fixed-concurrency points (default c=1 and c=4, 128 in / 32 out, 8 prompts a point,
one warm-up request), measured by quantkit's load generator. Prints output tok/s, TTFT p50 and
TPOT p50 per dtype and point, and each one's ratio to bf16.

Run it on the CPU it is about, or imitate a lesser one on an AVX-512 machine:

    .venv/bin/python benchmarks/dtype_vs_bf16.py [MODEL] [--concurrency 1,4] [--input-len 128]
        [--output-len 32] [-n 8] [--rounds 1]
    QUANTKIT_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python benchmarks/dtype_vs_bf16.py

(`--rounds 2` serves the dtypes in the order A B B A, so drift from other work on a shared CPU
falls on both.) A script, not a test: its figures go in the issue note.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from quantkit import models
from quantkit.machine import cpu_isa
from quantkit.measure.capacity.bench import run_bench
from quantkit.serve.config import ServeConfig
from quantkit.serve.hardware_fit import serving_dtype
from quantkit.serve.server import VLLMServer


def measure(model_dir: Path, dtype: str, args) -> dict[int, dict[str, float]]:
    config = ServeConfig(enforce_eager=True, dtype=dtype)
    with VLLMServer(model_dir, config) as server:
        served = server.info.dtype
        run = run_bench(server, model_dir, concurrency=args.concurrency, input_len=args.input_len,
                        output_len=args.output_len, num_prompts=args.num_prompts, warmup_requests=1,
                        out_dir=Path(args.out) if args.out else None)
    if served != dtype:
        print(f"  note: asked {dtype}, the engine computed in {served}", file=sys.stderr)
    return {p.concurrency: {"tok_s": p.output_tok_s, "ttft_ms": 1000 * p.ttft.p50, "tpot_ms": 1000 * p.tpot.p50,
                            "client_limited": bool(p.client_limited)} for p in run.points}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("-n", "--num-prompts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, choices=(1, 2))
    parser.add_argument("--out", default=None, help="where the bench JSON files go (default: beside the model)")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    model_dir = models.resolve(args.model).path
    isa = cpu_isa()
    chosen = serving_dtype(None, gpu=False, isa=isa)
    dtypes = ["bfloat16"] + ([chosen.dtype] if chosen.dtype != "bfloat16" else []) + \
             (["float32"] if "float32" not in (chosen.dtype, "bfloat16") else [])
    print(f"CPU: {isa.describe()}; quantkit serves {chosen.dtype} ({chosen.reason})", file=sys.stderr)
    order = dtypes + (dtypes[::-1] if args.rounds == 2 else [])
    found: dict[str, list[dict]] = {d: [] for d in dtypes}
    for dtype in order:
        print(f"serving {model_dir.name} in {dtype} ...", file=sys.stderr)
        found[dtype].append(measure(model_dir, dtype, args))

    def median(dtype: str, c: int, key: str) -> float:
        return statistics.median(r[c][key] for r in found[dtype])

    print(f"\n{model_dir.name}, {args.input_len} in / {args.output_len} out, {args.num_prompts} prompts a point, "
          f"{args.rounds} round(s); CPU {isa.describe()}; quantkit's choice: {chosen.dtype}")
    print(f"{'dtype':<10} {'c':>3} {'out tok/s':>10} {'x bf16':>7} {'TTFT p50 ms':>12} {'TPOT p50 ms':>12}")
    for dtype in dtypes:
        for c in args.concurrency:
            tok = median(dtype, c, "tok_s")
            star = "*" if any(r[c]["client_limited"] for r in found[dtype]) else ""
            mark = " (chosen)" if dtype == chosen.dtype else ""
            print(f"{dtype:<10} {c:>3} {tok:>9.1f}{star:1} {tok / median('bfloat16', c, 'tok_s'):>7.2f} "
                  f"{median(dtype, c, 'ttft_ms'):>12.0f} {median(dtype, c, 'tpot_ms'):>12.1f}{mark}")
    print("(* quantkit's client limited the point)")


if __name__ == "__main__":
    main()
