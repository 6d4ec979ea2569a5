"""optimum worker: optimum.gptq.GPTQQuantizer (its kernels come from GPTQModel)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import finish, read_calibration, read_spec  # noqa: E402


def main():
    spec = read_spec()
    from optimum.gptq import GPTQQuantizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    texts = [s["text"] for s in read_calibration(spec)]
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"])
    quantizer = GPTQQuantizer(bits=spec["bits"], dataset=texts, group_size=spec["group_size"] or -1,
                              sym=spec["symmetric"], desc_act=False, model_seqlen=2048)
    started = time.monotonic()
    quantized = quantizer.quantize_model(model, tokenizer)
    quantizer.save(quantized, spec["out"])
    tokenizer.save_pretrained(spec["out"])
    finish(started, "optimum", "gptqmodel", "torch", "transformers")


if __name__ == "__main__":
    main()
