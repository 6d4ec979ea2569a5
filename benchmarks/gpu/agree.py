"""One line: `vllm bench serve` against `quantkit bench` on the same server and load.

usage: python agree.py VLLM_RESULT.json QUANTKIT_BENCH.json
The ratio is quantkit's output tok/s over vLLM's; the two clients are independent, so a ratio
near 1 (and matching TPOT/TTFT medians) says quantkit's load generator measures what vLLM's does.
"""

import json
import sys

v = json.load(open(sys.argv[1]))
q = json.load(open(sys.argv[2]))["points"][0]
print(f"agree c={q['concurrency']}: vllm {v['output_throughput']:.1f} tok/s, quantkit {q['output_tok_s']:.1f} tok/s, "
      f"ratio {q['output_tok_s'] / v['output_throughput']:.3f}; TPOT med {v['median_tpot_ms']:.2f} vs "
      f"{q['tpot']['p50'] * 1e3:.2f} ms; TTFT med {v['median_ttft_ms']:.1f} vs {q['ttft']['p50'] * 1e3:.1f} ms")
