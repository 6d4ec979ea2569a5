"""GPTQModel worker: GPTQ or AWQ in GPTQModel's native format (vLLM loads it as gptq / awq)."""

import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import carry_options, fail, finish, read_calibration, read_spec  # noqa: E402

# llm-compressor's option names -> GPTQModel's
RENAMES = {"dampening_frac": "damp_percent"}


def main():
    spec = read_spec()
    from gptqmodel import GPTQModel, QuantizeConfig
    from gptqmodel.quantization import METHOD

    kwargs = dict(bits=spec["bits"], group_size=spec["group_size"] or -1, sym=spec["symmetric"], desc_act=False,
                  # its offload scratch goes to the work folder quantkit removes, not to /tmp
                  offload_to_disk_path=os.path.join(os.getcwd(), "offload"))
    if spec["method"] == "awq":
        kwargs["quant_method"] = METHOD.AWQ
    # QuantizeConfig(...) returns a method-specific dataclass (GPTQConfig, AWQConfig): its fields
    # say which recipe options carry over (damp_percent is GPTQ's only)
    config_cls = type(QuantizeConfig(**kwargs))
    fields = {f.name for f in dataclasses.fields(config_cls)}
    config = QuantizeConfig(**kwargs, **carry_options(spec.get("options"), fields, RENAMES, "GPTQModel"))
    samples = [{"input_ids": s["input_ids"], "attention_mask": s["attention_mask"]} for s in read_calibration(spec)]
    started = time.monotonic()
    model = GPTQModel.load(spec["model"], config)
    try:
        model.quantize(samples, batch_size=1)
    except ValueError as exc:  # 7.6's AWQ kernels: "AWQ: CUDA is not available." (quantkit refuses that earlier)
        if "CUDA is not available" not in str(exc):
            raise
        fail(f"GPTQModel cannot pack {spec['method']} weights without CUDA ({exc}); on a CPU use --backend autoawq "
             "for AWQ, or --method gptq")
    model.save(spec["out"])
    finish(started, "gptqmodel", "torch", "transformers")


if __name__ == "__main__":
    main()
