"""AutoAWQ worker: AWQ GEMM format (config quant_method awq, version gemm)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import carry_options, finish, read_calibration, read_spec  # noqa: E402

# keyword arguments of AutoAWQ's quantize() a recipe may set (llm-compressor's duo_scaling is one)
QUANTIZE_OPTIONS = {"duo_scaling", "apply_clip", "max_chunk_memory"}


def snapshot_by_copy() -> None:
    """AutoAWQ 0.2.9's scale search saves a block's weights as `{k: v.cpu() for k, v in
    state_dict()}`, tries each of 20 ratios with an in-place `weight.mul_(scales)` and restores the
    saved weights after each. On a GPU `.cpu()` copies; on the CPU it returns the same tensors, so
    the first trial scales the "saved" weights too and every restore brings back a rescaled block:
    the search compounds 20 scalings instead of comparing them (the cause of its 19x perplexity
    here). Saving copies makes the CPU run the search the GPU runs; on a GPU nothing changes."""
    import torch
    from awq.quantize.quantizer import AwqQuantizer

    if torch.cuda.is_available():
        return
    search = AwqQuantizer._compute_best_scale

    def compute_best_scale(self, x, w_mean, x_mean, module2inspect, *args, **kwargs):
        live = module2inspect.state_dict
        module2inspect.state_dict = lambda *a, **k: {n: t.clone() for n, t in live(*a, **k).items()}
        try:
            return search(self, x, w_mean, x_mean, module2inspect, *args, **kwargs)
        finally:
            del module2inspect.state_dict  # the instance attribute: the class's method again

    AwqQuantizer._compute_best_scale = compute_best_scale


def main():
    spec = read_spec()
    from awq import AutoAWQForCausalLM
    from transformers import AutoTokenizer

    snapshot_by_copy()

    samples = read_calibration(spec)
    texts = [s["text"] for s in samples]
    seq_len = max((len(s["input_ids"]) for s in samples), default=512)
    quant_config = {"zero_point": not spec["symmetric"], "q_group_size": spec["group_size"] or 128,
                    "w_bit": spec["bits"], "version": "GEMM"}
    options = carry_options(spec.get("options"), QUANTIZE_OPTIONS, {}, "AutoAWQ's quantize()")
    started = time.monotonic()
    model = AutoAWQForCausalLM.from_pretrained(spec["model"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    # AutoAWQ joins the texts and cuts them into max_calib_seq_len blocks: the same block length
    # as quantkit's samples keeps the calibration set the one quantkit.json describes
    model.quantize(tokenizer, quant_config=quant_config, calib_data=texts, n_parallel_calib_samples=1,
                   max_calib_samples=len(texts), max_calib_seq_len=seq_len, **options)
    model.save_quantized(spec["out"])
    tokenizer.save_pretrained(spec["out"])
    finish(started, "autoawq", "torch", "transformers")


if __name__ == "__main__":
    main()
