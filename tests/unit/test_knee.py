"""Knee search on synthetic saturating curves: the search must give the answer of the full 20-point
grid while measuring far fewer points."""

from __future__ import annotations

import math

import pytest

from quantkit.measure.capacity.search import find_knee, knee_from_grid, knee_grid

GRID = knee_grid(1, 1024)


def test_grid_has_twenty_points_and_doubles():
    assert len(GRID) == 20
    assert GRID[:8] == [1, 2, 3, 4, 6, 8, 12, 16]
    assert all(2 * x in GRID for x in GRID if 2 * x <= 1024)


def michaelis(tmax, k):
    return lambda c: tmax * c / (c + k)


def exp_sat(tmax, k):
    return lambda c: tmax * (1 - math.exp(-c / k))


def linear_latency(base, slope, limit):
    return lambda c: base + slope * c <= limit


def always(_c):
    return True


def run_both(curve, slo_ok, hi=1024):
    calls = []

    def measure(c):
        calls.append(c)
        return curve(c), slo_ok(c)

    found = find_knee(measure, lo=1, hi=hi)
    grid = knee_grid(1, hi)
    reference = knee_from_grid({x: (curve(x), slo_ok(x)) for x in grid}, grid)
    return found, reference, calls


CURVES = [michaelis(100, k) for k in (0.3, 0.7, 1, 1.5, 2, 2.5, 3, 3.5)] + [exp_sat(90, k) for k in (1, 2, 3, 4, 6)]


@pytest.mark.parametrize("curve", CURVES)
def test_saturating_curves_match_grid_with_at_most_8_points(curve):
    found, reference, calls = run_both(curve, always)
    assert found.reason == reference.reason == "saturated"
    assert found.knee == reference.knee
    assert found.knee <= 16  # these curves saturate where CPU servers do
    assert len(calls) <= 8, (found.knee, calls)
    assert len(set(calls)) == len(calls)  # no point measured twice


@pytest.mark.parametrize("k", [5, 8, 12, 20, 40])
def test_later_knees_match_with_log_points(k):
    found, reference, calls = run_both(michaelis(1000, k), always)
    assert found.knee == reference.knee
    # a doubling ladder up to twice the power of two at or above the knee, plus two points
    assert len(calls) <= math.ceil(math.log2(found.knee)) + 4


def test_michaelis_knee_is_where_doubling_gains_drop_below_10_percent():
    # T(2c)/T(c) = 2(c+K)/(2c+K) < 1.1  <=>  c > 4.5 K: with K=2 the first grid point past 9 is 12
    found, _, _ = run_both(michaelis(100, 2), always)
    assert found.knee == 12


@pytest.mark.parametrize("base, slope, limit", [(0.05, 0.01, 0.2), (0.05, 0.002, 0.2), (0.1, 0.05, 0.5), (0.1, 0.01, 0.35)])
def test_slo_break_matches_grid(base, slope, limit):
    found, reference, calls = run_both(michaelis(100, 30), linear_latency(base, slope, limit))
    assert (found.knee, found.reason) == (reference.knee, reference.reason)
    assert found.reason == "slo"
    assert linear_latency(base, slope, limit)(found.knee)
    assert len(calls) <= math.ceil(math.log2(found.knee)) + 4
    if found.knee <= 16:
        assert len(calls) <= 8


def test_slo_broken_at_minimum_and_not_reached():
    found, reference, calls = run_both(michaelis(100, 1), lambda c: False)
    assert found.knee is None and found.reason == reference.reason == "slo_at_min" and calls == [1]
    found, reference, _ = run_both(lambda c: float(c), always, hi=64)  # never saturates
    assert (found.knee, found.reason) == (reference.knee, reference.reason) == (64, "not_reached")


def test_hi_off_the_ladder_is_rounded_down():
    found, _, calls = run_both(lambda c: float(c), always, hi=100)
    assert max(calls) == 64 and found.knee == 64
