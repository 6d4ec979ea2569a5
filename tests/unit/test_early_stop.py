"""Stopping a point that cannot pass: a decided verdict, and over-saturation (the waiting queue
grows and TTFT climbs with the send time)."""

from __future__ import annotations

from quantkit.measure.capacity.live import CapacitySettings, EarlyStop, oversaturated
from quantkit.measure.observe.metrics import Scrape
from quantkit.measure.stats.point import RequestResult
from quantkit.measure.stats.slo import parse_slo


def req(ttft=0.1, tpot=0.05, start=0.0, ok=True, itl=None):
    return RequestResult(ok=ok, error=None if ok else "HTTP 500: boom", start_s=start, ttft=ttft, tpot=tpot,
                         e2e=ttft + 10 * tpot, itl=itl if itl is not None else [tpot] * 10, completion_tokens=11)


def stop(slo, total=20, output_len=11, profile="concurrency", series=None):
    class Monitor:
        def series(self):
            return series or []

    return EarlyStop(parse_slo(slo), total, output_len, Monitor(), profile)


def test_p95_is_decided_once_enough_requests_broke_it():
    s = stop("tpot_p95=0.1", total=20)
    # (n-1) * 0.95 = 18.05: the p95 sits between the 19th and 20th value; two over the limit decide it
    assert s([req(tpot=0.2)] + [req()] * 5, 3.0) is None
    assert "cannot pass" in s([req(tpot=0.2)] * 2 + [req()] * 5, 3.0)


def test_mean_itl_attainment_and_failures():
    assert "above" in stop("ttft_mean=1", total=4)([req(ttft=4.5)], 1.0)
    assert stop("ttft_mean=1", total=10)([req(ttft=4.5)], 1.0) is None
    itl = stop("itl_p50=0.1", total=2, output_len=11)  # 20 gaps expected; 11 over the limit decide p50
    assert itl([req(itl=[0.2] * 10)], 1.0) is None
    assert itl([req(itl=[0.2] * 10), req(itl=[0.2] * 2 + [0.01] * 8)], 1.0)
    att = stop("ttft_p50=10,attainment=0.9", total=10)
    assert att([req(ttft=11)], 1.0) is None and "attainment" in att([req(ttft=11)] * 2, 1.0)
    assert "failed" in stop("ttft_p95=10")([req(ok=False)], 1.0)


def queue(values, step=1.0):
    return [Scrape(t=i * step, gauges={"waiting": float(v), "running": 8.0}) for i, v in enumerate(values)]


def climbing(n=16, span=12.0, growth=3.0):
    return [req(ttft=0.2 * (1 + growth * i / n), start=span * i / n) for i in range(n)]


def test_oversaturation_needs_the_queue_growing_and_ttft_climbing():
    assert "over-saturated" in oversaturated(queue([0, 2, 5, 9, 14, 20, 27, 35]), climbing())
    assert oversaturated(queue([8] * 8), climbing()) is None  # a full but steady queue (fixed concurrency)
    steady = [req(ttft=0.2, start=12.0 * i / 16) for i in range(16)]
    assert oversaturated(queue([0, 2, 5, 9, 14, 20, 27, 35]), steady) is None
    assert oversaturated([], climbing(growth=4.0)).startswith("over-saturated: TTFT")  # no /metrics: TTFT alone
    assert oversaturated([], climbing(growth=0.8)) is None
    assert oversaturated(queue([0, 5, 10, 20]), climbing(n=6)) is None  # too few requests to tell


def test_only_rate_points_are_checked_for_oversaturation():
    growing = queue([0, 2, 5, 9, 14, 20, 27, 35])
    assert stop("ttft_p99=100", total=100, profile="rate", series=growing)(climbing(), 12.0)
    assert stop("ttft_p99=100", total=100, profile="concurrency", series=growing)(climbing(), 12.0) is None


def test_requests_per_burst_point():
    # a burst point is sized by waves; steady-state points run for a time (test_steady_state.py)
    s = CapacitySettings(profile="burst", waves=3, min_requests=16)
    assert s.requests(2) == 16 and s.requests(10) == 30
    assert CapacitySettings(profile="burst", max_requests=20).requests(64) == 20
