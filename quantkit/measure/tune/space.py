"""The tuner's search space: vLLM's serving knobs and their choices, `--space` parsing, and the
configurations vLLM would refuse without a server start (study.py searches it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from ...errors import UsageError, did_you_mean
from ...machine import cpu_isa, has_gpu
from ...numbers import field_constraints, problem
from ...serve import flag_support
from ...serve.config import BOOL_KNOBS, KNOBS, ServeConfig
from ...serve.hardware_fit import kv_cache_scheme


class SpaceSettings(Protocol):
    """What resolve_space reads of the tune settings (tune.TuneSettings has it)."""

    space: dict[str, list[Any]]
    knobs: list[str] | None

# Choices per knob; None is vLLM's default (the flag is not passed).
DEFAULT_SPACE: dict[str, list[Any]] = {
    "max_num_seqs": [None, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    "max_num_batched_tokens": [None, 256, 512, 1024, 2048, 4096, 8192, 16384],
    "block_size": [None, 32, 64, 128, 256],  # vLLM-CPU's attention wants multiples of 32 (16 is rejected)
    "enable_chunked_prefill": [None, False],
    "kv_cache_dtype": [None, "fp8"],
    # host side: streaming and HTTP work off the engine's process (a second API server takes a core
    # from vLLM-CPU's engine threads: two at most here, four on a GPU host)
    "stream_interval": [None, 4, 16],
    "api_server_count": [None, 2],
}
# What the defaults already are is left out, not tried twice: vLLM 0.26 schedules async wherever it
# can (so "on" repeats the default), captures up to min(2 x max-num-seqs, 512) tokens (512 at its
# defaults), and its -O3 is its -O2 (config/vllm.py)
GPU_SPACE: dict[str, list[Any]] = {"gpu_memory_utilization": [None, 0.8, 0.85, 0.95],
                                   "block_size": [None, 16, 32, 64, 128],  # CUDA attention backends: 16..128
                                   "api_server_count": [None, 2, 4],
                                   "async_scheduling": [None, False],
                                   "max_cudagraph_capture_size": [None, 256, 1024],
                                   "optimization_level": [None, 1]}  # piecewise CUDA graphs only: a faster start
TUNABLE = set(DEFAULT_SPACE) | set(GPU_SPACE) | {"tensor_parallel_size", "pipeline_parallel_size", "max_model_len"}
if TUNABLE - set(KNOBS):  # the choices are this module's; the knobs, ServeConfig's fields (serve/config.py)
    raise ImportError(f"tune knobs that are no ServeConfig knob: {sorted(TUNABLE - set(KNOBS))}")


def resolve_space(settings: SpaceSettings, gpus: int | None = None, model_dir: Path | None = None,
                  vllm: str | None = None, base: ServeConfig | None = None) -> dict[str, list[Any]]:
    """The default space (with GPU knobs where there are GPUs, parallel sizes up to their count),
    the recipe's/CLI's `space` merged over it (an empty list removes a knob), `knobs` kept.

    A checkpoint with calibrated KV scales (`model_dir`'s kv_cache_scheme) is served with an FP8
    KV cache that uses them: `kv_cache_dtype` is then no lever (vLLM's default already takes the
    scales, and the tuner must not serve them away), and naming it in `space` is an error.

    A knob whose flag the vLLM in use lacks (`vllm`: its version, None when not known) leaves the
    default space; a choice it lacks, or one vLLM-CPU ignores, named in `space` or set in the base
    configuration `base`, is an error (serve/flag_support.py): before the first trial, not in each."""
    gpus = gpus if gpus is not None else _gpu_count()
    gpu = bool(gpus) or has_gpu()
    reason = flag_support.refusal(base, gpu=gpu, vllm=vllm) if base is not None else None
    if reason:
        raise UsageError(reason)
    space = {k: list(v) for k, v in DEFAULT_SPACE.items()}
    scaled = model_dir is not None and kv_cache_scheme(model_dir) is not None
    if scaled:
        space.pop("kv_cache_dtype")
        if any(values and check_knob(name) == "kv_cache_dtype" for name, values in settings.space.items()):
            raise UsageError(f"{Path(model_dir).name} carries calibrated FP8 KV-cache scales, served with "
                             "--kv-cache-dtype fp8: leave kv-cache-dtype out of the tune space")
    if gpu:
        space.update({k: list(v) for k, v in GPU_SPACE.items()})
    elif not scaled and not cpu_isa().avx512:  # vLLM-CPU runs no FP8 KV cache without AVX-512 or AMX (hardware_fit)
        space.pop("kv_cache_dtype")
    if gpus and gpus > 1:
        sizes = [n for n in (2, 4, 8) if n <= gpus]
        space["tensor_parallel_size"] = [None, *sizes]
        space["pipeline_parallel_size"] = [None, *[n for n in (2, 4) if n <= gpus]]
    space = {k: v for k, v in space.items()
             if not any(flag_support.knob_refusal(k, value, gpu=gpu, vllm=vllm) for value in v)}
    for name, values in settings.space.items():
        knob = check_knob(name)
        if not values:
            space.pop(knob, None)
            continue
        space[knob] = [_value(knob, v) for v in values]
        for value in space[knob]:
            reason = flag_support.knob_refusal(knob, value, gpu=gpu, vllm=vllm)
            if reason:
                raise UsageError(f"tune space {knob.replace('_', '-')}: {reason}")
    if settings.knobs is not None:
        keep = {check_knob(k) for k in settings.knobs}
        space = {k: v for k, v in space.items() if k in keep}
    if not space:
        raise UsageError("the tune space is empty: give at least one knob with two or more choices")
    return space


def _gpu_count() -> int:
    from ..observe.gpu import gpu_count

    return gpu_count()


def check_knob(name: str) -> str:
    knob = name.strip().lstrip("-").replace("-", "_")
    if knob not in TUNABLE:
        raise UsageError(f"unknown tune knob '{name}'; {did_you_mean(knob, sorted(TUNABLE))}")
    return knob


def _value(knob: str, value: Any) -> Any:
    """A choice as written (`16`, `default`, `on`) -> the knob's value (None: vLLM's default),
    refused here, with the knob's range, when ServeConfig would refuse it (a trial would fail)."""
    if isinstance(value, str) and value.strip().lower() in ("default", "none", "auto") and knob != "kv_cache_dtype":
        return None
    if knob == "kv_cache_dtype" and isinstance(value, str) and value.strip().lower() in ("default", "auto", "none"):
        return None
    if knob in BOOL_KNOBS and isinstance(value, str):
        return value.strip().lower() in ("1", "true", "on", "yes")
    if isinstance(value, str):
        text = value.strip()
        for cast in (int, float):
            try:
                return _checked(knob, cast(text))
            except ValueError:
                pass
        return _checked(knob, text)
    return _checked(knob, value)


def _checked(knob: str, value: Any) -> Any:
    try:
        ServeConfig.__pydantic_validator__.validate_assignment(ServeConfig.model_construct(), knob, value)
    except ValidationError as exc:
        problem_ = problem(exc, field_constraints(ServeConfig.model_fields[knob]))
        raise UsageError(f"bad tune choice {knob.replace('_', '-')}={value}: {problem_}") from None
    return value


def parse_space(items: list[str]) -> dict[str, list[Any]]:
    """`--space max-num-seqs=8,16,32` (repeatable) -> {"max_num_seqs": [8, 16, 32]}; `NAME=` removes it."""
    space: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep:
            raise UsageError(f"bad --space '{item}': expected NAME=V1,V2 such as max-num-seqs=16,64,default")
        knob = check_knob(key)
        space[knob] = [_value(knob, v) for v in values.split(",") if v.strip()]
    return space


def config_for(base: ServeConfig, params: dict[str, Any]) -> ServeConfig:
    data = base.model_dump()
    for knob, value in params.items():
        if value is not None:
            data[knob] = value
    try:
        return ServeConfig(**data)
    except ValueError as exc:
        raise UsageError(f"bad tune value in {params}: {' '.join(str(exc).split())[:200]}") from None


def invalid(config: ServeConfig, gpus: int) -> str | None:
    """What vLLM would reject without starting, or what would serve the same as another trial
    (either saves a server start), or None."""
    world = (config.tensor_parallel_size or 1) * (config.pipeline_parallel_size or 1)
    if world > max(gpus, 1):
        return f"needs {world} GPUs, this machine has {gpus}"
    if config.enable_chunked_prefill is False and config.max_num_batched_tokens and config.max_model_len \
            and config.max_num_batched_tokens < config.max_model_len:
        return (f"max-num-batched-tokens {config.max_num_batched_tokens} < max-model-len {config.max_model_len} "
                "without chunked prefill")
    # not a rejection but the same server as the trial without the knob: vLLM captures no CUDA graph
    # when eager or at -O0 (config/vllm.py), so the capture size is never read
    eager = "--enforce-eager" if config.enforce_eager else "-O0" if config.optimization_level == 0 else None
    if config.max_cudagraph_capture_size is not None and eager:
        return (f"max-cudagraph-capture-size {config.max_cudagraph_capture_size} with {eager}, which captures no "
                "CUDA graph: the same server as without it")
    return None


def label(base: ServeConfig, params: dict[str, Any]) -> str:
    changed = {k: v for k, v in params.items() if v is not None and getattr(base, k) != v}
    if not changed:
        return "defaults"
    return " ".join(f"{k.replace('_', '-')}={str(v).lower() if isinstance(v, bool) else v}" for k, v in changed.items())
