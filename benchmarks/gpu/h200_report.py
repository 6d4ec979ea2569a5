"""Build the H200 throughput report from the bench JSONs that h200_bench.sh brought back.

The variants are config-only Llama-3.1-8B-shape checkpoints served with --load-format dummy, so
the report has throughput and latency but no accuracy (random weights); it says so.
usage: .venv/bin/python benchmarks/gpu/h200_report.py RAW_DIR OUT_DIR
"""

import json
import sys
from pathlib import Path

from quantkit.report import Variant, build_report, write_report

# bytes of weights per variant at Llama-3.1-8B shape (what one decode step reads), from the
# parameter count: 8.03e9 parameters, of which 1.05e9 embedding + 1.05e9 lm_head stay bf16
PARAMS, EMBED, HEAD = 8.03e9, 128256 * 4096, 128256 * 4096
LINEAR = PARAMS - EMBED - HEAD
SIZES = {"bf16": PARAMS * 2, "fp8": LINEAR * 1 + (EMBED + HEAD) * 2, "int8": LINEAR * 1 + (EMBED + HEAD) * 2,
         "w4a16": LINEAR * 0.5 + LINEAR / 128 * 2 + (EMBED + HEAD) * 2}
FORMATS = {"bf16": "bf16", "fp8": "FP8_DYNAMIC", "int8": "W8A8", "w4a16": "W4A16 g128"}


def main():
    raw, out = Path(sys.argv[1]), Path(sys.argv[2])
    gpu = (raw / "gpu.txt").read_text().split(",")
    variants = []
    for name in ("bf16", "fp8", "int8", "w4a16"):
        bench = json.loads((raw / f"bench-{name}.json").read_text())
        sweep = raw / f"sweep-{name}.json"
        if sweep.exists():  # the knee search ran on the same server: its points include the knee's
            swept = json.loads(sweep.read_text())
            seen = {p["concurrency"] for p in bench["points"]}
            bench["points"] += [p for p in swept["points"] if p["concurrency"] not in seen]
            bench["points"].sort(key=lambda p: p["concurrency"])
            bench["knee"] = swept["knee"]
        bench.setdefault("hardware", {})["gpu"] = gpu[0].strip()
        variants.append(Variant(name="baseline" if name == "bf16" else name, method=FORMATS[name],
                                model_dir=f"llama8b-{name} (config-only, --load-format dummy)",
                                bench=bench, size_bytes=int(SIZES[name])))
    env = {"device": gpu[0].strip(), "driver": gpu[1].strip(), "gpu_memory": gpu[2].strip(),
           "vllm": "0.26.0", "torch": "2.11.0+cu130", "transformers": "5.17.0",
           "model": "Llama-3.1-8B shape, random weights (--load-format dummy)",
           "workload": "512 input / 256 output tokens, ignore_eos, streamed"}
    report = build_report(variants, title="H200: Llama-3.1-8B-shape throughput by precision (vLLM 0.26.0)",
                          environment=env)
    for kind, path in write_report(report, out).items():
        print(kind, path)


if __name__ == "__main__":
    main()
