"""Issue 39: `runs rm` of a record a live run is running is refused (its process is alive) unless
`--force`, and a run whose record was removed under it says so in one line, not a TypeError from
inside SQLite. The live run is a real process that began a record in a real store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.stores import remote_store

from quantkit.errors import UsageError
from quantkit.store import Store, StoreError, run_key

REPO = Path(__file__).resolve().parents[2]
KEY = run_key("bench", live=True)

# How a user names the live run's key: prefixes short and long, the whole key, upper case, padded.
SPELLINGS = [KEY[:4], KEY[:6], KEY[:10], KEY, KEY.upper(), KEY[:8].upper(), f"  {KEY[:10]}  ", f"{KEY[:10]}\n"]

LIVE_RUN = """
import sys
from quantkit.store import Store
store = Store(sys.argv[1])
store.begin(sys.argv[2], "bench", "m", "baseline", {"checkpoint": "/m"})
print("running", flush=True)
sys.stdin.read()  # until the test closes it (or kills this process)
"""


class LiveRun:
    """A process that began KEY's record and is still running it."""

    def __init__(self, db: Path):
        self.proc = subprocess.Popen([sys.executable, "-c", LIVE_RUN, str(db), KEY], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "running"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    home = tmp_path_factory.mktemp("live-home")
    with Store(home / "results.db") as store:  # an earlier, finished attempt of the same key
        store.finish(store.begin(KEY, "bench", "m", "baseline", {}), {"kind": "quantkit.bench"})
        other = run_key("bench", other=True)
        store.finish(store.begin(other, "bench", "m", "w4", {}), {"kind": "quantkit.bench"})
    run = LiveRun(home / "results.db")
    yield {"home": home, "db": home / "results.db", "run": run, "other": other}
    run.end()


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QUANTKIT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "quantkit", *args], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=120)


def statuses(db: Path, key: str = KEY) -> list[str]:
    with Store(db) as store:
        return [r.status for r in store.records(keys=[key])]


@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda s: repr(s))
def test_removing_a_live_runs_record_is_refused(live, spelling):
    with Store(live["db"]) as store:
        with pytest.raises(UsageError) as refused:
            store.remove(spelling)
    line = refused.value.one_line()
    pid = live["run"].proc.pid
    assert f"bench baseline ({KEY[:10]}) is being run by quantkit process {pid} now" in line
    assert f"kill {pid}" in line and "--force" in line and "\n" not in line
    assert statuses(live["db"]) == ["done", "running"]  # every attempt kept, the finished one too


def test_runs_rm_refuses_it_in_one_line_and_json_says_so_too(live):
    before = statuses(live["db"])
    proc = cli(live["home"], "runs", "rm", KEY[:10])
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: bench baseline") and "--force" in lines[0], proc.stderr
    proc = cli(live["home"], "runs", "rm", KEY[:10], "--json")
    assert proc.returncode == 2 and json.loads(proc.stdout)["exit_code"] == 2
    assert "is being run by quantkit process" in json.loads(proc.stdout)["error"]
    assert statuses(live["db"]) == before
    # a key no live process is running is removed as before
    proc = cli(live["home"], "runs", "rm", live["other"][:10], "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"removed": 1}, proc.stderr


def test_force_removes_it_and_the_run_says_its_record_is_gone(tmp_path):
    db = tmp_path / "results.db"
    Store(db).close()
    run = LiveRun(db)
    try:
        proc = cli(tmp_path, "runs", "rm", KEY[:8], "--force", "--json")
        assert proc.returncode == 0 and json.loads(proc.stdout) == {"removed": 1}, proc.stderr
        assert statuses(db) == []
    finally:
        run.end()


def test_a_killed_runs_record_is_removed_without_force(tmp_path):
    """A record whose process is gone (SIGKILL: it is left `running`) belongs to nobody."""
    db = tmp_path / "results.db"
    Store(db).close()
    run = LiveRun(db)
    run.kill()
    assert statuses(db) == ["running"]
    with Store(db) as store:
        assert store.remove(KEY[:6]) == 1


@pytest.fixture(params=["local", "remote"])
def stores(request, tmp_path, monkeypatch):
    """(the store a lane writes through, the driver's Store)"""
    if request.param == "local":
        driver = lane = Store(tmp_path / "results.db")
    else:
        lane, actor = remote_store(tmp_path / "results.db", monkeypatch)
        driver = actor.store
    yield lane, driver
    driver.close()


WRITES = {
    "point": lambda store, rid: store.add_point(rid, {"concurrency": 1, "output_tok_s": 1.0}),
    "finish": lambda store, rid: store.finish(rid, {"kind": "quantkit.bench"}, "/m/bench.json"),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_to_a_removed_record_says_so_in_one_line(stores, write):
    lane, driver = stores
    rid = lane.begin(KEY, "bench", "m", "baseline", {})
    assert driver.remove(KEY[:6], force=True) == 1  # what `runs rm --force` did under the run
    with pytest.raises(StoreError) as gone:
        WRITES[write](lane, rid)
    line = gone.value.one_line()
    assert line == (f"its record ({rid}) was removed from the result store {driver.path} while this run was running "
                    "it (quantkit runs rm --force); its result is not stored: run again to redo it")
    lane.fail(rid, "interrupted", "interrupted")  # ending it is a no-op: there is nothing left to end
    assert driver.records() == [] and driver.db.execute("SELECT COUNT(*) FROM points").fetchone()[0] == 0


@pytest.mark.parametrize("write", list(WRITES))
def test_a_stage_whose_record_is_removed_fails_with_that_line(stores, write):
    lane, driver = stores
    with pytest.raises(StoreError, match=r"was removed from the result store .* run again to redo it"):
        with lane.stage(KEY, "bench", "m", "baseline", {}) as rec:
            driver.remove(KEY[:6], force=True)
            WRITES[write](lane, rec.id)
    assert driver.records() == []
