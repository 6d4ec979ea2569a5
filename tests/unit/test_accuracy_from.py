"""`quantkit compare --accuracy-from P`: a random-weights model gated on another model's evals.

Model A (a real small model) has eval records of its baseline, fp8 and gptq, with per-item scores
(so recovery is paired); model B (random weights) has only capacity records of the same variants.
"""

from __future__ import annotations

import json

import pytest
from fixtures.evals import eval_result
from typer.testing import CliRunner

from quantkit.cli import app
from quantkit.errors import UsageError
from quantkit.report.gather import compare
from quantkit.report.render import fmt_ci, fmt_pm
from quantkit.store import Store, run_key

SLO = "ttft_p95=1,tpot_p95=0.1"
GATES = {"min_recovery": 0.9}


def capacity_result(goodput: float, model_dir: str, method: str) -> dict:
    """A stored CapacityResult as the report reads it (the fields it uses)."""
    return {"kind": "quantkit.capacity", "slo": SLO, "model_dir": model_dir, "checkpoint": {"method": method},
            "settings": {"profile": "concurrency", "tolerance": 0.1},
            "capacity": {"load": 8, "req_s": goodput, "output_tok_s": goodput * 64, "goodput_req_s": goodput},
            "search": {"reason": "bracketed"}, "points_spent": 6,
            "points": [{"profile": "concurrency", "concurrency": 8, "successes": 16, "output_tok_s": goodput * 64}],
            "bound": {"kind": "compute", "evidence": "e", "knob": "k"}, "server": {"serve_config": {}}}


def add(store: Store, kind: str, model: str, variant: str, result: dict) -> None:
    params = {"checkpoint": f"/models/{model}-{variant}"}
    if kind == "capacity":
        params.update(capacity={"profile": "concurrency", "input_len": 512, "output_len": 256}, slo=SLO)
    store.finish(store.begin(run_key(kind, m=model, v=variant), kind, model, variant, params), result)


def fill(store: Store, *, gptq_arc: float = 0.40, a_evals=("baseline", "fp8", "gptq")) -> None:
    scores = {"baseline": (0.60, 0.70), "fp8": (0.59, 0.70), "gptq": (gptq_arc, 0.50)}
    for variant in a_evals:
        add(store, "eval", "A", variant, eval_result(f"/models/A-{variant}", *scores[variant]))
    for variant, goodput in (("baseline", 1.0), ("fp8", 2.0), ("gptq", 3.0)):  # gptq is fastest
        add(store, "capacity", "B", variant, capacity_result(goodput, f"/models/B-{variant}", variant))


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "results.db") as s:
        fill(s)
        yield s


def rows(result):
    return {r.name: r for r in result["report"].rows}


def test_b_takes_a_s_recovery_and_gates_and_says_so(store, tmp_path):
    a = rows(compare(store, model="A", out_dir=tmp_path / "a", gates=GATES))
    result = compare(store, model="B", out_dir=tmp_path / "b", gates=GATES, accuracy_from="A")
    b = rows(result)
    for name in ("fp8", "gptq"):
        assert (b[name].recovery, b[name].recovery_low, b[name].recovery_high, b[name].recovery_method) == \
            (a[name].recovery, a[name].recovery_low, a[name].recovery_high, a[name].recovery_method)
        assert b[name].gate == a[name].gate and b[name].gate_detail == a[name].gate_detail
        assert b[name].accuracy_from == "A" and b[name].scores == []  # A's scores are not B's
    assert a["fp8"].recovery_method == "paired delta" and (a["fp8"].gate, a["gptq"].gate) == ("pass", "fail")
    assert b["baseline"].gate == "reference" and b["baseline"].recovery == 1.0 and b["baseline"].accuracy_from == "A"
    decision = result["report"].decision
    assert decision.recommended.variant == "fp8"
    (note,) = [n for n in decision.notes if n.startswith("accuracy:")]
    assert "A's" in note and "fp8, gptq" in note and "proxy" in note
    assert not any("capacity alone" in n for n in decision.notes)
    md = result["paths"]["md"].read_text()
    assert "deploy fp8 (fp8)" in decision.summary and "recovery 0.992 ± 0.011 (from A)" in decision.summary
    assert "accuracy recovery: 0.9917 ± 0.0109 (from A), gate: pass" in md
    assert "| baseline | 1.0000 (reference, from A) |" in md
    f = a["fp8"]
    assert f"| fp8 | {fmt_ci(f.recovery, f.recovery_low, f.recovery_high)} (from A) | — | pass |" in md  # Accuracy
    assert f"| {fmt_pm(f.recovery, f.recovery_stderr)} (from A) | pass |" in md  # Capacity under the SLO
    saved = json.loads(result["paths"]["json"].read_text())
    assert {r["name"]: r["accuracy_from"] for r in saved["rows"]} == {"baseline": "A", "fp8": "A", "gptq": "A"}
    assert saved["decision"]["recommended"]["accuracy_from"] == "A"


def test_a_gate_that_fails_on_a_makes_b_s_variant_ineligible(store, tmp_path):
    decision = compare(store, model="B", out_dir=tmp_path / "b", gates=GATES, accuracy_from="A")["report"].decision
    gptq = next(c for c in decision.candidates if c.variant == "gptq")
    assert not gptq.eligible and gptq.why_not.startswith("accuracy gate fail")  # the fastest, but A's gptq fails
    assert decision.recommended.variant == "fp8"


def test_a_variant_a_did_not_evaluate_gets_no_recovery_and_the_notes_say_so(tmp_path):
    with Store(tmp_path / "results.db") as s:
        fill(s, a_evals=("baseline", "fp8"))
        result = compare(s, model="B", out_dir=tmp_path / "b", gates=GATES, accuracy_from="A")
    b = rows(result)
    assert b["gptq"].recovery is None and b["gptq"].gate is None and b["gptq"].accuracy_from is None
    assert any(n.startswith("A has no finished eval of gptq") for n in result["report"].notes)
    assert result["report"].decision.recommended.variant == "fp8"


def test_a_variant_with_its_own_eval_keeps_it(store, tmp_path):
    add(store, "eval", "B", "baseline", eval_result("/models/B-baseline", 0.30, 0.50))
    add(store, "eval", "B", "fp8", eval_result("/models/B-fp8", 0.30, 0.50))
    result = compare(store, model="B", out_dir=tmp_path / "b", gates=GATES, accuracy_from="A")
    b = rows(result)
    assert b["fp8"].accuracy_from is None and b["fp8"].recovery == 1.0  # its own, against its own baseline
    assert b["gptq"].accuracy_from == "A"
    assert any(n.startswith("baseline, fp8 kept their own eval") for n in result["report"].notes)


@pytest.mark.parametrize("proxy, message", [
    ("C", "--accuracy-from C: nothing stored for that model; the store has: A, B"),
    ("B", "names the model being compared"),
])
def test_an_unusable_proxy_is_a_one_line_error(store, tmp_path, proxy, message):
    with pytest.raises(UsageError, match=message):
        compare(store, model="B", out_dir=tmp_path / "b", accuracy_from=proxy)


def test_a_proxy_without_a_baseline_eval_is_an_error(tmp_path):
    with Store(tmp_path / "results.db") as s:
        fill(s, a_evals=("fp8", "gptq"))
        with pytest.raises(UsageError, match="A: it has no finished baseline eval .*run its baseline eval first"):
            compare(s, model="B", out_dir=tmp_path / "b", accuracy_from="A")


def test_cli_compare_accuracy_from(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANTKIT_HOME", str(tmp_path / "home"))
    with Store() as s:
        fill(s)
    args = ["compare", "--model", "B", "-o", str(tmp_path / "r"), "--min-recovery", "0.9"]
    result = CliRunner().invoke(app, [*args, "--accuracy-from", "A", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["verdicts"] == {"fp8": "pass", "gptq": "fail"} and out["decision"]["recommended"]["variant"] == "fp8"
    assert {v["name"]: v["accuracy_from"] for v in out["variants"]} == {"baseline": "A", "fp8": "A", "gptq": "A"}
    human = CliRunner().invoke(app, [*args, "--accuracy-from", "A"])
    assert human.exit_code == 0 and "pass (from A)" in human.output
    missing = CliRunner().invoke(app, [*args, "--accuracy-from", "nope"])
    assert missing.exit_code == 2 and "the store has: A, B" in missing.output
