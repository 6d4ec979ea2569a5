"""A record's statuses are one list: the type the code uses and the SQLite schema's CHECK agree, and
every record a store holds reads as one of them."""

from __future__ import annotations

import re
import sqlite3

from quantkit.store import Store
from quantkit.store.protocol import RECORD_STATUSES


def test_the_schema_checks_the_statuses_the_code_names(tmp_path):
    with Store(tmp_path / "results.db"):
        pass
    with sqlite3.connect(tmp_path / "results.db") as conn:
        schema = "\n".join(sql for (sql,) in conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
    checks = re.findall(r"status IN \(([^)]*)\)", schema)
    assert checks and all(tuple(re.findall(r"'(\w+)'", c)) == RECORD_STATUSES for c in checks), checks


def test_stored_records_read_with_a_known_status(tmp_path):
    with Store(tmp_path / "results.db") as store:
        done = store.begin("k1", "bench", "m", "v", {})
        store.finish(done, {"ok": True})
        store.fail(store.begin("k2", "eval", "m", "v", {}), "boom")
        store.begin("k3", "eval", "m", "w", {})
        assert sorted(r.status for r in store.records()) == ["done", "failed", "running"]
        assert {r.status for r in store.records()} <= set(RECORD_STATUSES)
