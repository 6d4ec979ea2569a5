"""Whether a tail-latency bound (p99 <= X) holds, on the requests seen: MLPerf LoadGen's
early-stopping rule, and how many more requests a verdict needs.

LoadGen (mlcommons/inference loadgen/early_stopping.cc, results.cc; the rule is the appendix "Early
Stopping Criterion" of mlcommons/inference_policies inference_rules.adoc): a system meets a latency
bound at percentile p when a system that only just fails it, with a per-request under-latency
rate of p - d, would show as few over-latency requests as were seen with probability below 1 - c.
With t requests over the bound, the binomial CDF in terms of the regularized incomplete beta
function gives the fewest under-latency requests h for which that holds:

    smallest h with  I(p - d; h, t + 1) < 1 - c          (LoadGen uses d = 0, c = 0.99)

and the run of n requests passes when n >= h + t; otherwise it "would need to run at least
h + t - n more queries, with the run being successful if every additional query were under
latency". With t = 0 that is p^h < 1 - c: 459 requests for a p99 at 99%, 44 for a p90.

LoadGen never says "failed": a run short of h + t only needs more requests. `verdict` adds the
mirror-image test at the same confidence (not LoadGen's): the bound is broken when a system that
only just meets it (over-latency rate 1 - p) would show at least t over-latency requests of n with
probability below 1 - c, i.e. I(1 - p; t, n - t + 1) < 1 - c. Between the two the verdict is
undecided, with LoadGen's count of requests still to run.

`discarded` is the single-stream/multi-stream reading of the same rule: the largest t with
h(t) + t <= n; LoadGen discards the t - 1 slowest requests and reports the slowest of the rest
as its percentile estimate (needing h(1) + 1 requests at all: 64 for p90, 662 for p99).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

CONFIDENCE = 0.99  # LoadGen's c
TOLERANCE = 0.0  # LoadGen's d

Decision = Literal["met", "broken", "undecided"]


def _check(percentile: float, confidence: float, tolerance: float) -> None:
    if not 0 < percentile - tolerance < 1 or not 0.5 <= confidence < 1 or tolerance < 0:
        raise ValueError(f"percentile {percentile}, tolerance {tolerance} and confidence {confidence} must satisfy "
                         "0 < percentile - tolerance < 1, tolerance >= 0, 0.5 <= confidence < 1")


def odds(under: int, over: int, percentile: float, tolerance: float = TOLERANCE) -> float:
    """The probability that a system with an under-latency rate of percentile - tolerance shows at
    most `over` over-latency requests among under + over: I(p - d; under, over + 1)."""
    from scipy.special import betainc

    if under <= 0:
        return 1.0
    return float(betainc(under, over + 1, percentile - tolerance))


def min_passing(over: int, percentile: float, confidence: float = CONFIDENCE, tolerance: float = TOLERANCE) -> int:
    """LoadGen's find_min_passing: the fewest under-latency requests h for which `over`
    over-latency requests still meet the bound, odds(h, over) < 1 - confidence."""
    _check(percentile, confidence, tolerance)
    if over < 0:
        raise ValueError(f"over-latency requests must be >= 0 (got {over})")
    # odds falls as h grows: double until it passes, then bisect
    low, high = 0, max(1, math.ceil((over + 1) * percentile / (1 - percentile)))
    while odds(high, over, percentile, tolerance) >= 1 - confidence:
        low, high = high, 2 * high
    while high - low > 1:  # odds(low) >= 1 - c > odds(high)
        middle = (low + high) // 2
        if odds(middle, over, percentile, tolerance) < 1 - confidence:
            high = middle
        else:
            low = middle
    return high


def _broken(requests: int, over: int, percentile: float, confidence: float) -> bool:
    """A system that only just meets the bound shows `over` or more of `requests` over it with
    probability below 1 - confidence: P(X >= t) for X ~ Binomial(n, 1 - p), = I(1 - p; t, n - t + 1)."""
    from scipy.special import betainc

    return over > 0 and float(betainc(over, requests - over + 1, 1 - percentile)) < 1 - confidence


@dataclass(frozen=True)
class TailVerdict:
    decision: Decision
    requests: int  # n, the requests seen
    over: int  # t, those over the latency bound
    percentile: float  # p, e.g. 0.99
    confidence: float  # c
    needed: int  # h + t: the requests LoadGen's rule needs to call it met with t over the bound
    more: int | None  # undecided: requests still to run, met if every one of them is under the bound

    def describe(self) -> str:
        share = f"{self.over} of {self.requests} requests over the bound"
        if self.decision == "undecided":
            return f"undecided ({share}; needs {self.more} more requests at {self.confidence:.0%} confidence)"
        return f"{self.decision} ({share}, p{self.percentile * 100:g} at {self.confidence:.0%} confidence)"


def verdict(requests: int, over: int, percentile: float, confidence: float = CONFIDENCE,
            tolerance: float = TOLERANCE) -> TailVerdict:
    """Met (LoadGen's early-stopping rule passes), broken (the mirror test: module docstring) or
    undecided with the requests still to run, for `over` of `requests` over the latency bound."""
    if not 0 <= over <= requests:
        raise ValueError(f"over-latency requests ({over}) must be between 0 and the requests ({requests})")
    needed = min_passing(over, percentile, confidence, tolerance) + over
    if requests >= needed:
        decision: Decision = "met"
    elif _broken(requests, over, percentile - tolerance, confidence):
        decision = "broken"
    else:
        decision = "undecided"
    more = needed - requests if decision == "undecided" else None
    return TailVerdict(decision, requests, over, percentile, confidence, needed, more)


def discarded(requests: int, percentile: float, confidence: float = CONFIDENCE,
              tolerance: float = TOLERANCE) -> int | None:
    """How many of the slowest requests LoadGen's single-stream estimate discards (t - 1, t the
    largest with h(t) + t <= n); None when n < h(1) + 1, too few for an estimate at all."""
    if requests < min_passing(1, percentile, confidence, tolerance) + 1:
        return None
    low, high = 1, requests  # h(t) + t grows with t: h(low) + low <= n < h(high) + high
    while high - low > 1:
        middle = (low + high) // 2
        if min_passing(middle, percentile, confidence, tolerance) + middle <= requests:
            low = middle
        else:
            high = middle
    return low - 1


def percentile_estimate(latencies: Sequence[float], percentile: float, confidence: float = CONFIDENCE) -> float | None:
    """LoadGen's early-stopping percentile estimate: the slowest latency left after discarding
    `discarded` of the slowest; None with too few requests."""
    drop = discarded(len(latencies), percentile, confidence)
    return None if drop is None else sorted(latencies)[len(latencies) - drop - 1]
