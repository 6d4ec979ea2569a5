"""AutoGPTQ worker (CUDA only: AutoGPTQ refuses to quantize on a CPU)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import finish, read_calibration, read_spec  # noqa: E402


def main():
    spec = read_spec()
    import torch
    from auto_gptq import AutoGPTQForCausalLM, BaseQuantizeConfig
    from transformers import AutoTokenizer

    config = BaseQuantizeConfig(bits=spec["bits"], group_size=spec["group_size"] or -1,
                                sym=spec["symmetric"], desc_act=False)
    examples = [{"input_ids": torch.tensor([s["input_ids"]]), "attention_mask": torch.tensor([s["attention_mask"]])}
                for s in read_calibration(spec)]
    started = time.monotonic()
    model = AutoGPTQForCausalLM.from_pretrained(spec["model"], config)
    model.quantize(examples)
    model.save_quantized(spec["out"], use_safetensors=True)
    AutoTokenizer.from_pretrained(spec["model"]).save_pretrained(spec["out"])
    finish(started, "auto-gptq", "torch", "transformers")


if __name__ == "__main__":
    main()
