"""Each load point starts on an idle server: the requests an earlier point left behind are waited out.

A point that ends early (its verdict decided) or whose requests timed out leaves the server with
requests whose client went away. vLLM aborts them; not every engine does. A server that keeps
working on them carries them into the next point: after a saturated capacity point, the next one
inherited 700 requests in flight and failed at a load the server sustains, so the search bracketed
43.9-46.6 req/s below the truth (issue 39).

Before each point (and before a point measured again, generator.py), `wait_idle` polls the server's
`/metrics` until it has no request running or waiting (vLLM's vllm:num_requests_running and
vllm:num_requests_waiting), up to a limit (QUANTKIT_DRAIN_TIMEOUT, 120 s). A point that starts with
requests still there is measured all the same, and flagged (`started_busy`, with how many and how
long it waited). The client's own requests are over by then: a point returns only once every
stream it opened has finished or been closed. A server without `/metrics` cannot say: nothing is
waited for and nothing flagged.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from ...serve import answers
from ..observe.metrics import parse

POLL_S = 0.5


@dataclass
class Drain:
    waited_s: float
    left: float | None  # requests running or waiting when the wait ended; None: /metrics could not say
    limit_s: float

    @property
    def busy(self) -> bool:
        return bool(self.left)

    def reason(self) -> str:
        return (f"the server still had {self.left:.0f} requests running or waiting when the point started, "
                f"after {self.waited_s:.0f} s of waiting (QUANTKIT_DRAIN_TIMEOUT: {self.limit_s:g} s)")


async def wait_idle(base_url: str, limit_s: float | None = None, headers: dict[str, str] | None = None) -> Drain:
    """Until the server at `base_url` (no /v1) has no request running or waiting by its /metrics, or
    `limit_s` (QUANTKIT_DRAIN_TIMEOUT) has passed."""
    from ...settings import drain_timeout

    limit_s = drain_timeout() if limit_s is None else limit_s
    started = time.monotonic()
    url = base_url.rstrip("/") + "/metrics"
    async with httpx.AsyncClient(timeout=5.0, headers=headers) as http:
        while True:
            try:
                response = await answers.aget(http, url, answers.METRICS_LIMIT)
                response.raise_for_status()
                gauges = parse(response.text).gauges
            except (httpx.HTTPError, ValueError, answers.TooLarge):
                return Drain(round(time.monotonic() - started, 2), None, limit_s)
            left = gauges.get("running", 0) + gauges.get("waiting", 0)
            waited = time.monotonic() - started
            if left == 0 or waited >= limit_s:
                return Drain(round(waited, 2), left, limit_s)
            await asyncio.sleep(min(POLL_S, max(limit_s - waited, 0.0)))


def before_point(base_url: str, headers: dict[str, str] | None = None) -> Drain:
    """`wait_idle` from synchronous code (a point about to be measured)."""
    from .client import run_loop

    return run_loop(wait_idle(base_url, headers=headers))


def mark(point, drain: Drain):
    """Flag `point` (a BenchPoint) when it started on a busy server; returns it."""
    if drain.busy:
        point.started_busy = True
        point.started_busy_reason = drain.reason()
    return point
