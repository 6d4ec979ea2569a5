"""What a result store is to the code that writes through it: `RecordStore`.

Two stores stand behind it: `db.Store` (the SQLite file) and `pipeline/ray_store.RemoteStore` (a
lane on a Ray worker, answered by the driver's `Store`). A lane (`stages.run_lane`, and the tune
study it runs) is handed either and calls only what this protocol names, so both subclass it
explicitly: a method missing from one of them is a TypeError when it is made, not an
AttributeError halfway through a lane on a remote node.

One stage's record life cycle (`stage`: running, then done, failed or interrupted) is written
here once over the protocol's own methods, so that both stores close a record the same way.
"""

from __future__ import annotations

import sqlite3
from abc import abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Protocol, get_args

from ..errors import QuantkitError
from ..files import resolved
from .lines import _exception_line


# what a record's stage came to; the SQLite schema's CHECK constraint lists the same (db.py)
RecordStatus = Literal["running", "done", "failed", "interrupted"]
RECORD_STATUSES: tuple[str, ...] = get_args(RecordStatus)


@dataclass
class Record:
    id: int
    run_key: str
    kind: str
    model: str
    variant: str
    status: RecordStatus
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
        return resolved((self.result or {}).get("output_dir") if self.kind == "convert" else self.params.get("checkpoint"))

    def current_status(self) -> str:
        """The stored status, or `missing` for a conversion whose checkpoint folder is gone (a run
        redoes it). Bench, eval and tune results live in the store itself: their exports may go."""
        if self.kind == "convert" and self.status == "done" and self.result_path and not Path(self.result_path).exists():
            return "missing"
        return self.status


class RecordStore(Protocol):
    """The methods a lane calls on its store. `path` is the store's file (a checkpoint names the
    store that owns it)."""

    path: Path

    @abstractmethod
    def done(self, key: str) -> Record | None:
        """The key's `done` record, if any (resume skips it)."""

    @abstractmethod
    def begin(self, key: str, kind: str, model: str, variant: str, params: dict[str, Any],
              recipe_hash: str | None = None) -> int:
        """A new `running` record of `key`; its id."""

    @abstractmethod
    def add_point(self, record_id: int, point: dict[str, Any]) -> None:
        """One more point of a running record, stored before the next one is measured."""

    @abstractmethod
    def finish(self, record_id: int, result: dict[str, Any], result_path: str | None = None) -> None:
        """The record is `done` with `result`: its key's one done record."""

    @abstractmethod
    def fail(self, record_id: int, error: str, status: RecordStatus = "failed", result: dict[str, Any] | None = None) -> None:
        """The record ended without a result: `failed` or `interrupted`, with the reason."""

    @abstractmethod
    def records(self, model: str | None = None, kind: str | None = None, status: str | None = None,
                keys: list[str] | None = None) -> list[Record]:
        """The records that match, oldest first (the tune study reads its stored trials)."""

    @abstractmethod
    def points(self, record_id: int) -> list[dict[str, Any]]:
        """A record's stored points, in order (the fidelity stage reads the windows stored before)."""

    @contextmanager
    def stage(self, key: str, kind: str, model: str, variant: str, params: dict[str, Any],
              recipe_hash: str | None = None) -> Iterator["StageHandle"]:
        """One stage as a record: `running` on entry; `done` once `handle.finish(...)` is called;
        `interrupted` on Ctrl-C or SIGTERM (KeyboardInterrupt: the signal handler raises it);
        `failed` with the reason on anything else: a QuantkitError's line, or any other
        exception's type and message (a full disk, an SQLite error, a bug), so the record says
        what went wrong. The exception is re-raised either way. A body that ends without
        finishing leaves the record failed."""
        handle = StageHandle(self, self.begin(key, kind, model, variant, params, recipe_hash))
        try:
            yield handle
        except (KeyboardInterrupt, GeneratorExit):
            _close_quietly(self, handle.id, "interrupted", "interrupted")
            raise
        except BaseException as exc:
            _close_quietly(self, handle.id, failure_line(exc), "failed")
            raise
        if not handle.finished:
            self.fail(handle.id, "the stage ended without a result")


def failure_line(exc: BaseException) -> str:
    """What a failed stage's record (and the run's summary) says: a QuantkitError's own line, or
    any other exception's type and message (a bug, a reply the client did not survive)."""
    return exc.one_line() if isinstance(exc, QuantkitError) else _exception_line(exc)


def _close_quietly(store: RecordStore, record_id: int, error: str, status: RecordStatus) -> None:
    """Record how a stage ended; a store that cannot take it (the very failure, a full disk, a
    driver that is gone) must not hide the stage's own exception: the next run marks the row
    interrupted."""
    try:
        store.fail(record_id, error, status=status)
    except (sqlite3.Error, QuantkitError, OSError):
        pass


class StageHandle:
    """What a running stage may do with its record: add points as they finish, then finish."""

    def __init__(self, store: RecordStore, record_id: int):
        self.store, self.id, self.finished = store, record_id, False

    def add_point(self, point: dict[str, Any]) -> None:
        self.store.add_point(self.id, point)

    def finish(self, result: dict[str, Any], result_path: str | None = None) -> None:
        self.store.finish(self.id, result, result_path)
        self.finished = True
