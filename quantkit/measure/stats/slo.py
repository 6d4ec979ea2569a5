"""Latency SLOs: `ttft_p95=0.5,tpot_p95=50ms,attainment=0.9` parsed into what a point meets or breaks.

An SLO has two parts (the definitions the report prints, `SLO_DEFINITION`):
- bounds: a latency metric (TTFT, TPOT, ITL, E2E) at a statistic (mean, p50 ... p99) and a limit.
  A point meets a bound when its statistic over the point's requests is within the limit (the
  `vllm bench serve` reading: p95 of TTFT over all requests <= 0.5 s).
- attainment: the share of requests that must meet every bound on their own (the goodput
  literature's reading, DistServe; `vllm bench serve --goodput` counts the same requests). A request
  meets a bound when its own TTFT / TPOT / E2E is within the limit (for ITL, its own statistic of
  its inter-token gaps); a failed request meets none. Optional: without it, the bounds decide.
A point meets the SLO when it meets every bound, reaches the attainment target, and no request
failed. Goodput = the requests/s (and output tokens/s) of the requests that met every bound.

`Slo` is the one type every seam carries (results, points, tiers, recipes, run keys): it is stored
and printed as its canonical text (`ttft_p95=0.5,tpot_p95=0.05`), read back from that text by the
one parser here (`parse_slo`), and compared and hashed by value.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from ...errors import UsageError, did_you_mean
from ...numbers import MAX_SECONDS
from .percentiles import METRICS, STATS, Stats, percentile


class Request(Protocol):
    """What a request's verdict reads (measure.stats.point.RequestResult, which sits above this module)."""

    ok: bool
    ttft: float | None
    tpot: float | None
    e2e: float | None
    itl: list[float]


class Point(Protocol):
    """What a load point's verdict reads and sets (measure.stats.point.BenchPoint)."""

    ttft: Stats | None
    itl: Stats | None
    tpot: Stats | None
    e2e: Stats | None
    failures: int
    duration_s: float
    slo: "Slo | None"
    slo_met: bool | None
    slo_violations: list[str]
    slo_attainment: float | None
    goodput_req_s: float | None

class SloTerm(BaseModel):
    model_config = ConfigDict(frozen=True)

    metric: Literal["ttft", "itl", "tpot", "e2e"]
    stat: Literal["mean", "p50", "p90", "p95", "p99"]
    limit_s: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}"


SLO_DEFINITION = (
    "SLO: each bound is a latency statistic over a point's requests (e.g. TTFT p95 <= 0.5 s); "
    "attainment is the share of requests that met every bound on their own (a failed request meets "
    "none). A load meets the SLO when every bound holds, attainment reaches its target (when one is "
    "set) and no request failed. Capacity = the highest load that meets it; goodput = the requests/s "
    "that met every bound."
)


class Slo(BaseModel):
    model_config = ConfigDict(frozen=True)

    terms: tuple[SloTerm, ...]
    attainment: float | None = Field(None, gt=0, lt=1)  # share of requests that must meet every term; None: not required

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        """A stored or typed SLO is its text: parsed here, by the one parser."""
        if isinstance(value, str):
            parsed = parse_slo(value)
            if parsed is None:
                raise ValueError("an empty SLO")
            return {"terms": parsed.terms, "attainment": parsed.attainment}
        return value

    @model_serializer
    def _as_text(self) -> str:
        return str(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Slo):
            return NotImplemented  # never equal to its text: compare Slo with Slo
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        text = ",".join(f"{t.key}={t.limit_s:g}" for t in self.terms)
        return text + (f",attainment={self.attainment:g}" if self.attainment is not None else "")

    def share_met(self, results: list[Request]) -> float | None:
        """The share of requests that met every term on their own (None for no requests)."""
        if not results:
            return None
        return sum(1 for r in results if self.request_ok(r)) / len(results)

    def margin(self, point: Point) -> float | None:
        """How close the point is to breaking the SLO: the largest value/limit over the terms, and
        for attainment (1 - share) / (1 - target); <= 1 meets. None when a term has no data."""
        worst = 0.0
        for t in self.terms:
            stats: Stats | None = getattr(point, t.metric)
            if stats is None:
                return None
            worst = max(worst, stats.get(t.stat) / t.limit_s)
        if self.attainment is not None and point.slo_attainment is not None:
            worst = max(worst, (1.0 - point.slo_attainment) / (1.0 - self.attainment))  # parse_slo: attainment < 1
        return worst

    def violations(self, point: Point) -> list[str]:
        """The terms a point breaks, e.g. `ttft_p95 0.81s > 0.5s`; a metric with no data breaks it."""
        out = []
        for t in self.terms:
            stats: Stats | None = getattr(point, t.metric)
            if stats is None:
                out.append(f"{t.key} has no data")
            elif stats.get(t.stat) > t.limit_s:
                out.append(f"{t.key} {stats.get(t.stat):.3g}s > {t.limit_s:g}s")
        return out

    def judge(self, point: Point, results: list[Request]) -> Point:
        """Set the point's SLO verdict: the terms it breaks (failed requests break it too) and its
        goodput, the requests/s that met every term on their own."""
        point.slo = self
        point.slo_violations = self.violations(point)
        point.slo_attainment = self.share_met(results)
        if self.attainment is not None and (point.slo_attainment or 0.0) < self.attainment:
            point.slo_violations.append(f"attainment {point.slo_attainment or 0:.3g} < {self.attainment:g}")
        if point.failures:
            point.slo_violations.append(f"{point.failures} failed requests")
        point.slo_met = not point.slo_violations
        point.goodput_req_s = sum(1 for r in results if self.request_ok(r)) / max(point.duration_s, 1e-9)
        return point

    def request_ok(self, r: Request) -> bool:
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


_SLO_SYNTAX = ("expected METRIC_STAT=SECONDS[,...][,attainment=SHARE] such as ttft_p95=0.5,itl_p95=50ms,"
               "attainment=0.9")


def _parse_share(item: str, value: str) -> float:
    text = value.strip().lower()
    try:
        share = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise UsageError(f"bad --slo term '{item}': attainment is a share such as 0.9 or 90%") from None
    if share == 1:
        # every request, at a confidence: no finite window can show that (confidence.requests_needed
        # would count requests forever), so it is refused here rather than searched for
        raise UsageError(f"bad --slo term '{item}': an attainment of 1 (every request) cannot be shown by any number of "
                         "requests; use a share below 1 such as attainment=0.99, or a tail bound such as ttft_p99=...")
    if not 0 < share < 1:
        raise UsageError(f"bad --slo term '{item}': attainment must be in (0, 1) (0.9 = 90% of requests)")
    return share


def parse_slo(text: str | None) -> Slo | None:
    """`ttft_p95=0.5,itl_p95=50ms` -> Slo. Seconds by default; `ms` and `s` suffixes accepted."""
    if text is None or not text.strip():
        return None
    terms: list[SloTerm] = []
    attainment: float | None = None
    seen: set[str] = set()
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep:
            raise UsageError(f"bad --slo term '{item}': {_SLO_SYNTAX}")
        if key == "attainment":
            if attainment is not None:
                raise UsageError("bad --slo: 'attainment' given twice")
            attainment = _parse_share(item, value)
            continue
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
        if not 0 < limit <= MAX_SECONDS:  # 1e999 reads as inf
            raise UsageError(f"bad --slo term '{item}': the limit must be positive and at most {MAX_SECONDS:g} s")
        if key in seen:
            raise UsageError(f"bad --slo: '{key}' given twice")
        seen.add(key)
        terms.append(SloTerm(metric=metric, stat=stat, limit_s=limit))
    if not terms:
        what = "empty --slo" if attainment is None else "--slo needs at least one latency bound"
        raise UsageError(f"{what}; {_SLO_SYNTAX}")
    return Slo(terms=tuple(terms), attainment=attainment)
