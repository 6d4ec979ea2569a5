"""Quantization methods: one entry per method, the one place that says what a method is.

An entry holds everything quantkit decides by method: its name and meaning (`--method`'s help,
`quantkit recipes`), whether it calibrates (calibration data is prepared, and `--num-samples`,
`--seq-len`, `--calib` accepted, only then), its weight bits (the model card's bit tag where the
checkpoint's own config does not say), the backends that implement it (each backend's `methods`
is read from here) and, where llm-compressor is one of them, the function that builds its
llm-compressor modifiers. Its defaults (scheme, group size, calibration set) are its built-in
recipe, `recipes/<name>.yaml`, which is named after it.

A leaf module (it imports errors.py only): quantize/recipe.py, report/card.py and the backends all read
it, and none of them may import another's layer. The builder is a "module:attr" string, imported
only when llm-compressor runs (as registry.py does), so `quantkit --help` imports no torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .errors import UsageError, did_you_mean

# The backend whose conversions are built from an entry's `modifiers` (the others run their own
# library's method by name in a worker: quantize/external.py).
LLMCOMPRESSOR = "llmcompressor"


@dataclass(frozen=True)
class Method:
    name: str
    description: str
    calibrated: bool  # needs calibration data (awq, gptq); False: data-free (round-to-nearest, fp8), unless a
    # recipe adds a calibrated KV cache (`kv_cache: fp8`), whose scales are calibrated for any method
    weight_bits: int
    backends: tuple[str, ...]  # registry.BACKENDS names that implement it
    # "module:attr" of `(recipe, common) -> list of modifiers` (quantize/llmcompressor.py), where
    # common is the scheme and ignore list every modifier is given; None where llmcompressor is
    # not one of the backends
    modifiers: str | None = None

    def modifier_builder(self) -> Callable[..., list[Any]]:
        if self.modifiers is None:
            raise UsageError(f"method '{self.name}' has no llm-compressor modifiers (backends: {', '.join(self.backends)})")
        module_name, _, attr = self.modifiers.partition(":")
        return getattr(importlib.import_module(module_name), attr)


class MethodRegistry:
    """The methods in the order they are listed (`--method`'s help, did-you-mean), and the names
    users type that are answered with an explanation instead of "unknown method"."""

    def __init__(self, methods: Iterable[Method], removed: dict[str, str]):
        self._methods = {m.name: m for m in methods}
        self.removed = dict(removed)
        # a wrong entry fails at import, so every test and command says so, not one conversion
        for m in self._methods.values():
            if (LLMCOMPRESSOR in m.backends) != (m.modifiers is not None):
                raise ValueError(f"method {m.name}: an llmcompressor method names its modifier builder, no other does")
        clash = set(self._methods) & set(self.removed)
        if clash:
            raise ValueError(f"methods both offered and removed: {sorted(clash)}")

    def names(self) -> list[str]:
        return list(self._methods)

    def __iter__(self) -> Iterator[Method]:
        return iter(self._methods.values())

    def __contains__(self, name: object) -> bool:
        return name in self._methods

    def get(self, name: str | None) -> Method | None:
        return self._methods.get(name) if isinstance(name, str) else None

    def __getitem__(self, name: str) -> Method:
        return self._methods[self.check(name)]

    def check(self, name: str) -> str:
        """The method's name (case-folded); a UsageError for a removed or unknown one."""
        key = name.lower()
        if key in self.removed:
            raise UsageError(f"method '{name}' is not available: {self.removed[key]}")
        if key not in self._methods:
            raise UsageError(f"unknown method '{name}'; {did_you_mean(key, self.names())}")
        return key

    def calibrated(self) -> list[str]:
        return sorted(m.name for m in self if m.calibrated)

    def for_backend(self, backend: str) -> frozenset[str]:
        """The methods a backend implements (its `methods`)."""
        return frozenset(m.name for m in self if backend in m.backends)


_LLMC = "quantkit.quantize.llmcompressor"

METHODS = MethodRegistry(
    [
        Method("awq", "AWQ W4A16 asymmetric, group 128 (activation-aware scaling, calibrated)",
               calibrated=True, weight_bits=4, backends=(LLMCOMPRESSOR, "gptqmodel", "autoawq"),
               modifiers=f"{_LLMC}:awq_modifiers"),
        Method("gptq", "GPTQ W4A16 symmetric, group 128 (calibrated)",
               calibrated=True, weight_bits=4, backends=(LLMCOMPRESSOR, "gptqmodel", "auto-gptq", "optimum"),
               modifiers=f"{_LLMC}:gptq_modifiers"),
        Method("int8", "W8A8 INT8: SmoothQuant + GPTQ, per-channel weights, dynamic per-token activations",
               calibrated=True, weight_bits=8, backends=(LLMCOMPRESSOR,), modifiers=f"{_LLMC}:gptq_modifiers"),
        Method("fp8", "FP8 dynamic: per-channel FP8 weights, dynamic per-token FP8 activations (no calibration)",
               calibrated=False, weight_bits=8, backends=(LLMCOMPRESSOR,), modifiers=f"{_LLMC}:quantization_modifiers"),
        Method("w4a8-fp8", "W4A8-FP8: GPTQ int4 weights (symmetric, group 128), dynamic per-token FP8 activations; "
               "Hopper GPUs only (calibrated)",
               calibrated=True, weight_bits=4, backends=(LLMCOMPRESSOR,), modifiers=f"{_LLMC}:gptq_modifiers"),
        Method("w4a8-fp8-awq", "W4A8-FP8 with AWQ scaling before the int4 rounding (group 128); Hopper GPUs only "
               "(calibrated)",
               calibrated=True, weight_bits=4, backends=(LLMCOMPRESSOR,), modifiers=f"{_LLMC}:awq_modifiers"),
        Method("w4a16-rtn", "W4A16 symmetric, group 128, round-to-nearest (no calibration)",
               calibrated=False, weight_bits=4, backends=(LLMCOMPRESSOR,), modifiers=f"{_LLMC}:quantization_modifiers"),
        Method("w8a16", "W8A16 per-channel INT8 weights, round-to-nearest (no calibration)",
               calibrated=False, weight_bits=8, backends=(LLMCOMPRESSOR,), modifiers=f"{_LLMC}:quantization_modifiers"),
    ],
    removed={
        "squeezellm": "vLLM removed SqueezeLLM support (v0.6); use --method awq or --method gptq",
        "marlin": "Marlin is a vLLM kernel, not a quantization method; vLLM picks it for gptq/awq W4A16 checkpoints",
        "bitsandbytes": "bitsandbytes quantizes at load time in vLLM (--quantization bitsandbytes); no checkpoint to convert",
    },
)
