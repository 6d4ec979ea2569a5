"""measure/capacity/ladder: a stored ladder of steady-state points judged again under another SLO.

The points are built from requests whose latencies are known (TTFT = 0.1 s x load, a little spread),
so the capacity under each SLO is known before the code runs."""

from __future__ import annotations

import pytest

from fixtures.ladders import WINDOW, ladder, point

from quantkit.errors import UsageError
from quantkit.measure.capacity.live import CapacitySettings
from quantkit.measure.capacity.ladder import rederive
from quantkit.measure.stats.slo import parse_slo

def test_a_tighter_slo_finds_the_pass_below_the_first_failure():
    result, stored = ladder([1, 2, 4, 4.4, 8])
    out = rederive(result, stored, parse_slo("ttft_p95=0.5"))
    # TTFT p95 at 4 req/s is under 0.48 s, at 4.4 req/s over 0.5 s
    assert (out.coverage, out.result.capacity.load, out.result.search.ceiling) == ("bracketed", 4, 4.4)
    assert str(out.result.slo) == "ttft_p95=0.5" and str(out.result.derived_from) == "ttft_p95=100"
    assert out.note is None
    assert [s.state for s in out.steps] == ["pass", "pass", "pass", "fail", "fail"]
    assert out.result.points[3].slo_met is False and out.result.points[3].samples is None


def test_a_gap_wider_than_the_tolerance_is_coarse_and_says_what_to_run():
    result, stored = ladder([1, 2, 4, 8])
    out = rederive(result, stored, parse_slo("ttft_p95=0.5"))
    assert (out.coverage, out.result.capacity.load, out.result.search.ceiling) == ("coarse", 4, 8)
    assert "--capacity-start 4 --capacity-max 8" in out.note and "--slo ttft_p95=0.5" in out.note


def test_an_slo_the_ladder_does_not_reach_is_not_covered_either_way():
    result, stored = ladder([2, 4, 8])
    above = rederive(result, stored, parse_slo("ttft_p95=5"))
    assert (above.coverage, above.result.capacity.load, above.result.search.reason) == ("above", 8, "max_reached")
    assert "at least" in above.note and "--capacity-start 8" in above.note
    below = rederive(result, stored, parse_slo("ttft_p95=0.1"))
    assert (below.coverage, below.result.capacity) == ("below", None)
    assert below.result.search.reason == "below_min" and "--capacity-max 2" in below.note


def test_a_saturated_point_fails_any_slo_and_a_client_limited_one_decides_nothing():
    result, stored = ladder([1, 2, 4, 8], {4: {"saturated": True}})
    out = rederive(result, stored, parse_slo("ttft_p95=5"))
    assert (out.result.capacity.load, out.result.search.ceiling) == (2, 4)
    result, stored = ladder([1, 2, 4, 8], {4: {"client_limited": True}})
    out = rederive(result, stored, parse_slo("ttft_p95=5"))
    assert out.coverage == "above" and out.result.capacity.load == 2 and "above it, 4 req/s offered decides nothing: sends late" in out.note


def test_a_burst_ladder_is_refused_with_what_to_measure():
    result, stored = ladder([1, 2])
    for p in stored:
        p["window"] = None
    result.settings = CapacitySettings(profile="burst")
    with pytest.raises(UsageError, match="bursts.*--capacity-profile poisson"):
        rederive(result, stored, parse_slo("ttft_p95=0.5"))


def test_points_too_short_for_a_p99_are_undecided_not_below_the_ladder():
    # 116 requests in each window: a p99 pass needs ~300, so nothing below the failure decides
    result, stored = ladder([1, 2, 4, 8])
    out = rederive(result, stored, parse_slo("ttft_p99=0.7"))
    assert [s.state for s in out.steps] == ["undecided", "undecided", "undecided", "fail"]
    assert out.coverage == "undecided" and out.result.capacity is None
    assert "below 8 req/s offered decides ttft_p99=0.7" in out.note and "quantkit bench" in out.note


def test_a_span_search_stays_below_the_ladders_lowest_saturated_load():
    # the H200's fp8 ladder: 40 req/s passed, 44 and 48 saturated; a span search for a looser tier
    # started at 40 and, blind to the rest, grew to 83.5 and 57.8 req/s (both saturated, as any load
    # above 44 is): now it stays below 44, so the ladder it has answers the tier without a new point
    from quantkit.measure.capacity.live import span_search
    from quantkit.measure.stats.point import BenchPoint
    from quantkit.measure.capacity.search import search_capacity

    kept = {x: BenchPoint.model_validate(point(x, ttft_per_rate=0.001, saturated=x > 40)) for x in (40.0, 44.0, 48.0)}
    asked = []

    def measure_at(load):
        asked.append(load)
        kept[float(load)] = BenchPoint.model_validate(point(load, ttft_per_rate=0.001, saturated=load > 40))
        return kept[float(load)]

    def search(measure, start, hi=None):
        return search_capacity(measure, lo=1, hi=128 if hi is None else hi, tolerance=0.1, integer=False, start=start,
                               max_growth=2.0)

    found = span_search(parse_slo("ttft_p95=2"), "a looser tier", kept, WINDOW, search, measure_at, 40.0, 1.0)
    assert (found.capacity, found.ceiling, found.reason, asked) == (40.0, 44.0, "bracketed", [])
