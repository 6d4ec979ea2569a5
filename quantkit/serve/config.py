"""Serving knobs: what users set on a vLLM server, and the `vllm serve` arguments they become.

One model (`ServeConfig`) is used by every command that starts a server (serve, bench, tune,
eval, run) and by run recipes' `serve:` mapping; `KNOBS` is the public list of its named knobs.
None means "vLLM's default" and is not passed.

The fields are the one list of knobs: `KNOBS`, the `vllm serve` flags, `--serve-arg` names, the
commands' flags (cli/options.py, from each field's `description`, its help text) and the tuner's
knob names (measure/tune/space.py, checked against KNOBS) all follow from them. Adding a knob is
one field here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from ..errors import UsageError
# what a secret is and how it is masked: secrets.py (its names stay importable from here)
from ..secrets import MASK, is_secret, mask_args, mask_flags, mask_secrets, mask_text  # noqa: F401
from ..numbers import Concurrency, Count, Tokens, base_type

DTYPES = ("auto", "bfloat16", "float16", "half", "float32", "float")  # vLLM's --dtype choices


class ServeConfig(BaseModel):
    """The serving knobs users tune; None means "vLLM's default" and is not passed.

    `quantization` stays None by default: vLLM detects the method from the checkpoint, and a value
    that differs from the checkpoint's `quant_method` is a hard error in vLLM (docs/DESIGN.md, "What was seen").
    """

    # recipe keys may be spelled as the flags are (`max-num-seqs`) or as the fields (`max_num_seqs`)
    model_config = ConfigDict(extra="forbid", alias_generator=lambda name: name.replace("_", "-"),
                              validate_by_name=True, validate_by_alias=True, allow_inf_nan=False)

    # the fields stored run keys were made with: a field added after them joins a key only once set
    # (store.keyed), so that adding a knob does not make every stored measurement run again
    KEY_FIELDS: ClassVar[frozenset[str]] = frozenset({
        "quantization", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "block_size",
        "enable_chunked_prefill", "max_model_len", "kv_cache_dtype", "tensor_parallel_size",
        "pipeline_parallel_size", "distributed_executor_backend", "load_format", "enforce_eager", "extra"})

    # every field but `extra` is a knob; its description is its flag's help text (cli/options.py)
    quantization: str | None = Field(None, description="vLLM --quantization (default: vLLM detects it from the checkpoint).")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="Fraction of GPU memory vLLM may use (GPU only).")
    max_num_seqs: Concurrency | None = Field(None, description="Most sequences per scheduler step.")
    max_num_batched_tokens: Tokens | None = Field(None, description="Most tokens per scheduler step.")
    block_size: Tokens | None = Field(None, description="KV-cache block size in tokens.")
    # tri-state: None = vLLM's default
    enable_chunked_prefill: bool | None = Field(None, description="Chunked prefill (default: vLLM's).")
    # vLLM's default is the model's (8192 here): KV-cache hungry on CPU
    max_model_len: Tokens | None = Field(2048, description="Context length the server accepts.")
    kv_cache_dtype: str | None = Field(None, description="KV-cache dtype (auto, fp8, ...).")
    # None: quantkit picks on a CPU (serve/hardware_fit.py: bf16 only where the CPU computes it natively)
    dtype: str | None = Field(None, description="vLLM --dtype of activations and unquantized weights (auto, bfloat16, "
                              "float16, float32; default on a CPU: bfloat16 where it computes bf16 natively, "
                              "float32 elsewhere; on a GPU: vLLM's).")
    tensor_parallel_size: Count | None = Field(None, description="Tensor-parallel GPUs.")
    pipeline_parallel_size: Count | None = Field(None, description="Pipeline-parallel stages.")
    distributed_executor_backend: str | None = Field(None, description="mp, ray (multi-node), uni.")
    load_format: str | None = Field(None, description="vLLM --load-format (dummy: random weights, for speed work).")
    enforce_eager: bool = Field(False, description="No torch.compile/CUDA graphs: starts ~3x faster on CPU, ~10-15% slower.")
    # host-side and batching levers (issue 43); which vLLM has them, and which vLLM-CPU cannot use: flag_support.py
    api_server_count: Count | None = Field(None, description="API server processes in front of the engine (default: vLLM's, "
                                           "one): more spread HTTP, tokenization and streaming over more cores.")
    stream_interval: Tokens | None = Field(None, description="Tokens a stream buffers per message it sends (default: vLLM's, "
                                           "1): higher sends fewer, cheaper messages, coarser for the client.")
    async_scheduling: bool | None = Field(None, description="Async scheduling: the next step is scheduled while one runs "
                                          "(default: vLLM's, on where it can; GPU only, vLLM-CPU turns it off).")
    max_cudagraph_capture_size: Tokens | None = Field(None, description="Largest batch (tokens) captured as a CUDA graph "
                                                      "(default: vLLM's, 2 x max-num-seqs up to 512; GPU only).")
    optimization_level: int | None = Field(None, ge=0, le=3, description="vLLM -O level: 0 no compilation nor CUDA "
                                           "graphs (fastest start), 1 compiled with piecewise graphs, 2 (vLLM's "
                                           "default) and 3 full and piecewise graphs.")
    # free-form `--serve-arg k=v`: flag name (no dashes) -> value; None = a bare flag
    extra: dict[str, str | None] = Field(default_factory=dict)

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str | None) -> str | None:
        if value is not None and value not in DTYPES:
            raise ValueError(f"'{value}' is not a vLLM dtype: use one of {', '.join(DTYPES)}")
        return value

    @field_serializer("extra", when_used="json")
    def _extra_masked(self, extra: dict[str, str | None]) -> dict[str, str | None]:
        # a JSON dump is for records, result files and reports: never a secret. A Python dump
        # (model_dump()) keeps the values, for building another config to serve (tune's trials).
        return mask_flags(extra)

    def to_args(self, mask: bool = False) -> list[str]:
        """The `vllm serve` arguments for these knobs (model, host, port are added by the server);
        `mask`: secret flags' values as MASK, for every line that is shown or stored."""
        args: list[str] = []
        for name in KNOBS:
            value = getattr(self, name)
            if value is None:
                continue
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                if name == "enforce_eager":
                    if value:
                        args.append(flag)
                else:
                    args.append(flag if value else "--no-" + flag[2:])
            else:
                args += [flag, str(value)]
        for key, value in (mask_flags(self.extra) if mask else self.extra).items():
            args.append("--" + key)
            if value is not None:
                args.append(value)
        return args

    def changed(self) -> dict[str, Any]:
        """The knobs that differ from ServeConfig() (for labels and records: secrets masked)."""
        default = ServeConfig()
        out = {k: getattr(self, k) for k in KNOBS if getattr(self, k) != getattr(default, k)}
        out.update(mask_flags(self.extra))
        return out

    def label(self) -> str:
        changed = self.changed()
        if not changed:
            return "defaults"
        return " ".join(f"{k.replace('_', '-')}={str(v) if v is not None else 'on'}" for k, v in changed.items())

    @classmethod
    def from_options(cls, serve_args: list[str] | None = None, *, defaults: dict[str, Any] | None = None,
                     **knobs: Any) -> "ServeConfig":
        """Named knobs (None = unset) plus `k=v` strings; a `k` naming a knob fills that knob, so
        `--serve-arg max-num-seqs=8` and `--max-num-seqs 8` mean the same. `defaults` fill what
        neither set (a command's own defaults, such as eval's eager start, are not a repeat)."""
        values = {k: v for k, v in knobs.items() if v is not None}
        extra: dict[str, str | None] = {}
        for item in serve_args or []:
            key, value = parse_serve_arg(item)
            field = key.replace("-", "_")
            if field in KNOBS:
                if field in values:
                    raise UsageError(f"--serve-arg {item} repeats --{key}; give it once")
                values[field] = parse_bool(value) if field in BOOL_KNOBS else value
            else:
                extra[key] = value
        for key, value in (defaults or {}).items():
            values.setdefault(key, value)
        try:
            return cls(**values, extra=extra)
        except Exception as exc:  # pydantic.ValidationError: first problem, one line
            errors = getattr(exc, "errors", lambda: [])()
            if errors:
                first = errors[0]
                where = ".".join(str(x) for x in first.get("loc", ()))
                raise UsageError(f"bad serving option {where.replace('_', '-')}: {first.get('msg')}") from None
            raise



def knob_type(name: str) -> Any:
    """The knob's value type without None or its bounds (`max_num_seqs`: int)."""
    return base_type(ServeConfig.model_fields[name].annotation)


KNOBS: list[str] = [name for name in ServeConfig.model_fields if name != "extra"]  # in field order: the flags' order
BOOL_KNOBS: set[str] = {name for name in KNOBS if knob_type(name) is bool}  # on/off: `--x/--no-x`, `k=on`

# Flags quantkit sets itself; passing them through --serve-arg would break the server's contract.
_RESERVED = {"host", "port", "served-model-name", "model"}


def parse_serve_arg(item: str) -> tuple[str, str | None]:
    """`k=v` -> (k, v); `k` -> (k, None) for a bare flag. Leading dashes and underscores are
    accepted (`--max_num_seqs=8`)."""
    key, sep, value = item.partition("=")
    key = key.strip().lstrip("-").replace("_", "-")
    if not key or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", key):
        shown = f"{key}={MASK}" if sep and is_secret(key) else item  # an error line is shown and stored
        raise UsageError(f"bad --serve-arg '{shown}': expected NAME=VALUE or NAME (a vllm serve flag without dashes)")
    if key in _RESERVED:
        raise UsageError(f"--serve-arg {key} is set by quantkit itself (use --port/--host of the command instead)")
    return key, (value.strip() if sep else None)



def parse_bool(value: str | None) -> bool:
    if value is None or value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"expected on/off (true/false) but got '{value}'")



def serve_command(model_dir: Path | str, config: ServeConfig) -> str:
    """The `vllm serve` line a user can paste to serve `model_dir` with these knobs (a secret
    flag's value is MASK: the line is shown and stored; the user puts their own in)."""
    return shlex.join(["vllm", "serve", str(model_dir), *config.to_args(mask=True)])


def parallel_of(serve_config: dict[str, Any] | None) -> tuple[int, int]:
    """(tensor, pipeline) parallel GPUs of a stored `serve_config` (ServeConfig's fields as stored,
    whatever knobs the quantkit that stored it had), 1 each when not set."""
    config = serve_config or {}
    return int(config.get("tensor_parallel_size") or 1), int(config.get("pipeline_parallel_size") or 1)


def args_of(serve_config: dict[str, Any] | None) -> list[str]:
    """The `vllm serve` flags of a stored `serve_config`; a record from a quantkit whose knobs
    differ shows what it stored instead of failing."""
    if not serve_config:
        return []
    try:
        return ServeConfig.model_validate(serve_config).to_args(mask=True)
    except ValueError:
        shown = mask_flags(mask_secrets(serve_config))
        return [f"{k}={v}" for k, v in shown.items() if v not in (None, False, {})]
