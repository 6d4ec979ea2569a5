"""A stored steady-state point judged under another SLO, and what a set of judged loads brackets.

The judging is the rule a live point uses (window.settle: confidence.judge at the point's
confidence, whose percentile bounds are MLPerf LoadGen's early-stopping rule, tail_bound.py; a
pass still rising or short of the window's minimum of requests is undecided) applied to the
requests the store kept (samples.py) and the window they fell in. A saturated point fails any SLO;
a client-limited one decides nothing. An undecided point keeps the requests it still needs
(`LadderStep.more`).

An undecided point is never counted as a pass, nor as a failure: it bounds the capacity from
neither side (`cover`; search.left_open names it with the requests it needs). ladder.py turns
the bracket into a capacity result; live.py's span search steers with `judge_step` and starts
at `start_from`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..stats.point import OVERLOADED, BenchPoint, WindowSettings
from ..stats.samples import decode
from ..stats.slo import Slo
from ..stats.window import settle
from .search import CapacitySearch

Coverage = Literal["bracketed", "coarse", "above", "below", "undecided"]


class LadderStep(BaseModel):
    """One stored point judged under the new SLO."""

    load: float
    state: Literal["pass", "fail", "undecided", "saturated", "stall", "untrusted"]
    measured: int = 0
    margin: float | None = None  # worst statistic / limit over the terms (<= 1 meets)
    reasons: list[str] = Field(default_factory=list)
    attainment: float | None = None  # share of the window's requests that met every term on their own
    met: int | None = None  # ... and how many (goodput = met / the point's duration, as slo.Slo.judge)
    more: int | None = None  # undecided: requests still to run before it could decide (None: not known)


def judge_step(point: BenchPoint, slo: Slo, window: WindowSettings) -> LadderStep:
    """A stored steady-state point's verdict under `slo`, from its kept requests."""
    load = point.x
    w = point.window
    if w is not None and w.verdict in OVERLOADED:
        return LadderStep(load=load, state=w.verdict, measured=w.measured,
                          reasons=[w.saturation or (w.reasons[0] if w.reasons else w.verdict)])
    if point.client_limited:
        return LadderStep(load=load, state="untrusted", reasons=[point.client_limited_reason or "client-limited"])
    if not point.samples:
        return LadderStep(load=load, state="undecided", reasons=["the store kept no requests of this point"])
    measured = [r for r, where in decode(point.samples) if where == "window"]
    if not measured:
        return LadderStep(load=load, state="undecided", reasons=["no request finished inside the window"])
    state, reasons, more, verdict = settle(slo, measured, window)
    values = [t.value / t.limit for t in verdict.terms if t.value is not None and t.limit]
    met = sum(1 for r in measured if slo.request_ok(r))
    return LadderStep(load=load, state=state, measured=len(measured), margin=max(values, default=None),
                      reasons=reasons, attainment=met / len(measured), met=met, more=more)


def cover(steps: list[LadderStep], tolerance: float, integer: bool) -> tuple[Coverage, float | None, float | None]:
    """(coverage, capacity, ceiling): the highest decided pass below the lowest decided failure (or
    saturation) and below the lowest point that decides nothing (client-limited)."""
    failed = [s.load for s in steps if s.state in ("fail", *OVERLOADED)]
    untrusted = [s.load for s in steps if s.state == "untrusted"]
    ceiling = min(failed, default=None)
    limit = min([x for x in (ceiling, min(untrusted, default=None)) if x is not None], default=None)
    passes = [s.load for s in steps if s.state == "pass" and (limit is None or s.load < limit)]
    capacity = max(passes, default=None)
    if capacity is None:
        # below the ladder only if its lowest point itself breaks the SLO, not a point that could not decide
        undecided_below = any(s.state == "undecided" and (limit is None or s.load < limit) for s in steps)
        return ("below" if ceiling is not None and not undecided_below else "undecided"), None, ceiling
    if ceiling is None:
        return "above", capacity, None
    # as the search: a bracket may end on an undecided load (near the bound a window may not decide);
    # the ceiling reported stays the decided failure above it
    edge = min(s.load for s in steps if s.load > capacity and s.state != "pass")
    close = edge <= capacity * (1 + tolerance) + 1e-9 or (integer and edge - capacity <= 1)
    return ("bracketed" if close else "coarse"), capacity, ceiling


def tighten(search: CapacitySearch, steps: list[LadderStep]) -> CapacitySearch:
    """`search`'s bracket narrowed by the judged loads of `steps` inside it that its own path stepped
    over (a tier span's or a recheck's points), read as `cover` reads a ladder: the highest pass
    below the lowest decided failure (and below an untrusted load) raises the capacity, that
    failure lowers the ceiling. 12-06, one H100, W4A16: the search bisected 32.4 (pass) and 37.65
    (saturated) to 34.93 (saturated) and stopped on 32.4 while the ladder held a pass at 34.35,
    which ladder.rederive (`compare --slo` under another SLO) read from the same stored points."""
    if search.capacity is None or search.ceiling is None:
        return search
    _, capacity, ceiling = cover([s for s in steps if search.capacity < s.load < search.ceiling], 0.0, False)
    capacity = search.capacity if capacity is None else capacity
    ceiling = search.ceiling if ceiling is None else ceiling
    if (capacity, ceiling) == (search.capacity, search.ceiling):
        return search
    return search.model_copy(update={"capacity": capacity, "ceiling": ceiling})


def start_from(steps: list[LadderStep]) -> float | None:
    """Where a search for this SLO should begin on the ladder: its capacity there, else half the
    lowest failure (None: no point decides)."""
    steps = sorted(steps, key=lambda s: s.load)
    _, capacity, ceiling = cover(steps, 0.0, False)
    if capacity is not None:
        return capacity
    return ceiling / 2 if ceiling is not None else None
