"""Paired recovery, three-way gates and the items-needed estimate, on constructed per-item data
whose answers are known (no server, no lm-eval)."""

from __future__ import annotations

import math
import random

import pytest
from typer.testing import CliRunner

from quantkit.cli import app
from quantkit.errors import GateFailed, GateInconclusive, UsageError
from quantkit.evals import gates, paired, results, run as evals_run


def task(name: str, scores: list[float], *, metric="acc,none", weights: list[float] | None = None,
         higher=True, ids: list[str] | None = None, prompts: list[str] | None = None, n_available=10_000,
         limit: int | None = None) -> results.TaskResult:
    """A task result whose headline metric and per-item scores agree (as lm-eval's would)."""
    ids = ids or [str(i) for i in range(len(scores))]
    if weights is None:
        value = sum(scores) / len(scores)
        stderr = paired.mean_stderr(scores)
    else:
        value, stderr = math.exp(-sum(scores) / sum(weights)), None
    items = results.ItemScores(ids=ids, prompts=prompts or [f"{int(i.split('/')[-1]):08x}" for i in ids],
                               values={metric: scores}, weights={metric: weights} if weights else {})
    return results.TaskResult(
        task=name, version="1.0", n_shot=0, limit=limit if limit is not None else len(scores), n_samples=len(scores),
        n_available=n_available, output_type="multiple_choice", chat_template=False, add_bos_token=False,
        data=results.DataInfo(source="offline", template="stock:x.yaml"), primary_metric=metric,
        higher_is_better=higher, metrics={metric: results.Metric(value=value, stderr=stderr)}, wall_time_s=1.0,
        items=items)


def run(*tasks: results.TaskResult, name="q") -> results.EvalRun:
    return results.EvalRun(created_at="2026-12-01T00:00:00+00:00", model_dir=f"/m/{name}", checkpoint={}, server={},
                           protocol={}, data_dir=None, versions={}, tasks=list(tasks), results_file=f"/r/{name}.json")


def bernoulli(n: int, p: float, seed: int) -> list[float]:
    """n items of which exactly round(n p) are right, in a seeded order."""
    ones = round(n * p)
    scores = [1.0] * ones + [0.0] * (n - ones)
    random.Random(seed).shuffle(scores)
    return scores


def flip(scores: list[float], losses: int, gains: int = 0) -> list[float]:
    """The same items with `losses` right answers turned wrong and `gains` wrong ones turned right."""
    out = list(scores)
    right = [i for i, s in enumerate(out) if s == 1.0]
    wrong = [i for i, s in enumerate(out) if s == 0.0]
    for i in right[:losses]:
        out[i] = 0.0
    for i in wrong[:gains]:
        out[i] = 1.0
    return out


# ----------------------------------------------------------------------------------------------
# The interval


def test_identical_items_are_not_certainty_their_width_is_that_of_one_disagreement():
    # int8 on an AVX2 CPU (12-06) scored 30 arc_easy items exactly as its baseline: a zero-width
    # interval then would pass any gate on 30 items
    b = bernoulli(200, 0.6, 1)
    report = gates.compare_to_baseline(run(task("arc_easy", b)), run(task("arc_easy", b), name="b"))
    (row,) = report.tasks
    assert row.method == "paired delta" and row.n_items == 200
    bm = sum(b) / len(b)
    assert row.recovery == 1.0 and row.recovery_stderr == pytest.approx(math.sqrt(1 / 201 / 200) / bm)
    assert row.recovery_low < 1.0 < row.recovery_high
    one = paired.mean_ratio_paired(flip(b, losses=1, gains=0), b)  # the nearest sample that shows a disagreement
    assert 0.7 < row.recovery_stderr / one.stderr < 1.5
    assert row.independent_stderr > 0.05  # two unrelated 60% runs of 200 items: ~0.07
    assert row.recovery_stderr < row.independent_stderr / 5
    assert report.mean_recovery_stderr == pytest.approx(row.recovery_stderr)
    assert report.mean_independent_stderr == pytest.approx(row.independent_stderr)
    # and a strict gate on few identical items is no pass
    few = bernoulli(30, 0.5, 3)
    tight = gates.compare_to_baseline(run(task("arc_easy", few)), run(task("arc_easy", few), name="b"),
                                      {"min_recovery": 0.99}, raise_on_fail=False)
    assert tight.tasks[0].recovery_low < 0.99 and tight.verdict == "inconclusive"


def test_paired_stderr_is_the_covariance_formula():
    b = bernoulli(300, 0.55, 2)
    q = flip(b, losses=25, gains=8)
    est = paired.mean_ratio_paired(q, b)
    n, qm, bm = len(q), sum(q) / len(q), sum(b) / len(b)
    r = qm / bm
    var_q, var_b = paired.sample_variance(q), paired.sample_variance(b)
    cov = sum((x - qm) * (y - bm) for x, y in zip(q, b)) / (n - 1)
    expected = math.sqrt((var_q + r * r * var_b - 2 * r * cov) / n) / bm
    assert est.value == pytest.approx(r) and est.stderr == pytest.approx(expected, rel=1e-12)
    assert est.low == pytest.approx(r - paired.Z * expected) and est.high == pytest.approx(r + paired.Z * expected)
    independent = paired.mean_ratio_independent(q, b)
    assert independent.stderr == pytest.approx(r * math.sqrt(var_q / n / qm**2 + var_b / n / bm**2))
    assert est.stderr < independent.stderr / 2


def test_a_known_correlation_gives_the_known_width():
    """Per-item scores with correlation rho, equal variance s^2 and mean mu: the ratio of means
    has sd sqrt(2 s^2 (1 - rho) / n) / mu at recovery 1 (the paired interval must say so), while
    the independent figure is sqrt(2 s^2 / n) / mu. Checked against the spread of 1000 repeats."""
    rho, s, mu, n = 0.9, 1.0, 5.0, 400
    rng = random.Random(7)
    ratios, paired_se, independent_se = [], [], []
    for _ in range(1000):
        b, q = [], []
        for _ in range(n):
            z1, z2 = rng.gauss(0, 1), rng.gauss(0, 1)
            b.append(mu + s * z1)
            q.append(mu + s * (rho * z1 + math.sqrt(1 - rho * rho) * z2))
        est = paired.mean_ratio_paired(q, b)
        ratios.append(est.value)
        paired_se.append(est.stderr)
        independent_se.append(paired.mean_ratio_independent(q, b).stderr)
    truth = math.sqrt(2 * s * s * (1 - rho) / n) / mu
    mean_ratio = sum(ratios) / len(ratios)
    spread = math.sqrt(sum((x - mean_ratio) ** 2 for x in ratios) / (len(ratios) - 1))
    assert spread == pytest.approx(truth, rel=0.06)
    assert sum(paired_se) / len(paired_se) == pytest.approx(truth, rel=0.03)
    assert sum(independent_se) / len(independent_se) == pytest.approx(math.sqrt(2 * s * s / n) / mu, rel=0.03)


def test_perplexity_ratio_bootstraps_documents_together():
    rng = random.Random(3)
    words = [float(rng.randint(50, 900)) for _ in range(60)]
    ll_b = [-w * (2.9 + rng.gauss(0, 0.3)) for w in words]  # ~exp(2.9) = 18 word perplexity
    ll_q = [x - w * (0.05 + rng.gauss(0, 0.01)) for x, w in zip(ll_b, words)]  # ~5% worse, per document
    q = task("wikitext", ll_q, metric="word_perplexity,none", weights=words, higher=False)
    b = task("wikitext", ll_b, metric="word_perplexity,none", weights=words, higher=False)
    (row,) = gates.compare_to_baseline(run(q), run(b, name="b")).tasks
    assert row.recovery == pytest.approx(b.primary.value / q.primary.value)
    assert row.quantized == pytest.approx(q.primary.value) and row.baseline == pytest.approx(b.primary.value)
    assert row.method == "paired bootstrap" and row.recovery_low < row.recovery < row.recovery_high
    assert (row.independent_high - row.independent_low) > 5 * (row.recovery_high - row.recovery_low)
    # the same store gives the same interval (seeded)
    again = gates.compare_to_baseline(run(q), run(b, name="b")).tasks[0]
    assert (again.recovery_low, again.recovery_high) == (row.recovery_low, row.recovery_high)
    same = paired.perplexity_ratio_paired(ll_b, ll_b, words)
    assert same.value == 1.0 and same.low == same.high == 1.0 and same.stderr == 0.0


def test_the_average_adds_task_variances():
    b1, b2 = bernoulli(200, 0.6, 4), bernoulli(150, 0.4, 5)
    report = gates.compare_to_baseline(run(task("a", flip(b1, 10)), task("b", flip(b2, 4))),
                                       run(task("a", b1), task("b", b2), name="b"))
    a, b = report.tasks
    assert report.mean_recovery == pytest.approx((a.recovery + b.recovery) / 2)
    assert report.mean_recovery_stderr == pytest.approx(math.hypot(a.recovery_stderr, b.recovery_stderr) / 2)
    assert report.mean_method == "paired delta"
    assert report.mean_recovery_low == pytest.approx(report.mean_recovery - paired.Z * report.mean_recovery_stderr)


def test_records_without_item_scores_fall_back_to_the_independent_interval():
    q, b = task("arc_easy", bernoulli(100, 0.5, 6)), task("arc_easy", bernoulli(100, 0.6, 6))
    q.items = None
    report = gates.compare_to_baseline(run(q), run(b, name="b"))
    (row,) = report.tasks
    assert row.method == "independent delta" and row.n_items is None
    assert row.recovery_stderr == pytest.approx(gates.ratio_stderr(q.primary.value, q.primary.stderr,
                                                                   b.primary.value, b.primary.stderr))


# ----------------------------------------------------------------------------------------------
# Pairing refuses other items


def test_pairing_uses_the_variants_items_of_a_larger_baseline():
    b = bernoulli(300, 0.6, 8)
    q = task("arc_easy", flip(b[:100], 5))
    (row,) = gates.compare_to_baseline(run(q), run(task("arc_easy", b), name="b")).tasks
    assert row.n_items == 100 and row.baseline == pytest.approx(sum(b[:100]) / 100)


def test_other_items_or_other_prompts_are_refused():
    b = task("arc_easy", bernoulli(100, 0.6, 9))
    other = task("arc_easy", bernoulli(100, 0.6, 9), ids=[str(i) for i in range(50, 150)])
    with pytest.raises(UsageError, match="50 of its 100 items .first: 100. were not scored by the baseline"):
        gates.compare_to_baseline(run(other), run(b, name="b"))
    reworded = task("arc_easy", bernoulli(100, 0.6, 9), prompts=["deadbeef"] * 100)
    with pytest.raises(UsageError, match="asked with other prompts"):
        gates.compare_to_baseline(run(reworded), run(b, name="b"))


# ----------------------------------------------------------------------------------------------
# Gates: pass, fail, inconclusive, and how many items decide


def _one(q: list[float], b: list[float], threshold: float, **kw) -> gates.RecoveryReport:
    return gates.compare_to_baseline(run(task("arc_easy", q, **kw)), run(task("arc_easy", b, **kw), name="b"),
                                     {"min_recovery": threshold}, raise_on_fail=False)


def test_gate_verdicts_on_the_three_sides():
    b = bernoulli(400, 0.6, 10)
    q = flip(b, losses=24)  # recovery 0.90, paired interval about +-0.04
    r = _one(q, b, 0.85)
    (g,) = r.gates
    assert g.verdict == "pass" and g.low >= 0.85 and r.verdict == "pass" and r.passed
    assert g.summary().endswith(">= 0.85: pass")

    r = _one(q, b, 0.95)
    (g,) = r.gates
    assert g.verdict == "fail" and g.high < 0.95 and r.verdict == "fail" and not r.passed
    assert g.describe().startswith("average recovery 0.9000 [") and "< 0.95 (short by 0.0500)" in g.describe()
    with pytest.raises(GateFailed) as err:
        gates.raise_for_verdict(r)
    assert err.value.exit_code == 3

    r = _one(q, b, 0.93)
    (g,) = r.gates
    assert g.verdict == "inconclusive" and g.low < 0.93 <= g.high and r.verdict == "inconclusive" and not r.passed
    assert g.more_items["arc_easy"] > 0 and g.note is None
    assert "straddles 0.93" in g.describe() and "more items per task would likely decide it" in g.describe()
    with pytest.raises(GateInconclusive) as err:
        gates.raise_for_verdict(r)
    assert err.value.exit_code == 4 and err.value.one_line().startswith("gate inconclusive: average recovery 0.9000")
    assert r.counts() == {"pass": 0, "fail": 0, "inconclusive": 1}


def test_a_failed_gate_outranks_an_inconclusive_one():
    b = bernoulli(400, 0.6, 10)
    r = gates.compare_to_baseline(run(task("arc_easy", flip(b, losses=24))), run(task("arc_easy", b), name="b"),
                                  {"min_recovery": 0.93, "tasks": {"arc_easy": 0.99}}, raise_on_fail=False)
    assert [g.verdict for g in r.gates] == ["inconclusive", "fail"] and r.verdict == "fail"
    assert gates.gate_failure_message(r).startswith("gate failed: arc_easy recovery")
    assert r.counts() == {"pass": 0, "fail": 1, "inconclusive": 1}


def test_items_needed_estimate_decides_the_gate_when_the_items_behave_alike():
    """Grown by the estimate with items like the ones seen (the same mix of agreements), the
    interval no longer holds the threshold; with a quarter of them it still does."""
    b = bernoulli(200, 0.6, 11)
    q = flip(b, losses=14, gains=2)  # recovery 0.9
    threshold = 0.93
    (g,) = _one(q, b, threshold).gates
    assert g.verdict == "inconclusive"
    more = g.more_items["arc_easy"]
    factor = paired.growth_factor(g.value, _one(q, b, threshold).mean_recovery_stderr, threshold)
    assert more == math.ceil(200 * factor) - 200

    def grown(extra: int) -> str:
        total = 200 + extra
        reps = math.ceil(total / 200)
        qq, bb = (q * reps)[:total], (b * reps)[:total]
        return _one(qq, bb, threshold).gates[0].verdict

    assert grown(more) == "fail"
    assert grown(more // 4) == "inconclusive"


def test_an_estimate_that_cannot_be_decided_says_why():
    b = bernoulli(100, 0.6, 12)
    q = flip(b, losses=6)  # recovery 0.9 on 100 of a 120-item split
    (g,) = _one(q, b, 0.9, n_available=120).gates
    assert g.verdict == "inconclusive" and "no number of items" in g.note
    (g,) = _one(q, b, 0.92, n_available=120).gates
    assert g.verdict == "inconclusive" and "more than the tasks hold (arc_easy has 20 left)" in g.note
    assert "more than the tasks hold" in g.describe() and "would likely decide it" not in g.describe()
    q[0] = 0.0
    (g,) = _one([0.0] * 100, [0.0] * 100, 0.9).gates
    assert g.value is None and g.verdict == "fail" and "undefined" in g.summary()


def test_task_gates_each_use_their_own_interval():
    b1, b2 = bernoulli(400, 0.6, 13), bernoulli(400, 0.5, 14)
    r = gates.compare_to_baseline(run(task("a", b1), task("b", flip(b2, 40))), run(task("a", b1), task("b", b2), name="b"),
                                  {"min_task_recovery": 0.95}, raise_on_fail=False)
    assert [(g.task, g.verdict) for g in r.gates] == [("a", "pass"), ("b", "fail")]


def test_cli_prints_the_counts_and_exits_4_when_inconclusive(tmp_path, monkeypatch):
    b = bernoulli(400, 0.6, 10)
    quant, base = run(task("arc_easy", flip(b, losses=24))), run(task("arc_easy", b), name="b")
    base.write(tmp_path / "base.json")
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(evals_run, "evaluate", lambda *a, **k: quant)
    args = ["eval", str(tmp_path), "-t", "arc_easy", "--baseline", str(tmp_path / "base.json")]
    result = CliRunner().invoke(app, [*args, "--min-recovery", "0.93"])
    assert result.exit_code == 4, result.output
    assert "gates: 0 pass, 0 fail, 1 inconclusive" in result.output
    assert "gate inconclusive: average recovery 0.9000" in result.output
    result = CliRunner().invoke(app, [*args, "--min-recovery", "0.85"])
    assert result.exit_code == 0, result.output
    assert "gates: 1 pass, 0 fail, 0 inconclusive" in result.output
