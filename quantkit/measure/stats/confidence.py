"""SLO verdicts a point's data support at a stated confidence: pass, fail, or undecided.

A percentile bound such as TTFT p95 <= 1 s holds when the share of requests over 1 s is at most
5%. The requests of a window are a sample of the server's steady state, so the share over the limit
is known only within a binomial interval: the bound is met when the interval's upper end is within
the allowed share, broken when its lower end is beyond it, and undecided in between. That is
MLPerf Inference LoadGen's early-stopping rule for percentile latency bounds (tail_bound.py, at the
window's confidence: e.g. p95 at 95% needs 59 requests with none over the limit, 93 with one, a
p99 299), and an undecided bound says how many more requests it needs (`TermVerdict.more`). The
same reading decides:
- attainment (the share of requests that met every bound, target T): pass when the lower bound of
  the share met is at least T, fail when its upper bound is below T (GuideLLM's goodput search
  reads a Wilson interval the same way);
- a mean bound: Student's t interval on the mean;
- ITL percentiles: a request's gaps are not independent of each other, so the unit is the request
  (its own ITL at that percentile), which gives a wide, honest interval, never an over-confident one.
A failed request counts as over every limit (it met none).

Requests that overlap in time share one queue and one batch, so their latencies are correlated: a
window's 200 requests may hold the information of far fewer independent draws. The interval is
therefore the wider of the binomial one and a batch-means one (the window cut into 10 runs of
consecutive requests, Student's t over their shares), the standard reading of steady-state
simulation output; a verdict that both allow is the one given. The requests an undecided
percentile bound still needs are the more of the two readings': LoadGen's (the fewest more requests
that would make it met, every one of them under the limit) and the batch means' (the window
lengthened until their interval, narrowing as 1/sqrt(requests), clears the allowed share at the
share seen; none when that share sits on the allowed one).

The words: a term is `met`, `broken` or `undecided (needs N more requests)` (`verdict_word`); the
point's decision keeps the names its stored windows have (pass / fail / undecided).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from . import tail_bound
from .point import percentile

if TYPE_CHECKING:
    from .point import RequestResult
    from .slo import Slo, SloTerm

Decision = Literal["pass", "fail", "undecided"]
DEFAULT_CONFIDENCE = 0.95


def share_bounds(k: int, n: int, confidence: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (lower, upper) on a binomial share from k of n, each at
    `confidence` (the exact binomial bound LoadGen's early stopping uses)."""
    from scipy.stats import beta

    if n <= 0:
        return 0.0, 1.0
    lower = 0.0 if k <= 0 else float(beta.ppf(1 - confidence, k, n - k + 1))
    upper = 1.0 if k >= n else float(beta.ppf(confidence, k + 1, n - k))
    return lower, upper


BATCHES = 10  # batch means: the window cut into this many runs of consecutive requests
MIN_BATCH = 10  # requests a batch must hold for the batch means to be read


def batch_means(over: list[bool], confidence: float) -> tuple[float, float] | None:
    """(mean, one-sided half-width) of the share over a limit from the means of consecutive batches
    (the batch-means method of steady-state simulation output): requests sent close together see
    the same queue and batch, so their exceedances come in runs that a binomial interval takes for
    independent luck. Student's t over the batches' shares; None when the window is too short to
    cut into batches."""
    from scipy.stats import t as student

    k = min(BATCHES, len(over) // MIN_BATCH)
    if k < 5:
        return None
    size = len(over) / k
    shares = [sum(over[int(i * size):int((i + 1) * size)]) / (int((i + 1) * size) - int(i * size)) for i in range(k)]
    mean = sum(shares) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in shares) / (k - 1))
    return mean, float(student.ppf(confidence, k - 1)) * sd / math.sqrt(k)


class TermVerdict(BaseModel):
    key: str  # ttft_p95, attainment, ...
    decision: Decision
    n: int  # requests it was judged on
    value: float | None = None  # the point estimate (the statistic, or the share met)
    limit: float
    over: int | None = None  # requests over the limit (percentile bounds)
    interval: tuple[float, float] | None = None  # of the share over (percentiles), the share met, or the mean
    more: int | None = None  # undecided percentile bound: requests still to run before it can decide (module doc)

    def describe(self) -> str:
        # no value: every request of the window failed, so no latency was measured (the point fails)
        word = verdict_word(self.decision, self.more, counted=self.over is not None)
        if self.key == "attainment":
            lo, hi = self.interval or (0.0, 1.0)
            shown = "none" if self.value is None else f"{self.value:.3f}"
            return f"attainment {shown} [{lo:.3f}, {hi:.3f}] vs {self.limit:g}: {word}"
        shown = "none" if self.value is None else f"{self.value:.3g}s"
        if self.over is not None:
            lo, hi = self.interval or (0.0, 1.0)
            return (f"{self.key} {shown} vs {self.limit:g}s, {self.over}/{self.n} over "
                    f"(share {lo:.3f}..{hi:.3f}): {word}")
        return f"{self.key} {shown} vs {self.limit:g}s: {word}"


WORDS = {"pass": "met", "fail": "broken", "undecided": "undecided"}


def verdict_word(decision: str, more: int | None, counted: bool = True) -> str:
    """A bound's verdict as the report says it: met, broken, or undecided with the requests it still
    needs (`counted`: a percentile bound, whose count is known or said to be unknown)."""
    word = WORDS.get(decision, decision)
    if decision != "undecided" or not counted:
        return word
    return f"undecided (needs {more} more requests)" if more is not None else "undecided (needs more requests)"


class SloVerdict(BaseModel):
    decision: Decision
    confidence: float
    terms: list[TermVerdict]
    failures: int = 0

    def reasons(self) -> list[str]:
        out = [f"{self.failures} failed requests"] if self.failures else []
        return out + [t.describe() for t in self.terms if t.decision != "pass"]

    @property
    def more(self) -> int | None:
        """Requests still to run before every undecided percentile bound could decide (the most any
        needs); None when the verdict is decided, or a bound's count is unknown."""
        if self.decision != "undecided":
            return None
        open_terms = [t for t in self.terms if t.decision == "undecided"]
        counts = [t.more for t in open_terms]
        if not counts or any(c is None for c in counts):
            return None
        return max(c for c in counts if c is not None)


def _value(r: "RequestResult", term: "SloTerm") -> float | None:
    if term.metric == "itl":
        if not r.itl:
            return None
        return sum(r.itl) / len(r.itl) if term.stat == "mean" else percentile(r.itl, float(term.stat[1:]))
    return getattr(r, term.metric)


def _percentile_term(term: "SloTerm", results: list["RequestResult"], confidence: float) -> TermVerdict:
    values = [_value(r, term) if r.ok else math.inf for r in results]
    values = [v for v in values if v is not None]
    n = len(values)
    q = float(term.stat[1:]) / 100.0
    allowed = 1.0 - q
    over = sum(1 for v in values if v > term.limit_s)
    bound = tail_bound.verdict(n, over, q, confidence)  # the binomial interval's reading, with its count
    decision: Decision = {"met": "pass", "broken": "fail", "undecided": "undecided"}[bound.decision]
    more = bound.more
    lower, upper = share_bounds(over, n, confidence)
    batched = batch_means([v > term.limit_s for v in values], confidence)
    if batched is not None:  # requests that shared the server's state are not independent draws
        share, half = batched
        lower, upper = min(lower, max(0.0, share - half)), max(upper, min(1.0, share + half))
        by_batches = "pass" if share + half <= allowed else "fail" if share - half > allowed else "undecided"
        if by_batches == "undecided":
            decision, more = "undecided", _batch_more(n, share, half, allowed, more)
        elif by_batches != decision and decision != "undecided":  # a verdict both readings allow, or none
            decision, more = "undecided", None
    finite = [v for v in values if math.isfinite(v)]
    estimate = percentile(finite, q * 100) if finite else None
    return TermVerdict(key=term.key, decision=decision, n=n, value=estimate, limit=term.limit_s, over=over,
                       interval=(lower, upper), more=more)


def _batch_more(n: int, share: float, half: float, allowed: float, binomial: int | None) -> int | None:
    """The requests still needed when the batch means keep a bound undecided: their interval's
    half-width narrows as 1/sqrt(requests), so at the share seen it clears the allowed share after
    n (half / gap)^2 requests; the more of that and LoadGen's count. None: the share seen is the
    allowed one (no length decides it)."""
    gap = abs(share - allowed)
    if gap < 1e-9:
        return None
    return max(binomial or 0, math.ceil(n * (half / gap) ** 2) - n, 1)


def _mean_term(term: "SloTerm", results: list["RequestResult"], confidence: float) -> TermVerdict:
    from scipy.stats import t as student

    values = [v for r in results if r.ok and (v := _value(r, term)) is not None]
    n = len(values)
    if n < 2:
        return TermVerdict(key=term.key, decision="undecided", n=n, limit=term.limit_s,
                           value=values[0] if values else None)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(student.ppf(confidence, n - 1)) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    decision: Decision = "pass" if hi <= term.limit_s else "fail" if lo > term.limit_s else "undecided"
    return TermVerdict(key=term.key, decision=decision, n=n, value=mean, limit=term.limit_s, interval=(lo, hi))


def judge(slo: "Slo", results: list["RequestResult"], confidence: float = DEFAULT_CONFIDENCE) -> SloVerdict:
    """The SLO's verdict on a window's requests: fail when any bound (or attainment) fails at
    `confidence` or a request failed, pass when every one passes, else undecided."""
    terms = [(_mean_term if t.stat == "mean" else _percentile_term)(t, results, confidence) for t in slo.terms]
    if slo.attainment is not None:
        n = len(results)
        met = sum(1 for r in results if slo.request_ok(r))
        lo, hi = share_bounds(met, n, confidence)
        decision: Decision = "pass" if lo >= slo.attainment else "fail" if hi < slo.attainment else "undecided"
        terms.append(TermVerdict(key="attainment", decision=decision, n=n, value=met / n if n else None,
                                 limit=slo.attainment, interval=(lo, hi)))
    failures = sum(1 for r in results if not r.ok)
    if failures or any(t.decision == "fail" for t in terms):
        overall: Decision = "fail"
    elif results and all(t.decision == "pass" for t in terms):
        overall = "pass"
    else:
        overall = "undecided"
    return SloVerdict(decision=overall, confidence=confidence, terms=terms, failures=failures)


def requests_to_pass(quantile: float, confidence: float = DEFAULT_CONFIDENCE, over: int = 0) -> int:
    """The fewest requests with `over` of them over the limit that pass a percentile bound."""
    n = over + 1
    while share_bounds(over, n, confidence)[1] > 1 - quantile:
        n += 1
    return n


def requests_needed(slo: "Slo", confidence: float = DEFAULT_CONFIDENCE) -> int:
    """Requests a window must hold before a pass can be decided at all: the strictest percentile
    (or attainment) bound's `requests_to_pass` with no request over it (59 for a p95 at 95%, 299
    for a p99), and 30 for mean bounds alone. A point too short for it can only be undecided."""
    shares = [float(t.stat[1:]) / 100.0 for t in slo.terms if t.stat != "mean"]
    if slo.attainment is not None:
        shares.append(slo.attainment)
    return max([30] + [requests_to_pass(q, confidence) for q in shares])

