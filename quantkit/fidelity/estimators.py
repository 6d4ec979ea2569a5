"""Per-position fidelity figures from top-k log-probabilities (pure numpy).

At each position of a token sequence a server tells, for each model, its k most likely next tokens
with their log-probabilities, plus the actual next token's (vLLM's `prompt_logprobs`: k entries,
k + 1 when the actual token is not among them). A side's `listed` tokens are those. With P the
baseline's next-token distribution and Q the variant's, the figures are:

- **KL(P || Q), a lower bound** (`kl_lower`). Take the tokens listed on both sides, C, and one
  bucket O for every other token. P and Q are known exactly on that partition: P(c), Q(c) for c
  in C, and P(O) = 1 - sum_C P, Q(O) = 1 - sum_C Q. Merging outcomes into buckets can only lower
  KL (the data-processing inequality: KL of the images under any map is at most KL), so
  KL_C = sum_C P log(P/Q) + P(O) log(P(O)/Q(O)) <= KL(P || Q), whatever the tokens outside the
  lists do. It is a bound, not an estimate: tested to hold at every position against the exact
  KL from full logits (tests/unit/test_fidelity_truth.py).
- **KL(P || Q) on the union of the two top-k sets** (`kl_union`), the estimate the issue names:
  every token listed on either side is its own outcome, and each side's remaining mass is one
  bucket. A token of the union missing from one side's list has an unknown probability there,
  known only to lie in [0, that side's k-th probability] (it is not in that side's top-k), and
  all of that side's missing tokens together with its rest bucket share its remaining mass
  m = 1 - sum(listed). It is filled with min(k-th probability, m / (missing + 1)): the largest
  value the top-k allows, held to an equal share of m with the rest bucket so that bucket keeps
  some mass. With a fill the union figure is an approximation, not a bound: KL on the true union
  partition is <= KL(P || Q) (same inequality), but the fill can move it either way. It is always
  >= `kl_lower` (the fill puts the same masses on C and O, and the union partition refines
  C + O). Its measured error against the exact KL is stated in tests/unit/test_fidelity_truth.py.
- **Top-1 agreement**: the two models' most likely next tokens are the same token (the first of
  each list; a tie goes to the smaller id, as torch.argmax picks).
- **NLL of the actual token** under each model: -log P(actual), exact (the actual token is always
  listed), so ΔNLL = NLL_variant - NLL_baseline needs no estimate.

Remaining masses are computed as -expm1(logsumexp(listed)), exact when the list holds nearly all
the mass, and clipped to [0, 1]: a bf16 server's listed probabilities can sum to a hair over 1.
A variant that leaves no mass where the baseline has some would make KL infinite; its mass there
is floored at `FLOOR` instead, which keeps the figure finite and large.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

FLOOR = 1e-12  # the least probability a bucket is given on the variant's side (KL stays finite)

Listed = Mapping[int, float]  # token id -> log-probability: a side's top-k plus the actual token


@dataclass(frozen=True)
class PositionFigures:
    kl_lower: float  # a lower bound on KL(P || Q), nats
    kl_union: float  # the union estimate of KL(P || Q), nats
    top1_agrees: bool
    nll_baseline: float  # -log P(actual)
    nll_variant: float  # -log Q(actual)


def rest_mass(logprobs: np.ndarray) -> float:
    """1 - sum(exp(logprobs)), computed where it is small, clipped to [0, 1]."""
    if logprobs.size == 0:
        return 1.0
    top = float(logprobs.max())
    total = top + math.log(float(np.exp(logprobs - top).sum()))  # logsumexp
    return min(1.0, max(0.0, -math.expm1(total)))


def _kl_terms(p: np.ndarray, q: np.ndarray) -> float:
    """sum p log(p / q) over buckets given as probabilities; 0 log 0 = 0, q floored at FLOOR."""
    keep = p > 0
    p, q = p[keep], np.maximum(q[keep], FLOOR)
    return float((p * (np.log(p) - np.log(q))).sum())


def kl_lower(p: Listed, q: Listed) -> float:
    """KL(P || Q) on the tokens listed by both sides plus one bucket for all others: a lower
    bound on the true KL (the data-processing inequality)."""
    common = sorted(p.keys() & q.keys())
    lp = np.fromiter((p[t] for t in common), dtype=np.float64, count=len(common))
    lq = np.fromiter((q[t] for t in common), dtype=np.float64, count=len(common))
    kl = float((np.exp(lp) * (lp - lq)).sum()) if common else 0.0
    kl += _kl_terms(np.array([rest_mass(lp)]), np.array([rest_mass(lq)]))
    return max(0.0, kl)  # a bound on a non-negative quantity; rounding may dip below 0


def _filled(side: Listed, union: list[int], k: int) -> np.ndarray:
    """One side's probabilities on the union's tokens, then its rest bucket; unlisted tokens
    filled with min(k-th probability, remaining mass / (missing + 1))."""
    logprobs = np.fromiter(side.values(), dtype=np.float64, count=len(side))
    ranked = np.sort(logprobs)[::-1]
    kth = math.exp(ranked[min(k, ranked.size) - 1]) if ranked.size else 0.0
    remaining = rest_mass(logprobs)
    missing = sum(1 for t in union if t not in side)
    fill = min(kth, remaining / (missing + 1))
    probs = np.array([math.exp(side[t]) if t in side else fill for t in union] + [remaining - fill * missing])
    return np.maximum(probs, 0.0)


def kl_union(p: Listed, q: Listed, k: int) -> float:
    """KL(P || Q) on the union of both lists plus each side's rest bucket, with each side's
    unlisted tokens filled (module docstring): an approximation, at least `kl_lower`."""
    union = sorted(p.keys() | q.keys())
    return max(0.0, _kl_terms(_filled(p, union, k), _filled(q, union, k)))


def top1(side: Listed) -> int:
    """The most likely listed token; a tie goes to the smaller id."""
    return min(side, key=lambda t: (-side[t], t))


def position(p: Listed, q: Listed, actual: int, k: int) -> PositionFigures:
    """Every figure of one position: `p` the baseline's listed tokens, `q` the variant's,
    `actual` the token that comes next in the text (listed on both sides)."""
    if actual not in p or actual not in q:
        raise ValueError(f"the actual next token {actual} is not listed on both sides")
    return PositionFigures(kl_lower(p, q), kl_union(p, q, k), top1(p) == top1(q), -p[actual], -q[actual])
