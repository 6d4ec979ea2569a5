"""What every quantization backend provides, and the helpers they share."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Protocol

from ..errors import UsageError
from ..models import ResolvedModel
from .recipe import Recipe


@dataclass
class BackendResult:
    group_size: int | None
    calibration: dict[str, Any] | None
    quantize_time_s: float
    versions: dict[str, str]
    peak_rss_mb: float | None = None
    notes: list[str] = field(default_factory=list)


class Backend(Protocol):
    name: str
    # the methods whose methods.py entry names this backend: METHODS.for_backend(name)
    methods: frozenset[str]

    def quantize(self, model: ResolvedModel, recipe: Recipe, out_dir: Path) -> BackendResult:
        """Write a loadable checkpoint (weights, config, tokenizer) into out_dir."""
        ...


def is_ignored(name: str, ignore: Iterable[str]) -> bool:
    """llm-compressor's ignore rules: a module name, a name suffix, or `re:<regex>`."""
    for rule in ignore:
        if rule.startswith("re:"):
            if re.match(rule[3:], name):
                return True
        elif name == rule or name.endswith("." + rule):
            return True
    return False


def choose_group_size(linear_inputs: dict[str, int], preferred: int, auto: bool, minimum: int = 16) -> int:
    """The largest power-of-two group <= preferred dividing every quantized Linear's input size.

    Group 128 cannot apply to SmolLM2-135M (hidden size 576 = 64 x 9): there this returns 64.
    """
    def offenders(group: int) -> list[str]:
        return [name for name, size in linear_inputs.items() if size % group]

    bad = offenders(preferred)
    if not bad:
        return preferred
    first = bad[0]
    if not auto:
        raise UsageError(
            f"group size {preferred} does not divide the input size {linear_inputs[first]} of {first} "
            f"(and {len(bad) - 1} other layers); pass --group-size with a divisor or enable auto_group"
        )
    group = preferred // 2
    while group >= minimum:
        if not offenders(group):
            return group
        group //= 2
    raise UsageError(
        f"no group size between {minimum} and {preferred} divides every quantized layer's input size "
        f"({first}: {linear_inputs[first]}); add such layers to --ignore or use a per-channel method (int8, fp8, w8a16)"
    )


def w4a8_group(linear_inputs: dict[str, int], asked: int) -> int:
    """Group 128 for W4A8-FP8, or a one-line refusal: a checkpoint of another group is one vLLM
    refuses at load ("W4A8 kernels require group quantization with group size 128")."""
    from ..serve.hardware_fit import W4A8_GROUP

    if asked != W4A8_GROUP:
        raise UsageError(f"W4A8-FP8 takes group size {W4A8_GROUP} only (vLLM's W4A8 kernel refuses group {asked}); "
                         f"leave --group-size out, or use --method gptq for another group")
    bad = [name for name, size in linear_inputs.items() if size % W4A8_GROUP]
    if bad:
        raise UsageError(
            f"W4A8-FP8 needs group size {W4A8_GROUP} (vLLM's W4A8 kernel takes no other), which does not divide "
            f"the input size {linear_inputs[bad[0]]} of {bad[0]} (and {len(bad) - 1} other layers); "
            f"this model cannot be W4A8-FP8 for vLLM: use --method gptq (W4A16, any group) or fp8")
    return W4A8_GROUP


def resolve_group_size(model, recipe: Recipe) -> int | None:
    """The group size a recipe gets on this model (None for per-channel / unquantized schemes)."""
    import torch
    from compressed_tensors.quantization import preset_name_to_scheme

    from ..console import info

    weights = preset_name_to_scheme(recipe.scheme, ["Linear"]).weights
    if weights is None or weights.strategy != "group" or recipe.group_size is None:
        return None
    inputs = {
        name: module.in_features
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and not is_ignored(name, recipe.ignore)
    }
    if recipe.scheme == "W4AFP8":  # vLLM's W4A8 kernel takes group 128 only: no other would serve
        return w4a8_group(inputs, recipe.group_size)
    chosen = choose_group_size(inputs, recipe.group_size, recipe.auto_group)
    if chosen != recipe.group_size:
        info(f"group size {recipe.group_size} does not divide every layer's input size; using {chosen}")
    return chosen


def meta_model(path: Path):
    """The model's module tree without weights (for shape checks before a subprocess backend)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)
