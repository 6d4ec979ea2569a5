"""`quantkit compare --slo S`: every variant's capacity under S, judged again from its stored ladder.

No point is measured: each capacity record's points keep their requests in the store, and
measure/capacity/ladder.py judges their windows under S. The report says which SLO its ladders were measured
under, and for each variant whose ladder does not cover S, what to run. A tuned configuration was
searched under its own SLO and its trials keep no ladder the report could judge again, so under
another SLO it is left out (said so).

Under the SLO a ladder was measured under, its capacity is judged again too, and the stored figure
kept unless the ladder says otherwise: a search before 8ede9f8 could step over a load that passed
(12-06's gptq printed 32.4 req/s where its ladder held 34.35). Then the ladder's figure is shown,
with a note naming both, so `--slo S` gives the same answer whether or not S is the one measured.
"""

from __future__ import annotations

from ..errors import UsageError
from ..measure.capacity.live import CapacityResult
from ..measure.capacity.ladder import rederive
from ..measure.stats.slo import Slo
from ..store import Record, Store
from .build import Variant
from .gather import ladder_judged_again
from .records import as_model


def apply_slo(store: Store, by_variant: dict[str, dict[str, Record]], variants: list[Variant], slo: Slo) -> list[str]:
    """Replace each variant's capacity with its ladder's under `slo`; the report's notes about it."""
    measured: set[Slo] = set()
    notes: list[str] = []
    for v in variants:
        record = by_variant.get(v.name, {}).get("capacity")
        if record is None or v.capacity is None:
            continue
        result = as_model(CapacityResult, v.capacity)  # judged again whole: the strict model
        measured.add(result.slo)
        if result.slo == slo:
            notes.extend(_rejudged(store, record, v, result))
            continue
        try:
            derived = rederive(result, store.points(record.id), slo, model_dir=v.model_dir or None)
        except UsageError as exc:
            v.capacity = None
            notes.append(f"{v.name}: not re-derived: {exc.message}")
            continue
        v.capacity = derived.result
        if derived.note:
            notes.append(f"{v.name}: {derived.note}")
        if v.tune is not None and v.tune.slo != slo:
            notes.append(f"{v.name}: its tuned configuration was searched under {v.tune.slo} and is not shown "
                         f"under {slo}")
            v.tune = None
    if measured - {slo}:
        notes.insert(0, f"Capacity under {slo} is re-derived from the stored ladders, measured under "
                        f"{', '.join(sorted(map(str, measured)))}: every point's window judged again, nothing measured anew.")
    return notes


def _rejudged(store: Store, record: Record, v: Variant, result: CapacityResult) -> list[str]:
    """A capacity under the SLO it was measured under, its ladder judged again: the ladder's figure
    where it differs from the stored one (a search that stepped over a pass), with a note; a burst
    or a record without its points stays as stored."""
    derived = ladder_judged_again(store, record)
    stored, again = result.search, derived.search if derived is not None else None
    if stored is None or again is None or (stored.capacity, stored.ceiling) == (again.capacity, again.ceiling):
        return []
    v.capacity = derived

    def said(search) -> str:
        return f"{search.capacity:g}" if search.capacity is not None else "none"

    return [f"{v.name}: its ladder, judged again under {result.slo}, holds {said(again)} req/s"
            + (f" (breaks at {again.ceiling:g})" if again.ceiling is not None else "")
            + f" where its search printed {said(stored)}: the ladder's figure is shown (a search before "
            "quantkit 8ede9f8 could step over a load that passed)"]
