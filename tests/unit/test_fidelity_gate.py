"""The fidelity gate's three verdicts, its exits, the result model and the run key."""

from __future__ import annotations

import pytest

from quantkit.errors import GateFailed, GateInconclusive
from quantkit.evals.paired import Estimate
from quantkit.fidelity.documents import Window
from quantkit.fidelity.gate import (DEFAULT_MAX_DELTA_NLL, DEFAULT_MIN_TOP1, FidelityGates, raise_for_verdicts,
                                    verdict, verdicts)
from quantkit.fidelity.intervals import DocumentSums
from quantkit.fidelity.result import (FidelityResult, FidelitySettings, sums_of_point, window_id, window_point)
from quantkit.fidelity.run import KIND, fidelity_key, stored_windows, summary
from quantkit.serve.config import ServeConfig
from quantkit.store import Store


def estimate(value, low, high):
    return Estimate(value, 0.01, low, high, 32, "paired bootstrap over documents")


@pytest.mark.parametrize("low, high, expected", [
    (0.006, 0.014, "pass"),  # the demo's int8: the whole interval under 0.05
    (0.372, 0.443, "fail"),  # the demo's gptq: the whole interval above
    (0.03, 0.07, "inconclusive"),
    (0.01, 0.05, "pass"),  # the bound on the threshold is within it
])
def test_a_maximum_gate_reads_the_upper_bound_to_pass_and_the_lower_to_fail(low, high, expected):
    v = verdict("max_delta_nll", 0.05, estimate((low + high) / 2, low, high))
    assert v.verdict == expected and v.figure == "delta_nll" and v.passed == (expected == "pass")
    assert v.describe().endswith(f": {expected}")


@pytest.mark.parametrize("low, high, expected", [
    (0.905, 0.925, "pass"),
    (0.64, 0.70, "fail"),
    (0.84, 0.87, "inconclusive"),
])
def test_a_minimum_gate_reads_the_lower_bound_to_pass_and_the_upper_to_fail(low, high, expected):
    assert verdict("min_top1", 0.85, estimate((low + high) / 2, low, high)).verdict == expected


def test_a_figure_without_an_interval_is_never_passed_on_its_point_value():
    assert verdict("min_top1", 0.85, Estimate(0.99, None, None, None, 1, "x")).verdict == "inconclusive"


def test_the_defaults_decide_the_demo_s_measured_int8_and_gptq():
    int8 = {"delta_nll": estimate(0.0099, 0.006, 0.014), "top1_agreement": estimate(0.915, 0.905, 0.925)}
    gptq = {"delta_nll": estimate(0.406, 0.372, 0.443), "top1_agreement": estimate(0.671, 0.65, 0.69)}
    gates = FidelityGates()
    assert (gates.max_delta_nll, gates.min_top1) == (DEFAULT_MAX_DELTA_NLL, DEFAULT_MIN_TOP1)
    assert [v.verdict for v in verdicts(gates, int8)] == ["pass", "pass"]
    assert [v.verdict for v in verdicts(gates, gptq)] == ["fail", "fail"]
    assert [v.gate for v in verdicts(FidelityGates(min_top1=None), int8)] == ["max_delta_nll"]


def test_verdicts_exit_as_the_accuracy_gates_do():
    passed = verdict("min_top1", 0.85, estimate(0.9, 0.88, 0.92))
    failed = verdict("max_delta_nll", 0.05, estimate(0.4, 0.37, 0.44))
    undecided = verdict("min_top1", 0.85, estimate(0.85, 0.84, 0.86))
    raise_for_verdicts([passed])
    with pytest.raises(GateFailed, match="fidelity gate failed: delta_nll 0.4000") as failure:
        raise_for_verdicts([passed, undecided, failed])
    assert failure.value.exit_code == 3
    with pytest.raises(GateInconclusive, match="--windows") as inconclusive:
        raise_for_verdicts([passed, undecided])
    assert inconclusive.value.exit_code == 4


@pytest.mark.parametrize("bad", [{"max_delta_nll": 0}, {"min_top1": 1.5}, {"min_top1": float("nan")}])
def test_a_gate_outside_its_range_is_refused(bad):
    with pytest.raises(ValueError):
        FidelityGates(**bad)


def test_the_run_key_leaves_out_the_window_count_and_reads_everything_else():
    serve = ServeConfig(enforce_eager=True)
    key = fidelity_key("sha256:b", "sha256:v", FidelitySettings(windows=8), serve, "0.32.0")
    assert key == fidelity_key("sha256:b", "sha256:v", FidelitySettings(windows=64), serve, "0.32.0")
    others = [fidelity_key("sha256:b", "sha256:w", FidelitySettings(), serve, "0.32.0"),
              fidelity_key("sha256:a", "sha256:v", FidelitySettings(), serve, "0.32.0"),
              fidelity_key("sha256:b", "sha256:v", FidelitySettings(k=10), serve, "0.32.0"),
              fidelity_key("sha256:b", "sha256:v", FidelitySettings(window_len=128), serve, "0.32.0"),
              fidelity_key("sha256:b", "sha256:v", FidelitySettings(), ServeConfig(), "0.32.0"),
              fidelity_key("sha256:b", "sha256:v", FidelitySettings(), serve, "0.33.0")]
    assert len({key, *others}) == 7


def windows_and_sums(n):
    """n windows of n documents; the variant loses 0.02 nats/token and agrees at 9 of 10 positions."""
    windows = [Window("wikitext2", f"wikitext2/{i}", 0, [1] + [2] * 10) for i in range(n)]
    sums = {window_id(w): DocumentSums(w.document, 10, 0.1 + 0.01 * (i % 3), 0.2, 9, 30.0, 30.2 + 0.01 * (i % 2))
            for i, w in enumerate(windows)}
    return windows, sums


def test_stored_windows_are_read_back_from_every_record_of_the_key_and_summarized(tmp_path):
    windows, sums = windows_and_sums(12)
    with Store(tmp_path / "results.db") as store:
        with pytest.raises(KeyboardInterrupt):  # an interrupted run keeps its windows
            with store.stage("a" * 20, KIND, "m", "v", {}) as rec:
                for w in windows[:5]:
                    rec.add_point(window_point(window_id(w), sums[window_id(w)]))
                raise KeyboardInterrupt
        with store.stage("a" * 20, KIND, "m", "v", {}) as rec:
            for w in windows[5:]:
                rec.add_point(window_point(window_id(w), sums[window_id(w)]))
            rec.finish({})
        with store.stage("b" * 20, KIND, "m", "v", {}) as rec:  # another key's windows stay its own
            rec.add_point(window_point("wikitext2/99@0", sums[window_id(windows[0])]))
            rec.finish({})
        assert store.records(kind=KIND, keys=["a" * 20])[0].status == "interrupted"
        assert stored_windows(store, "a" * 20) == sums
    assert sums_of_point(window_point("x", sums[window_id(windows[0])])) == sums[window_id(windows[0])]

    result = summary(windows, sums, FidelityGates(), run_key="a" * 20, baseline_dir="b", variant_dir="v",
                     baseline_fingerprint="sha256:b", variant_fingerprint="sha256:v", settings=FidelitySettings(),
                     vllm_version="0.32.0", reused_windows=12, scored_windows=0)
    assert (result.windows, result.documents, result.tokens) == (12, 12, 120)
    assert result.figures["top1_agreement"].value == pytest.approx(0.9)
    assert result.figures["delta_nll"].value == pytest.approx(0.0205)
    assert result.figures["delta_nll"].low <= 0.0205 <= result.figures["delta_nll"].high
    assert [v.verdict for v in result.verdicts] == ["pass", "pass"] and result.verdict == "pass"
    assert result.kind == "quantkit.fidelity"
    assert FidelityResult.model_validate_json(result.model_dump_json()) == result

