"""Lazy registries: names map to "module:attr" strings, imported only when used.

Importing quantkit (and running `quantkit --help`) must not import torch, llm-compressor or
lm-eval; a backend's heavy imports happen when that backend runs.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import UsageError, did_you_mean


class Registry:
    def __init__(self, kind: str, entries: dict[str, str]):
        self.kind = kind
        self._entries = dict(entries)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def check(self, name: str) -> str:
        if name not in self._entries:
            raise UsageError(f"unknown {self.kind} '{name}'; {did_you_mean(name, self.names())}")
        return name

    def load(self, name: str) -> Any:
        return resolve(self._entries[self.check(name)])


def resolve(target: str) -> Any:
    """What a `"module:attr"` string names (a module, without `:attr`), imported now."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


# Quantization backends. llmcompressor runs in the main environment; the others run as a
# subprocess in an environment of their own (their pins do not fit the main one).
BACKENDS = Registry(
    "backend",
    {
        "llmcompressor": "quantkit.quantize.llmcompressor:LLMCompressorBackend",
        "gptqmodel": "quantkit.quantize.external:GPTQModelBackend",
        "autoawq": "quantkit.quantize.external:AutoAWQBackend",
        "auto-gptq": "quantkit.quantize.external:AutoGPTQBackend",
        "optimum": "quantkit.quantize.external:OptimumBackend",
    },
)
