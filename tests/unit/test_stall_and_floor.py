"""A server too slow for the range (issue 38): a point in which no request finished is a stall,
never a saturation figure, and a search whose lowest load fails walks on down to its floor (three
halvings) instead of recording no capacity."""

from __future__ import annotations

import pytest

from quantkit.measure.stats.point import OVERLOADED, RequestResult
from quantkit.measure.capacity.search import FLOOR_DIVISOR, CapacitySearch, CapacityStep, Verdict, floor_of, outcome, search_capacity
from quantkit.measure.stats.slo import parse_slo
from quantkit.measure.stats.window import STALL_AFTER, WindowSettings, WindowStop, summarize

SLO = parse_slo("ttft_p95=2,tpot_p95=150ms")
WINDOW = WindowSettings(warmup_s=3, min_s=10, max_s=25, min_requests=40)


def req(i, start, ttft=0.3, tpot=0.05, n=16):
    return RequestResult(ok=True, index=i, start_s=start, ttft=ttft, tpot=tpot, e2e=ttft + tpot * (n - 1),
                         itl=[tpot] * (n - 1), prompt_tokens=8, completion_tokens=n)


@pytest.mark.parametrize("sent", [2, 9, 137])
@pytest.mark.parametrize("open_loop", [True, False])
def test_a_point_where_nothing_finished_is_a_stall_not_a_saturation(sent, open_loop):
    """The AVX2 demo's first point: 0 of 137 requests finished in 36 s, judged `saturated` before."""
    starts = [i * 36.0 / sent for i in range(sent)]
    summary, window = summarize(SLO, [], WINDOW, cut_starts=starts, open_loop=open_loop)
    assert summary.verdict == "stall" and window == []
    assert summary.saturation is None and summary.cut_off == sent and summary.measured == 0
    assert summary.reasons[0].startswith("stall: no request finished") and f"({sent} sent)" in summary.reasons[0]
    assert Verdict.of_window("stall", 0.5) == Verdict(passed=False, margin=None, decided=True, state="stall")


def test_a_point_whose_requests_all_failed_is_a_failure_not_a_stall():
    failed = [RequestResult(ok=False, error="HTTP 500", index=i, start_s=i * 0.5) for i in range(20)]
    summary, _ = summarize(SLO, failed, WINDOW, cut_starts=[10.5])
    assert summary.verdict != "stall"


def test_the_stop_rule_ends_a_stalled_point_after_the_warmup_and_the_shortest_window():
    offsets = [i * 0.25 for i in range(400)]  # 4 req/s
    stop = WindowStop(SLO, WINDOW, offsets)
    assert stop([], 12.9) is None  # the warm-up (3 s) and min_s (10 s) have not passed
    said = stop([], 13.5)
    assert said.startswith("stall: no request finished in 14 s (55 sent)")
    summary, _ = summarize(SLO, [], WINDOW, cut_starts=offsets[:55], closed_by=said)
    assert summary.verdict == "stall" and summary.reasons == [said]
    assert stop([req(0, 0.0)], 13.5) is None or not stop([req(0, 0.0)], 13.5).startswith("stall")


def test_a_slow_server_is_not_stalled_before_its_first_request_could_have_finished():
    """An idle request of 5 s (float32 on an AVX2 CPU) under a batch of 13 takes longer still:
    no completion after 13.5 s is no stall yet; after 4 idle durations from the first send it is."""
    offsets = [0.5 + i for i in range(100)]  # 1 req/s, the first at 0.5 s
    stop = WindowStop(SLO, WINDOW, offsets, request_s=5.0)
    assert stop([], 13.5) is None and stop([], 20.4) is None
    assert stop([], 20.6).startswith("stall: no request finished in 21 s (21 sent)")
    assert STALL_AFTER == 4.0


def test_a_closed_loop_stall_does_not_count_sends_it_cannot_see():
    stop = WindowStop(SLO, WINDOW)  # a closed loop: no send schedule
    said = stop([], 14.0)
    assert said.startswith("stall: no request finished in 14 s:") and "sent" not in said


@pytest.mark.parametrize("lo,integer,floor", [(1, False, 0.125), (2, False, 0.25), (0.5, False, 0.1), (0.1, False, 0.1),
                                              (1, True, 1.0), (16, True, 2.0), (4, True, 1.0)])
def test_the_floor_is_three_halvings_below_the_range(lo, integer, floor):
    assert FLOOR_DIVISOR == 8 and floor_of(lo, integer) == floor


def _server(capacity: float, overloaded: str = "saturated"):
    """A server that sustains `capacity` req/s: a margin ~ load / capacity below 1.6 x it, overloaded above."""
    calls: list[float] = []

    def measure(load: float) -> Verdict:
        calls.append(load)
        if load > 1.6 * capacity:
            return Verdict.of_window(overloaded, None)
        margin = (load / capacity) ** 2
        return Verdict.of_window("pass" if margin <= 1 else "fail", margin)

    return measure, calls


@pytest.mark.parametrize("overloaded", OVERLOADED)
@pytest.mark.parametrize("capacity", [0.9, 0.5, 0.3, 0.14])
def test_a_search_whose_lowest_load_fails_walks_down_to_a_capacity(capacity, overloaded):
    measure, calls = _server(capacity, overloaded)
    found = search_capacity(measure, lo=1, hi=64, tolerance=0.15, integer=False, start=1.0, max_growth=4.0,
                            floor=floor_of(1, False))
    assert found.capacity is not None and capacity / 1.15 ** 2 <= found.capacity <= capacity
    assert found.reason == "bracketed" and found.floor == 0.125
    assert calls[0] == 1.0 and min(calls) >= 0.125
    assert len(calls) == len(set(calls)) <= 8


@pytest.mark.parametrize("overloaded", OVERLOADED)
def test_below_the_floor_the_search_says_so(overloaded):
    measure, calls = _server(0.05, overloaded)  # slower than the floor allows
    found = search_capacity(measure, lo=1, hi=64, tolerance=0.15, integer=False, start=1.0, max_growth=4.0,
                            floor=0.125)
    assert found.capacity is None and found.reason == "below_min" and min(calls) == 0.125
    assert [c for c in calls if c < 1] == sorted((c for c in calls if c < 1), reverse=True)  # walking down only
    assert outcome(found) == overloaded


def test_without_a_floor_the_search_stops_at_the_range_as_before():
    measure, calls = _server(0.3)
    found = search_capacity(measure, lo=1, hi=64, tolerance=0.15, integer=False, start=1.0, max_growth=4.0)
    assert found.reason == "below_min" and calls == [1.0] and found.floor is None


def test_a_stall_at_the_lowest_load_is_said_in_one_word():
    found = CapacitySearch(capacity=None, ceiling=0.125, reason="below_min", tolerance=0.1, lo=1, hi=8, floor=0.125,
                           steps=[CapacityStep(load=x, passed=False, decided=True, state="stall")
                                  for x in (1, 0.5, 0.25, 0.125)])
    assert outcome(found) == "stall"


def test_a_server_whose_token_counters_grow_is_busy_not_stalled():
    """12-07, a 2-core Zen 4, the demo's baseline at 1.95 req/s: its Poisson draw sent 44 requests in
    13 s, 43 ran at once at 0.22 s a step (a request ~14 s), and the point was called a stall with
    1,162 tokens made. While /metrics shows the counters growing, the point runs on."""
    offsets = [i * 13.0 / 44 for i in range(200)]
    idle = [0.4]
    stop = WindowStop(SLO, WINDOW, offsets, request_s=3.2, server_idle_s=lambda: idle[0])
    assert stop([], 13.2) is None and stop([], 20.0) is None  # computing: no stall
    idle[0] = 6.0  # quiet for 6 s, less than 4 idle requests (12.8 s): a long prefill, say
    assert stop([], 21.0) is None
    idle[0] = 13.0
    assert stop([], 22.0).startswith("stall: no request finished in 22 s")
    # busy, yet nothing done after 3 x the wait (12.8 s): too slow for the load, whatever its window's cap
    idle[0] = 0.4
    long = WindowSettings(warmup_s=3, min_s=10, max_s=600, min_requests=40)
    busy = WindowStop(SLO, long, offsets, request_s=3.2, server_idle_s=lambda: idle[0])
    assert busy([], 38.0) is None and busy([], 38.5).startswith("stall: no request finished in 38 s")
    # no /metrics (a server that is not vLLM): the timeout alone decides, as before
    blind = WindowStop(SLO, WINDOW, offsets, request_s=3.2, server_idle_s=lambda: None)
    assert blind([], 13.2).startswith("stall: no request finished in 13 s (45 sent)")


def test_idle_is_the_time_since_the_token_counters_last_grew():
    from quantkit.measure.observe.metrics import Scrape, idle_s

    def scrape(t, prompt, generated):
        return Scrape(t=t, counters={"prompt_tokens": prompt, "generation_tokens": generated})

    assert idle_s([]) is None and idle_s([scrape(0, 0, 0)]) is None
    assert idle_s([Scrape(t=0), Scrape(t=1)]) is None  # no token counters: not vLLM
    assert idle_s([scrape(0, 0, 0), scrape(1, 128, 0), scrape(2, 128, 40), scrape(3, 128, 40), scrape(4.5, 128, 40)]) == 2.5
    assert idle_s([scrape(0, 5, 5), scrape(1, 5, 5), scrape(2, 5, 5)]) == 2.0  # never grew: idle since the first
    assert idle_s([scrape(0, 0, 0), scrape(1, 0, 9)]) == 0.0
    # scrapes that stopped coming (a /metrics that failed since) count as no growth until now
    assert idle_s([scrape(0, 0, 0), scrape(1, 0, 9)], now=7.5) == 6.5


def test_the_point_monitor_tells_its_idle_time_until_now():
    from quantkit.measure.observe.metrics import PointMonitor

    counts = iter([0, 64, 64, 64])  # the prompt's tokens counted at the second reading, nothing since

    def page(url):
        n = next(counts, 64)
        return f"vllm:prompt_tokens_total {n}\nvllm:generation_tokens_total 0\n"

    monitor = PointMonitor("http://x", interval_s=60, fetch=page).start()  # a reading at start
    monitor.tick()
    try:
        idle = monitor.server_idle_s()
        assert idle is not None and 0 <= idle < 1.0
    finally:
        monitor.stop()
