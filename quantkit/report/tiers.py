"""The report's SLO tiers: every variant's capacity under each named tier, judged from its stored ladder.

Beside the SLO the ladders were measured under, each tier of measure/stats/tiers.py (with its source) gets
a capacity per variant (re-derived by measure/capacity/ladder.py: nothing is measured), its ratio to bf16 on
vLLM's defaults as a bracket (the lowest and highest ratio the two capacity brackets allow), and its
own decision (report/decision.py, so ties and gates are judged as in the main recommendation). A
tier a ladder does not cover says so in its cell, and the notes say what to run. A load whose
window cannot decide a tier (a p99 needs hundreds of requests: MLPerf LoadGen's rule,
measure/stats/tail_bound.py) bounds the capacity from neither side; its cell names it with the
requests it needs ("30-38.5 req/s offered; undecided at 33.99 req/s offered (needs 1093 more
requests)"), never as a pass.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..errors import UsageError
from ..measure.capacity.live import CapacityResult
from ..measure.capacity.ladder import rederive
from ..measure.stats.slo import Slo
from ..measure.stats.tiers import TIERS
from ..store import Record, Store
from .decision import CapacityCell, Decision, capacity_cell, decide

DASH = "—"


class TierResult(BaseModel):
    name: str
    slo: Slo
    source: str
    cells: dict[str, CapacityCell | None] = Field(default_factory=dict)  # variant -> capacity on vLLM defaults
    coverage: dict[str, str] = Field(default_factory=dict)  # variant -> bracketed | coarse | above | below | ...
    # variant -> the load its ladder leaves undecided, with the requests it needs (ladder.Rederived.open_text)
    undecided: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    decision: Decision | None = None
    ratio_bracket: tuple[float | None, float | None] | None = None  # the winner's / bf16's, lowest and highest
    # variants whose ladder does not reach this tier and might beat the winner: the tier is inconclusive
    open: dict[str, str] = Field(default_factory=dict)  # variant -> why it cannot be ranked


def tier_results(store: Store, by_variant: dict[str, dict[str, Record]], variants: list[Any],
                 rows: list[Any], asked: bool = False) -> list[TierResult]:
    """The SLO the ladders were measured under (`asked`: the one `compare --slo` judged them under
    instead), then each tier: cells and decision (empty when no variant has a steady-state ladder)."""
    out = []
    # steady-state capacities only: a burst is never put in one ratio with them
    measured = {r.name: r.capacity for r in rows if r.capacity is not None and r.capacity.steady}
    if measured:
        first = next(iter(measured.values()))
        name, source = (("asked", "the SLO `compare --slo` asked for, judged from the stored ladders") if asked
                        else ("measured", "the SLO the ladders were searched under"))
        undecided = {v.name: text for v in variants if v.name in measured and v.capacity is not None
                     and (text := v.capacity.open_text()) is not None}
        result = TierResult(name=name, slo=first.slo, source=source, cells=measured, undecided=undecided,
                            coverage={n: "above" if c.reason == "max_reached" else
                                      "undecided" if c.load is None and n in undecided else "bracketed"
                                      for n, c in measured.items()})
        result.decision = decide([r.model_copy(update={"capacity": measured.get(r.name), "capacity_tuned": None})
                                  for r in rows])
        result.ratio_bracket = _ratio_bracket(result.decision)
        out.append(result)
    ladders = {v.name: store.points(rec.id) for v in variants
               if v.capacity is not None and (rec := by_variant.get(v.name, {}).get("capacity")) is not None}
    for tier in TIERS.values():
        slo = tier.slo
        result = TierResult(name=tier.name, slo=slo, source=tier.source)
        lowest: dict[str, float] = {}  # a ladder that starts above the tier's capacity: its lowest load
        for v in variants:
            if v.name not in ladders:
                continue
            try:
                derived = rederive(v.capacity.model_dump(mode="json", exclude_unset=True), ladders[v.name], slo,
                                   model_dir=v.model_dir or None)
            except UsageError:
                continue  # a burst ladder: the main table labels it; a tier cannot be judged on it
            result.cells[v.name] = capacity_cell(derived.result)
            result.coverage[v.name] = derived.coverage
            if (left_open := derived.result.open_text()) is not None:
                result.undecided[v.name] = left_open
            if derived.coverage in ("below", "undecided"):
                lowest[v.name] = derived.steps[0].load
            if derived.note:
                result.notes.append(f"{v.name}: {derived.note}")
        if not result.cells or all(c.slo == slo for c in measured.values()):
            continue  # no ladder, or the tier is the SLO measured
        tier_rows = [r.model_copy(update={"capacity": result.cells.get(r.name), "capacity_tuned": None}) for r in rows]
        result.decision = decide(tier_rows)
        result.ratio_bracket = _ratio_bracket(result.decision)
        result.open = _open_rivals(result.decision, lowest)
        out.append(result)
    return out if len(out) > 1 else []  # the measured SLO alone is the capacity table's


def _open_rivals(d: Decision, lowest: dict[str, float]) -> dict[str, str]:
    """The variants a tier's ladders cannot rank against its winner: each one's capacity lies below
    its ladder's lowest point (or no point decides), which is above the winner's capacity, so it may
    be higher. (On the H200, fp8+kv-fp8's ladder began at 40 req/s, which breaks the interactive
    tier; bf16's passed it at 30: bf16 was named the winner of a comparison never made.)"""
    if d.recommended is None:
        return {}
    won = d.recommended.cell.load or 0.0
    return {name: f"its ladder begins at {low:g}, above {d.recommended.variant}'s {won:g}"
            for name, low in lowest.items() if name != d.recommended.variant and low > won}


def _ratio_bracket(d: Decision) -> tuple[float | None, float | None] | None:
    """The winner's capacity over bf16's as far as their brackets allow: (lowest, highest; None: open)."""
    if d.recommended is None or d.baseline is None or d.baseline.load is None:
        return None
    w, b = d.recommended.cell, d.baseline
    if w is b:
        return (1.0, 1.0)
    low = w.load / b.ceiling if b.ceiling else None
    high = w.ceiling / b.load if w.ceiling else None
    return (low, high)


def ratio_text(bracket: tuple[float | None, float | None] | None) -> str:
    if bracket is None:
        return DASH
    low, high = bracket
    if low == high == 1.0:
        return "1.00 x (the baseline itself)"
    lower = f"{low:.2f}" if low is not None else "?"
    return f"{lower}-{high:.2f} x" if high is not None else f"{lower}+ x (open above)"


def cost_per_million(cell: CapacityCell | None, price_per_hour: float | None) -> float | None:
    """The price of a million output tokens at the cell's capacity, on a machine of `price_per_hour`."""
    if price_per_hour is None or cell is None or cell.load is None or not cell.output_tok_s:
        return None
    return price_per_hour / (cell.output_tok_s * 3600.0) * 1e6


def _cell_text(cell: CapacityCell | None, coverage: str | None, price: float | None, left_open: str | None = None) -> str:
    """A variant's capacity under a tier; `left_open`: the load its ladder leaves undecided there."""
    if cell is None:
        return DASH
    if cell.load is None:
        return left_open or {"below": "below the ladder", "undecided": "undecided (too few requests)"}.get(coverage or "", "not met")
    cost = cost_per_million(cell, price)
    return (cell.load_text() + (" (not covered above)" if coverage == "above" else "")
            + (f", {cost:.3g} per M output tokens" if cost is not None else "")
            + (f"; {left_open}" if left_open else ""))


def tier_table(tiers: list[TierResult], price_per_hour: float | None = None
               ) -> tuple[str, list[str], list[list[str]], str] | None:
    """(title, header, rows, caption) of the tier table, or None; with a price per hour, each cell
    adds the cost of a million output tokens at its capacity."""
    if not tiers:
        return None
    names = list(dict.fromkeys(n for t in tiers for n in t.cells))
    rows = []
    for t in tiers:
        d = t.decision
        winner = (d.recommended.variant + (" (tie)" if "tie within" in d.summary else "")
                  if d is not None and d.recommended is not None else "none")
        if t.open:
            winner = "inconclusive: " + ", ".join(t.open) + " not covered"
        rows.append([f"{t.name}: {t.slo}", *(_cell_text(t.cells.get(n), t.coverage.get(n), price_per_hour,
                                                        t.undecided.get(n)) for n in names),
                     winner, DASH if t.open else ratio_text(t.ratio_bracket)])
    sources = "; ".join(f"{t.name}: {t.source}" for t in tiers)
    # what each ladder cannot tell under a tier, and the command that would cover it
    # (one note after another, each closed: joined by spaces they read as one run-on sentence)
    to_cover = "; ".join(f"{t.name}, {n.rstrip('. ')}" for t in tiers for n in t.notes)
    return ("Capacity per SLO tier", ["tier", *names, "winner", "x baseline (bracket)"], rows,
            f"Each variant's ladder on vLLM defaults judged again under each tier (nothing measured anew); a range "
            f"is a bracket wider than the search tolerance, 'not covered above' a tier the ladder's top still meets, "
            f"'undecided at X (needs N more requests)' a load whose window was too short to tell (MLPerf LoadGen's "
            f"early-stopping rule at the window's confidence): it is counted neither as a pass nor as a failure. "
            f"x baseline: the winner's capacity over the baseline's (served in the dtype of the environment table), "
            f"lowest to highest as their brackets allow. To cover a tier: "
            f"`quantkit bench DIR --capacity --slo TIER` (its windows stretch to the requests a p99 needs), or the run "
            f"recipe's `capacity: {{span: [{', '.join(TIERS)}]}}`. "
            + (f"Not covered: {to_cover}. " if to_cover else "")
            + f"Sources: {sources}."
            + (f" Cost: at {price_per_hour:g} per machine-hour, over the output tokens/s at capacity."
               if price_per_hour is not None else " A price per hour (--price-per-hour) adds the cost per million "
               "output tokens."))


def tier_lines(tiers: list[TierResult]) -> list[str]:
    """One sentence per tier for the report's opening section and `compare`'s output, each ending
    with the loads its ladders leave undecided and the requests they need."""
    return [line + "".join(f"; {name}: {text}" for name, text in t.undecided.items())
            for t, line in zip(tiers, _verdict_lines(tiers))]


def _verdict_lines(tiers: list[TierResult]) -> list[str]:
    out = []
    for t in tiers:
        d = t.decision
        if t.open:
            why = "; ".join(f"{name} ({reason})" for name, reason in t.open.items())
            out.append(f"under {t.name} ({t.slo}): inconclusive, {why}: measure lower to rank "
                       f"{'it' if len(t.open) == 1 else 'them'} (the caption says how)")
        elif d is not None and d.recommended is not None:
            tie = " (a tie: see the notes)" if "tie within" in d.summary else ""
            out.append(f"under {t.name} ({t.slo}): {d.recommended.variant}{tie} at "
                       f"{d.recommended.cell.load_text()}, {ratio_text(t.ratio_bracket)} the baseline on vLLM defaults")
        else:
            states = sorted(set(t.coverage.values()))
            out.append(f"under {t.name} ({t.slo}): no recommendation, the ladders are {' / '.join(states)} there")
    return out
