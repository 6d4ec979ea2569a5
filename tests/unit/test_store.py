"""The SQLite result store: round trip, migrations, one done record per key, faults."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from quantkit.store import db as store_mod
from quantkit.errors import UsageError
from quantkit.store import Store, StoreError, run_key


def test_round_trip_and_points(tmp_path):
    with Store(tmp_path / "r.db") as s:
        key = run_key("bench", checkpoint="sha256:x", bench={"concurrency": [1, 4]})
        rid = s.begin(key, "bench", "m", "baseline", {"concurrency": [1, 4]})
        assert s.done(key) is None
        s.add_point(rid, {"concurrency": 1, "output_tok_s": 20.5})
        s.add_point(rid, {"concurrency": 4, "output_tok_s": 55.0})
        s.finish(rid, {"kind": "quantkit.bench", "complete": True}, "/x/bench.json")
    with Store(tmp_path / "r.db") as s:  # reopened: nothing lost, migrations not re-applied
        record = s.done(key)
        assert record.status == "done" and record.result == {"kind": "quantkit.bench", "complete": True}
        assert record.params == {"concurrency": [1, 4]} and record.result_path == "/x/bench.json"
        assert [p["concurrency"] for p in s.points(record.id)] == [1, 4]
        assert s.applied() == [name for name, _ in store_mod.MIGRATIONS]
        assert s.get(key[:6]).id == record.id


def test_keys_are_stable_and_sensitive():
    a = run_key("eval", checkpoint="c", eval={"tasks": "quick", "limit": None})
    assert a == run_key("eval", eval={"limit": None, "tasks": "quick"}, checkpoint="c")
    assert a != run_key("eval", checkpoint="c", eval={"tasks": "quick", "limit": 5})
    assert a != run_key("bench", checkpoint="c", eval={"tasks": "quick", "limit": None})


def test_interrupted_then_redone_gives_one_done_record(tmp_path):
    with Store(tmp_path / "r.db") as s:
        key = run_key("convert", source="x")
        s.begin(key, "convert", "m", "gptq", {})  # a run killed here leaves 'running'
        rid = s.begin(key, "convert", "m", "gptq", {})  # the next run marks it interrupted
        s.finish(rid, {"ok": 1})
        statuses = [r.status for r in s.records(model="m")]
        assert statuses == ["interrupted", "done"]
        rid2 = s.begin(key, "convert", "m", "gptq", {})  # --force: redo
        s.finish(rid2, {"ok": 2})
        done = s.records(model="m", status="done")
        assert len(done) == 1 and done[0].result == {"ok": 2}
        with pytest.raises(sqlite3.IntegrityError):  # the index itself forbids a second done row
            s.db.execute("UPDATE records SET status = 'done' WHERE status = 'interrupted'")


def test_failed_stage_keeps_reason_and_partial_result(tmp_path):
    with Store(tmp_path / "r.db") as s:
        rid = s.begin(run_key("bench", c=1), "bench", "m", "awq", {})
        s.add_point(rid, {"concurrency": 1})
        s.fail(rid, "the server died", result={"complete": False})
        r = s.records(model="m")[0]
        assert (r.status, r.error, r.result) == ("failed", "the server died", {"complete": False})
        assert s.points(r.id) == [{"concurrency": 1}]


def test_new_migration_is_applied_once(tmp_path, monkeypatch):
    path = tmp_path / "r.db"
    Store(path).close()
    monkeypatch.setattr(store_mod, "MIGRATIONS",
                        store_mod.MIGRATIONS + [("m999_note", "ALTER TABLE records ADD COLUMN note TEXT")])
    with Store(path) as s:
        assert s.applied()[-1] == "m999_note"
        columns = [row[1] for row in s.db.execute("PRAGMA table_info(records)")]
        assert "note" in columns
    Store(path).close()  # idempotent


def test_a_store_written_by_the_numbered_migrations_opens_in_place(tmp_path):
    """The committed H200 store was written by main 90b5006 (schema_migrations version 1, a kind
    CHECK without 'tune'); it migrates in place and keeps every record and point."""
    import shutil

    path = tmp_path / "old.db"
    shutil.copy(Path(__file__).parents[2] / "tests/data/h200/raw-2026-12-01/results.db", path)
    old = sqlite3.connect(path)
    before = old.execute("SELECT COUNT(*) FROM records").fetchone()[0], old.execute("SELECT COUNT(*) FROM points").fetchone()[0]
    old.close()
    assert before[0] > 0 and before[1] > 0
    with Store(path) as s:
        assert s.applied() == [name for name, _ in store_mod.MIGRATIONS]
        after = (len(s.records()), s.db.execute("SELECT COUNT(*) FROM points").fetchone()[0])
        assert after == before
        rid = s.begin(run_key("tune", x=1), "tune", "m", "baseline", {})  # the new kind fits
        s.finish(rid, {"best": None})
        assert s.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert not s.db.execute("PRAGMA foreign_key_check").fetchall()
    with Store(path) as s:  # reopened: nothing re-applied
        assert len(s.records()) == before[0] + 1


def test_corrupted_store_is_one_line(tmp_path):
    path = tmp_path / "r.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="is corrupted .* move it aside"):
        Store(path)


def test_locked_store_is_one_line(tmp_path):
    path = tmp_path / "r.db"
    Store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        s = Store.__new__(Store)
        s.path = path
        s.db = sqlite3.connect(path, timeout=0.2, isolation_level=None)
        with pytest.raises(StoreError, match="locked by another quantkit process"):
            with s.transaction():
                pass
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_remove_needs_a_real_prefix(tmp_path):
    with Store(tmp_path / "r.db") as s:
        with pytest.raises(UsageError, match="at least 4 characters"):
            s.remove("")
        with pytest.raises(UsageError, match="no run with key"):
            s.get("ffffffff")
