"""Which `--quantization` values does this vLLM accept for each checkpoint? (vLLM's own answer)

Runs in the vLLM environment. For every value vLLM knows (plus `marlin`, which its GPTQ/AWQ configs
take as an alias), builds vLLM's ModelConfig the way `vllm serve --quantization VALUE` does and
records whether it passed `_verify_quantization`. No weights are loaded, so this takes seconds;
serve/formats.py's table is checked against it.
usage: python vllm_flags.py DIR [DIR ...]   -> one line per DIR: MARKER {"model", "accepted", "resolved"}
"""

import json
import os
import sys

MARKER = "QUANTKIT_FLAGS "


def main():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm.config import ModelConfig
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    for path in sys.argv[1:]:
        accepted, resolved = [], {}
        for value in [*QUANTIZATION_METHODS, "marlin"]:
            try:
                config = ModelConfig(model=path, tokenizer=path, quantization=value, max_model_len=256)
            except Exception:  # vLLM's refusal (a pydantic ValidationError around its ValueError)
                continue
            accepted.append(value)
            resolved[value] = config.quantization
        auto = ModelConfig(model=path, tokenizer=path, max_model_len=256).quantization
        print(MARKER + json.dumps({"model": path, "accepted": accepted, "resolved": resolved, "auto": auto}), flush=True)


if __name__ == "__main__":
    main()
