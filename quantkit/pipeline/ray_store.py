"""The driver's store, reached from Ray workers.

The store stays on the driver and stays the one truth: `StoreActor` holds the driver's `Store`
(the same SQLite file, in an actor pinned to the driver's node), and a lane on any node writes
through `RemoteStore`, a `RecordStore` (store/protocol.py) like the driver's own: `done`, `begin`,
`add_point`, `finish`, `fail`, `records`, and the protocol's `stage` over them. Every call waits for the actor's answer, so a bench point measured on a
worker is in the driver's store before the next point starts: a killed run loses at most the
point in flight.

The actor also keeps what the live progress view and the fault handling need: an append-only list
of events (a lane started on a node, a stage began or ended, a point was measured), and which
records and planned stages each lane has open, so that a lane lost with its node can have them
marked failed.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from ..errors import QuantkitError
from ..store import Record, RecordStore, Store
from .progress import figure


class StoreActor:
    """Runs in a Ray actor on the driver's node (num_cpus=0: it never takes a lane's place).
    Ray runs its methods one at a time, so writes reach SQLite in the order they were made."""

    def __init__(self, path: str):
        self.store = Store(path)
        self.events: list[dict[str, Any]] = []
        self.open: dict[str, dict[int, tuple[str, str]]] = {}  # lane -> record id -> (kind, key), not ended
        self.planned: dict[str, dict[str, dict[str, Any]]] = {}  # lane -> key -> how to record it
        self.closed: dict[str, set[str]] = {}  # lane -> keys whose record ended in this attempt

    # -- what a lane reports
    def lane_started(self, lane: str, node: dict[str, Any]) -> None:
        # a lane that starts again was retried: its earlier attempt's records never ended
        self.close_lane(lane, f"interrupted: its node was lost; retried on {node['name']}", "interrupted")
        self.closed[lane] = set()
        self.event("lane", lane, status="running", node=node["name"])

    def plan(self, lane: str, stages: list[dict[str, Any]]) -> None:
        """The stages a lane will run, as (kind, key, model, variant, params) mappings."""
        self.planned.setdefault(lane, {}).update({s["key"]: s for s in stages})

    def begin(self, lane: str, node: dict[str, Any], key: str, kind: str, model: str, variant: str,
              params: dict[str, Any], recipe_hash: str | None) -> int:
        record_id = self.store.begin(key, kind, model, variant, {**params, "node": node}, recipe_hash)
        self.open.setdefault(lane, {})[record_id] = (kind, key)
        self.event("stage", lane, stage=kind, status="running", node=node["name"], record=record_id)
        return record_id

    def add_point(self, lane: str, record_id: int, point: dict[str, Any]) -> None:
        self.store.add_point(record_id, point)
        kind = self.open.get(lane, {}).get(record_id, (None, None))[0]
        self.event("point", lane, stage=kind, figure=figure("point", point))

    def finish(self, lane: str, record_id: int, result: dict[str, Any], result_path: str | None) -> None:
        self.store.finish(record_id, result, result_path)
        kind = self.ended(lane, record_id)
        self.event("stage", lane, stage=kind, status="done", record=record_id, figure=figure(kind, result))

    def fail(self, lane: str, record_id: int, error: str, status: str, result: dict[str, Any] | None) -> None:
        self.store.fail(record_id, error, status, result)
        kind = self.ended(lane, record_id)
        self.event("stage", lane, stage=kind, status=status, record=record_id, figure=error[:120])

    # the reads a lane makes (resume; the tune study's stored trials)
    def done(self, key: str) -> Record | None:
        return self.store.done(key)

    def records(self, **where: Any) -> list[Record]:
        return self.store.records(**where)

    def points(self, record_id: int) -> list[dict[str, Any]]:
        return self.store.points(record_id)

    # -- what the driver asks
    def close_lane(self, lane: str, error: str, status: str = "failed") -> list[tuple[str, str]]:
        """End every record the lane left open with `status`; when the lane failed, also record
        each stage it planned and never ran as failed (as a server that does not start fails each
        of its stages). Returns the (kind, key) of the stages so ended."""
        ended = []
        for record_id, (kind, key) in list(self.open.get(lane, {}).items()):
            self.store.fail(record_id, error, status)
            self.ended(lane, record_id)
            ended.append((kind, key))
        if status == "failed":
            closed = self.closed.get(lane, set())
            for key, stage in self.planned.get(lane, {}).items():
                if key not in closed and not self.store.done(key):
                    record_id = self.store.begin(key, stage["kind"], stage["model"], stage["variant"], stage["params"])
                    self.store.fail(record_id, error)
                    closed.add(key)
                    ended.append((stage["kind"], key))
        if ended:
            self.event("lane", lane, status=status, figure=error[:120])
        return ended

    def events_since(self, index: int) -> list[dict[str, Any]]:
        return self.events[index:]

    # -- bookkeeping
    def ended(self, lane: str, record_id: int) -> str | None:
        kind, key = self.open.get(lane, {}).pop(record_id, (None, None))
        if key is not None:
            self.closed.setdefault(lane, set()).add(key)
        return kind

    def event(self, event: str, lane: str, **fields: Any) -> None:
        self.events.append({"event": event, "variant": lane, "t": time.time(),
                            **{k: v for k, v in fields.items() if v is not None}})


def this_node() -> dict[str, Any]:
    """Where this process runs, as records name it: host, address, Ray node id."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    host = socket.gethostname()
    return {"name": f"{host}:{node_id[:6]}", "hostname": host, "ip": ray.util.get_node_ip_address(),
            "ray_node_id": node_id, "pid": os.getpid()}


class RemoteStore(RecordStore):
    """What a lane on a Ray worker uses as its store: every call is answered by the driver's
    `StoreActor` before it returns. Records it begins name this node (params["node"])."""

    def __init__(self, actor, lane: str, path: str):
        self.actor, self.lane, self.node = actor, lane, this_node()
        self.path = Path(path)  # the driver's store (checkpoints name the store that owns them)
        self.kinds: dict[int, str] = {}  # record id -> stage kind, of the records begun here
        self.after_finish: Callable[[str | None], Any] | None = None  # called with the kind of a finished stage

    def ask(self, method, *args: Any, **kwargs: Any) -> Any:
        import ray

        try:
            return ray.get(method.remote(*args, **kwargs))
        except ray.exceptions.RayActorError as exc:
            raise QuantkitError(f"the driver's result store is gone ({type(exc).__name__}): the run was stopped") from None
        except ray.exceptions.RayTaskError as exc:
            # the store's own refusal (a live run's key, a record removed under this run): its one
            # line, as the driver's Store would have raised it, not Ray's wrapper around it
            if isinstance(exc.cause, QuantkitError):
                raise exc.cause from None
            raise

    def done(self, key: str) -> Record | None:
        return self.ask(self.actor.done, key)

    def records(self, model: str | None = None, kind: str | None = None, status: str | None = None,
                keys: list[str] | None = None) -> list[Record]:
        return self.ask(self.actor.records, model=model, kind=kind, status=status, keys=keys)

    def points(self, record_id: int) -> list[dict[str, Any]]:
        return self.ask(self.actor.points, record_id)

    def begin(self, key: str, kind: str, model: str, variant: str, params: dict[str, Any],
              recipe_hash: str | None = None) -> int:
        record_id = self.ask(self.actor.begin, self.lane, self.node, key, kind, model, variant, params, recipe_hash)
        self.kinds[record_id] = kind
        return record_id

    def add_point(self, record_id: int, point: dict[str, Any]) -> None:
        self.ask(self.actor.add_point, self.lane, record_id, point)

    def finish(self, record_id: int, result: dict[str, Any], result_path: str | None = None) -> None:
        self.ask(self.actor.finish, self.lane, record_id, result, result_path)
        if self.after_finish is not None:
            self.after_finish(self.kinds.get(record_id))

    def fail(self, record_id: int, error: str, status: str = "failed", result: dict[str, Any] | None = None) -> None:
        self.ask(self.actor.fail, self.lane, record_id, error, status, result)

    def plan(self, stages: list[dict[str, Any]]) -> None:
        self.ask(self.actor.plan, self.lane, stages)
