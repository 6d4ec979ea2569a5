"""Executors: who runs the lanes of a run. Every executor runs the same `run_lane`, so run keys,
records and results are the same whichever one ran them (a run started locally can be finished
elsewhere and vice versa).

- `LocalExecutor` (the default): one lane after another on this machine.
- `RayExecutor` (`ray_executor.py`, `--executor ray`): one Ray task per lane, lanes in parallel on a
  local Ray instance or a cluster, the store on the driver. Ray is imported only when it is used.
"""

from __future__ import annotations

import importlib.util
from typing import Protocol

from ..console import OutputMode
from ..errors import SetupError, UsageError
from ..store import Store
from .recipe import ExecutorSettings
from .stages import Lane, RunContext, RunSummary, run_lane


class Executor(Protocol):
    def run(self, ctx: RunContext, lanes: list[Lane], store: Store, summary: RunSummary) -> None:
        """Run every lane to its end (a failed stage is recorded; the other lanes go on)."""
        ...


class LocalExecutor:
    """One lane after another on this machine (the default)."""

    def run(self, ctx: RunContext, lanes: list[Lane], store: Store, summary: RunSummary) -> None:
        for lane in lanes:
            run_lane(ctx, lane, store, summary)


def choose(config: ExecutorSettings, kind: str | None = None, address: str | None = None,
           output: OutputMode | None = None) -> Executor:
    """The executor of a run: the recipe's `executor:`, with `--executor` / `--address` over it
    (an address alone means Ray)."""
    kind = kind or ("ray" if address else config.kind)
    if kind == "local":
        if address:
            raise UsageError(f"--address {address} is a Ray cluster's; it needs --executor ray")
        return LocalExecutor()
    if kind != "ray":
        raise UsageError(f"unknown executor '{kind}'; choices: local, ray")
    if importlib.util.find_spec("ray") is None:
        raise SetupError("--executor ray needs Ray in this environment: scripts/setup.sh main installs it "
                         "(or pip install 'quantkit[ray]')")
    from .ray_executor import RayExecutor

    return RayExecutor(config.model_copy(update={"kind": "ray", "address": address or config.address}), output)
