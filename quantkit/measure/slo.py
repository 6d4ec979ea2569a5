"""Latency SLOs: `ttft_p95=0.5,itl_p95=0.05` parsed into bounds a point (or a request) meets or breaks."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from ..errors import UsageError, did_you_mean
from .point import METRICS, STATS, Stats, percentile

if TYPE_CHECKING:
    from .point import BenchPoint, RequestResult

class SloTerm(BaseModel):
    metric: Literal["ttft", "itl", "tpot", "e2e"]
    stat: Literal["mean", "p50", "p90", "p95", "p99"]
    limit_s: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}"


class Slo(BaseModel):
    terms: list[SloTerm]

    def __str__(self) -> str:
        return ",".join(f"{t.key}={t.limit_s:g}" for t in self.terms)

    def violations(self, point: "BenchPoint") -> list[str]:
        """The terms a point breaks, e.g. `ttft_p95 0.81s > 0.5s`; a metric with no data breaks it."""
        out = []
        for t in self.terms:
            stats: Stats | None = getattr(point, t.metric)
            if stats is None:
                out.append(f"{t.key} has no data")
            elif stats.get(t.stat) > t.limit_s:
                out.append(f"{t.key} {stats.get(t.stat):.3g}s > {t.limit_s:g}s")
        return out

    def judge(self, point: "BenchPoint", results: list["RequestResult"]) -> "BenchPoint":
        """Set the point's SLO verdict: the terms it breaks (failed requests break it too) and its
        goodput, the requests/s that met every term on their own."""
        point.slo = str(self)
        point.slo_violations = self.violations(point)
        if point.failures:
            point.slo_violations.append(f"{point.failures} failed requests")
        point.slo_met = not point.slo_violations
        point.goodput_req_s = sum(1 for r in results if self.request_ok(r)) / max(point.duration_s, 1e-9)
        return point

    def request_ok(self, r: "RequestResult") -> bool:
        """Per-request test for goodput: TTFT, TPOT, E2E of the request itself; for ITL, the
        request's own statistic of its ITLs (its p95 for itl_p95)."""
        if not r.ok:
            return False
        for t in self.terms:
            if t.metric == "itl":
                if not r.itl:
                    continue
                value = sum(r.itl) / len(r.itl) if t.stat == "mean" else percentile(r.itl, float(t.stat[1:]))
            else:
                value = getattr(r, t.metric)
            if value is None or value > t.limit_s:
                return False
        return True


_SLO_SYNTAX = "expected METRIC_STAT=SECONDS[,...] such as ttft_p95=0.5,itl_p95=0.05 (or 50ms)"


def parse_slo(text: str | None) -> Slo | None:
    """`ttft_p95=0.5,itl_p95=50ms` -> Slo. Seconds by default; `ms` and `s` suffixes accepted."""
    if text is None or not text.strip():
        return None
    terms: list[SloTerm] = []
    seen: set[str] = set()
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep:
            raise UsageError(f"bad --slo term '{item}': {_SLO_SYNTAX}")
        metric, _, stat = key.partition("_")
        if not stat:
            raise UsageError(f"bad --slo term '{item}': '{key}' names no statistic; {_SLO_SYNTAX}")
        if metric == "e2el":
            metric = "e2e"
        if metric not in METRICS:
            raise UsageError(f"bad --slo term '{item}': unknown metric '{metric}'; {did_you_mean(metric, list(METRICS))}")
        if stat not in STATS:
            raise UsageError(f"bad --slo term '{item}': unknown statistic '{stat}'; {did_you_mean(stat or '?', list(STATS))}")
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s)?\s*", value.lower())
        if not m:
            raise UsageError(f"bad --slo term '{item}': '{value.strip()}' is not a number of seconds; {_SLO_SYNTAX}")
        limit = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
        if limit <= 0:
            raise UsageError(f"bad --slo term '{item}': the limit must be positive")
        if key in seen:
            raise UsageError(f"bad --slo: '{key}' given twice")
        seen.add(key)
        terms.append(SloTerm(metric=metric, stat=stat, limit_s=limit))
    if not terms:
        raise UsageError(f"empty --slo; {_SLO_SYNTAX}")
    return Slo(terms=terms)
