"""A document's fidelity sums, and the corpus figures with paired bootstrap intervals over documents.

Every figure is a per-token mean over the corpus, a ratio of sums: sum over documents of the
document's sum over positions, over the number of positions. KL (both bounds of estimators.py),
top-1 agreement (the share of positions whose argmax agrees) and ΔNLL (variant NLL minus baseline
NLL of the actual tokens, nats per token: > 0 when the variant finds the text less likely).

Intervals: a seeded bootstrap over documents with percentile bounds, the estimator
evals/paired.py uses for perplexity ratios, with its resample count, seed and confidence. Positions
of one document are not independent draws (the same topic, the same context), so the unit
resampled is the document: windows cut from one document share its id and are resampled together.
The two models' figures are paired by construction (the same tokens at every position), so one
resampling of documents carries both.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

from ..evals.paired import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE, Estimate
from .estimators import Listed, position

FIGURES = ("kl_lower", "kl_union", "top1_agreement", "delta_nll")


@dataclass(frozen=True)
class DocumentSums:
    """One document's (or window's) sums over its scored positions."""

    document: str  # the bootstrap unit: windows of one document share it
    positions: int
    kl_lower: float
    kl_union: float
    top1_agree: int
    nll_baseline: float
    nll_variant: float

    @property
    def delta_nll(self) -> float:
        """Variant NLL minus baseline NLL of the actual tokens, nats per token."""
        return (self.nll_variant - self.nll_baseline) / self.positions if self.positions else 0.0

    def __add__(self, other: "DocumentSums") -> "DocumentSums":
        return DocumentSums(self.document, *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)[1:]))


def document_sums(document: str, baseline: Sequence[Listed], variant: Sequence[Listed], actual: Sequence[int],
                  k: int) -> DocumentSums:
    """Sums over positions: `baseline[i]` and `variant[i]` are the two models' listed tokens at
    position i, `actual[i]` the token that follows there."""
    if not len(baseline) == len(variant) == len(actual):
        raise ValueError(f"document {document}: {len(baseline)} baseline, {len(variant)} variant positions "
                         f"and {len(actual)} tokens; both models must score the same tokens")
    figures = [position(p, q, t, k) for p, q, t in zip(baseline, variant, actual)]
    return DocumentSums(document, len(figures), sum(f.kl_lower for f in figures), sum(f.kl_union for f in figures),
                        sum(f.top1_agrees for f in figures), sum(f.nll_baseline for f in figures),
                        sum(f.nll_variant for f in figures))


def by_document(sums: Sequence[DocumentSums]) -> list[DocumentSums]:
    """Windows of one document summed into one unit, in first-seen order."""
    merged: dict[str, DocumentSums] = {}
    for s in sums:
        merged[s.document] = merged[s.document] + s if s.document in merged else s
    return list(merged.values())


def _numerators(docs: Sequence[DocumentSums]) -> dict[str, np.ndarray]:
    return {
        "kl_lower": np.array([d.kl_lower for d in docs]),
        "kl_union": np.array([d.kl_union for d in docs]),
        "top1_agreement": np.array([d.top1_agree for d in docs], dtype=np.float64),
        "delta_nll": np.array([d.nll_variant - d.nll_baseline for d in docs]),
    }


def summarize(sums: Sequence[DocumentSums], seed: int = BOOTSTRAP_SEED,
              resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, Estimate]:
    """Each figure of FIGURES as a per-token mean with its paired bootstrap interval over
    documents (percentile bounds at evals.paired.CONFIDENCE; stderr the bootstrap's standard
    deviation). One document: the value without an interval."""
    docs = by_document(sums)
    if not docs or sum(d.positions for d in docs) == 0:
        raise ValueError("no scored positions to summarize")
    n = len(docs)
    positions = np.array([d.positions for d in docs], dtype=np.float64)
    numerators = _numerators(docs)
    method = "paired bootstrap over documents"
    if n < 2:
        return {name: Estimate(float(num.sum() / positions.sum()), None, None, None, n, method)
                for name, num in numerators.items()}
    picks = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    weight = np.zeros((resamples, n))  # how often each document is drawn in each resample
    np.add.at(weight, (np.arange(resamples)[:, None], picks), 1.0)
    denominator = weight @ positions
    tail = (1 - CONFIDENCE) / 2 * 100
    out = {}
    for name, num in numerators.items():
        stats = (weight @ num) / denominator
        low, high = np.percentile(stats, [tail, 100 - tail])
        out[name] = Estimate(float(num.sum() / positions.sum()), float(stats.std(ddof=1)), float(low), float(high),
                             n, method)
    return out
