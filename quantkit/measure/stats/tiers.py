"""Named SLO tiers a reader recognises, each with its source.

A report shows the capacity of every variant under each tier beside the recipe's own SLO
(re-derived from one stored ladder: ladder.py), and a run recipe can ask its ladder to span
tiers (`capacity: {span: [mlperf-server, interactive]}`) so that one measurement answers them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import UsageError
from .slo import Slo, parse_slo


@dataclass(frozen=True)
class Tier:
    name: str
    slo: Slo
    source: str


TIERS: dict[str, Tier] = {t.name: t for t in (
    Tier("mlperf-server", Slo.model_validate("ttft_p99=2,tpot_p99=100ms"),
         "MLPerf Inference v5.1, Llama-3.1-8B, Server scenario latency constraints"),
    Tier("interactive", Slo.model_validate("ttft_p99=0.5,tpot_p99=30ms"),
         "MLPerf Inference v5.1, Llama-3.1-8B, Interactive scenario latency constraints"),
)}


def resolve(item: str) -> tuple[str, Slo]:
    """A tier name or an SLO string as (label, Slo); the label is the tier's name or the SLO itself."""
    tier = TIERS.get(item.strip())
    if tier is not None:
        return tier.name, tier.slo
    try:
        slo = parse_slo(item)
    except UsageError as exc:
        raise UsageError(f"{item!r} is neither an SLO tier ({', '.join(TIERS)}) nor an SLO: {exc.message}") from None
    if slo is None:
        raise UsageError(f"an empty SLO tier; name one of {', '.join(TIERS)} or give an SLO such as ttft_p95=1,tpot_p95=50ms")
    return str(slo), slo
