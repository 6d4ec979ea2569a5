"""How much GPU memory a process still holds after `quantkit convert` has run in it, on a GPU.

`quantkit run` converts and then starts vLLM, which asks for 92% of the GPU. On 12-02 a forced fp8
conversion of the 8B model (data-free: loaded onto the GPU) left 16.8 GiB held in the quantkit
process, and vLLM refused to start. The llm-compressor backend now releases it
(quantize/llmcompressor.py: release_accelerator). This converts once in this process and prints
what the GPU holds before and after; `--no-release` turns the release off, for the reference
measured in the same session:

    python benchmarks/gpu/convert_releases_gpu.py /tmp/w8b/llama8b-random /tmp/fp8-check
    python benchmarks/gpu/convert_releases_gpu.py /tmp/w8b/llama8b-random /tmp/fp8-check --no-release
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path


def used_mib() -> int:
    out = subprocess.check_output(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], text=True)
    return int(out.split()[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("output", type=Path)
    ap.add_argument("--method", default="fp8")
    ap.add_argument("--no-release", action="store_true", help="the reference: keep what the conversion leaves")
    args = ap.parse_args()
    import torch

    from quantkit.quantize import convert, llmcompressor

    if args.no_release:
        llmcompressor.release_accelerator = lambda: None
    before = used_mib()
    record = convert(args.model, args.method, output=args.output, force=True)
    print(json.dumps({"release": not args.no_release, "method": args.method, "wall_time_s": record.wall_time_s,
                      "gpu_used_mib_before": before, "gpu_used_mib_after": used_mib(),
                      "torch_allocated_mib": torch.cuda.memory_allocated() // 2**20,
                      "torch_reserved_mib": torch.cuda.memory_reserved() // 2**20}))


if __name__ == "__main__":
    main()
