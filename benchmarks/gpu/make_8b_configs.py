"""Config-only Llama-3.1-8B-shape checkpoints for `vllm serve --load-format dummy` throughput work.

For each variant: config.json (Llama-3.1-8B dimensions) + a tokenizer (SmolLM2's: ids stay below
its 49,152 entries, far inside the 128,256 vocabulary) + for quantized variants the
`quantization_config` block that `quantkit convert` wrote (copied from a real quantkit output,
group size set to 128, which divides every 8B Linear). Random weights: speed only, no accuracy.

usage: python make_8b_configs.py TOKENIZER_DIR QCONFIG_DIR OUT_DIR [variant ...]
       variants: bf16 or a QCONFIG_DIR/NAME.json (default set: bf16 fp8 int8 w4a16)
"""

import json
import shutil
import sys
from pathlib import Path

LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
}


def main():
    tok, qdir, out = map(Path, sys.argv[1:4])
    variants = sys.argv[4:] or ["bf16", "fp8", "int8", "w4a16"]
    for name in variants:
        d = out / f"llama8b-{name}"
        d.mkdir(parents=True, exist_ok=True)
        config = dict(LLAMA_31_8B)
        if name != "bf16":
            qc = json.loads((qdir / f"{name}.json").read_text())
            for group in qc.get("config_groups", {}).values():
                w = group.get("weights") or {}
                if w.get("strategy") == "group":
                    w["group_size"] = 128
            config["quantization_config"] = qc
        (d / "config.json").write_text(json.dumps(config, indent=2))
        for f in tok.iterdir():
            if f.name.startswith("tokenizer") or f.name in ("special_tokens_map.json", "chat_template.jinja"):
                shutil.copy(f, d / f.name)
        # no quantkit.json: these folders were not converted; a bench names them by their config's
        # own quantization (bf16 when none), the variant label is given at `runs import`
        print(d)


if __name__ == "__main__":
    main()
