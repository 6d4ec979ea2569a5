"""Executors: who runs the lanes of a run. Every executor runs the same `run_lane`, so run keys,
records and results are the same whichever one ran them (a run started locally can be finished
elsewhere and vice versa)."""

from __future__ import annotations

from typing import Protocol

from ..store import Store
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
