"""Cut a Llama-style checkpoint to its first N decoder layers, keeping their real weights.

Calibrated quantizers on 2 CPU cores take minutes per layer (AutoAWQ's grid search most of all), so
the backend tests and docs/BACKENDS.md quantize a 2-layer cut of the demo model: real weight
statistics (unlike a random tiny model) at a 15th of the demo model's depth.

usage: python scripts/cut_model.py SRC_DIR OUT_DIR [--layers 2]
"""

from __future__ import annotations

import argparse
from pathlib import Path


def cut(src: Path, out: Path, layers: int = 2) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(src)
    if layers >= config.num_hidden_layers:
        raise SystemExit(f"{src} has {config.num_hidden_layers} layers; a cut keeps fewer")
    model = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.bfloat16)
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    if getattr(model.config, "layer_types", None):  # newer configs list one entry per layer
        model.config.layer_types = model.config.layer_types[:layers]
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    print(cut(args.src, args.out, args.layers))


if __name__ == "__main__":
    main()
