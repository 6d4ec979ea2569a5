"""The top-k fidelity estimators against the truth: exact figures from full logits.

Two pairs of models score the same windows with transformers (CPU, float32): SmolLM2-135M (the
demo model, a trained model's peaked distributions) against itself with every Linear weight
rounded to the nearest of 16 levels (symmetric, groups of 64: round-to-nearest 4-bit weights), and the 2-layer random
Llama (nearly flat distributions over 49,152 tokens: the top 20 hold almost none of the mass, the
hardest case for a top-k estimate) against itself with the same rounding. From the full logits:
the exact KL(baseline || variant) at each position, the argmaxes and the actual tokens' NLL; from
the same logits' top 20 (plus the actual token, as vLLM lists it): the estimators' figures.

Measured on 12-05 (the test's 4 windows of 64 tokens, the first of 4 wikitext2 pages: 256
positions; in brackets a run on 6 consecutive windows of 128 tokens from the first page, 768 positions):
- `kl_lower` is below the exact KL at every position of both pairs: the bound's direction holds.
  SmolLM2 vs RTN-4bit: exact mean KL 0.627 nats/token, lower bound 0.311 (-50%) [0.617, 0.308,
  -50%]. The top 20 hold 73% of SmolLM2's mass on this text; the rest of the KL lives in the tail.
  The relative error is steady across the size of the damage (RTN at 5, 6, 8 bits: -43%, -40%,
  -33% [-46%, -42%, -38%]), so the figure ranks variants, but a gate threshold on it is a
  threshold on the bound, not on the KL. The random Llama: exact 0.0105, lower bound 0.000008
  (-99.9%): its distributions are near-uniform over 49,152 tokens, the top 20 hold next to none of the
  mass, and the bound says next to nothing.
- `kl_union` (an approximation, with no guaranteed direction) came out below the exact KL at every
  position too: SmolLM2 vs RTN-4bit 0.386 (-38%) [0.376, -39%]; at 5, 6, 8 bits -38%, -38%, -33%
  [-40%, -40%, -38%]; the random Llama 0.000015 (-99.9%). It is >= `kl_lower` everywhere, as it must be.
- top-1 agreement and ΔNLL read the same numbers the exact computation reads: equal to 1e-9.
The test pins the bound everywhere, the trained pair's errors within a margin of those figures,
and the exact equalities.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from quantkit.fidelity import documents, estimators
from quantkit.fidelity.intervals import DocumentSums, document_sums, summarize

K = 20
WINDOW = 64
WINDOWS = 4


def _rtn_4bit(model, group: int = 64) -> None:
    """Every Linear weight (lm_head aside) rounded to 4 bits, symmetric, per group of `group`
    inputs, in place: a real quantization error, without a conversion."""
    import torch

    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and "lm_head" not in name:
                w = module.weight.data
                g = w.reshape(w.shape[0], -1, group)
                scale = g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 7
                module.weight.data = (torch.clamp(torch.round(g / scale), -8, 7) * scale).reshape(w.shape)


def _log_probs(model, windows) -> list[np.ndarray]:
    """Each window's next-token log-probabilities at its scored positions, float64 (positions x vocab)."""
    import torch

    with torch.no_grad():  # one batch: every window has the same length
        logits = model(torch.tensor([w.token_ids for w in windows])).logits[:, :-1].double()
    return list(torch.log_softmax(logits, dim=-1).numpy())


def _listed(row: np.ndarray, actual: int) -> dict[int, float]:
    """What vLLM lists for a position: the top K, plus the actual token."""
    top = np.argpartition(-row, K)[:K]
    listed = {int(t): float(row[t]) for t in top}
    listed[actual] = float(row[actual])
    return listed


@pytest.fixture(scope="module")
def wiki_windows(smollm2_dir, data_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    return documents.windows(documents.load_texts("wikitext2", data_dir), tokenizer, "wikitext2", WINDOW,
                             limit=WINDOWS, per_document=1)


def _pair(model_dir, windows):
    """(baseline, variant) log-probabilities of `windows` for the model and its RTN-4bit twin."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    base = _log_probs(model, windows)
    _rtn_4bit(model)
    return base, _log_probs(model, windows)


def _compare(base, variant, windows):
    """Exact and estimated figures at every position: arrays of exact KL, kl_lower, kl_union,
    and the document sums from the estimators."""
    exact, lower, union, sums = [], [], [], []
    for w, lp, lq in zip(windows, base, variant):
        actual = w.token_ids[1:]
        exact.append((np.exp(lp) * (lp - lq)).sum(axis=1))
        p_listed = [_listed(lp[i], t) for i, t in enumerate(actual)]
        q_listed = [_listed(lq[i], t) for i, t in enumerate(actual)]
        lower.append([estimators.kl_lower(p, q) for p, q in zip(p_listed, q_listed)])
        union.append([estimators.kl_union(p, q, K) for p, q in zip(p_listed, q_listed)])
        sums.append(document_sums(w.document, p_listed, q_listed, actual, K))
        # top-1 agreement and ΔNLL need no estimate: the same numbers as the full logits'
        assert sums[-1].top1_agree == int((lp.argmax(1) == lq.argmax(1)).sum())
        nll_b = -lp[np.arange(len(actual)), actual].sum()
        nll_v = -lq[np.arange(len(actual)), actual].sum()
        assert sums[-1].nll_baseline == pytest.approx(nll_b, abs=1e-9)
        assert sums[-1].nll_variant == pytest.approx(nll_v, abs=1e-9)
    return np.concatenate(exact), np.concatenate(lower), np.concatenate(union), sums


def _check_bound(exact, lower, union):
    # float64 log-softmax of the same logits: the bound holds to rounding (1e-12 of a nat)
    assert (lower <= exact + 1e-12).all(), f"kl_lower above the exact KL at {np.flatnonzero(lower > exact + 1e-12)}"
    assert (union >= lower - 1e-12).all()


def test_estimators_against_exact_kl_of_a_trained_model_and_its_4bit_rounding(smollm2_dir, wiki_windows):
    base, variant = _pair(smollm2_dir, wiki_windows)
    exact, lower, union, sums = _compare(base, variant, wiki_windows)
    _check_bound(exact, lower, union)
    print(f"smollm2 vs rtn4: exact {exact.mean():.5f} lower {lower.mean():.5f} union {union.mean():.5f}")
    assert 0.01 < exact.mean() < 1.0  # a real, not a vanishing, difference to estimate
    assert 0.3 * exact.mean() < lower.mean() < exact.mean()  # measured: -57%
    assert 0.45 * exact.mean() < union.mean() < 1.2 * exact.mean()  # measured: -42%
    figures = summarize(sums)
    assert figures["kl_lower"].value == pytest.approx(lower.mean(), rel=1e-9)
    assert figures["kl_lower"].low <= figures["kl_lower"].value <= figures["kl_lower"].high


def test_the_bound_holds_where_the_top_k_holds_almost_no_mass(tiny_llama_dir, wiki_windows):
    base, variant = _pair(tiny_llama_dir, wiki_windows)
    exact, lower, union, _ = _compare(base, variant, wiki_windows)
    _check_bound(exact, lower, union)
    print(f"tiny llama vs rtn4: exact {exact.mean():.6f} lower {lower.mean():.6f} union {union.mean():.6f}")
    assert exact.mean() > 0
    assert lower.mean() < 0.1 * exact.mean()  # the honest answer for flat distributions: a weak bound


def test_identical_sides_give_zero_kl_and_full_agreement():
    side = {5: math.log(0.5), 7: math.log(0.3), 9: math.log(0.1)}
    figures = estimators.position(side, dict(side), 7, k=3)
    assert figures.kl_lower == 0 and figures.kl_union == 0 and figures.top1_agrees
    assert figures.nll_baseline == figures.nll_variant == pytest.approx(-math.log(0.3))
    sums = summarize([DocumentSums("d", 1, 0.0, 0.0, 1, 1.0, 1.0)])
    assert sums["delta_nll"].value == 0 and sums["top1_agreement"].value == 1 and sums["kl_lower"].low is None
