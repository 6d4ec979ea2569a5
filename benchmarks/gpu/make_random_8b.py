"""A Llama-3.1-8B-shape checkpoint with random weights, saved so that `quantkit convert` can read it.

llm-compressor's `oneshot` on a model built in memory from a config fails in its pre-processing
(it looks a processor up by the model's empty `name_or_path`), so the model is written to a
directory first. Weights are N(0, 0.02) like the model's own initializer, norms are ones; the
tensors are made shard by shard straight into safetensors files (no transformers model object),
which takes about a minute for 8B parameters instead of several. The tokenizer is SmolLM2's (ids
stay below its 49,152 entries, far inside the 128,256 vocabulary).

Random weights give real conversion times and real serving speed, never accuracy.
usage: python make_random_8b.py TOKENIZER_DIR OUT_DIR [--layers N] [--seed S]
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_8b_configs import LLAMA_31_8B  # noqa: E402

SHARD_BYTES = 5 * 1024**3


def layer_tensors(cfg: dict, i: int) -> dict[str, tuple[int, ...]]:
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    p = f"model.layers.{i}."
    return {
        p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
        p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
        p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
        p + "mlp.down_proj.weight": (h, inter),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=LLAMA_31_8B["num_hidden_layers"])
    ap.add_argument("--seed", type=int, default=0)
    # CPU by default: the GPUs may be serving (vLLM refuses to start when another process holds memory)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    cfg = {**LLAMA_31_8B, "num_hidden_layers": args.layers, "dtype": "bfloat16"}
    cfg.pop("torch_dtype", None)
    device = args.device
    gen = torch.Generator(device=device).manual_seed(args.seed)
    t0 = time.monotonic()
    tmp = args.out.with_name(args.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg["vocab_size"], cfg["hidden_size"])}
    for i in range(args.layers):
        shapes.update(layer_tensors(cfg, i))
    shapes["model.norm.weight"] = (cfg["hidden_size"],)
    shapes["lm_head.weight"] = (cfg["vocab_size"], cfg["hidden_size"])

    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        if size + 2 * n > SHARD_BYTES and shards[-1]:
            shards.append({})
            size = 0
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = torch.empty(shape, dtype=torch.bfloat16, device=device).normal_(0.0, 0.02, generator=gen).cpu()
        shards[-1][name] = t
        size += 2 * n
    weight_map, total = {}, 0
    for k, shard in enumerate(shards, 1):
        fname = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, tmp / fname, metadata={"format": "pt"})
        for name, t in shard.items():
            weight_map[name] = fname
            total += t.numel() * 2
    (tmp / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    (tmp / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]}))
    for f in args.tokenizer.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("special_tokens_map.json", "chat_template.jinja"):
            shutil.copy(f, tmp / f.name)
    shutil.rmtree(args.out, ignore_errors=True)
    tmp.rename(args.out)
    params = sum(t.numel() for s in shards for t in s.values())
    print(f"{args.out}: {params / 1e9:.2f}B parameters, {total / 1e9:.1f} GB in {len(shards)} shards, "
          f"{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
