"""Issue 31, the store: nothing lost (wildcard keys, a live run's records, a newer store), nothing
misreported (a stage's foreign failure), one line for a damaged or read-only store."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from quantkit.errors import UsageError
from quantkit.store import Store, StoreError, run_key
from quantkit.store import db as store_mod

REPO = Path(__file__).resolve().parents[2]

# Spellings a user (or a script) might pass as a run key that are not one: SQL LIKE wildcards,
# glob and regex characters, SQL, whitespace, other alphabets. None may remove or show anything.
HOSTILE_KEYS = ["%%%%", "____", "%", "_", "a%", "%a", "ab%d", "ab_d", "a_b_", "____%", "%' OR '1'='1",
                "'; DROP TABLE records; --", "\\%\\%", "****", "????", "[a-f]*", "a.*", "..", "ab cd",
                "0x1234", "ＡＢＣＤ", "abcd\n%", "ghij", "-1", "12 34"]


def _filled(path: Path, n: int = 8) -> tuple[Store, list[str]]:
    store = Store(path)
    keys = []
    for i in range(n):
        key = run_key("bench", i=i)
        store.finish(store.begin(key, "bench", "m", f"v{i}", {}), {"i": i})
        keys.append(key)
    return store, keys


def test_hostile_keys_remove_and_show_nothing(tmp_path):
    store, keys = _filled(tmp_path / "r.db")
    with store:
        for spelling in HOSTILE_KEYS:
            with pytest.raises(UsageError):
                store.remove(spelling)
            with pytest.raises(UsageError):
                store.get(spelling)
            with pytest.raises(UsageError):
                store.records(keys=[spelling])
            assert len(store.records()) == len(keys), spelling  # nothing lost
        # a real prefix still works, and removes exactly its own key (all attempts of it)
        assert store.get(keys[3][:6].upper()).run_key == keys[3]
        assert store.remove(keys[3][:8]) == 1
        assert len(store.records()) == len(keys) - 1


def test_a_prefix_of_several_runs_is_refused_not_all_removed(tmp_path):
    with Store(tmp_path / "r.db") as store:
        for key in ("abcd" + "0" * 16, "abcd" + "1" * 16):
            store.finish(store.begin(key, "bench", "m", "v", {}), {})
        with pytest.raises(UsageError, match="names 2 different runs"):
            store.remove("abcd")
        assert len(store.records()) == 2
        assert store.remove("abcd0") == 1


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QUANTKIT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "quantkit", *args], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=120)


def _error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


def test_runs_rm_wildcard_is_a_usage_error_and_keeps_the_store(tmp_path):
    home = tmp_path / "home"
    store, keys = _filled(home / "results.db")
    store.close()
    proc = _cli(home, "runs", "rm", "%%%%")
    assert proc.returncode == 2
    assert "not a run key" in _error_line(proc)
    with Store(home / "results.db") as again:
        assert len(again.records()) == len(keys)


# -- a live run's records ------------------------------------------------------------------------

HOLDER = """
import sys, time
from quantkit.store import Store
store = Store(sys.argv[1])
store.begin(sys.argv[2], "convert", "m", "fp8", {})
print("began", flush=True)
time.sleep(120)
"""


def test_a_live_runs_record_is_not_taken_over(tmp_path):
    path, key = tmp_path / "r.db", run_key("convert", x=1)
    Store(path).close()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), key], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "began"
        with Store(path) as store:
            with pytest.raises(StoreError, match=rf"another quantkit process now \(pid {holder.pid},"):
                store.begin(key, "convert", "m", "fp8", {})
            assert [r.status for r in store.records()] == ["running"]  # its record untouched
            assert [(k, pid) for k, pid, _ in store.live_runs([key, "ffff"])] == [(key, holder.pid)]
    finally:
        holder.kill()
        holder.wait()
    with Store(path) as store:  # the holder is gone: its record was a killed run's
        rid = store.begin(key, "convert", "m", "fp8", {})
        store.finish(rid, {})
        assert [r.status for r in store.records()] == ["interrupted", "done"]


def test_a_reused_pid_is_not_a_live_run(tmp_path):
    path, key = tmp_path / "r.db", run_key("convert", x=2)
    with Store(path) as store:
        store.begin(key, "convert", "m", "fp8", {})
        # the pid now belongs to this very test's parent, started long before the record said
        store.db.execute("UPDATE records SET pid = ?, proc_start = '1'", (os.getppid(),))
        store.finish(store.begin(key, "convert", "m", "fp8", {}), {})
        assert [r.status for r in store.records()] == ["interrupted", "done"]


# -- a store written by a newer quantkit -----------------------------------------------------------


def test_a_newer_quantkits_store_is_refused_untouched(tmp_path):
    home = tmp_path / "home"
    path = home / "results.db"
    _filled(path)[0].close()
    raw = sqlite3.connect(path)
    raw.execute("ALTER TABLE records ADD COLUMN from_the_future TEXT")
    raw.execute("INSERT INTO _migrations VALUES ('m900_from_the_future', '2030-01-01')")
    raw.commit()
    raw.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="written by a newer quantkit .*m900_from_the_future.* upgrade quantkit"):
        Store(path)
    proc = _cli(home, "runs", "ls")
    assert proc.returncode == 1
    assert "written by a newer quantkit" in _error_line(proc)
    assert path.read_bytes() == before


# -- how a stage ended ---------------------------------------------------------------------------


@pytest.mark.parametrize("exc, kind", [
    (OSError(errno.ENOSPC, "No space left on device"), "OSError"),
    (sqlite3.OperationalError("disk I/O error"), "OperationalError"),
    (ZeroDivisionError("division by zero"), "ZeroDivisionError"),
    (MemoryError("out of memory"), "MemoryError"),
])
def test_a_foreign_failure_inside_a_stage_is_failed_with_its_reason(tmp_path, exc, kind):
    with Store(tmp_path / "r.db") as store:
        with pytest.raises(type(exc)):
            with store.stage(run_key("bench", k=kind), "bench", "m", "v", {}):
                raise exc
        record = store.records()[0]
        assert record.status == "failed"
        assert record.error.startswith(f"{kind}: ") and str(exc.args[-1]) in record.error


def test_only_an_interrupt_is_interrupted(tmp_path):
    with Store(tmp_path / "r.db") as store:
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C, and SIGTERM through the CLI's handler
            with store.stage(run_key("bench", k=1), "bench", "m", "v", {}):
                raise KeyboardInterrupt
        assert store.records()[0].status == "interrupted"


# -- a damaged or read-only store ----------------------------------------------------------------


def test_a_damaged_page_is_one_line(tmp_path):
    home = tmp_path / "home"
    store = Store(home / "results.db")
    for i in range(300):
        store.finish(store.begin(run_key("bench", i=i), "bench", "m", "v", {"pad": "x" * 500}), {"pad": "y" * 500})
    store.close()
    with open(home / "results.db", "r+b") as fh:  # pages 21-23 (records), not the schema page
        fh.seek(4096 * 20)
        fh.write(b"\xff" * 4096 * 3)
    proc = _cli(home, "runs", "ls")
    assert proc.returncode == 1
    assert "is corrupted (database disk image is malformed); move it aside" in _error_line(proc)


@contextmanager
def _read_only(*paths: Path):
    """Make paths unwritable, even for root (which ignores modes): the immutable attribute."""
    if os.geteuid() != 0:
        for p in paths:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield
        finally:
            for p in paths:
                p.chmod(0o755 if p.is_dir() else 0o644)
        return
    done = []
    try:
        for p in paths:
            if subprocess.run(["chattr", "+i", str(p)], capture_output=True).returncode != 0:
                pytest.skip("cannot make a folder read-only here (root without chattr)")
            done.append(p)
        yield
    finally:
        for p in done:
            subprocess.run(["chattr", "-i", str(p)], capture_output=True)


def test_a_read_only_home_is_still_read_and_a_write_says_why(tmp_path):
    home = tmp_path / "home"
    store, keys = _filled(home / "results.db", 3)
    store.close()
    with _read_only(home / "results.db", home):
        listed = _cli(home, "runs", "ls", "--json")
        assert listed.returncode == 0, listed.stderr
        assert keys[0] in listed.stdout
        removed = _cli(home, "runs", "rm", keys[0])
        assert removed.returncode == 1
        assert "cannot be written" in _error_line(removed) and "read-only" in removed.stderr


def test_the_store_records_the_process_identity(tmp_path):
    with Store(tmp_path / "r.db") as store:
        store.begin(run_key("bench", z=1), "bench", "m", "v", {})
        pid, host, start = store.db.execute("SELECT pid, host, proc_start FROM records").fetchone()
        assert pid == os.getpid() and host and (start or not Path("/proc/self/stat").exists())
        assert store.applied()[-1] == store_mod.MIGRATIONS[-1][0]
