"""AutoAWQ worker: AWQ GEMM format (config quant_method awq, version gemm)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import finish, read_calibration, read_spec  # noqa: E402


def main():
    spec = read_spec()
    from awq import AutoAWQForCausalLM
    from transformers import AutoTokenizer

    texts = [s["text"] for s in read_calibration(spec)]
    quant_config = {"zero_point": not spec["symmetric"], "q_group_size": spec["group_size"] or 128,
                    "w_bit": spec["bits"], "version": "GEMM"}
    started = time.monotonic()
    model = AutoAWQForCausalLM.from_pretrained(spec["model"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model.quantize(tokenizer, quant_config=quant_config, calib_data=texts,
                   n_parallel_calib_samples=1, max_calib_samples=len(texts))
    model.save_quantized(spec["out"])
    tokenizer.save_pretrained(spec["out"])
    finish(started, "autoawq", "torch", "transformers")


if __name__ == "__main__":
    main()
