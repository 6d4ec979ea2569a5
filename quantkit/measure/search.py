"""Searching the load axis: the knee of a throughput curve (and, later, capacity under an SLO).

The search takes a `measure(load) -> (throughput, slo_ok)` callable, so it is pure logic: the unit
tests drive it with synthetic curves, `bench` drives it with real load points.
"""

from __future__ import annotations

import math
from typing import Callable, Literal

from pydantic import BaseModel

from ..errors import UsageError

class KneeProbe(BaseModel):
    x: float
    throughput: float
    slo_ok: bool


class KneeResult(BaseModel):
    """The load (concurrency or rate) past which more load stops paying.

    `saturated`: doubling the load from `knee` raises output throughput by less than `min_gain`;
    `slo`: the next grid point up breaks the SLO; `slo_at_min`: even the lowest load breaks it
    (knee is None); `not_reached`: neither happened up to the top of the range (knee = top).
    """

    knee: float | None
    reason: Literal["saturated", "slo", "slo_at_min", "not_reached"]
    min_gain: float
    measured: list[KneeProbe]


def knee_grid(lo: float, hi: float, integer: bool = True) -> list[float]:
    """Candidate loads: lo * 2^k and lo * 1.5 * 2^k within [lo, hi]. With lo=1, hi=1024: 20 points
    (1, 2, 3, 4, 6, 8, 12, ... 768, 1024); every point's double is on the grid too."""
    if lo <= 0 or hi < lo:
        raise UsageError(f"bad sweep range {lo:g}..{hi:g}")
    points = set()
    k = 0
    while lo * 2**k <= hi:
        points.add(lo * 2**k)
        if lo * 1.5 * 2**k <= hi and (not integer or float(lo * 1.5 * 2**k).is_integer()):
            points.add(lo * 1.5 * 2**k)
        k += 1
    return sorted(points)


def knee_from_grid(values: dict[float, tuple[float, bool]], grid: list[float], min_gain: float = 0.10) -> KneeResult:
    """The knee by brute force over a fully measured grid (the reference the search must match).

    Saturation knee: the smallest c with T(2c) < (1 + min_gain) * T(c). SLO knee: the grid point
    before the first one whose SLO fails. The knee is the smaller of the two."""
    measured = [KneeProbe(x=x, throughput=values[x][0], slo_ok=values[x][1]) for x in grid]
    first_bad = next((x for x in grid if not values[x][1]), None)
    if first_bad == grid[0]:
        return KneeResult(knee=None, reason="slo_at_min", min_gain=min_gain, measured=measured)
    sat = next((x for x in grid if 2 * x in values and values[2 * x][0] < (1 + min_gain) * values[x][0]), None)
    slo_knee = grid[grid.index(first_bad) - 1] if first_bad is not None else None
    return _combine(sat, slo_knee, grid[-1], min_gain, measured)


def _combine(sat, slo_knee, top, min_gain, measured) -> KneeResult:
    if sat is None and slo_knee is None:
        return KneeResult(knee=top, reason="not_reached", min_gain=min_gain, measured=measured)
    if slo_knee is not None and (sat is None or slo_knee <= sat):
        return KneeResult(knee=slo_knee, reason="slo", min_gain=min_gain, measured=measured)
    return KneeResult(knee=sat, reason="saturated", min_gain=min_gain, measured=measured)


def find_knee(measure: Callable[[float], tuple[float, bool]], lo: float = 1, hi: float = 1024,
              min_gain: float = 0.10, integer: bool = True) -> KneeResult:
    """The same answer as `knee_from_grid` over `knee_grid(lo, hi)`, measuring few points.

    Assumes what saturating serving curves do: the gain per doubling shrinks as load grows, and
    once the SLO breaks it stays broken. A doubling ladder (lo, 2lo, 4lo, ...) stops at the first
    doubling that gains < min_gain or breaks the SLO; then only the 1.5x grid points inside that
    last bracket are left to decide, and they need at most two more points (3c/8 and 3c/4, the
    latter shared by both questions). A knee at 16 takes 8 points; at 2^k, k + 4.
    """
    cache: dict[float, tuple[float, bool]] = {}
    # the ladder must end on the grid's top point, or points above its last rung go unchecked
    hi = lo * 2 ** math.floor(math.log2(hi / lo) + 1e-9)
    grid = knee_grid(lo, hi, integer)

    def get(x: float) -> tuple[float, bool]:
        if x not in cache:
            throughput, ok = measure(int(x) if integer else x)
            cache[x] = (float(throughput), bool(ok))
        return cache[x]

    def probes() -> list[KneeProbe]:
        return [KneeProbe(x=x, throughput=t, slo_ok=ok) for x, (t, ok) in cache.items()]

    if not get(lo)[1]:
        return KneeResult(knee=None, reason="slo_at_min", min_gain=min_gain, measured=probes())
    c = lo
    sat = slo_knee = None
    while 2 * c <= hi:
        c2 = 2 * c
        t2, ok2 = get(c2)
        if not ok2:
            mid = 1.5 * c  # the only grid point between c and 2c
            slo_knee = mid if mid in grid and get(mid)[1] else c
        if t2 < (1 + min_gain) * get(c)[0]:
            # c saturates; c/2 did not (the ladder went on), so only 3c/4 remains to check
            sat = c
            q = 0.75 * c
            if q in grid and q > c / 2:
                if get(1.5 * c)[0] < (1 + min_gain) * get(q)[0]:
                    sat = q
        if sat is not None or slo_knee is not None:
            break
        c = c2
    return _combine(sat, slo_knee, grid[-1], min_gain, probes())
