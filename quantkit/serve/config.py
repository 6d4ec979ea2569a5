"""Serving knobs: what users set on a vLLM server, and the `vllm serve` arguments they become.

One model (`ServeConfig`) is used by every command that starts a server (serve, bench, tune,
eval, run) and by run recipes' `serve:` mapping; `KNOBS` is the public list of its named knobs.
None means "vLLM's default" and is not passed.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import UsageError

class ServeConfig(BaseModel):
    """The serving knobs users tune; None means "vLLM's default" and is not passed.

    `quantization` stays None by default: vLLM detects the method from the checkpoint, and a value
    that differs from the checkpoint's `quant_method` is a hard error in vLLM (FIELD-NOTES.md).
    """

    # recipe keys may be spelled as the flags are (`max-num-seqs`) or as the fields (`max_num_seqs`)
    model_config = ConfigDict(extra="forbid", alias_generator=lambda name: name.replace("_", "-"),
                              validate_by_name=True, validate_by_alias=True)

    quantization: str | None = None
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    block_size: int | None = Field(None, ge=1)
    enable_chunked_prefill: bool | None = None  # tri-state: None = vLLM's default
    max_model_len: int | None = Field(2048, ge=1)  # vLLM's default is the model's (8192 here): KV-cache hungry on CPU
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int | None = Field(None, ge=1)
    pipeline_parallel_size: int | None = Field(None, ge=1)
    distributed_executor_backend: str | None = None
    load_format: str | None = None
    enforce_eager: bool = False
    # free-form `--serve-arg k=v`: flag name (no dashes) -> value; None = a bare flag
    extra: dict[str, str | None] = Field(default_factory=dict)

    def to_args(self) -> list[str]:
        """The `vllm serve` arguments for these knobs (model, host, port are added by the server)."""
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
        for key, value in self.extra.items():
            args.append("--" + key)
            if value is not None:
                args.append(value)
        return args

    def changed(self) -> dict[str, Any]:
        """The knobs that differ from ServeConfig() (for labels and records)."""
        default = ServeConfig()
        out = {k: getattr(self, k) for k in KNOBS if getattr(self, k) != getattr(default, k)}
        out.update({k: v for k, v in self.extra.items()})
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
                values[field] = parse_bool(value) if field in ("enable_chunked_prefill", "enforce_eager") else value
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



KNOBS = [
    "quantization",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "enable_chunked_prefill",
    "max_model_len",
    "kv_cache_dtype",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "distributed_executor_backend",
    "load_format",
    "enforce_eager",
]

# Flags quantkit sets itself; passing them through --serve-arg would break the server's contract.
_RESERVED = {"host", "port", "served-model-name", "model"}


def parse_serve_arg(item: str) -> tuple[str, str | None]:
    """`k=v` -> (k, v); `k` -> (k, None) for a bare flag. Leading dashes and underscores are
    accepted (`--max_num_seqs=8`)."""
    key, sep, value = item.partition("=")
    key = key.strip().lstrip("-").replace("_", "-")
    if not key or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", key):
        raise UsageError(f"bad --serve-arg '{item}': expected NAME=VALUE or NAME (a vllm serve flag without dashes)")
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
    """The `vllm serve` line a user can paste to serve `model_dir` with these knobs."""
    return shlex.join(["vllm", "serve", str(model_dir), *config.to_args()])


def args_of(serve_config: dict[str, Any] | None) -> list[str]:
    """The `vllm serve` flags of a stored `serve_config`; a record from a quantkit whose knobs
    differ shows what it stored instead of failing."""
    if not serve_config:
        return []
    try:
        return ServeConfig.model_validate(serve_config).to_args()
    except ValueError:
        return [f"{k}={v}" for k, v in serve_config.items() if v not in (None, False, {})]
