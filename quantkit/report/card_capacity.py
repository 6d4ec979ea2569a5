"""The model card's capacity section: what a deployment of this checkpoint sustains, and under what.

Only a steady-state capacity is published: the offered load (and, for Poisson arrivals, the requests
in flight it produced), goodput and output tokens/s at it, the SLO, the load profile, the workload,
the hardware and the bracket. A capacity measured as a burst (c prompts sent at once) measures a
prefill burst, not what a server sustains, so the card says it is not published and what to run.
Beside the SLO measured, each SLO tier of measure/stats/tiers.py, judged from the same stored ladder.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..errors import UsageError
from ..measure.capacity import profiles
from ..measure.capacity.live import CapacityResult
from ..measure.capacity.ladder import rederive
from ..measure.stats.tiers import TIERS
from ..store import Store
from . import records
from .decision import CapacityCell, capacity_cell
from .render import fmt, markdown_table, md_code, md_escape

MISSING = "not measured"


def capacity_lines(store: Store, ev: Any, measured: CapacityCell | None) -> list[str]:
    """The `## Capacity under an SLO` section of the card of `ev` (gather.Evidence), whose capacity the
    report shows as `measured` (its Row's cell); [] without one."""
    stored = ev.result("capacity", CapacityResult)
    if stored is None or measured is None:
        return []
    try:
        result = records.as_model(CapacityResult, stored)  # the ladder is judged again below: it needs it whole
    except ValidationError:
        return []  # a record stored by an older quantkit: the report still shows what it holds
    profile = profiles.get(result.settings.profile)
    s = result.settings
    out = ["## Capacity under an SLO", ""]
    if not profile.steady:
        return out + [f"A capacity was measured as a burst ({s.input_len} in / {s.output_len} out, c prompts sent at "
                      "once): it measures how fast the server prefills a wave, not what it sustains, and is not "
                      "published here. `quantkit bench DIR --capacity --slo ...` measures a steady state (Poisson "
                      "arrivals).", ""]
    device = stored.hardware.device or "a machine not recorded"
    server = result.server
    dtype = (f", computing in {server.dtype}" + (f" ({server.dtype_reason})" if server.dtype_reason else "")
             if server is not None and server.dtype else "")
    out.append(md_escape(f"Measured with {profile.sent_as} ({s.input_len} prompt / {s.output_len} output tokens), "
                         f"each load a steady-state window judged at "
                         f"{int(round((result.window.confidence if result.window else 0.95) * 100))}% confidence, on "
                         f"{device}{dtype}, server flags ") + md_code(" ".join(measured.serve_args) or "defaults") + ".")
    rows = [_row(f"{measured.slo} (measured)", measured, profile, left_open=result.open_text())]
    points = store.points(ev.stages["capacity"].id)
    for tier in TIERS.values():  # each tier's cell as the report's tier table has it (report/tiers.py)
        try:
            derived = rederive(result, points, tier.slo, model_dir=str(ev.checkpoint))
        except UsageError:
            break
        if tier.slo == result.slo:
            continue
        rows.append(_row(f"{tier.name}: {derived.slo}", capacity_cell(derived.result), profile, derived.coverage,
                         derived.result.open_text()))
    out += ["", *markdown_table(["SLO", "capacity", "goodput (req/s)", "output tok/s", "in flight"], rows), ""]
    return out + ["capacity: the highest offered load whose window met the SLO; `+`: the ladder's top still met it; "
                  "a range: bracketed only that far; `undecided at X (needs N more requests)`: a load whose window was "
                  "too short to tell (MLPerf LoadGen's early-stopping rule), counted neither as met nor as broken; "
                  "tiers are judged from the same measured windows (sources: "
                  + "; ".join(f"{t.name}: {t.source}" for t in TIERS.values()) + ").", ""]


def _row(label: str, cell: CapacityCell, profile: profiles.Profile, coverage: str = "bracketed",
         left_open: str | None = None) -> list[str]:
    """`left_open`: the load the ladder leaves undecided, with the requests it needs (CapacityResult.open_text)."""
    if cell.load is None:
        why = {"undecided": "undecided: too few requests in the windows", "below": "not met at the lowest load measured"}
        return [label, left_open or why.get(coverage, "not met"), MISSING, MISSING, MISSING]
    load = f"{cell.load:g}" + (f"-{cell.ceiling:g}" if coverage == "coarse" and cell.ceiling else "")
    text = (profile.unit.format(load=load) + ("+" if cell.reason == "max_reached" else "")
            + (f"; {left_open}" if left_open else ""))
    return [label, text, fmt(cell.goodput_req_s if cell.goodput_req_s is not None else cell.req_s),
            fmt(cell.output_tok_s), fmt(cell.in_flight)]
