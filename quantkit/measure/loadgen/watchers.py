"""The load generator's watchers, each an asyncio task beside a point: the server's liveness, the
stop rule (asked every second), and a line on stderr when no request finishes for a while."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Callable

from ...console import warn

if TYPE_CHECKING:
    from .client import Job, Raw
    from ..stats.point import RequestResult


async def watch(alive: Callable[[], bool] | None, dead: Callable[[], None], every: float = 1.0,
                 failed: asyncio.Event | None = None) -> None:
    """Ask `alive()` every `every` seconds, and at once after a request failed (`failed`)."""
    while alive is not None:
        if failed is None:
            await asyncio.sleep(every)
        else:
            try:
                await asyncio.wait_for(failed.wait(), every)
            except asyncio.TimeoutError:
                pass
            failed.clear()
        if not await asyncio.to_thread(alive):
            dead()
            return


Stop = Callable[[list["RequestResult"], float], "str | None"]


async def stop_watch(stop_when: Stop, finished: Callable[[], list[RequestResult]], started: float,
                      halt: Callable[[], None], reason: list[str]) -> None:
    """Ask `stop_when` every second; on a reason, record it and halt the point. The rule runs in a
    thread, on a copy of the list: a verdict over thousands of requests takes tens of ms, which on
    this loop would delay the sends and reads it measures (the GIL still passes between the two
    every few ms)."""
    while True:
        await asyncio.sleep(1.0)
        results, elapsed = list(finished()), time.perf_counter() - started
        said = await asyncio.to_thread(stop_when, results, elapsed)
        if said:
            reason.append(said)
            halt()
            return


async def quiet_watch(done: list[Raw], job: Job) -> None:
    """A line on stderr whenever no request finished for a while (a stuck server is not silence):
    every 30 s, or half the request timeout if shorter."""
    every = min(30.0, job.request_timeout / 2)
    seen, quiet = len(done), 0.0
    while True:
        await asyncio.sleep(every)
        quiet = quiet + every if len(done) == seen else 0.0
        seen = len(done)
        if quiet:
            warn(f"no request finished in the last {quiet:.0f} s ({seen} of {len(job.bodies)} done); each "
                 f"request fails after {job.request_timeout:g} s without a complete answer (QUANTKIT_REQUEST_TIMEOUT)")
