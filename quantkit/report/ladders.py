"""`quantkit compare --slo S`: every variant's capacity under S, judged again from its stored ladder.

No point is measured: each capacity record's points keep their requests in the store, and
measure/capacity/ladder.py judges their windows under S. The report says which SLO its ladders were measured
under, and for each variant whose ladder does not cover S, what to run. A tuned configuration was
searched under its own SLO and its trials keep no ladder the report could judge again, so under
another SLO it is left out (said so).
"""

from __future__ import annotations

from ..errors import UsageError
from ..measure.capacity.live import CapacityResult
from ..measure.capacity.ladder import rederive
from ..measure.stats.slo import Slo
from ..store import Record, Store
from .build import Variant
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
            continue  # measured under S itself
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
