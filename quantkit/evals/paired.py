"""Recovery and its confidence interval from per-item scores of the same items (pure arithmetic).

Both runs score the same items, and an item that is hard for the baseline is hard for its
quantized variant too: their per-item scores are strongly correlated, so the uncertainty of their
ratio is far smaller than that of two independent runs. Two estimators, chosen per metric:

- Mean metrics (accuracy, exact match): recovery r = mean(q) / mean(b), and its variance by the
  delta method WITH the covariance: var(r) = var(d) / (n mean(b)^2), d_i = q_i - r b_i (the same
  as (var q + r^2 var b - 2 r cov(q, b)) / (n mean(b)^2)). Closed form and deterministic: the
  statistic is a ratio of two means over hundreds of items, whose sampling distribution is
  close to normal, so a bootstrap would give the same width plus Monte-Carlo noise, at a cost.
  The same variance tells how many items would decide a gate (`more_items`). Where every item
  scored alike on both, the sample variance is zero; half a discordant pair each way (Agresti &
  Min, 2005) stands in for it, so agreement on few items never reads as certainty.
- Word perplexity (lower is better): recovery = ppl(b) / ppl(q) = exp(sum(ll_q - ll_b) / words)
  over the same documents, with a seeded paired bootstrap over documents (percentile interval):
  the statistic is the exponential of a ratio of sums over a few dozen documents of very
  different lengths, skewed enough that a symmetric interval would misstate it.

The independent figures (each run's own stderr, combined as if the runs were unrelated; the
document bootstrap resampling each run on its own) are computed on the same items for comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

CONFIDENCE = 0.95
Z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)  # 1.96: two-sided 95%
# "Would likely decide": items for which a true recovery equal to today's estimate lands its
# interval clear of the threshold with 80% probability (the usual power of a sample-size plan).
POWER = 0.80
Z_POWER = NormalDist().inv_cdf(POWER)
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 1234  # lm-eval's numpy seed: the same store gives the same intervals


@dataclass(frozen=True)
class Estimate:
    value: float | None  # None when undefined (a zero baseline)
    stderr: float | None  # None when it cannot be estimated (one item, no per-item scores)
    low: float | None
    high: float | None
    n: int
    method: str


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def sample_variance(xs: Sequence[float]) -> float:
    """Sample variance (n - 1), as lm-eval's stderr uses."""
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def interval(value: float | None, stderr: float | None, n: int, method: str) -> Estimate:
    """value +- Z stderr (a normal interval); no bounds without a stderr."""
    if value is None or stderr is None:
        return Estimate(value, None, None, None, n, method)
    return Estimate(value, stderr, value - Z * stderr, value + Z * stderr, n, method)


def mean_stderr(xs: Sequence[float]) -> float | None:
    """lm-eval's stderr of a mean: sample standard deviation / sqrt(n)."""
    return math.sqrt(sample_variance(xs) / len(xs)) if len(xs) > 1 else None


def mean_ratio_paired(q: Sequence[float], b: Sequence[float]) -> Estimate:
    """mean(q) / mean(b) over the same items, with the paired delta-method interval."""
    n = len(q)
    if n != len(b) or n == 0:
        raise ValueError(f"paired scores need the same non-zero number of items (got {n} and {len(b)})")
    qm, bm = _mean(q), _mean(b)
    if bm == 0:
        return Estimate(None, None, None, None, n, "paired delta")
    r = qm / bm
    if n == 1:
        return interval(r, None, n, "paired delta")
    var = max(sample_variance([x - r * y for x, y in zip(q, b)]), 0.0)
    if var <= 1e-15:
        # every item scored alike on both: no disagreement seen is not none possible (30 agreeing
        # items still allow ~10% discordance), and a zero-width interval would pass any gate. Half a
        # discordant pair each way (Agresti & Min 2005, for paired 0/1 scores) gives the variance
        # one disagreeing item would: an interval as wide as the nearest sample that shows one.
        var = 1.0 / (n + 1)
    return interval(r, math.sqrt(var / n) / abs(bm), n, "paired delta")


def ratio_stderr(q: float, se_q: float | None, b: float, se_b: float | None) -> float | None:
    """Stderr of q / b for independent q, b (delta method); None if either stderr is unknown."""
    if se_q is None or se_b is None or b == 0:
        return None
    if q == 0:
        return se_q / abs(b)  # d(q/b)/dq = 1/b; the q-relative term is undefined at q = 0
    r = q / b
    return abs(r) * math.sqrt((se_q / q) ** 2 + (se_b / b) ** 2)


def mean_ratio_independent(q: Sequence[float], b: Sequence[float]) -> Estimate:
    """The same ratio as if q and b were independent runs (each mean's own stderr)."""
    n = len(q)
    qm, bm = _mean(q), _mean(b)
    if bm == 0:
        return Estimate(None, None, None, None, n, "independent delta")
    se = ratio_stderr(qm, math.sqrt(sample_variance(q) / n), bm, math.sqrt(sample_variance(b) / len(b))) if n > 1 else None
    return interval(qm / bm, se, n, "independent delta")


def _bootstrap(ll_q: Sequence[float], ll_b: Sequence[float], words: Sequence[float], paired: bool,
               seed: int) -> Estimate:
    import numpy as np

    n = len(words)
    if not (n == len(ll_q) == len(ll_b)) or n == 0:
        raise ValueError("perplexity pairs need the same documents on both sides")
    lq, lb, w = (np.asarray(x, dtype=np.float64) for x in (ll_q, ll_b, words))
    value = math.exp((lq.sum() - lb.sum()) / w.sum())  # ppl(b) / ppl(q) on the same words
    method = "paired bootstrap" if paired else "independent bootstrap"
    if n < 2:
        return Estimate(value, None, None, None, n, method)
    rng = np.random.default_rng(seed)
    stats = []
    for start in range(0, BOOTSTRAP_RESAMPLES, 500):  # chunks keep memory small for long splits
        size = min(500, BOOTSTRAP_RESAMPLES - start)
        i = rng.integers(0, n, size=(size, n))
        j = i if paired else rng.integers(0, n, size=(size, n))
        stats.append(np.exp(lq[i].sum(1) / w[i].sum(1) - lb[j].sum(1) / w[j].sum(1)))
    s = np.concatenate(stats)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(s, [tail, 100 - tail])
    return Estimate(value, float(s.std(ddof=1)), float(low), float(high), n, method)


def perplexity_ratio_paired(ll_q: Sequence[float], ll_b: Sequence[float], words: Sequence[float],
                            seed: int = BOOTSTRAP_SEED) -> Estimate:
    """ppl(baseline) / ppl(quantized) over the same documents; documents resampled together."""
    return _bootstrap(ll_q, ll_b, words, True, seed)


def perplexity_ratio_independent(ll_q: Sequence[float], ll_b: Sequence[float], words: Sequence[float],
                                 seed: int = BOOTSTRAP_SEED) -> Estimate:
    """The same ratio with each run's documents resampled on their own (as if unrelated runs)."""
    return _bootstrap(ll_q, ll_b, words, False, seed)


def mean_of(estimates: Sequence[Estimate], method: str) -> Estimate:
    """The average of per-task estimates; tasks are disjoint item sets, so variances add."""
    values = [e.value for e in estimates]
    if not estimates or any(v is None for v in values):
        return Estimate(None, None, None, None, sum(e.n for e in estimates), method)
    k = len(estimates)
    mean = sum(values) / k
    ses = [e.stderr for e in estimates]
    se = math.sqrt(sum(s * s for s in ses)) / k if all(s is not None for s in ses) else None
    return interval(mean, se, sum(e.n for e in estimates), method)


def growth_factor(value: float | None, stderr: float | None, threshold: float) -> float | None:
    """By how much the item count must grow for the interval to clear `threshold`, with POWER
    probability if the true value is today's estimate (variance shrinks as 1/n). None when no
    number of items would be expected to decide it (no variance known, or exactly on the line)."""
    if value is None or not stderr:
        return None
    gap = abs(value - threshold)
    if gap <= 1e-9 * max(1.0, abs(threshold)):  # on the threshold (up to rounding: 54/60 is 0.9000000000000001)
        return None
    return ((Z + Z_POWER) * stderr / gap) ** 2


def more_items(n: int, factor: float | None) -> int | None:
    """Items to add to n for a growth factor (at least one)."""
    if factor is None:
        return None
    return max(1, math.ceil(n * factor) - n)
