"""optimum worker: optimum.gptq.GPTQQuantizer (its kernels come from GPTQModel)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import carry_options, finish, fix_quantization_config, read_calibration, read_spec  # noqa: E402

RENAMES = {"dampening_frac": "damp_percent"}
# GPTQQuantizer keyword arguments a recipe may set
QUANTIZER_OPTIONS = {"damp_percent", "true_sequential", "act_group_aware", "modules_in_block_to_quantize"}


def main():
    spec = read_spec()
    from optimum.gptq import GPTQQuantizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    samples = read_calibration(spec)
    texts = [s["text"] for s in samples]
    seq_len = max((len(s["input_ids"]) for s in samples), default=2048)
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"])
    options = carry_options(spec.get("options"), QUANTIZER_OPTIONS, RENAMES, "optimum's GPTQQuantizer")
    quantizer = GPTQQuantizer(bits=spec["bits"], dataset=texts, group_size=spec["group_size"] or -1,
                              sym=spec["symmetric"], desc_act=False, model_seqlen=seq_len, **options)
    started = time.monotonic()
    quantized = quantizer.quantize_model(model, tokenizer)
    quantizer.save(quantized, spec["out"])
    tokenizer.save_pretrained(spec["out"])
    # optimum 2.3 writes `format: gptq_v2` into config.json although GPTQModel packed the weights as
    # v1 (qzeros hold zero - 1; quantize_config.json says gptq): a loader that trusts config.json
    # would shift every zero point. It also copies the whole calibration set into both files; the
    # calibration set is described in quantkit.json instead.
    fix_quantization_config(spec["out"], drop=("dataset",), set_values={"format": "gptq"})
    finish(started, "optimum", "gptqmodel", "torch", "transformers")


if __name__ == "__main__":
    main()
