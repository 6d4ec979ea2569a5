"""The recommended deployment: gates, ties, ratio to bf16 on defaults, nothing meeting the SLO."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from quantkit.report.decision import CapacityCell, decide
from quantkit.report.render import decision_lines

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
                           size_bytes=size, accuracy_from=None)


def test_highest_capacity_that_passes_the_gates_wins_with_its_ratio_to_bf16():
    rows = [row("baseline", cell(1.0), recovery=1.0, gate="reference", baseline=True),
            row("int8", cell(1.8), tuned=cell(2.5, "tuned", 16, ["--max-num-seqs", "32"]), recovery=0.99),
            row("gptq", cell(3.0), recovery=0.85, gate="fail")]
    d = decide(rows)
    assert d.status == "recommended"
    assert (d.recommended.variant, d.recommended.cell.config) == ("int8", "tuned")  # gptq is faster but fails
    assert d.ratio_vs_baseline == pytest.approx(2.5)
    assert "--max-num-seqs 32" in d.summary and "2.50 x the baseline" in d.summary
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


def test_a_tie_with_the_baseline_goes_to_the_variant_that_passed_its_gate_and_names_both():
    # the baseline's recovery is 1.0 by definition: within the tolerance it does not win on it
    rows = [row("baseline", cell(2.0), recovery=1.0, gate="reference", baseline=True, size=256),
            row("int8", cell(1.9), recovery=0.97, gate="pass", size=160)]
    d = decide(rows)
    assert d.recommended.variant == "int8" and "a tie within the search tolerance with baseline (defaults) 2.00" in d.summary
    assert any("int8 and baseline (defaults) 2.00" in n and "do not separate them" in n for n in d.notes)
    rows[1] = row("int8", cell(1.9), recovery=0.97, gate="inconclusive", size=160)
    assert decide(rows).recommended.variant == "baseline"  # a gate not passed is no tie


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


def capacity_record(goodput, load=8, slo=SLO, bound="batch_slots"):
    """A stored CapacityResult as the report reads it (the fields it uses)."""
    return {"kind": "quantkit.capacity", "slo": slo, "settings": {"profile": "concurrency", "tolerance": 0.1},
            "capacity": {"load": load, "req_s": goodput, "output_tok_s": goodput * 64, "goodput_req_s": goodput,
                         "point_index": 0} if goodput else None,
            "search": {"reason": "bracketed" if goodput else "below_min"}, "points_spent": 6,
            "points": [{"profile": "concurrency", "concurrency": load, "successes": 16, "output_tok_s": (goodput or 0) * 64,
                        "slo_violations": [] if goodput else ["tpot_p95 0.3s > 0.1s"]}],
            "bound": {"kind": bound, "evidence": "4 requests ran", "knob": "--max-num-seqs higher"},
            "server": {"serve_config": {"enforce_eager": True, "max_model_len": 2048}}}


def test_the_report_opens_with_the_recommendation(tmp_path):
    from quantkit.report.build import Variant, build_report
    from quantkit.report.render import render_markdown, write_report

    tune = {"slo": SLO, "capacity": {"profile": "concurrency", "tolerance": 0.1}, "server_starts": 3, "trials": [{}, {}, {}],
            "best": {"label": "max-num-seqs=16", "value": 3.0, "capacity": {"load": 16, "req_s": 3.1, "output_tok_s": 190},
                     "command": "vllm serve /m/int8 --max-num-seqs 16 --enforce-eager", "points": 5,
                     "bound": {"kind": "compute", "evidence": "e", "knob": "k"}}}
    variants = [Variant(name="baseline", method="bf16", model_dir="/m/bf16", baseline=True, capacity=capacity_record(1.0)),
                Variant(name="int8", method="int8", model_dir="/m/int8", convert={"method": "int8"},
                        capacity=capacity_record(2.0), tune=tune)]
    report = build_report(variants, title="t", environment={})
    d = report.decision
    assert d.status == "recommended" and d.recommended.cell.config == "tuned" and d.ratio_vs_baseline == pytest.approx(3.0)
    md = render_markdown(report)
    assert md.index("## Recommended deployment") < md.index("## Capacity under the SLO") < md.index("## Checkpoints")
    assert "`vllm serve /m/int8 --max-num-seqs 16 --enforce-eager`" in md and "3.00 x" in md
    assert "attainment is the share of requests" in md  # the definitions are printed
    assert "c=16: 3.00 req/s, 190 tok/s (1.50 x) with --max-num-seqs 16" in md
    paths = write_report(report, tmp_path)
    assert (tmp_path / "plots" / "recovery_vs_capacity.png").exists() is False  # no recovery: not drawn
    assert "Recommended deployment" in paths["html"].read_text()


def test_a_client_limited_first_point_is_no_capacity_not_an_slo_failure():
    """On 2 cores the server can starve quantkit's client at the first load: the search stops there
    (`untrusted`), and neither the capacity summary nor the decision may call that an SLO failure."""
    from quantkit.measure.capacity.live import CapacityResult, CapacitySettings
    from quantkit.measure.capacity.search import CapacitySearch
    from quantkit.report import records
    from quantkit.report.decision import capacity_cell

    reason = "event-loop lag p50 4.1 ms, p99 31.0 ms (limits 3 / 30 ms): other processes kept it waiting"
    point = {"profile": "concurrency", "concurrency": 1, "slo_violations": [], "client_limited": True,
             "client_limited_reason": reason}
    stored = {"slo": SLO, "settings": {"profile": "concurrency"}, "capacity": None, "points": [point],
              "search": {"reason": "untrusted"}, "points_spent": 1, "model_dir": "M"}
    c = capacity_cell(records.Capacity.model_validate(stored))
    assert c.load is None and "client limited the point" in c.blocker and "31.0 ms" in c.blocker
    d = decide([row("baseline", c, recovery=1.0, gate="reference", baseline=True)])
    assert d.status == "none_meets_slo" and "no variant has a trusted capacity" in d.summary
    assert "nothing meets the SLO" not in d.summary
    assert "no trusted capacity" in d.candidates[0].why_not
    d = decide([row("baseline", c, recovery=1.0, gate="reference", baseline=True), row("int8", cell(2.0), recovery=0.99)])
    assert d.status == "recommended" and d.ratio_vs_baseline is None
    assert "the baseline on vLLM defaults has no trusted capacity" in d.summary

    result = CapacityResult.model_construct(slo=SLO, settings=CapacitySettings(), capacity=None, bound=None,
                                            points=[SimpleNamespace(client_limited_reason=reason)],
                                            search=CapacitySearch(capacity=None, ceiling=None, reason="untrusted",
                                                                  tolerance=0.1, lo=1, hi=8, steps=[]))
    assert "limited by quantkit's client" in result.summary() and "not met" not in result.summary()


def test_a_poisson_cell_s_goodput_is_the_offered_rate_times_attainment_even_for_older_records():
    from quantkit.report import records
    from quantkit.report.decision import capacity_cell

    stored = {"slo": SLO, "settings": {"profile": "poisson", "tolerance": 0.15},
              "capacity": {"load": 6.48, "req_s": 6.79, "output_tok_s": 367, "goodput_req_s": 6.79, "point_index": 0},
              "search": {"reason": "bracketed", "ceiling": 7.05},
              "points": [{"profile": "rate", "rate": 6.48, "slo_attainment": 0.98, "window": {"verdict": "pass"}}]}
    assert capacity_cell(records.Capacity.model_validate(stored)).goodput == pytest.approx(6.48 * 0.98)


def test_a_tuner_that_kept_the_defaults_is_no_second_candidate_tied_with_itself():
    """An H200 report (12-01) said fp8 tied 'with fp8 (defaults)': the tuner's best trial was vLLM's
    defaults, the same configuration as the defaults cell."""
    kept = cell(2.0, "tuned").model_copy(update={"label": "defaults"})
    rows = [row("baseline", cell(1.0), recovery=1.0, gate="reference", baseline=True),
            row("fp8", cell(2.0), tuned=kept, recovery=0.99)]
    d = decide(rows)
    assert [(c.variant, c.cell.config) for c in d.candidates] == [("baseline", "defaults"), ("fp8", "defaults")]
    assert d.recommended.cell.config == "defaults" and not any("tolerance" in n for n in d.notes)
    alone = decide([row("baseline", cell(1.0), recovery=1.0, gate="reference", baseline=True),
                    row("fp8", None, tuned=kept, recovery=0.99)])  # no defaults cell: the trial stands for it
    assert ("fp8", "tuned") in [(c.variant, c.cell.config) for c in alone.candidates]


def test_the_bounds_figures_sit_beside_the_ladders_read_with_them(tmp_path):
    """A ladder whose bound was read with the server's CPU (observe/host.py) gets a row of figures
    beside the capacity table; one read before (the stored H200 ladders) gets none, and its cell in
    report.json is written as before (tests/unit/test_output_pins.py)."""
    import json

    from quantkit.report.build import Variant, build_report
    from quantkit.report.render import render_markdown, write_report

    figures = {"running_max": 75.0, "gpu_util_mean": 78.0, "engine_core_busiest": 0.97, "engine_core_cores_max": 1.0,
               "api_server_busiest": 0.41, "api_server_cores_max": 0.5, "client_cores": 0.12,
               "gpu_sm_clock_mhz": 1980.0, "step_s": 0.0213, "decode_batch_mean": 380.0}
    read = {**capacity_record(2.0, bound="host"),
            "bound": {"kind": "host", "evidence": "the engine core kept 0.97 of a core busy", "knob": "k", "figures": figures}}
    baseline = Variant(name="baseline", method="bf16", model_dir="/m/bf16", baseline=True, capacity=capacity_record(1.0))
    fp8 = Variant(name="fp8", method="fp8", model_dir="/m/fp8", convert={"method": "fp8"}, capacity=read)
    report = build_report([baseline, fp8], title="t", environment={})
    md = render_markdown(report)
    assert md.index("## Capacity under the SLO") < md.index("## What bounds each ladder") < md.index("## Checkpoints")
    section = md[md.index("## What bounds each ladder"):md.index("## Checkpoints")]
    assert "| fp8 | defaults | host | 0.970 (max 1.00) | 0.410 (max 0.500) | — | 0.120 | 78.0% | 1,980 | 21.3 | 380 |" in section
    assert "| baseline |" not in section and "0.9 of a core or more" in section
    cells = {r["name"]: r["capacity"] for r in json.loads(write_report(report, tmp_path)["json"].read_text())["rows"]}
    assert cells["fp8"]["bound_figures"] == figures and "bound_figures" not in cells["baseline"]
    assert "What bounds each ladder" not in render_markdown(build_report([baseline], title="t", environment={}))


@pytest.mark.parametrize("held, said", [
    ((), "1.15 x the baseline on vLLM defaults"),
    (("fp8",), "at least 1.15 x the baseline on vLLM defaults (its ladder held its top)"),
    (("baseline",), "at most 1.15 x the baseline on vLLM defaults (the baseline's ladder held its top)"),
    (("fp8", "baseline"), "a ratio the ladders do not bound (1.15 x at their tops; both held them"),
])
def test_a_capacity_whose_ladder_held_its_top_bounds_the_ratio_only_one_way(held, said):
    # 12-06's H100: bf16 held 31.2 req/s and fp8 36, each its ladder's top; "1.15 x" alone read as a gain
    def capped(name, goodput):
        c = cell(goodput, load=goodput)
        c.reason = "max_reached" if name in held else "bracketed"
        return c
    rows = [row("baseline", capped("baseline", 31.2), recovery=1.0, gate="reference", baseline=True),
            row("fp8", capped("fp8", 36.0), recovery=0.99)]
    d = decide(rows)
    assert d.recommended.variant == "fp8" and said in d.summary
    # the report's own line under the recommendation bounds it the same way
    line = next(x for x in decision_lines(SimpleNamespace(decision=d, tiers=[], slo_definition=None)) if x.startswith("vs the baseline"))
    assert {(): ": 1.15 x", ("fp8",): ": at least 1.15 x", ("baseline",): ": at most 1.15 x",
            ("fp8", "baseline"): ": not bounded (1.15 x"}[held] in line


def test_the_baseline_recommended_against_itself_is_one_whatever_its_ladder():
    base = cell(31.2, load=31.2)
    base.reason = "max_reached"
    d = decide([row("baseline", base, recovery=1.0, gate="reference", baseline=True)])
    assert "1.00 x the baseline on vLLM defaults" in d.summary and "at most" not in d.summary


@pytest.mark.parametrize("args, said", [
    (["--dtype", "float32", "--enforce-eager"], "deploy baseline (bf16 checkpoint served in float32) on"),
    (["--dtype", "bfloat16"], "deploy baseline (bf16) on"),
    ([], "deploy baseline (bf16) on"),
])
def test_a_baseline_served_in_another_dtype_says_so_beside_its_label(args, said):
    # an AVX2 CPU serves the bf16 checkpoint in float32 (the demo there, 12-06): "bf16" alone misleads
    d = decide([row("baseline", cell(1.6, args=args), recovery=1.0, gate="reference", baseline=True)])
    assert d.summary.startswith(said), d.summary
