"""Latency statistics as `vllm bench serve` computes them (numpy's linear-interpolation percentiles),
in seconds: the metrics and statistics an SLO can name, and one metric's summary over a point."""

from __future__ import annotations

import math

from pydantic import BaseModel

METRICS = ("ttft", "itl", "tpot", "e2e")
STATS = ("mean", "p50", "p90", "p95", "p99")


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
