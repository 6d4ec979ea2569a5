"""`quantkit fidelity` end to end: the demo model (the session's shared bf16 server, by URL) against
its quantized conversion (the session's quantized server, by URL: test_paired evaluates it there;
the command started vLLM on it itself until 12-07, the one-line open_server branch that `quantkit
bench` and the run lanes start their servers through), a few short windows; the record
and its per-window points; a re-run that serves nothing; the gate's verdict and exit code. Then a
run recipe's `fidelity:` stage on the same pair: the same run key, so it reads the stored windows
back (serving none) into a record under its lane's name, which the run's report shows and its
verdict counts; a second run skips it."""

from __future__ import annotations

import json

import pytest
from fixtures.idle import wait_idle
from typer.testing import CliRunner

from quantkit import pipeline
from quantkit.cli import app
from quantkit.fidelity.intervals import FIGURES
from quantkit.store import Store

pytestmark = pytest.mark.integration

WINDOWS, WINDOW_LEN = 6, 64
EXIT_OF = {"pass": 0, "fail": 3, "inconclusive": 4}
DEAD_URL = "http://127.0.0.1:9"  # nothing listens: a run that served anything would fail on it


def fidelity(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["fidelity", *args, "--json"])
    assert result.exit_code in EXIT_OF.values(), result.output[-3000:]
    data = json.loads(result.stdout)
    return result.exit_code, data.get("result", data)  # a gate that did not pass: the error and the result


def test_fidelity_of_the_quantized_demo_model_is_stored_per_window_reused_gated_and_read_by_a_run(
        shared_server, smollm2_dir, quantized_checkpoint, quantized_server, tmp_path):
    wait_idle(quantized_server)
    code, first = fidelity(str(quantized_checkpoint), "--baseline", str(smollm2_dir), "--baseline-url", shared_server.url,
                           "--url", quantized_server.url, "--windows", str(WINDOWS), "--window-len", str(WINDOW_LEN))
    assert (first["windows"], first["scored_windows"], first["reused_windows"]) == (WINDOWS, WINDOWS, 0)
    assert first["tokens"] == WINDOWS * WINDOW_LEN and first["documents"] >= 2
    figures = first["figures"]
    assert set(figures) == set(FIGURES)
    assert 0 <= figures["kl_lower"]["value"] <= figures["kl_union"]["value"]  # the bound is below the estimate
    assert 0 < figures["top1_agreement"]["value"] < 1  # a 4-bit (or int8) model flips some argmaxes, not all
    for f in figures.values():
        assert f["low"] <= f["value"] <= f["high"]
    assert code == EXIT_OF[first["verdict"]] and [v["gate"] for v in first["verdicts"]] == ["max_delta_nll", "min_top1"]

    with Store() as store:
        record = store.done(first["run_key"])
        points = store.points(record.id)
    assert record.kind == "fidelity" and record.params["baseline"] == str(smollm2_dir.resolve())
    assert record.result["figures"] == figures
    assert len(points) == WINDOWS and len({p["window"] for p in points}) == WINDOWS
    assert all(p["positions"] == WINDOW_LEN and 0 <= p["top1_agree"] <= WINDOW_LEN for p in points)

    # fewer windows, loose gates: read from the store (both URLs are dead), nothing written, exit 0
    code, again = fidelity(str(quantized_checkpoint), "--baseline", str(smollm2_dir), "--baseline-url", DEAD_URL,
                           "--url", DEAD_URL, "--windows", str(WINDOWS - 2), "--window-len", str(WINDOW_LEN),
                           "--max-delta-nll", "100", "--min-top1", "0.001")
    assert code == 0 and again["verdict"] == "pass" and again["run_key"] == first["run_key"]
    assert (again["windows"], again["reused_windows"], again["scored_windows"]) == (WINDOWS - 2, WINDOWS - 2, 0)
    with Store() as store:
        assert [r.id for r in store.records(kind="fidelity", keys=[first["run_key"]])] == [record.id]

    # the run recipe's stage: the command's windows and serving settings, so the command's key
    recipe = tmp_path / "fidelity.yaml"
    recipe.write_text(f"kind: run\nname: fidelity\nmodel: {smollm2_dir}\n"
                      f"methods: [{{checkpoint: {quantized_checkpoint}, name: q}}]\n"
                      "serve: {enforce_eager: true, max_model_len: 2048}\nbench: null\neval: null\n"
                      f"fidelity: {{windows: {WINDOWS}, window_len: {WINDOW_LEN}}}\n")
    with Store() as store:
        run = pipeline.run(recipe, store=store, report_dir=tmp_path / "report")
        (outcome,) = [o for o in run.outcomes if o.kind == "fidelity"]
        assert (outcome.variant, outcome.status, outcome.run_key) == ("q", "done", first["run_key"]), outcome
        staged = store.done(first["run_key"])  # the lane's record replaced the command's as the key's done one
        assert (staged.variant, staged.params["baseline"]) == ("q", str(smollm2_dir.resolve()))
        assert (staged.result["reused_windows"], staged.result["scored_windows"]) == (WINDOWS, 0)
        assert len(store.points(staged.id)) == WINDOWS and staged.result["figures"] == figures
        assert run.verdicts["q"] == first["verdict"]  # the fidelity gate decides the variant
        report = (tmp_path / "report" / "report.md").read_text()
        delta = figures["delta_nll"]
        assert f"| q | {smollm2_dir.name} | {WINDOWS} (" in report[report.index("## Fidelity to the baseline"):]
        assert f"{delta['value']:.4f} [{delta['low']:.4f}, {delta['high']:.4f}]" in report
        again = pipeline.run(recipe, store=store, report_dir=tmp_path / "report")
        assert [(o.kind, o.status) for o in again.outcomes] == [("fidelity", "skipped")]
