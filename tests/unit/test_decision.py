"""The recommended deployment: gates, ties, ratio to bf16 on defaults, nothing meeting the SLO."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from quantkit.report.decision import CapacityCell, decide

SLO = "ttft_p95=1,tpot_p95=0.1"


def cell(goodput, config="defaults", load=8.0, args=(), bound="compute", blocker=None):
    return CapacityCell(config=config, slo=SLO, load=load if goodput is not None else None,
                        req_s=goodput, goodput_req_s=goodput, output_tok_s=(goodput or 0) * 64, bound=bound,
                        knob="k", serve_args=list(args), label="defaults" if config == "defaults" else "tuned",
                        blocker=blocker, command="vllm serve M " + " ".join(args))


def row(name, defaults, tuned=None, recovery=None, gate="pass", baseline=False, size=100, status="done"):
    return SimpleNamespace(name=name, method="bf16" if baseline else name, status=status, baseline=baseline,
                           capacity=defaults, capacity_tuned=tuned, recovery=recovery, recovery_stderr=0.01,
                           gate=gate, gate_detail=[] if gate != "fail" else ["average recovery 0.8 < 0.9 (failed)"],
                           size_bytes=size)


def test_highest_capacity_that_passes_the_gates_wins_with_its_ratio_to_bf16():
    rows = [row("baseline", cell(1.0), recovery=1.0, gate="reference", baseline=True),
            row("int8", cell(1.8), tuned=cell(2.5, "tuned", 16, ["--max-num-seqs", "32"]), recovery=0.99),
            row("gptq", cell(3.0), recovery=0.85, gate="fail")]
    d = decide(rows)
    assert d.status == "recommended"
    assert (d.recommended.variant, d.recommended.cell.config) == ("int8", "tuned")  # gptq is faster but fails
    assert d.ratio_vs_baseline == pytest.approx(2.5)
    assert "--max-num-seqs 32" in d.summary and "2.50 x bf16" in d.summary
    gptq = next(c for c in d.candidates if c.variant == "gptq")
    assert not gptq.eligible and "0.8 < 0.9" in gptq.why_not


def test_ties_within_the_tolerance_go_to_recovery_then_fewer_flags():
    rows = [row("baseline", cell(1.0), recovery=1.0, gate="reference", baseline=True),
            row("int8", cell(2.0), tuned=cell(2.1, "tuned", 9, ["--block-size", "64"]), recovery=0.97),
            row("fp8", cell(2.05), recovery=0.99)]
    d = decide(rows)
    # 2.0, 2.05 and 2.1 are within 10% of each other: fp8's recovery decides
    assert d.recommended.variant == "fp8" and any("tolerance" in n for n in d.notes)
    rows[2] = row("fp8", cell(2.05), recovery=0.97)
    d = decide(rows)  # equal recovery: the defaults of int8 or fp8 before int8 tuned
    assert d.recommended.cell.config == "defaults"


def test_inconclusive_or_missing_accuracy_is_not_eligible():
    rows = [row("baseline", cell(1.0), recovery=1.0, gate="reference", baseline=True),
            row("int8", cell(3.0), recovery=0.95, gate="inconclusive"),
            row("awq", cell(4.0), recovery=None, gate=None)]
    d = decide(rows)
    assert d.recommended.variant == "baseline" and d.ratio_vs_baseline == pytest.approx(1.0)


def test_nothing_meets_the_slo_names_the_closest_and_its_blocker():
    rows = [row("baseline", cell(None, blocker="at c=1: tpot_p95 0.3s > 0.1s"), recovery=1.0, gate="reference",
                baseline=True),
            row("int8", cell(None, blocker="at c=1: tpot_p95 0.12s > 0.1s"), recovery=0.99)]
    d = decide(rows)
    assert d.status == "none_meets_slo" and d.recommended is None
    assert d.closest.variant == "int8" and "0.12s > 0.1s" in d.blocker and "bound: compute" in d.blocker


def test_slo_met_only_by_a_variant_that_fails_its_gate():
    rows = [row("baseline", cell(None, blocker="at c=1: ttft_p95 2s > 1s"), recovery=1.0, gate="reference",
                baseline=True),
            row("gptq", cell(2.0), recovery=0.8, gate="fail")]
    d = decide(rows)
    assert d.status == "none_passes_gates" and d.closest.variant == "gptq" and "gate fail" in d.blocker


def test_no_accuracy_at_all_decides_on_capacity_and_says_so():
    rows = [row("baseline", cell(1.0), gate=None, baseline=True), row("int8", cell(2.0), gate=None)]
    d = decide(rows)
    assert d.recommended.variant == "int8" and any("capacity alone" in n for n in d.notes)


def test_no_capacity_measured():
    assert decide([row("baseline", None, recovery=1.0, baseline=True)]).status == "no_capacity"


def test_failed_variants_are_not_candidates():
    rows = [row("baseline", cell(1.0), recovery=1.0, gate="reference", baseline=True),
            row("int8", cell(9.0), recovery=1.0, status="failed")]
    assert decide(rows).recommended.variant == "baseline"
