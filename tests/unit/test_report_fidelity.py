"""The fidelity figures in the report, the card, the recommendation and `push`: a store filled as
`quantkit run` fills it (tests/push_world.py) plus a fidelity record made by fidelity/run.py's own
summary (the paired bootstrap and the gates) from per-window sums whose figures are known. The
fidelity gate is read as the accuracy gates are: a fail blocks, an inconclusive one is said as such."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest
from push_world import make_checkpoint, store_runs

from quantkit.errors import GateFailed, GateInconclusive
from quantkit.fidelity.documents import Window
from quantkit.fidelity.gate import FidelityGates
from quantkit.fidelity.intervals import DocumentSums
from quantkit.fidelity.result import FidelitySettings
from quantkit.fidelity.run import KIND, summary
from quantkit.store import Store, run_key
from quantkit.store.kinds import stage_kind

MODEL = "smollm2-135m"
POSITIONS = 256
# (ΔNLL per token, top-1 agreement) of the variant; the windows scatter around them
FAILS = (0.40, 0.67)  # the demo's GPTQ, as measured (fidelity/gate.py)
PASSES = (0.01, 0.92)  # its int8
STRADDLES = (0.05, 0.92)  # ΔNLL on the 0.05 gate


def fidelity_result(ckpt, baseline_dir, figures: tuple[float, float], windows: int = 16, seed: int = 0):
    """A FidelityResult of `windows` windows (two per document) whose ΔNLL and top-1 agreement
    scatter around `figures`, summarized with the default gates."""
    rng = np.random.default_rng(seed)
    delta, agree = figures
    plan, sums = [], {}
    for i in range(windows):
        window = Window(source="wikitext2", document=f"wikitext2/{i // 2}", start=POSITIONS * (i % 2), token_ids=[0])
        nll = 3.0 * POSITIONS
        kl = max(0.0, delta + rng.normal(0, 0.02)) * POSITIONS
        sums[f"{window.document}@{window.start}"] = DocumentSums(
            document=window.document, positions=POSITIONS, kl_lower=kl, kl_union=kl * 1.05,
            top1_agree=int(np.clip(round((agree + rng.normal(0, 0.02)) * POSITIONS), 0, POSITIONS)),
            nll_baseline=nll, nll_variant=nll + (delta + rng.normal(0, 0.02)) * POSITIONS)
        plan.append(window)
    return summary(plan, sums, FidelityGates(), run_key="f" * 20, baseline_dir=str(baseline_dir),
                   variant_dir=str(ckpt), baseline_fingerprint="b", variant_fingerprint="v",
                   settings=FidelitySettings(windows=windows), vllm_version="0.32.0", reused_windows=0,
                   scored_windows=windows)


def world(tmp_path, figures: tuple[float, float] | None, **runs):
    """The push world's gptq checkpoint and records, with a fidelity record of `figures` (None: none)."""
    ckpt = make_checkpoint(tmp_path / "models" / "smollm2-135m-gptq")
    baseline = tmp_path / "models" / MODEL
    baseline.mkdir()
    home = tmp_path / "home"
    store_runs(home, ckpt, baseline, **runs)
    if figures is not None:
        result = fidelity_result(ckpt, baseline, figures)
        with Store(home / "results.db") as store:
            params = stage_kind(KIND).params(ckpt, "v", FidelitySettings(), result.settings, baseline=str(baseline))
            with store.stage(run_key(KIND, figures=list(figures)), KIND, MODEL, "gptq", params) as rec:
                rec.finish(result.model_dump(mode="json"))
    return ckpt, home


def report_of(home, tmp_path, gates=None):
    from quantkit.report.gather import compare

    with Store(home / "results.db") as store:
        return compare(store, model=MODEL, out_dir=tmp_path / "report", gates=gates)


def test_the_report_shows_the_fidelity_table_and_its_gate_decides_with_the_accuracy_gates(tmp_path):
    ckpt, home = world(tmp_path, FAILS)
    result = report_of(home, tmp_path, gates={"min_recovery": 0.9})
    gptq = next(r for r in result["report"].rows if r.name == "gptq")
    # the recovery passes its gate (0.97 [0.95, 0.99] >= 0.9); the fidelity gate fails: the row fails
    assert gptq.recovery_low > 0.9 and gptq.gate == "fail" and result["verdicts"]["gptq"] == "fail"
    assert result["gate_counts"] == {"pass": 1, "fail": 2, "inconclusive": 0}  # recovery + ΔNLL + top-1
    assert any(d.startswith("fidelity delta_nll 0.4") and d.endswith(": fail") for d in gptq.gate_detail)
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.index("## Accuracy") < md.index("## Fidelity to the baseline") < md.index("## Plots")
    table = md[md.index("## Fidelity to the baseline"):md.index("## Plots")]
    header = ("| variant | against | windows (documents) | tokens scored (top-k) | ΔNLL (nats/token) | top-1 agreement "
              "| KL lower bound | KL on the top-k union | fidelity gate |")
    assert header in table
    cell = gptq.fidelity.figures["delta_nll"]
    row = html.unescape(next(line for line in table.splitlines() if line.startswith("| gptq |")))  # '<' is '&lt;' in Markdown
    assert f"| gptq | {MODEL} | 16 (8) | 4096 (k=20) | {cell.value:.4f} [{cell.low:.4f}, {cell.high:.4f}] |" in row
    assert f"| fail: delta_nll {cell.value:.4f} [{cell.low:.4f}, {cell.high:.4f}] > 0.05; top1_agreement 0.6" in row
    assert "the true KL is at least it" in table  # the bound, and which way
    assert "- **gptq**: average recovery" in md and "fidelity top1_agreement 0.6" in md  # the Gates section
    assert "<h2>Fidelity to the baseline</h2>" in (tmp_path / "report" / "report.html").read_text()
    rows = {r["name"]: r for r in json.loads((tmp_path / "report" / "report.json").read_text())["rows"]}
    assert "fidelity" not in rows["baseline"] and rows["gptq"]["fidelity"]["verdict"] == "fail"


def test_a_report_without_fidelity_records_has_no_fidelity_table_or_key(tmp_path):
    _, home = world(tmp_path, None)
    result = report_of(home, tmp_path, gates={"min_recovery": 0.9})
    assert result["verdicts"]["gptq"] == "pass"
    assert "Fidelity" not in (tmp_path / "report" / "report.md").read_text()
    assert all("fidelity" not in r for r in json.loads((tmp_path / "report" / "report.json").read_text())["rows"])


def test_the_recommendation_skips_a_faster_variant_that_fails_its_fidelity_gate():
    from quantkit.report.build import Variant, build_report

    def capacity(goodput):
        return {"slo": "ttft_p95=1,tpot_p95=0.1", "settings": {"profile": "concurrency", "tolerance": 0.1},
                "capacity": {"load": 8, "req_s": goodput, "goodput_req_s": goodput, "output_tok_s": goodput * 64},
                "search": {"reason": "bracketed"}, "points_spent": 4,
                "points": [{"profile": "concurrency", "concurrency": 8, "successes": 16, "output_tok_s": goodput * 64}]}

    base = "/m/bf16"
    variants = [Variant(name="baseline", method="bf16", model_dir=base, baseline=True, capacity=capacity(1.0)),
                Variant(name="int8", method="int8", model_dir="/m/int8", convert={"method": "int8"}, capacity=capacity(1.5),
                        fidelity=fidelity_result("/m/int8", base, PASSES)),
                Variant(name="gptq", method="gptq", model_dir="/m/gptq", convert={"method": "gptq"}, capacity=capacity(3.0),
                        fidelity=fidelity_result("/m/gptq", base, FAILS))]
    d = build_report(variants, title="t", environment={}).decision
    assert d.status == "recommended" and d.recommended.variant == "int8" and d.recommended.gate == "pass"
    gptq = next(c for c in d.candidates if c.variant == "gptq")
    assert not gptq.eligible and gptq.why_not == "accuracy gate fail"


@pytest.mark.parametrize("figures, verdict, refusal", [(FAILS, "fail", GateFailed), (STRADDLES, "inconclusive", GateInconclusive)])
def test_push_reads_the_fidelity_gate_as_it_reads_the_accuracy_gates(tmp_path, monkeypatch, figures, verdict, refusal):
    from quantkit.hub import build_card, gather_evidence, push

    ckpt, home = world(tmp_path, figures, recipe_gates={"min_recovery": 0.9})
    with Store(home / "results.db") as store:
        ev = gather_evidence(store, ckpt, None)
        card = html.unescape(build_card(store, ev, "org/gptq").text)
    assert not ev.validated and ev.verdict == verdict and ev.recovery.verdict == "pass"
    assert ev.reason.startswith(f"fidelity gate {'failed' if verdict == 'fail' else 'inconclusive'}: delta_nll")
    assert "## Fidelity to the baseline" in card and f"| {verdict}: delta_nll" in card
    assert card.index("## Accuracy") < card.index("## Fidelity to the baseline") < card.index("## Throughput")
    assert "- fidelity: run `" in card  # its record in the provenance
    monkeypatch.setenv("QUANTKIT_HOME", str(home))
    with pytest.raises(refusal, match=f"not validated \\(fidelity gate {'failed' if verdict == 'fail' else 'inconclusive'}"):
        push(ckpt, "org/gptq")


def test_a_passing_fidelity_gate_is_named_in_the_validation_and_a_card_without_one_has_no_section(tmp_path):
    from quantkit.hub import build_card, gather_evidence

    ckpt, home = world(tmp_path, PASSES, recipe_gates={"min_recovery": 0.9})
    with Store(home / "results.db") as store:
        ev = gather_evidence(store, ckpt, None)
    assert ev.validated and ev.verdict == "pass"
    assert ev.reason == "passed mean recovery >= 0.9, ΔNLL <= 0.05, top-1 agreement >= 0.85, each by its 95% interval"

    ckpt, home = world(tmp_path / "none", None, recipe_gates={"min_recovery": 0.9})
    with Store(home / "results.db") as store:
        ev = gather_evidence(store, ckpt, None)
        card = build_card(store, ev, "org/gptq").text
    assert ev.validated and "Fidelity" not in card and "- fidelity:" not in card


def test_compare_judges_the_stored_fidelity_intervals_again_under_other_gates(tmp_path):
    """As --slo re-judges stored ladders: the figures stay, the verdicts follow the gates asked."""
    from typer.testing import CliRunner

    from quantkit.cli import app
    from quantkit.report.gather import compare

    _, home = world(tmp_path, STRADDLES)
    with Store(home / "results.db") as store:
        stored = compare(store, model=MODEL, out_dir=tmp_path / "r0")
        looser = compare(store, model=MODEL, out_dir=tmp_path / "r1", fidelity_gates=FidelityGates(max_delta_nll=0.2))
        off = compare(store, model=MODEL, out_dir=tmp_path / "r2",
                      fidelity_gates=FidelityGates(max_delta_nll=None, min_top1=None))
    row = {name: next(r for r in res["report"].rows if r.name == "gptq") for name, res in
           (("stored", stored), ("looser", looser), ("off", off))}
    assert row["stored"].fidelity.verdict == "inconclusive"  # ΔNLL's interval holds the default 0.05
    assert row["looser"].fidelity.verdict == "pass" and row["looser"].fidelity.figures == row["stored"].fidelity.figures
    assert row["off"].fidelity.verdict is None and not row["off"].fidelity.verdicts
    assert any("fidelity gates: ΔNLL <= 0.2, top-1 agreement >= 0.85 (given for this report" in n
               for n in looser["report"].notes)
    cli = CliRunner().invoke(app, ["compare", "--model", MODEL, "-o", str(tmp_path / "r3"), "--max-delta-nll", "0.2",
                                   "--json"], env={"QUANTKIT_HOME": str(home)})
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.output)["verdicts"]["gptq"] == "pass"  # the top-1 gate kept its default 0.85 and passed
    no_top1 = CliRunner().invoke(app, ["compare", "--model", MODEL, "-o", str(tmp_path / "r4"), "--min-top1", "0",
                                       "--json"], env={"QUANTKIT_HOME": str(home)})
    assert json.loads(no_top1.output)["verdicts"]["gptq"] == "inconclusive"  # ΔNLL's default 0.05 still straddled
    bad = CliRunner().invoke(app, ["compare", "--model", MODEL, "--min-top1", "2"], env={"QUANTKIT_HOME": str(home)})
    assert bad.exit_code == 2 and "bad --min-top1" in bad.output
