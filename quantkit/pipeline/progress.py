"""One view of a run's lanes while they run elsewhere: variant, stage, node, elapsed, last figure.

The events come from the driver's store actor (`ray_store.StoreActor`: a lane started on a node, a
stage began or ended, a point was measured) and from the driver itself (queued, done earlier,
lost). `LaneView` shows them as a live table on a terminal, as one line per change otherwise, and
as JSON Lines on stderr with `--json` (stdout keeps the one JSON result).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..console import OutputMode, info, stderr


def figure(kind: str | None, payload: dict[str, Any] | None) -> str | None:
    """The one figure worth showing for a bench point or a stage's result (None if there is none)."""
    if not payload:
        return None
    try:
        if kind == "point":
            load = f"c={payload['concurrency']}" if payload.get("concurrency") is not None else f"rate={payload.get('rate')}"
            failed = f", {payload['failures']} failed" if payload.get("failures") else ""
            return f"{load}: {payload['output_tok_s']:.1f} tok/s{failed}"
        if kind == "convert":
            return f"{payload['size_bytes'] / 1e6:.0f} MB in {payload['wall_time_s']:.0f} s"
        if kind == "bench" and payload.get("points"):
            best = max(payload["points"], key=lambda p: p.get("output_tok_s") or 0)
            return "best " + (figure("point", best) or "")
        if kind == "eval" and payload.get("tasks"):
            task = payload["tasks"][0]
            metric = task["metrics"][task["primary_metric"]]
            return f"{task['task']} {task['primary_metric']} {metric['value']:.3f}"
        if kind == "fidelity" and payload.get("figures"):
            figures = payload["figures"]
            return (f"ΔNLL {figures['delta_nll']['value']:.4f}, top-1 {figures['top1_agreement']['value']:.3f}"
                    + (f": {payload['verdict']}" if payload.get("verdict") else ""))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return None


@dataclass
class LaneRow:
    variant: str
    stage: str = "-"
    status: str = "queued"
    node: str = "-"
    since: float = field(default_factory=time.time)
    last: str = ""


class LaneView:
    """`with LaneView(labels, mode) as view: view.apply(event)`; rows keep the lanes' order."""

    def __init__(self, labels: list[str], mode: OutputMode | None = None):
        self.mode = mode or OutputMode()
        self.rows = {label: LaneRow(label) for label in labels}
        self.live: Live | None = None

    def __enter__(self) -> "LaneView":
        if not (self.mode.json or self.mode.quiet) and stderr.is_terminal:
            self.live = Live(get_renderable=self.table, console=stderr, refresh_per_second=2,
                             redirect_stdout=False, redirect_stderr=True)
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def apply(self, event: dict[str, Any]) -> None:
        row = self.rows.get(event.get("variant", ""))
        if row is None:
            return
        kind = event.get("event")
        if kind == "point":
            row.last = event.get("figure") or row.last
        else:
            if kind == "stage":
                row.stage = event.get("stage") or row.stage
            row.status = event.get("status", row.status)
            row.node = event.get("node", row.node)
            row.since = event.get("t", time.time())
            row.last = event.get("figure") or row.last
        self.show(event, row)

    def show(self, event: dict[str, Any], row: LaneRow) -> None:
        if self.mode.quiet:
            return
        if self.mode.json:
            sys.stderr.write(json.dumps({"event": "progress", **event}, default=str) + "\n")
            sys.stderr.flush()
        elif self.live is None:  # a log, not a terminal: one line per change
            where = f" on {row.node}" if row.node != "-" else ""
            info(f"[{row.variant}] {row.stage if row.stage != '-' else 'lane'} {row.status}{where}"
                 + (f": {row.last}" if row.last else ""))

    def table(self) -> Table:
        table = Table("variant", "stage", "status", "node", "elapsed", "last", title="quantkit run", title_justify="left")
        now = time.time()
        for row in self.rows.values():
            running = row.status in ("running", "queued")
            table.add_row(escape(row.variant), row.stage, row.status, row.node,
                          f"{now - row.since:.0f} s" if running else "", escape(row.last))
        return table
