"""`quantkit compare --slo`: capacity under any SLO from the stored ladders, and the run's own gates.

Two variants' ladders are stored as a capacity search leaves them (tests/fixtures/ladders.py: TTFT =
0.1 s x rate for the baseline, 0.08 s x rate for int8, a 20% spread), so under TTFT p95 <= 0.5 s the
baseline holds 4 req/s and breaks at 4.4, int8 holds 5 and breaks at 5.5. The evals carry the gates
the run used (as pipeline/stages.py stores them)."""

from __future__ import annotations

import json

import pytest
from fixtures.evals import eval_result
from fixtures.ladders import ladder
from typer.testing import CliRunner

from quantkit.cli import app
from quantkit.measure.stats.slo import parse_slo
from quantkit.report.gather import compare
from quantkit.serve.server import ServerInfo
from quantkit.store import Store, run_key

MEASURED = "ttft_p95=100"
RUN_GATES = {"min_recovery": 0.9, "min_task_recovery": None, "tasks": {}}


def fill(store: Store) -> None:
    for variant, per_rate, rates, scores in (("baseline", 0.1, [1, 2, 4, 4.4, 8], (0.60, 0.70)),
                                             ("int8", 0.08, [1, 2, 5, 5.5, 10], (0.59, 0.70))):
        folder = f"/models/m-{variant}"
        result, stored = ladder(rates, ttft_per_rate=per_rate, slo=MEASURED, model_dir=folder)
        result.server = ServerInfo(url="http://127.0.0.1:1", model_name=variant,
                                   serve_config={"enforce_eager": True, "max_model_len": 2048})
        params = {"checkpoint": folder, "slo": MEASURED, "capacity": result.settings.model_dump(mode="json")}
        rec = store.begin(run_key("capacity", v=variant), "capacity", "m", variant, params)
        for p in stored:
            store.add_point(rec, p)
        store.finish(rec, result.model_dump(mode="json", exclude={"path"}))
        params = {"checkpoint": folder, "gates": RUN_GATES}
        store.finish(store.begin(run_key("eval", v=variant), "eval", "m", variant, params),
                     eval_result(folder, *scores))


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "results.db") as s:
        fill(s)
        yield s


def cells(result):
    return {r.name: r.capacity for r in result["report"].rows}


def test_a_covered_slo_is_re_derived_from_the_ladders_without_measuring(store, tmp_path):
    result = compare(store, model="m", out_dir=tmp_path / "r", slo=parse_slo("ttft_p95=0.5"))
    got = cells(result)
    assert (got["baseline"].load, got["baseline"].ceiling, got["int8"].load, got["int8"].ceiling) == (4, 4.4, 5, 5.5)
    assert str(got["int8"].slo) == "ttft_p95=0.5" and not got["int8"].coarse
    notes = result["report"].notes
    assert any("re-derived from the stored ladders, measured under ttft_p95=100" in n for n in notes)
    d = result["report"].decision
    # goodput under Poisson arrivals: the offered rate x the share that met the SLO (all did, at both)
    assert d.recommended.variant == "int8" and d.ratio_vs_baseline == pytest.approx(5 / 4)
    md = result["paths"]["md"].read_text()
    assert "ttft_p95=0.5" in md and "re-derived" in md
    assert "![TTFT and TPOT p95/p99 vs offered load" in md and (tmp_path / "r/plots/latency_vs_offered_load.png").is_file()


def test_an_slo_a_ladder_does_not_cover_says_what_to_run(store, tmp_path):
    result = compare(store, model="m", out_dir=tmp_path / "r", slo=parse_slo("ttft_p95=0.05"))
    assert cells(result)["baseline"].load is None
    (note,) = [n for n in result["report"].notes if n.startswith("baseline:")]
    assert "lowest point, 1 req/s offered, already breaks it" in note
    assert "quantkit bench /models/m-baseline --capacity --slo ttft_p95=0.05 --capacity-start 0.25 --capacity-max 1" in note
    loose = compare(store, model="m", out_dir=tmp_path / "r2", slo=parse_slo("ttft_p95=0.6"))
    assert cells(loose)["int8"].load_text() == "5.5-10 req/s offered"  # 0.528 s at 5.5; 10 breaks
    wide = compare(store, model="m", out_dir=tmp_path / "r3", slo=parse_slo("ttft_p95=0.3"))
    assert cells(wide)["baseline"].coarse and cells(wide)["baseline"].load_text() == "2-4 req/s offered"


def test_the_run_gates_apply_on_a_re_render_unless_told_otherwise(store, tmp_path):
    result = compare(store, model="m", out_dir=tmp_path / "r")
    assert result["verdicts"] == {"int8": "pass"}
    assert any(n.startswith("gates: min_recovery=0.9, the run's own") for n in result["report"].notes)
    given = compare(store, model="m", out_dir=tmp_path / "r2", gates={"min_recovery": 1.2})
    assert given["verdicts"] == {"int8": "fail"} and any("given for this report" in n for n in given["report"].notes)
    none = compare(store, model="m", out_dir=tmp_path / "r3", stored_gates=False)
    assert none["verdicts"] == {} and {r.name: r.gate for r in none["report"].rows}["int8"] == "no gates"


def test_cli_compare_slo_takes_a_tier_and_refuses_a_bad_one(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANTKIT_HOME", str(tmp_path / "home"))
    with Store() as s:
        fill(s)
    args = ["compare", "--model", "m", "-o", str(tmp_path / "r")]
    ok = CliRunner().invoke(app, [*args, "--slo", "ttft_p95=0.5", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["decision"]["recommended"]["variant"] == "int8"
    tier = CliRunner().invoke(app, [*args, "--slo", "mlperf-server"])
    assert tier.exit_code == 0, tier.output
    # 119 requests a window, 299 for a p99 at 95% (LoadGen's rule): each tier's sentence says so
    assert ("under asked (ttft_p99=2,tpot_p99=0.1): no recommendation, the ladders are undecided there; "
            "baseline: undecided at 1 req/s offered (needs 180 more requests); int8: undecided at 1 req/s offered "
            "(needs 180 more requests)\n") in tier.output
    bad = CliRunner().invoke(app, [*args, "--slo", "fast"])
    assert bad.exit_code == 2 and "neither an SLO tier (mlperf-server, interactive) nor an SLO" in bad.output


def test_a_price_per_hour_adds_the_cost_per_million_output_tokens(store, tmp_path):
    from quantkit.report.render import tables
    from quantkit.report.tiers import cost_per_million

    result = compare(store, model="m", out_dir=tmp_path / "r", slo=parse_slo("ttft_p95=0.5"), price_per_hour=2.0)
    report = result["report"]
    # judged under an SLO the ladders were not searched under: the row says it was asked, not measured
    (tier,) = [t for t in report.tiers if t.name == "asked"]
    assert "compare --slo" in tier.source and not [t for t in report.tiers if t.name == "measured"]
    int8 = tier.cells["int8"]
    assert cost_per_million(int8, 2.0) == pytest.approx(2.0 / (int8.output_tok_s * 3600) * 1e6)
    (table,) = [t for t in tables(report) if t[0] == "Capacity per SLO tier"]
    row = next(r for r in table[2] if r[0].startswith("asked"))
    assert f"{cost_per_million(int8, 2.0):.3g} per M output tokens" in row[table[1].index("int8")]
    assert "at 2 per machine-hour" in table[3]


def test_the_card_publishes_a_steady_state_capacity_with_its_tiers_and_never_a_burst(store, tmp_path):
    from pathlib import Path

    from quantkit.report.card import build_card
    from quantkit.report.gather import evidence_for

    card = str(build_card(store, evidence_for(store, Path("/models/m-int8")), None))
    section = card[card.index("## Capacity under an SLO"):card.index("## How to serve")]
    assert "open-loop Poisson arrivals (128 prompt / 64 output tokens)" in section
    assert "| ttft_p95=100 (measured) | 10 req/s offered+ |" in section  # the ladder's top still met it
    assert "| mlperf-server: ttft_p99=2,tpot_p99=0.1 | undecided at 1 req/s offered (needs 180 more requests) |" in section
    assert "MLPerf Inference v5.1" in section
    # its serve config, not bare defaults
    assert "--max-model-len 2048 --enforce-eager\n```\n\nFlags: the configuration whose capacity was measured." in card
    (record,) = [r for r in store.records(kind="capacity") if r.variant == "int8"]
    burst = {**record.result, "settings": {**record.result["settings"], "profile": "burst"}}
    rec = store.begin(run_key("capacity", v="int8-burst"), "capacity", "m", "int8", record.params)
    store.finish(rec, burst)
    card = str(build_card(store, evidence_for(store, Path("/models/m-int8")), None))
    section = card[card.index("## Capacity under an SLO"):card.index("## How to serve")]
    assert "measured as a burst" in section and "not published" in section and "req/s offered" not in section


def test_the_tier_table_says_what_to_run_to_cover_a_tier_in_the_markdown_too():
    """The command that covers a tier a ladder cannot decide was in the JSON report only."""
    from quantkit.report.decision import CapacityCell
    from quantkit.report.tiers import TierResult, tier_table

    note = "p99 needs 460 requests per point; run: quantkit bench DIR --capacity --slo mlperf-server"
    tiers = [TierResult(name="measured", slo="ttft_p95=1", source="the recipe's"),
             TierResult(name="mlperf-server", slo="ttft_p99=2,tpot_p99=0.1", source="MLPerf",
                        cells={"baseline": CapacityCell(config="defaults", slo="ttft_p99=2", load=None)},
                        coverage={"baseline": "undecided"}, notes=[f"baseline: {note}", "fp8: its lowest point breaks it"])]
    title, header, rows, caption = tier_table(tiers)
    # each note closed, not run into the next (on the H200 report they read as one sentence)
    assert f"Not covered: mlperf-server, baseline: {note}; mlperf-server, fp8: its lowest point breaks it. Sources" in caption
    assert rows[1][1] == "undecided (too few requests)"
    assert "Not covered" not in tier_table(tiers[:1] + [tiers[1].model_copy(update={"notes": []})])[3]


def test_an_interrupted_search_keeps_its_ladder(tmp_path):
    """A search cut short (the H200 went back mid-search) is shown from the points it measured, as
    `partial`, judged under its own SLO: not hidden as failed, never a finished search."""
    result, stored = ladder([1, 2, 4, 4.4], ttft_per_rate=0.1, slo="ttft_p95=0.5", model_dir="/models/m-baseline")
    unfinished = result.model_dump(mode="json", exclude={"path"})
    unfinished.update(capacity=None, search=None, complete=False)  # as the export stands before the search ends
    with Store(tmp_path / "results.db") as s:
        rec = s.begin(run_key("capacity", v="baseline"), "capacity", "m", "baseline", {"checkpoint": "/models/m-baseline"})
        for p in stored:
            s.add_point(rec, p)
        s.fail(rec, "interrupted", status="interrupted", result=unfinished)
        out = compare(s, model="m", out_dir=tmp_path / "r")
    (row,) = out["report"].rows
    assert row.status == "partial" and "shown: the 4 points it measured" in (row.error or "")
    assert (row.capacity.load, row.capacity.ceiling) == (4, 4.4)  # TTFT p95 0.48 s at 4, 0.53 at 4.4


def test_a_tier_whose_rival_ladder_begins_above_the_winner_is_inconclusive():
    from quantkit.report.decision import Candidate, CapacityCell, Decision
    from quantkit.report.tiers import _open_rivals

    won = Candidate(variant="baseline", method="bf16", cell=CapacityCell(config="defaults", slo="ttft_p95=1", load=30.0))
    d = Decision(status="recommended", summary="deploy baseline", recommended=won)
    # fp8's ladder began at 40 (breaks the tier): its capacity lies below 40, perhaps above 30
    assert _open_rivals(d, {"fp8": 40.0}) == {"fp8": "its ladder begins at 40, above baseline's 30"}
    assert _open_rivals(d, {"fp8": 20.0}) == {}  # below 20 < 30: baseline is ahead whatever it is
    assert _open_rivals(d, {"baseline": 40.0}) == {}


def test_the_measured_slo_judges_the_ladder_again_and_shows_what_it_holds(tmp_path):
    """`--slo S` with S the SLO measured: a search that stepped over a pass (before 8ede9f8: 12-06's
    gptq printed 32.4 req/s where its ladder held 34.35) shows its ladder's figure, said so; a search
    its ladder agrees with is shown as stored, with no note."""
    slo = "ttft_p95=0.5"
    with Store(tmp_path / "results.db") as s:
        for variant, printed in (("baseline", None), ("gptq", (2.0, 4.0))):
            result, stored = ladder([1, 2, 4, 4.4], ttft_per_rate=0.1, slo=slo, model_dir=f"/models/m-{variant}")
            if printed:  # as the old search left it: 2 held, "breaks at 4", though 4 passed (TTFT p95 0.48 s)
                result.search.capacity, result.search.ceiling = printed
                at2 = result.points[1]
                result.capacity = result.capacity.model_copy(update={
                    "load": 2.0, "rate": 2.0, "point_index": 1, "req_s": at2.req_s, "output_tok_s": at2.output_tok_s})
            rec = s.begin(run_key("capacity", v=variant), "capacity", "m", variant, {"checkpoint": f"/models/m-{variant}"})
            for p in stored:
                s.add_point(rec, p)
            s.finish(rec, result.model_dump(mode="json", exclude={"path"}))
        out = compare(s, model="m", out_dir=tmp_path / "r", slo=parse_slo(slo))
    got = cells(out)
    assert (got["baseline"].load, got["baseline"].ceiling) == (4, 4.4)
    assert (got["gptq"].load, got["gptq"].ceiling) == (4, 4.4)
    (note,) = [n for n in out["report"].notes if n.startswith("gptq:")]
    assert "holds 4 req/s (breaks at 4.4) where its search printed 2" in note
    assert not [n for n in out["report"].notes if n.startswith("baseline:")]
