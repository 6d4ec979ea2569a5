"""A checkpoint's tokenizer for building prompts, without importing torch.

transformers' AutoTokenizer imports torch, scikit-learn and pandas first: ~7 s on 2 cores before
`quantkit bench --url` could even say that the URL is unreachable. A checkpoint with a
`tokenizer.json` (every fast tokenizer) is read by the `tokenizers` library itself in ~0.1 s;
its special tokens are the ones transformers names special (`all_special_ids`: the named ones,
bos, eos, unk, sep, pad, cls, mask, and the extra ones of tokenizer_config.json), so the random
prompts are the same token ids either way (tests/unit/test_prompt_tokenizer.py compares them).
A checkpoint without one, or with a config this reading does not cover, goes through transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

# transformers' SPECIAL_TOKENS_ATTRIBUTES
NAMED_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
EXTRA_SPECIAL = ("additional_special_tokens", "extra_special_tokens")


@dataclass(frozen=True)
class PromptTokenizer:
    """What building prompts needs of a tokenizer, whichever library read it (`reader`)."""

    reader: Literal["tokenizers", "transformers"]
    special_ids: frozenset[int]
    size: int
    decode: Callable[[list[int]], str]


def load(folder: Path) -> PromptTokenizer:
    """The tokenizer of checkpoint `folder`: `tokenizers` on its tokenizer.json where its special
    tokens can be read from tokenizer_config.json, else transformers."""
    fast = _load_fast(folder)
    if fast is not None:
        return fast
    from transformers import AutoTokenizer  # heavy: imports torch

    from .console import library_output

    with library_output("transformers: tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return PromptTokenizer("transformers", frozenset(tokenizer.all_special_ids or []), len(tokenizer), tokenizer.decode)


def _load_fast(folder: Path) -> PromptTokenizer | None:
    path, config_path = folder / "tokenizer.json", folder / "tokenizer_config.json"
    if not path.is_file() or not config_path.is_file():
        return None
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return None
    names = _special_names(config) if isinstance(config, dict) else None
    if names is None:
        return None
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception:  # a tokenizer.json this tokenizers release cannot read: transformers may
        return None
    ids = [tokenizer.token_to_id(name) for name in names]
    if any(i is None for i in ids):  # a special token outside the vocabulary: transformers adds it
        return None
    return PromptTokenizer("tokenizers", frozenset(ids), tokenizer.get_vocab_size(with_added_tokens=True),
                           lambda ids: tokenizer.decode(ids, skip_special_tokens=False))


def _special_names(config: dict[str, Any]) -> list[str] | None:
    """The special tokens' strings, or None where the config holds something this reading does not
    cover (transformers then decides)."""
    names = []
    for key in NAMED_SPECIAL:
        if (value := config.get(key)) is not None:
            if (name := _token_text(value)) is None:
                return None
            names.append(name)
    for key in EXTRA_SPECIAL:
        value = config.get(key)
        if value is None:
            continue
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if items is None:
            return None
        for item in items:
            if (name := _token_text(item)) is None:
                return None
            names.append(name)
    return names


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):  # a serialised AddedToken
        return value["content"]
    return None
