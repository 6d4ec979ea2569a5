"""One load point's data: per-request results, latency statistics, and the point's summary.

Statistics follow `vllm bench serve` (numpy's linear-interpolation percentiles), latencies are
seconds. A failed request is kept with its reason and counted; a point is never dropped.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, Field

SCHEMA_VERSION = 1
METRICS = ("ttft", "itl", "tpot", "e2e")
STATS = ("mean", "p50", "p90", "p95", "p99")

# --------------------------------------------------------------------------------------------
# Statistics


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default, which `vllm bench serve` uses)."""
    if not values:
        raise ValueError("percentile of no values")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


class Stats(BaseModel):
    """Seconds."""

    n: int
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> "Stats | None":
        if not values:
            return None
        return cls(
            n=len(values), mean=sum(values) / len(values),
            p50=percentile(values, 50), p90=percentile(values, 90), p95=percentile(values, 95),
            p99=percentile(values, 99), min=min(values), max=max(values),
        )

    def get(self, stat: str) -> float:
        return getattr(self, stat)



class RequestResult(BaseModel):
    ok: bool
    error: str | None = None
    start_s: float = 0.0  # send time relative to the point's start
    ttft: float | None = None
    itl: list[float] = Field(default_factory=list)
    tpot: float | None = None
    e2e: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    usage_from_server: bool = True


# --------------------------------------------------------------------------------------------
# Points


class BenchPoint(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.bench.point"
    profile: Literal["concurrency", "rate"]
    concurrency: int | None = None
    rate: float | None = None  # requests/s (Poisson)
    api: str = "completions"
    input_len: int | None = None  # requested; None for dataset prompts
    output_len: int
    num_requests: int
    started_at: str
    duration_s: float
    successes: int
    failures: int
    failure_reasons: dict[str, int] = Field(default_factory=dict)
    prompt_tokens: int
    completion_tokens: int
    output_tok_s: float
    total_tok_s: float
    req_s: float
    ttft: Stats | None = None
    itl: Stats | None = None
    tpot: Stats | None = None
    e2e: Stats | None = None
    max_in_flight: int = 0
    slo: str | None = None
    slo_met: bool | None = None
    slo_violations: list[str] = Field(default_factory=list)
    goodput_req_s: float | None = None  # requests/s that met every SLO term on their own
    slo_attainment: float | None = None  # share of the point's requests that met every SLO term
    stopped_early: str | None = None  # why the point was cut short (its verdict was already decided)
    server_metrics: dict[str, Any] | None = None  # measure.metrics.ServerMetrics: vLLM's /metrics during the point
    gpus: list[dict[str, Any]] | None = None  # measure.gpu.GpuSummary per GPU (NVML), where there are GPUs
    tokens_from_usage: bool = True
    partial: bool = False  # the server died during this point
    partial_reason: str | None = None

    @property
    def x(self) -> float:
        return float(self.concurrency if self.profile == "concurrency" else self.rate)


def summarize(results: list[RequestResult], duration: float, *, profile: str, concurrency: int | None,
              rate: float | None, output_len: int, input_len: int | None, api: str, started_at: str,
              max_in_flight: int = 0, partial_reason: str | None = None) -> BenchPoint:
    """The point's figures from its requests (the SLO verdict, if any, is slo.Slo.judge's)."""
    good = [r for r in results if r.ok]
    bad = [r for r in results if not r.ok]
    reasons = Counter(_reason_key(r.error or "unknown") for r in bad)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in good)
    completion_tokens = sum(r.completion_tokens or 0 for r in good)
    duration = max(duration, 1e-9)
    point = BenchPoint(
        profile=profile, concurrency=concurrency, rate=rate, api=api, input_len=input_len, output_len=output_len,
        num_requests=len(results), started_at=started_at, duration_s=round(duration, 4),
        successes=len(good), failures=len(bad), failure_reasons=dict(reasons),
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        output_tok_s=completion_tokens / duration, total_tok_s=(prompt_tokens + completion_tokens) / duration,
        req_s=len(good) / duration,
        ttft=Stats.of([r.ttft for r in good if r.ttft is not None]),
        itl=Stats.of([x for r in good for x in r.itl]),
        tpot=Stats.of([r.tpot for r in good if r.tpot is not None]),
        e2e=Stats.of([r.e2e for r in good if r.e2e is not None]),
        max_in_flight=max_in_flight,
        tokens_from_usage=all(r.usage_from_server for r in good),
        partial=partial_reason is not None, partial_reason=partial_reason,
    )
    return point


def _reason_key(error: str) -> str:
    # Group failures by kind: strip request-specific numbers so 64 timeouts make one entry.
    return re.sub(r"\b\d{4,}\b", "N", error)[:200]
