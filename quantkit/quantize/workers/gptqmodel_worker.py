"""GPTQModel worker: GPTQ or AWQ in GPTQModel's native format (vLLM loads it as gptq / awq)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import finish, read_calibration, read_spec  # noqa: E402


def main():
    spec = read_spec()
    from gptqmodel import GPTQModel, QuantizeConfig
    from gptqmodel.quantization import METHOD

    kwargs = dict(bits=spec["bits"], group_size=spec["group_size"] or -1, sym=spec["symmetric"], desc_act=False)
    if spec["method"] == "awq":
        kwargs["quant_method"] = METHOD.AWQ
    # recipe options are written for llm-compressor; carry over the ones GPTQModel also has
    renames = {"dampening_frac": "damp_percent"}
    fields = set(getattr(QuantizeConfig, "__dataclass_fields__", {}))
    for key, value in (spec.get("options") or {}).items():
        key = renames.get(key, key)
        if key in fields:
            kwargs[key] = value
        else:
            print(f"quantkit: ignoring option {key!r}: GPTQModel's QuantizeConfig has no such field", file=sys.stderr)
    config = QuantizeConfig(**kwargs)
    samples = [{"input_ids": s["input_ids"], "attention_mask": s["attention_mask"]} for s in read_calibration(spec)]
    started = time.monotonic()
    model = GPTQModel.load(spec["model"], config)
    model.quantize(samples, batch_size=1)
    model.save(spec["out"])
    finish(started, "gptqmodel", "torch", "transformers")


if __name__ == "__main__":
    main()
