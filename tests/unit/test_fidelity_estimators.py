"""The fidelity estimators and intervals on distributions whose figures are known by hand
(test_fidelity_truth.py checks them against full logits of real models)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quantkit.fidelity import estimators
from quantkit.fidelity.intervals import DocumentSums, by_document, document_sums, summarize


def _log(d: dict[int, float]) -> dict[int, float]:
    return {t: math.log(p) for t, p in d.items()}


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0)


# a 5-token vocabulary, both models listing their top 2 (the actual token is 0, listed by both)
P = [0.5, 0.2, 0.15, 0.1, 0.05]
Q = [0.4, 0.1, 0.3, 0.1, 0.1]
P_LISTED = _log({0: 0.5, 1: 0.2})
Q_LISTED = _log({0: 0.4, 2: 0.3})


def test_lower_bound_is_kl_on_the_common_tokens_plus_one_bucket():
    # common tokens {0}; bucket = {1, 2, 3, 4}: P 0.5, Q 0.6
    assert estimators.kl_lower(P_LISTED, Q_LISTED) == pytest.approx(_kl([0.5, 0.5], [0.4, 0.6]))
    assert estimators.kl_lower(P_LISTED, Q_LISTED) <= _kl(P, Q)


def test_union_fills_each_sides_missing_tokens_below_its_kth_probability():
    # union {0, 1, 2}. P misses 2: k-th prob 0.2, remaining 0.3 over 1 missing + the bucket: fill 0.15
    # (exactly P's true 0.15), bucket 0.15. Q misses 1: k-th 0.3, remaining 0.3: fill 0.15, bucket 0.15.
    expected = _kl([0.5, 0.2, 0.15, 0.15], [0.4, 0.15, 0.3, 0.15])
    assert estimators.kl_union(P_LISTED, Q_LISTED, k=2) == pytest.approx(expected)
    assert estimators.kl_lower(P_LISTED, Q_LISTED) <= estimators.kl_union(P_LISTED, Q_LISTED, k=2)


def test_a_fill_never_exceeds_the_kth_probability():
    # P's k-th probability (0.05) is below an equal share of its remaining mass (0.35 / 2)
    p = _log({0: 0.6, 1: 0.05})
    q = _log({0: 0.6, 2: 0.3})
    expected = _kl([0.6, 0.05, 0.05, 0.30], [0.6, 0.05, 0.3, 0.05])
    assert estimators.kl_union(p, q, k=2) == pytest.approx(expected)


def test_listed_mass_over_one_is_read_as_none_left():
    # a bf16 server's rounding: listed probabilities summing to a hair over 1
    over = {0: math.log(0.6), 1: math.log(0.40001)}
    assert estimators.rest_mass(np.array(list(over.values()))) == 0.0
    assert estimators.kl_lower(over, over) == 0.0
    assert math.isfinite(estimators.kl_union(over, _log({0: 0.5, 2: 0.5}), k=2))


def test_the_actual_token_must_be_listed_on_both_sides_and_ties_go_to_the_smaller_id():
    with pytest.raises(ValueError, match="not listed on both sides"):
        estimators.position(P_LISTED, Q_LISTED, actual=1, k=2)
    assert estimators.top1({9: -0.7, 4: -0.7, 2: -1.0}) == 4


def _doc(name: str, positions: int, kl: float, agree: int, nll_b: float, nll_v: float) -> DocumentSums:
    return DocumentSums(name, positions, kl, kl, agree, nll_b, nll_v)


def test_document_sums_add_up_positions():
    sums = document_sums("d", [P_LISTED, P_LISTED], [Q_LISTED, P_LISTED], [0, 0], k=2)
    assert sums.positions == 2 and sums.top1_agree == 2
    assert sums.kl_lower == pytest.approx(estimators.kl_lower(P_LISTED, Q_LISTED))
    assert sums.delta_nll == pytest.approx((-math.log(0.4) + math.log(0.5)) / 2)
    with pytest.raises(ValueError, match="same tokens"):
        document_sums("d", [P_LISTED], [Q_LISTED, Q_LISTED], [0], k=2)


def test_figures_are_token_weighted_and_windows_of_a_document_resample_together():
    docs = [_doc("a", 100, 10.0, 90, 200.0, 210.0), _doc("b", 300, 60.0, 240, 600.0, 615.0)]
    figures = summarize(docs)
    assert figures["kl_lower"].value == pytest.approx(70 / 400)
    assert figures["top1_agreement"].value == pytest.approx(330 / 400)
    assert figures["delta_nll"].value == pytest.approx(25 / 400)
    # the same document cut into two windows is one unit: the same figures and intervals
    split = [_doc("a", 40, 4.0, 36, 80.0, 84.0), _doc("a", 60, 6.0, 54, 120.0, 126.0), docs[1]]
    assert by_document(split)[0] == docs[0]
    assert summarize(split) == figures


def test_bootstrap_is_seeded_percentile_and_holds_the_estimate():
    rng = np.random.default_rng(7)
    docs = [_doc(f"d{i}", n, float(n * rng.uniform(0.01, 0.2)), int(n * 0.9), 2.0 * n, 2.0 * n + rng.normal(0.05, 0.1) * n)
            for i, n in enumerate(rng.integers(50, 500, size=40))]
    a, b = summarize(docs), summarize(docs)
    assert a == b  # seeded: the same store gives the same intervals
    assert summarize(docs, seed=1)["kl_lower"] != a["kl_lower"]
    for estimate in a.values():
        assert estimate.low <= estimate.value <= estimate.high and estimate.n == 40
        assert estimate.method == "paired bootstrap over documents"
    # the interval narrows as documents are added (4 times as many: about half as wide)
    wide, narrow = summarize(docs[:10])["kl_lower"], a["kl_lower"]
    assert narrow.high - narrow.low < wide.high - wide.low
