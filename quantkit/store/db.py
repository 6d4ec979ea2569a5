"""The result store: SQLite at $QUANTKIT_HOME/results.db (WAL), named append-only migrations.

The store is the one truth: every result (a `quantkit run` stage, a standalone bench, eval or
tune) is a record here; the JSON files beside checkpoints are exports. Readers (compare, card,
push, `eval --baseline`) read the store.

One row per stage of a run (convert, bench, eval, tune). A row's run key is a hash of everything that
defines the result (model fingerprint, the recipe entry of that stage, hardware, vLLM version,
quantkit version), so `quantkit run` skips a key that is already done (resume) and `--force`
redoes it. A stage is inserted as `running`, and becomes `done` (with its result JSON) or
`failed` (with the reason) in one transaction; rows left `running` by a killed process are
marked `interrupted` when the next run begins their key, and a key whose process still runs (pid,
host and process start time: live.py) is refused instead. At most one `done` row per key (a unique index).
Bench points (and tune entries) are appended to `points` as each one finishes, so a killed
bench keeps them.

Migrations are named (simonw's llm style) and applied once each, in order; a released one is never
edited. A store written before they were named (a `schema_migrations` table with version 1) is
adopted in place: its version 1 is the migration `m001_initial`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from pydantic import BaseModel

from .. import __version__, settings
from ..errors import QuantkitError, UsageError
from . import live
from .kinds import STAGE_KINDS
from .lines import _dump, _explain, _mask, _unwritable, check_key
from .protocol import Record, RecordStore

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
    # (kinds.STAGE_KINDS), since changing a CHECK constraint means rebuilding the table in SQLite.
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
    # A `running` row is another run's only while its process lives: the pid alone cannot say so
    # (another host's pid, or a pid reused after a reboot), so the host and the process's start
    # time are recorded beside it (live.py).
    ("m003_records_process_identity", """
    ALTER TABLE records ADD COLUMN host TEXT;
    ALTER TABLE records ADD COLUMN proc_start TEXT;
    """),
    # Capacity before steady-state windows was measured as waves of C prompts sent at once: those
    # records (settings profile `concurrency`, no window) are a prefill burst and are labelled
    # `burst`, so they are never read as a sustained capacity or mixed with one in a ratio.
    ("m004_capacity_bursts_labelled", """
    UPDATE records SET params = json_set(params, '$.capacity.profile', 'burst')
     WHERE json_valid(params) AND json_extract(params, '$.capacity.profile') = 'concurrency'
       AND json_extract(params, '$.capacity.window') IS NULL;
    UPDATE records SET result = json_set(result, '$.settings.profile', 'burst')
     WHERE kind = 'capacity' AND json_valid(result) AND json_extract(result, '$.settings.profile') = 'concurrency'
       AND json_extract(result, '$.window') IS NULL;
    UPDATE records SET result = json_set(result, '$.capacity.profile', 'burst')
     WHERE kind = 'capacity' AND json_valid(result) AND json_extract(result, '$.settings.profile') = 'burst'
       AND json_type(result, '$.capacity') = 'object';
    UPDATE points SET point = json_set(point, '$.load_profile', 'burst')
     WHERE json_valid(point) AND json_extract(point, '$.profile') = 'concurrency'
       AND record_id IN (SELECT id FROM records WHERE kind = 'capacity'
                         AND (json_extract(result, '$.settings.profile') = 'burst'
                              OR json_extract(params, '$.capacity.profile') = 'burst'));
    """),
]
# Stores written before migrations had names numbered them: version -> name.
_NUMBERED = {1: "m001_initial"}
# A record's columns by name: a store written by a newer quantkit may have more of them.
COLUMNS = ("id", "run_key", "kind", "model", "variant", "status", "params", "result", "result_path", "error",
           "recipe_hash", "started_at", "finished_at")
MIN_REMOVE_PREFIX = 4


class StoreError(QuantkitError):
    exit_code = 1


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_key(kind: str, **parts: Any) -> str:
    blob = json.dumps({"kind": kind, **parts}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def keyed(model: BaseModel, *, mode: str = "python", exclude: Iterable[str] = ()) -> dict[str, Any]:
    """`model`'s dump for a run key: the fields of its class's `KEY_FIELDS` (those the stored keys
    were made with) as they are, and a field added since only while it differs from its default. A
    new setting then keeps every stored key, and what those keys name resumes instead of running
    again (before, a new ServeConfig field changed every capacity, bench, eval and tune key)."""
    first: frozenset[str] = getattr(type(model), "KEY_FIELDS")
    fields = type(model).model_fields
    return {k: v for k, v in model.model_dump(mode=mode, exclude=set(exclude)).items()
            if k in first or getattr(model, k) != fields[k].get_default(call_default_factory=True)}


def default_path() -> Path:
    return settings.home() / "results.db"


class Store(RecordStore):
    """The SQLite file itself; its record life cycle (`stage`) is the protocol's."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else default_path()
        self.readonly = False  # opened for reading only: its folder or file cannot be written
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            try:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA foreign_keys=ON")
                self._migrate()
            except sqlite3.OperationalError as exc:
                if not _unwritable(exc) or not self.path.is_file():
                    raise
                self.db.close()
                self._open_readonly()
        except sqlite3.DatabaseError as exc:
            raise StoreError(_explain(exc, self.path)) from None

    def _open_readonly(self) -> None:
        """A store that cannot be written (a read-only home, another user's file) is still read:
        `quantkit runs ls` works; any write says what is wrong (_explain). A WAL store needs its
        -shm file to be read, which a read-only folder cannot hold: then it is opened immutable,
        which is sound while nothing can write it."""
        self.readonly = True
        uri = self.path.absolute().as_uri()
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                self.db = sqlite3.connect(uri + query, uri=True, timeout=10, isolation_level=None)
                self._check_known(self.applied())
                return
            except sqlite3.OperationalError as exc:
                self.db.close()
                if not _unwritable(exc) and "unable to open" not in str(exc):
                    raise
        raise sqlite3.OperationalError("attempt to write a readonly database")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self.close()
        # a damaged page shows only when it is read, long after the store opened: one line then too
        if isinstance(exc, sqlite3.DatabaseError):
            raise StoreError(_explain(exc, self.path)) from None

    # -- schema ---------------------------------------------------------------------------------

    def _migrate(self) -> None:
        exists = self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'").fetchone()
        if exists:  # before any write: a newer quantkit's store is neither changed nor misread
            self._check_known(self.applied())
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
        try:
            return [r[0] for r in self.db.execute("SELECT name FROM _migrations ORDER BY rowid")]
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # a store so old (or so new) that it has no named migrations
            raise

    def _check_known(self, applied: list[str]) -> None:
        unknown = [name for name in applied if name not in {n for n, _ in MIGRATIONS}]
        if unknown:
            raise StoreError(
                f"the result store {self.path} was written by a newer quantkit (migration {', '.join(unknown)} is "
                f"unknown to quantkit {__version__}); upgrade quantkit, or point QUANTKIT_HOME at another folder")

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
        row = self.db.execute(f"SELECT {', '.join(COLUMNS)} FROM records WHERE run_key = ? AND status = 'done'",
                              (key,)).fetchone()
        return self._record(row) if row else None

    def begin(self, key: str, kind: str, model: str, variant: str, params: dict[str, Any],
              recipe_hash: str | None = None) -> int:
        if kind not in STAGE_KINDS:
            raise ValueError(f"unknown record kind {kind!r}")
        pid, host, started = live.identity()
        with self.transaction():
            running = self.db.execute("SELECT id, pid, host, proc_start, started_at FROM records"
                                      " WHERE run_key = ? AND status = 'running'", (key,)).fetchall()
            for _id, other_pid, other_host, other_start, since in running:
                if live.alive(other_pid, other_host, other_start):
                    # another quantkit is running this very stage now: redoing it beside that run
                    # would write into the same folders and mark its record interrupted
                    raise StoreError(
                        f"{kind} {variant} ({key[:10]}) is being run by another quantkit process now (pid "
                        f"{other_pid}, since {since}); wait for it to finish or stop it (kill {other_pid}), then run again")
            # a row left 'running' by a process that is gone belongs to a killed run: it never finished
            self.db.execute(
                "UPDATE records SET status = 'interrupted', error = COALESCE(error, 'interrupted'), finished_at = ?"
                " WHERE run_key = ? AND status = 'running'", (now(), key))
            cur = self.db.execute(
                "INSERT INTO records (run_key, kind, model, variant, status, params, recipe_hash, pid, host, proc_start,"
                " started_at) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                (key, kind, model, variant, _dump(params), recipe_hash, pid, host, started, now()))
            return int(cur.lastrowid)

    def live_runs(self, keys: list[str]) -> list[tuple[str, int, str]]:
        """(key, pid, since) of the given keys' `running` records whose process is alive now: a
        caller may refuse a whole run up front instead of stage by stage (begin() refuses each)."""
        marks = ", ".join("?" for _ in keys)
        rows = self.db.execute(f"SELECT run_key, pid, host, proc_start, started_at FROM records WHERE status = 'running'"
                               f" AND run_key IN ({marks})", list(keys)).fetchall() if keys else []
        return [(key, pid, since) for key, pid, host, start, since in rows if live.alive(pid, host, start)]

    def add_point(self, record_id: int, point: dict[str, Any]) -> None:
        with self.transaction():
            self._key_of(record_id)
            idx = self.db.execute("SELECT COUNT(*) FROM points WHERE record_id = ?", (record_id,)).fetchone()[0]
            self.db.execute("INSERT INTO points VALUES (?, ?, ?)", (record_id, idx, _dump(point)))

    def finish(self, record_id: int, result: dict[str, Any], result_path: str | None = None) -> None:
        with self.transaction():
            key = self._key_of(record_id)
            # --force: the new result replaces the old one as the key's 'done' record
            self.db.execute("DELETE FROM records WHERE run_key = ? AND status = 'done'", (key,))
            self.db.execute(
                "UPDATE records SET status = 'done', result = ?, result_path = ?, error = NULL, finished_at = ?"
                " WHERE id = ?", (_dump(result), result_path, now(), record_id))
            self._mark_superseded(record_id, result)

    def _mark_superseded(self, record_id: int, result: dict[str, Any]) -> None:
        """A capacity ladder that measured a load again marks its first point `superseded` in its
        result; the stored copy (with every request) was written before that was known, so it is
        marked here too. Points are stored in the order the result lists them (started_at checks it)."""
        points = result.get("points")
        for idx, point in enumerate(points if isinstance(points, list) else []):  # a tune's `points` is a count
            if not isinstance(point, dict) or not point.get("superseded"):
                continue
            row = self.db.execute("SELECT point FROM points WHERE record_id = ? AND idx = ?", (record_id, idx)).fetchone()
            stored = json.loads(row[0]) if row else None
            if stored and stored.get("started_at") == point.get("started_at") and not stored.get("superseded"):
                stored["superseded"] = point["superseded"]
                self.db.execute("UPDATE points SET point = ? WHERE record_id = ? AND idx = ?",
                                (_dump(stored), record_id, idx))

    def _key_of(self, record_id: int) -> str:
        """The run key of a record this process began; one line when it is gone (`runs rm
        --force` while the run was running it) instead of an error from deep inside SQLite."""
        row = self.db.execute("SELECT run_key FROM records WHERE id = ?", (record_id,)).fetchone()
        if row is None:
            raise StoreError(f"its record ({record_id}) was removed from the result store {self.path} while this run "
                             "was running it (quantkit runs rm --force); its result is not stored: run again to redo it")
        return row[0]

    def fail(self, record_id: int, error: str, status: str = "failed", result: dict[str, Any] | None = None) -> None:
        with self.transaction():
            self.db.execute(
                "UPDATE records SET status = ?, error = ?, result = COALESCE(?, result), finished_at = ? WHERE id = ?",
                (status, _mask(error), _dump(result) if result else None, now(), record_id))

    # -- queries --------------------------------------------------------------------------------

    def points(self, record_id: int) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT point FROM points WHERE record_id = ? ORDER BY idx", (record_id,))
        return [json.loads(r[0]) for r in rows]

    def records(self, model: str | None = None, kind: str | None = None, status: str | None = None,
                keys: list[str] | None = None) -> list[Record]:
        sql, args = f"SELECT {', '.join(COLUMNS)} FROM records WHERE 1=1", []
        for column, value in (("model", model), ("kind", kind), ("status", status)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        if keys:
            # a prefix is compared as text (substr), never as a LIKE pattern: '%' or '_' in a
            # key would match every record
            prefixes = [check_key(k) for k in keys]
            sql += " AND (" + " OR ".join("substr(run_key, 1, ?) = ?" for _ in prefixes) + ")"
            for p in prefixes:
                args.extend([len(p), p])
        return [self._record(r) for r in self.db.execute(sql + " ORDER BY id", args)]

    def _one_key(self, key_prefix: str, min_len: int = 1) -> tuple[str, list[Record]]:
        """The one run key `key_prefix` names, and its records; a prefix of several is refused."""
        prefix = check_key(key_prefix, min_len)
        rows = self.records(keys=[prefix])
        if not rows:
            raise UsageError(f"no run with key {prefix}; `quantkit runs ls` lists them")
        distinct = sorted({r.run_key for r in rows})
        if len(distinct) > 1:
            shown = ", ".join(k[:12] for k in distinct[:5]) + (", ..." if len(distinct) > 5 else "")
            raise UsageError(f"run key prefix {prefix} names {len(distinct)} different runs ({shown}); "
                             "give more of the key (`quantkit runs ls` shows them)")
        return distinct[0], rows

    def get(self, key_prefix: str) -> Record:
        _key, rows = self._one_key(key_prefix)
        done = [r for r in rows if r.status == "done"]
        return (done or rows)[-1]

    def models(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT model FROM records ORDER BY model")]

    def remove(self, key_prefix: str, force: bool = False) -> int:
        """Remove every attempt of the one run key `key_prefix` names (exactly that key). An
        attempt whose process is alive (a run running it now) is refused unless `force`: that
        run would go on measuring into a record that is gone."""
        key, rows = self._one_key(key_prefix, MIN_REMOVE_PREFIX)
        live = self.live_runs([key])
        if live and not force:
            _key, pid, since = live[0]
            running = next(r for r in rows if r.status == "running")
            raise UsageError(f"{running.kind} {running.variant} ({key[:10]}) is being run by quantkit process {pid} now "
                             f"(since {since}); wait for it to finish or stop it (kill {pid}), or remove its record "
                             "anyway with --force (that run's stage then fails)")
        with self.transaction():
            cur = self.db.execute("DELETE FROM records WHERE run_key = ?", (key,))
        return cur.rowcount

    @staticmethod
    def _record(row: tuple) -> Record:
        (id_, key, kind, model, variant, status, params, result, result_path, error, recipe_hash,
         started, finished) = row
        return Record(id_, key, kind, model, variant, status, json.loads(params),
                      json.loads(result) if result else None, result_path, error, recipe_hash, started, finished)

