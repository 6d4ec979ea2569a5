"""Can this machine's vLLM run a checkpoint's format, and what does the checkpoint ask of vLLM?

Two formats quantkit writes are tied to hardware or to a serving flag:
- **W4A8-FP8** (int4 weights in groups, FP8 dynamic per-token activations; compressed-tensors'
  `W4AFP8`): vLLM runs it with a CUTLASS kernel on compute capability 9.0 only (its
  `_is_fp8_w4a8_sm90` matches 90 exactly), so not on a CPU, an Ampere/Ada GPU or a Blackwell one.
  On other hardware vLLM finds no scheme after a minute of start-up; `check_servable` says so at
  once, in one line, with what would run it. The kernel takes group size 128 and no other
  (`CompressedTensorsW4A8Fp8` raises "W4A8 kernels require group quantization with group size
  128", seen on an H200 with quantkit's group-64 SmolLM2 cut), so the conversion refuses a model
  128 does not divide (quantize/base.py) and serving refuses another group on any machine.
- **A calibrated FP8 KV cache** (`kv_cache_scheme` in `quantization_config`): its per-layer K/V
  scales are used when vLLM's `--kv-cache-dtype` is fp8. vLLM 0.32 turns `auto` into fp8 for such
  a checkpoint itself; quantkit passes the flag explicitly (`serve_defaults`) so that every vLLM
  it runs does the same and the `vllm serve` line it prints says so.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .formats import quantization_config

W4A8_CAPABILITY = 9.0  # Hopper: H100, H200, GH200
W4A8_GROUP = 128  # the only group size vLLM's W4A8 kernel takes


def _groups(qc: dict[str, Any]) -> list[dict[str, Any]]:
    groups = qc.get("config_groups")
    return [g for g in groups.values() if isinstance(g, dict)] if isinstance(groups, dict) else []


def is_w4a8_fp8(qc: dict[str, Any] | None) -> bool:
    """A compressed-tensors config whose layers hold int4 weights and take FP8 activations."""
    if not qc or str(qc.get("quant_method", "")).lower() != "compressed-tensors":
        return False
    for group in _groups(qc):
        w, a = group.get("weights") or {}, group.get("input_activations") or {}
        if w.get("type") == "int" and w.get("num_bits") == 4 and a.get("type") == "float" and a.get("num_bits") == 8:
            return True
    return False


def kv_cache_scheme(model_dir: Path) -> dict[str, Any] | None:
    """The checkpoint's calibrated KV-cache scheme (e.g. FP8 per tensor), or None."""
    scheme = (quantization_config(Path(model_dir)) or {}).get("kv_cache_scheme")
    return scheme if isinstance(scheme, dict) else None


def kv_cache_label(scheme: dict[str, Any] | None) -> str | None:
    """'fp8' for an 8-bit float scheme (what `--kv-cache-dtype` calls it), else its type and bits."""
    if not scheme:
        return None
    kind, bits = scheme.get("type"), scheme.get("num_bits")
    return "fp8" if (kind, bits) == ("float", 8) else f"{kind}{bits}"


@lru_cache(maxsize=1)
def gpu_capability() -> float | None:
    """The first visible NVIDIA GPU's compute capability (9.0 on an H200); None on a CPU machine
    (no `nvidia-smi`) or when `nvidia-smi` cannot say."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.split()
        return float(out[0]) if out else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def refusal(model_dir: Path, capability: float | None) -> str | None:
    """Why vLLM on this hardware cannot run the checkpoint (`capability`: the GPU's compute
    capability, None on a CPU), or None when nothing stands in the way that quantkit knows of."""
    qc = quantization_config(Path(model_dir))
    groups = sorted({(g.get("weights") or {}).get("group_size") for g in _groups(qc)} - {W4A8_GROUP}, key=str) \
        if is_w4a8_fp8(qc) else []
    if groups:
        return (f"{Path(model_dir).name} is W4A8-FP8 with group size {', '.join(map(str, groups))}: vLLM's W4A8 "
                f"kernel takes only group {W4A8_GROUP}; re-convert with group {W4A8_GROUP} (a model whose layer sizes "
                f"{W4A8_GROUP} divides), or use --method gptq (W4A16) for this model")
    if is_w4a8_fp8(qc) and capability != W4A8_CAPABILITY:
        where = "a CPU" if capability is None else f"a GPU of compute capability {capability:g}"
        return (f"{Path(model_dir).name} is W4A8-FP8 (int4 weights, FP8 activations): vLLM runs it only on "
                f"Hopper GPUs (compute capability 9.0: H100, H200), not on {where}; serve it on such a GPU, "
                f"or convert with --method gptq (W4A16) for this machine")
    return None


def check_servable(model_dir: Path, capability: float | None) -> None:
    """A UsageError (one line) before vLLM starts, for a format this machine's vLLM cannot run."""
    reason = refusal(model_dir, capability)
    if reason:
        raise UsageError(reason)


def serve_defaults(model_dir: Path, config):
    """The serve config with what the checkpoint asks of vLLM filled in where the user left it
    unset: `--kv-cache-dtype fp8` for a checkpoint with calibrated FP8 KV scales."""
    if config.kv_cache_dtype is None and kv_cache_label(kv_cache_scheme(model_dir)) == "fp8":
        return config.model_copy(update={"kv_cache_dtype": "fp8"})
    return config
