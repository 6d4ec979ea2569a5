"""The reference for benchmarks/convert_overhead.py: a bare llm-compressor call, no quantkit.

Same inputs as `quantkit convert MODEL --method M --num-samples N --seq-len L`: the same model
loaded in fp32, the same modifiers, the same C4 records (first N usable after a seeded shuffle,
truncated to L tokens), the same compressed save in bf16.
usage: python bare_oneshot.py MODEL_DIR METHOD OUT_DIR NUM_SAMPLES SEQ_LEN C4_JSONL
"""

import json
import random
import sys

import torch
from compressed_tensors.quantization import preset_name_to_scheme
from datasets import Dataset
from llmcompressor import oneshot
from llmcompressor.modifiers.gptq import GPTQModifier
from llmcompressor.modifiers.quantization import QuantizationModifier
from llmcompressor.modifiers.transform import AWQModifier
from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier
from llmcompressor.pipelines.cache import IntermediatesCache
from transformers import AutoModelForCausalLM, AutoTokenizer

model_dir, method, out, num_samples, seq_len, c4 = sys.argv[1:7]
num_samples, seq_len = int(num_samples), int(seq_len)
IntermediatesCache.pin_memory = lambda self, *a, **k: None  # CPU-only torch (same fix as quantkit)


def scheme(preset, group):
    s = preset_name_to_scheme(preset, ["Linear"])
    if s.weights is not None and s.weights.strategy == "group":
        s.weights = s.weights.model_copy(update={"group_size": group} if group else {"strategy": "channel", "group_size": None})
    return {"config_groups": {"group_0": s}, "ignore": ["lm_head"]}


recipe = {
    "awq": lambda: [AWQModifier(duo_scaling=True), QuantizationModifier(**scheme("W4A16_ASYM", 64))],
    "gptq": lambda: [GPTQModifier(**scheme("W4A16", 64), dampening_frac=0.01)],
    "int8": lambda: [SmoothQuantModifier(smoothing_strength=0.8), GPTQModifier(**scheme("W8A8", None))],
    "fp8": lambda: [QuantizationModifier(**scheme("FP8_DYNAMIC", None))],
    "w4a16-rtn": lambda: [QuantizationModifier(**scheme("W4A16", 64))],
}[method]()

tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
kwargs = {}
if method in ("awq", "gptq", "int8"):
    texts = [json.loads(line)["text"] for line in open(c4)]
    random.Random(0).shuffle(texts)
    samples = []
    for text in texts:
        ids = tokenizer(text)["input_ids"][:seq_len]
        if len(ids) >= 2:
            samples.append({"input_ids": ids, "attention_mask": [1] * len(ids)})
        if len(samples) == num_samples:
            break
    kwargs = dict(dataset=Dataset.from_list(samples), num_calibration_samples=num_samples,
                  max_seq_length=seq_len, shuffle_calibration_samples=False)
oneshot(model=model, recipe=recipe, processor=tokenizer, **kwargs)
model.to(torch.bfloat16)
model.save_pretrained(out, save_compressed=True)
tokenizer.save_pretrained(out)
