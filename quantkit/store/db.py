"""The result store: SQLite at $QUANTKIT_HOME/results.db (WAL), named append-only migrations.

The store is the one truth: every result (a `quantkit run` stage, a standalone bench, eval or
tune) is a record here; the JSON files beside checkpoints are exports. Readers (compare, card,
push, `eval --baseline`) read the store.

One row per stage of a run (convert, bench, eval, tune). A row's run key is a hash of everything that
defines the result (model fingerprint, the recipe entry of that stage, hardware, vLLM version,
quantkit version), so `quantkit run` skips a key that is already done (resume) and `--force`
redoes it. A stage is inserted as `running`, and becomes `done` (with its result JSON) or
`failed` (with the reason) in one transaction; rows left `running` by a killed process are
marked `interrupted` when the next run starts. At most one `done` row per key (a unique index).
Bench points (and tune entries) are appended to `points` as each one finishes, so a killed
bench keeps them.

Migrations are named (simonw's llm style) and applied once each, in order; a released one is never
edited. A store written before they were named (a `schema_migrations` table with version 1) is
adopted in place: its version 1 is the migration `m001_initial`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from .. import settings
from ..errors import QuantkitError, UsageError

# Append only: a released migration is never edited; a change is a new entry.
MIGRATIONS: list[tuple[str, str]] = [
    ("m001_initial", """
    CREATE TABLE records (
        id          INTEGER PRIMARY KEY,
        run_key     TEXT NOT NULL,
        kind        TEXT NOT NULL CHECK (kind IN ('convert', 'bench', 'eval')),
        model       TEXT NOT NULL,
        variant     TEXT NOT NULL,
        status      TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'interrupted')),
        params      TEXT NOT NULL,
        result      TEXT,
        result_path TEXT,
        error       TEXT,
        recipe_hash TEXT,
        pid         INTEGER,
        started_at  TEXT NOT NULL,
        finished_at TEXT
    );
    CREATE UNIQUE INDEX records_one_done ON records(run_key) WHERE status = 'done';
    CREATE INDEX records_by_model ON records(model, variant, kind);
    CREATE TABLE points (
        record_id INTEGER NOT NULL REFERENCES records(id) ON DELETE CASCADE,
        idx       INTEGER NOT NULL,
        point     TEXT NOT NULL,
        PRIMARY KEY (record_id, idx)
    );
    """),
    # Stage kinds grow (tune now; capacity and trials next): the kind is checked in Python
    # (KINDS), since changing a CHECK constraint means rebuilding the table in SQLite.
    ("m002_records_any_stage_kind", """
    CREATE TABLE records_new (
        id          INTEGER PRIMARY KEY,
        run_key     TEXT NOT NULL,
        kind        TEXT NOT NULL,
        model       TEXT NOT NULL,
        variant     TEXT NOT NULL,
        status      TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'interrupted')),
        params      TEXT NOT NULL,
        result      TEXT,
        result_path TEXT,
        error       TEXT,
        recipe_hash TEXT,
        pid         INTEGER,
        started_at  TEXT NOT NULL,
        finished_at TEXT
    );
    INSERT INTO records_new SELECT * FROM records;
    DROP TABLE records;
    ALTER TABLE records_new RENAME TO records;
    CREATE UNIQUE INDEX records_one_done ON records(run_key) WHERE status = 'done';
    CREATE INDEX records_by_model ON records(model, variant, kind);
    """),
]
# What a record can be; each is a stage of a run or a standalone command's result.
KINDS = ("convert", "bench", "eval", "tune", "capacity", "trial")
# Stores written before migrations had names numbered them: version -> name.
_NUMBERED = {1: "m001_initial"}


class StoreError(QuantkitError):
    exit_code = 1


@dataclass
class Record:
    id: int
    run_key: str
    kind: str
    model: str
    variant: str
    status: str
    params: dict[str, Any]
    result: dict[str, Any] | None
    result_path: str | None
    error: str | None
    recipe_hash: str | None
    started_at: str
    finished_at: str | None

    def summary(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("id", "run_key", "kind", "model", "variant", "status", "error",
                                              "result_path", "started_at", "finished_at")}
        out["status"] = self.current_status()
        return out

    def checkpoint_dir(self) -> Path | None:
        """The checkpoint folder this record is about (resolved): a conversion's output, or the
        folder a bench/eval/tune measured."""
        raw = (self.result or {}).get("output_dir") if self.kind == "convert" else self.params.get("checkpoint")
        if not raw:
            return None
        try:
            return Path(raw).expanduser().resolve()
        except (OSError, RuntimeError):
            return None

    def current_status(self) -> str:
        """The stored status, or `missing` for a conversion whose checkpoint folder is gone (a run
        redoes it). Bench, eval and tune results live in the store itself: their exports may go."""
        if self.kind == "convert" and self.status == "done" and self.result_path and not Path(self.result_path).exists():
            return "missing"
        return self.status


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_key(kind: str, **parts: Any) -> str:
    blob = json.dumps({"kind": kind, **parts}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def default_path() -> Path:
    return settings.home() / "results.db"


class Store:
    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(_explain(exc, self.path)) from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------------

    def _migrate(self) -> None:
        self.db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        done = self.applied()
        legacy = self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
        if legacy.fetchone():
            for (version,) in self.db.execute("SELECT version FROM schema_migrations").fetchall():
                name = _NUMBERED.get(version)
                if name and name not in done:
                    self.db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, now()))
            done = self.applied()
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            # a table rebuild must not cascade-delete the points of the rows it copies
            self.db.execute("PRAGMA foreign_keys=OFF")
            try:
                with self.transaction():
                    for statement in filter(str.strip, sql.split(";")):
                        self.db.execute(statement)
                    self.db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, now()))
                    if self.db.execute("PRAGMA foreign_key_check").fetchone():
                        raise StoreError(f"migration {name} of {self.path} broke a foreign key; the store is unchanged")
            finally:
                self.db.execute("PRAGMA foreign_keys=ON")

    def applied(self) -> list[str]:
        """The names of the migrations applied to this store, in order."""
        return [r[0] for r in self.db.execute("SELECT name FROM _migrations ORDER BY rowid")]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(_explain(exc, self.path)) from None
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        else:
            self.db.execute("COMMIT")

    # -- stages ---------------------------------------------------------------------------------

    def done(self, key: str) -> Record | None:
        row = self.db.execute("SELECT * FROM records WHERE run_key = ? AND status = 'done'", (key,)).fetchone()
        return self._record(row) if row else None

    def begin(self, key: str, kind: str, model: str, variant: str, params: dict[str, Any],
              recipe_hash: str | None = None) -> int:
        if kind not in KINDS:
            raise ValueError(f"unknown record kind {kind!r}")
        with self.transaction():
            # a row left 'running' for this key belongs to a killed run: it never finished
            self.db.execute(
                "UPDATE records SET status = 'interrupted', finished_at = ? WHERE run_key = ? AND status = 'running'",
                (now(), key))
            cur = self.db.execute(
                "INSERT INTO records (run_key, kind, model, variant, status, params, recipe_hash, pid, started_at)"
                " VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                (key, kind, model, variant, json.dumps(params, default=str), recipe_hash, os.getpid(), now()))
            return int(cur.lastrowid)

    def add_point(self, record_id: int, point: dict[str, Any]) -> None:
        with self.transaction():
            idx = self.db.execute("SELECT COUNT(*) FROM points WHERE record_id = ?", (record_id,)).fetchone()[0]
            self.db.execute("INSERT INTO points VALUES (?, ?, ?)", (record_id, idx, json.dumps(point)))

    def finish(self, record_id: int, result: dict[str, Any], result_path: str | None = None) -> None:
        with self.transaction():
            key = self.db.execute("SELECT run_key FROM records WHERE id = ?", (record_id,)).fetchone()[0]
            # --force: the new result replaces the old one as the key's 'done' record
            self.db.execute("DELETE FROM records WHERE run_key = ? AND status = 'done'", (key,))
            self.db.execute(
                "UPDATE records SET status = 'done', result = ?, result_path = ?, error = NULL, finished_at = ?"
                " WHERE id = ?", (json.dumps(result, default=str), result_path, now(), record_id))

    def fail(self, record_id: int, error: str, status: str = "failed", result: dict[str, Any] | None = None) -> None:
        with self.transaction():
            self.db.execute(
                "UPDATE records SET status = ?, error = ?, result = COALESCE(?, result), finished_at = ? WHERE id = ?",
                (status, error, json.dumps(result, default=str) if result else None, now(), record_id))

    @contextmanager
    def stage(self, key: str, kind: str, model: str, variant: str, params: dict[str, Any],
              recipe_hash: str | None = None) -> Iterator["StageHandle"]:
        """One stage as a record: `running` on entry; `done` once `handle.finish(...)` is called;
        `failed` (with the reason) on a QuantkitError, `interrupted` on anything else, which is
        re-raised either way. A body that ends without finishing leaves the record failed."""
        handle = StageHandle(self, self.begin(key, kind, model, variant, params, recipe_hash))
        try:
            yield handle
        except QuantkitError as exc:
            self.fail(handle.id, exc.one_line())
            raise
        except BaseException:
            self.fail(handle.id, "interrupted", status="interrupted")
            raise
        if not handle.finished:
            self.fail(handle.id, "the stage ended without a result")

    # -- queries --------------------------------------------------------------------------------

    def points(self, record_id: int) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT point FROM points WHERE record_id = ? ORDER BY idx", (record_id,))
        return [json.loads(r[0]) for r in rows]

    def records(self, model: str | None = None, kind: str | None = None, status: str | None = None,
                keys: list[str] | None = None) -> list[Record]:
        sql, args = "SELECT * FROM records WHERE 1=1", []
        for column, value in (("model", model), ("kind", kind), ("status", status)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        if keys:
            sql += " AND (" + " OR ".join("run_key LIKE ?" for _ in keys) + ")"
            args.extend(f"{k}%" for k in keys)
        return [self._record(r) for r in self.db.execute(sql + " ORDER BY id", args)]

    def get(self, key_prefix: str) -> Record:
        rows = self.records(keys=[key_prefix])
        if not rows:
            raise UsageError(f"no run with key {key_prefix}; `quantkit runs ls` lists them")
        done = [r for r in rows if r.status == "done"]
        return (done or rows)[-1]

    def models(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT model FROM records ORDER BY model")]

    def remove(self, key_prefix: str) -> int:
        if len(key_prefix) < 4:
            raise UsageError("give at least 4 characters of a run key (`quantkit runs ls` lists them)")
        with self.transaction():
            cur = self.db.execute("DELETE FROM records WHERE run_key LIKE ?", (f"{key_prefix}%",))
        return cur.rowcount

    @staticmethod
    def _record(row: tuple) -> Record:
        (id_, key, kind, model, variant, status, params, result, result_path, error, recipe_hash, _pid,
         started, finished) = row
        return Record(id_, key, kind, model, variant, status, json.loads(params),
                      json.loads(result) if result else None, result_path, error, recipe_hash, started, finished)


class StageHandle:
    """What a running stage may do with its record: add points as they finish, then finish."""

    def __init__(self, store: Store, record_id: int):
        self.store, self.id, self.finished = store, record_id, False

    def add_point(self, point: dict[str, Any]) -> None:
        self.store.add_point(self.id, point)

    def finish(self, result: dict[str, Any], result_path: str | None = None) -> None:
        self.store.finish(self.id, result, result_path)
        self.finished = True


def _explain(exc: sqlite3.DatabaseError, path: Path) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"the result store {path} is locked by another quantkit process; wait for it or stop it"
    if "not a database" in text or "malformed" in text or "file is encrypted" in text:
        return f"the result store {path} is corrupted ({text}); move it aside and run again (results start afresh)"
    return f"the result store {path} cannot be used: {text}"
