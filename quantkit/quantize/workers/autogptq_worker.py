"""AutoGPTQ worker (CUDA only: AutoGPTQ refuses to quantize on a CPU).

AutoGPTQ 0.7.1 is archived upstream and imports only with transformers 4.57.x (docs/DESIGN.md, "What was seen"); both
of its dead ends are reported as one line that names the backend that works instead.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import fail, finish, read_calibration, read_spec  # noqa: E402

ALTERNATIVE = "use --backend gptqmodel (GPTQ in the same checkpoint format, CPU or GPU)"


def main():
    spec = read_spec()
    try:
        import torch
        from auto_gptq import AutoGPTQForCausalLM, BaseQuantizeConfig
        from transformers import AutoTokenizer
    except ImportError as exc:
        import importlib.metadata as md

        try:
            found = md.version("transformers")
        except md.PackageNotFoundError:
            found = "none"
        fail(f"AutoGPTQ 0.7.1 does not import here ({exc}; it needs transformers 4.57.x, this environment "
             f"has {found}): {ALTERNATIVE}")

    config = BaseQuantizeConfig(bits=spec["bits"], group_size=spec["group_size"] or -1,
                                sym=spec["symmetric"], desc_act=False)
    examples = [{"input_ids": torch.tensor([s["input_ids"]]), "attention_mask": torch.tensor([s["attention_mask"]])}
                for s in read_calibration(spec)]
    started = time.monotonic()
    try:
        model = AutoGPTQForCausalLM.from_pretrained(spec["model"], config)
    except OSError as exc:
        if "requires CUDA" not in str(exc):
            raise
        # its own words: "Load pretrained model to do quantization requires CUDA available."
        fail(f"AutoGPTQ refuses to quantize without a CUDA GPU ({str(exc).strip()}): {ALTERNATIVE}")
    model.quantize(examples)
    model.save_quantized(spec["out"], use_safetensors=True)
    AutoTokenizer.from_pretrained(spec["model"]).save_pretrained(spec["out"])
    finish(started, "auto-gptq", "torch", "transformers")


if __name__ == "__main__":
    main()
