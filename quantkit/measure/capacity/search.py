"""Searching the load axis: the knee of a throughput curve, and capacity under an SLO.

Both searches take a `measure(load)` callable, so they are pure logic: the unit tests drive them
with synthetic curves, `bench` and `capacity` drive them with real load points.
"""

from __future__ import annotations

import math
from typing import Callable, Literal

from pydantic import BaseModel, Field

from ...errors import UsageError
from ...numbers import MIN_RATE
from ..stats.point import OVERLOADED

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


# --------------------------------------------------------------------------------------------
# Capacity under an SLO


class Verdict(BaseModel):
    """What one measured load says to the capacity search."""

    passed: bool  # which way the search goes: up past a pass, down from a failure
    margin: float | None = None  # SLO's worst value/limit (<= 1 meets); None when unknown
    trusted: bool = True  # False: quantkit's own client limited the point (its latencies are not the server's)
    decided: bool = True  # False: the data could not decide at the confidence asked (steers, never reported)
    state: str | None = None  # the point's own verdict (pass, fail, saturated), where it has one
    more: int | None = None  # undecided: requests still to run before it could decide (None: not known)

    @classmethod
    def of_window(cls, state: str, margin: float | None, trusted: bool = True, more: int | None = None) -> "Verdict":
        """A steady-state window's verdict (`pass`, `fail`, `saturated`, `undecided`, or `untrusted`:
        quantkit's client limited it) as the search reads it, for a point measured now and for one
        judged again from the ladder alike: `undecided` steers by its point estimate but is never
        reported; `saturated` fails and its percentiles give no margin."""
        decided = state in ("pass", "fail", *OVERLOADED)
        margin = None if state in OVERLOADED else margin
        passed = state == "pass" or (state == "undecided" and margin is not None and margin <= 1.0)
        return cls(passed=passed, margin=margin, trusted=trusted and state != "untrusted", decided=decided,
                   state=state if decided else None, more=more if state == "undecided" else None)


class CapacityStep(BaseModel):
    load: float
    passed: bool
    margin: float | None = None
    trusted: bool = True
    decided: bool = True
    state: str | None = None
    more: int | None = None  # undecided: requests still to run before it could decide (None: not known)


class CapacitySearch(BaseModel):
    """The highest load meeting the SLO, bracketed to `tolerance`.

    reason: `bracketed`: `capacity` meets the SLO and `ceiling` (<= capacity * (1 + tolerance), or
    the next integer) breaks it; `max_reached`: the highest load allowed still meets it (capacity is
    at least that); `below_min`: even the lowest load breaks it (capacity None); `untrusted`: a point
    that decides could not be trusted (client-limited), capacity is the highest trusted pass.
    """

    capacity: float | None
    ceiling: float | None
    reason: Literal["bracketed", "max_reached", "below_min", "untrusted"]
    tolerance: float
    lo: float
    hi: float
    steps: list[CapacityStep]
    floor: float | None = None  # how far below `lo` the search could walk when `lo` already failed (None: lo)
    undecided: list[float] = Field(default_factory=list)  # loads whose data could not decide (not in the bracket)


def left_open(search: CapacitySearch | None) -> CapacityStep | None:
    """The lowest load left undecided above the capacity (any, without one) and up to the ceiling.
    An undecided load is never counted as a pass, nor as a failure: it bounds the capacity from
    neither side, so the capacity stays the highest decided pass and the ceiling the lowest decided
    failure (the undecided load itself where none was measured above it), and this load is reported
    beside them with the requests it needs ("30-38.5 req/s,
    undecided at 33.99 (needs 1093 more requests)"; "undecided at 30 req/s (needs 159 more
    requests)" where nothing passed)."""
    if search is None:
        return None
    steps = search.steps or []  # a record stored abridged keeps no steps
    return next((s for s in sorted(steps, key=lambda s: s.load) if not s.decided and s.trusted
                 and (search.capacity is None or s.load > search.capacity)
                 and (search.ceiling is None or s.load <= search.ceiling)), None)


def outcome(search: CapacitySearch | None) -> str:
    """What a search found, in one word: `capacity`, or why there is none: `untrusted` (quantkit's
    client limited the deciding point), `saturated` (the lowest load already outpaced the server),
    `stall` (no request finished at the lowest load),
    `undecided` (no load below the first failure decided at the confidence asked) or `not met`."""
    if search is None:
        return "not met"
    if search.capacity is not None:
        return "capacity"
    if search.reason == "untrusted":
        return "untrusted"
    steps = sorted(search.steps, key=lambda s: s.load)
    failed = [s.load for s in steps if s.decided and not s.passed]
    if any(not s.decided for s in steps if not failed or s.load < failed[0]):
        return "undecided"
    return steps[0].state if steps and steps[0].state in OVERLOADED else "not met"


def floor_of(lo: float, integer: bool) -> float:
    """How low a search goes by itself when the range's lowest load `lo` already fails: three
    halvings (lo / 8: 0.125 req/s below a range starting at 1), one stream for a closed loop. A
    server too slow for the range still gets a capacity (on an AVX2 CPU serving emulated bf16,
    SmolLM2 held none of 1 req/s), and the search ends in minutes where that is not enough: a
    Poisson point at 0.125 req/s already runs ~8 minutes to hold the 59 requests a p95 needs. A
    rate floor is never below numbers.MIN_RATE (0.1 req/s), the lowest rate a user may ask for."""
    if integer:
        return max(1.0, float(math.floor(lo / FLOOR_DIVISOR)))
    return min(lo, max(MIN_RATE, lo / FLOOR_DIVISOR))  # never below the lowest rate a user may ask for


FLOOR_DIVISOR = 8


def search_capacity(measure: Callable[[float], Verdict], *, lo: float = 1, hi: float = 1024,
                    tolerance: float = 0.10, integer: bool = True, start: float | None = None,
                    max_growth: float = 8.0, floor: float | None = None) -> CapacitySearch:
    """Grow the load until the SLO breaks, then narrow the bracket [pass, fail] until
    fail <= pass * (1 + tolerance) (or, for integer loads, fail = pass + 1).

    The next load is predicted, not just halved: an SLO's margin (worst value/limit) is close to a
    power law of load (m = a * load^s) between two nearby measured loads, so the crossing m = 1 is
    interpolated in log-log space from the two measured loads nearest to it. Growing, the step is
    at most `max_growth` x; inside a bracket the prediction is kept at least one tolerance step
    from both ends, and a bracket that a prediction failed to halve twice in a row is halved
    geometrically (a safeguard against curves the power law fits badly). When the bracket is
    within (1 + tolerance)^2 one load in its geometric middle settles it either way.
    `start` begins elsewhere than `lo` (a cheap probe's capacity): the search then walks down
    as well as up. Every load is measured once; a point that is not trusted ends the search.
    When `lo` itself fails, the search walks on down to `floor` (default `lo`: no lower), halving
    where the failures carry no margin (saturated, stalled), and reports `below_min` only there.
    """
    if lo <= 0 or hi < lo:
        raise UsageError(f"bad capacity range {lo:g}..{hi:g}")
    if not 0 < tolerance < 4:
        raise UsageError(f"the capacity tolerance must be a positive share such as 0.1, not {tolerance:g}")
    steps: dict[float, CapacityStep] = {}
    step = 1 + tolerance
    floor = lo if floor is None else min(lo, floor)

    def norm(x: float) -> float:
        x = min(hi, max(floor, x))
        return float(round(x)) if integer else float(f"{x:.4g}")

    def get(x: float) -> CapacityStep:
        if x not in steps:
            v = measure(int(x) if integer else x)
            steps[x] = CapacityStep(load=x, passed=v.passed, margin=v.margin, trusted=v.trusted, decided=v.decided,
                                    state=v.state, more=v.more)
        return steps[x]

    def result(capacity, ceiling, reason) -> CapacitySearch:
        # the bracket holds decided loads only: an undecided pass steered the search upwards, but
        # the capacity is the highest load that passed at the confidence asked
        undecided = sorted(x for x, s in steps.items() if not s.decided)
        if capacity is not None and not steps[capacity].decided:
            capacity = max((x for x, s in steps.items() if s.passed and s.decided and x <= capacity), default=None)
            if capacity is None and reason in ("bracketed", "max_reached"):
                reason = "below_min"
        if ceiling is not None and not steps[ceiling].decided:
            decided_fail = min((x for x, s in steps.items() if not s.passed and s.decided and x >= ceiling),
                               default=None)
            ceiling = decided_fail if decided_fail is not None else ceiling
        return CapacitySearch(capacity=capacity, ceiling=ceiling, reason=reason, tolerance=tolerance, lo=lo, hi=hi,
                              steps=list(steps.values()), undecided=undecided, floor=floor if floor < lo else None)

    def done(p: float, f: float) -> bool:
        return f <= p * step + 1e-9 or (integer and f - p <= 1)

    good: float | None = None  # highest passing load
    bad: float | None = None  # lowest failing load
    x = norm(start if start is not None else lo)
    unhalved = 0
    while True:
        if x in steps:  # nothing new left to measure (integer loads next to both ends)
            reason = "bracketed" if good is not None and bad is not None else (
                "below_min" if good is None else "max_reached")
            return result(good, bad if reason != "max_reached" else None, reason)
        s = get(x)
        if not s.trusted:
            return result(good, bad, "untrusted")
        width = math.log(bad / good) if good is not None and bad is not None else None
        if s.passed:
            good = x if good is None or x > good else good
        else:
            bad = x if bad is None or x < bad else bad
        if good is not None and bad is not None:
            if done(good, bad):
                below = _below_undecided(steps, step, norm)
                if below is None:
                    return result(good, bad, "bracketed")
                x = below  # the bracket's pass is undecided: look one tolerance step below it
                continue
            unhalved = unhalved + 1 if width is not None and math.log(bad / good) > 0.55 * width else 0
        elif good is not None and good >= hi:
            return result(good, None, "max_reached")
        elif bad is not None and bad <= floor:
            return result(None, bad, "below_min")
        x = _next_load(steps, good, bad, lo, hi, step, max_growth, unhalved >= 2, integer, norm)


def _below_undecided(steps: dict[float, CapacityStep], step: float, norm: Callable[[float], float]) -> float | None:
    """An unmeasured load one tolerance step below the lowest undecided pass above every decided
    one, or None. Near the bound a point's data may not decide; a bracket whose pass is undecided
    is no capacity, and a load a step lower usually decides (the demo's gptq search stopped on an
    undecided pass at 2.31 req/s and said "not met even at 1 req/s", a load it never measured)."""
    decided = max((x for x, s in steps.items() if s.passed and s.decided and s.trusted), default=0.0)
    open_passes = [x for x, s in steps.items() if s.passed and not s.decided and x > decided]
    if not open_passes:
        return None
    x = norm(min(open_passes) / step)
    return None if x in steps or x <= decided else x


def _crossing(steps: dict[float, CapacityStep], good: float | None, bad: float | None) -> float | None:
    """The load where the margin reaches 1, from the measured loads nearest to it: a parabola in
    log-log space through three (serving curves bend upwards near saturation, which a line through
    the bracket's ends underestimates), a line through two, or, from one load, margin ~ load.
    None when the margins cannot tell (flat or falling)."""
    known = sorted((x, s.margin) for x, s in steps.items() if s.margin is not None and s.margin > 0 and s.trusted)
    if not known:
        return None
    pivot = good if good is not None else bad
    nearest = sorted(known, key=lambda p: abs(math.log(p[0] / pivot)))
    if good is not None and bad is not None:
        nearest = sorted(known, key=lambda p: min(abs(math.log(p[0] / good)), abs(math.log(p[0] / bad))))
    if len(nearest) == 1:
        x1, m1 = nearest[0]
        return x1 / m1
    pts = sorted(nearest[:3])
    lx = [math.log(x) for x, _ in pts]
    lm = [math.log(m) for _, m in pts]
    lo_x = math.log(good) if good is not None else -math.inf
    hi_x = math.log(bad) if bad is not None else math.inf
    if len(pts) == 3:
        root = _parabola_root(lx, lm, lo_x, hi_x)
        if root is not None:
            return math.exp(root)
    (x1, y1), (x2, y2) = (lx[-2], lm[-2]), (lx[-1], lm[-1])
    if good is not None and bad is not None:  # the line through the bracket's own ends
        both = [(math.log(x), math.log(m)) for x, m in known if x in (good, bad)]
        if len(both) == 2:
            (x1, y1), (x2, y2) = both
    if x1 == x2:
        return None
    if y2 <= y1:
        return math.inf  # flat or falling: no crossing in sight
    return math.exp(x1 + (0.0 - y1) * (x2 - x1) / (y2 - y1))


def _parabola_root(lx: list[float], lm: list[float], lo: float, hi: float) -> float | None:
    """Where the parabola through three (log load, log margin) points crosses 0 while rising,
    within (lo, hi); None if it does not."""
    (x0, x1, x2), (y0, y1, y2) = lx, lm
    try:
        d01, d12 = (y1 - y0) / (x1 - x0), (y2 - y1) / (x2 - x1)
    except ZeroDivisionError:
        return None
    a = (d12 - d01) / (x2 - x0)
    b = d01 - a * (x0 + x1)
    c = y0 - a * x0 * x0 - b * x0
    if abs(a) < 1e-12:
        roots = [-c / b] if b > 0 else []
    else:
        disc = b * b - 4 * a * c
        if disc < 0:
            return None
        r = math.sqrt(disc)
        roots = [(-b - r) / (2 * a), (-b + r) / (2 * a)]
    rising = [x for x in roots if 2 * a * x + b > 0 and lo < x < hi]
    return min(rising) if rising else None


def _next_load(steps, good, bad, lo, hi, step, max_growth, bisect, integer, norm) -> float:
    predicted = _crossing(steps, good, bad)
    if predicted == math.inf and not (good is not None and bad is None):
        predicted = None  # only growth may take a flat margin as licence for its longest step
    if good is not None and bad is None:  # growing
        target = predicted / math.sqrt(step) if predicted else good * 2
        x = min(max(target, good * step), good * max_growth)
        return _fresh(norm(x), steps, good, bad, integer, up=True)
    if bad is not None and good is None:  # walking down from a failing start
        target = predicted / math.sqrt(step) if predicted else bad / 2
        x = max(min(target, bad / step), bad / max_growth)
        return _fresh(norm(x), steps, good, bad, integer, up=False)
    # bracketed
    if bad / good <= step * step:
        x = math.sqrt(good * bad)  # any load in [bad/step, good*step] settles it either way
    elif bisect or predicted is None or steps[bad].margin is None:
        x = math.sqrt(good * bad)  # a failure without a margin (saturated) says nothing of where it crossed
    else:
        x = min(max(predicted, good * step), bad / step)
    return _fresh(norm(x), steps, good, bad, integer, up=True)


def _fresh(x: float, steps, good, bad, integer: bool, up: bool) -> float:
    """A load strictly inside the bracket that was not measured yet (integer loads round onto
    measured ones near the ends)."""
    if not integer:
        return x
    lo_end = good if good is not None else 0
    hi_end = bad if bad is not None else float("inf")
    candidates = [x, x + 1, x - 1] if up else [x, x - 1, x + 1]
    for c in candidates:
        if lo_end < c < hi_end and c not in steps and c >= 1:
            return c
    return x
