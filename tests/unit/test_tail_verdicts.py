"""A tail-latency bound is met, broken, or undecided with the requests it still needs, per point (the
window's verdict and a stored point judged again), and an undecided point bounds a capacity from
neither side: the search, the ladder, the tier table and the card name it with that count.

The truths: tail_bound.py is checked against MLPerf LoadGen's own figures (test_tail_bound.py);
here the judging of a window must give the same decision and count at the window's confidence,
and the ladders are built from requests whose latencies are known (fixtures/ladders.py)."""

from __future__ import annotations

import math

import pytest

from fixtures.ladders import ladder

from quantkit.measure.capacity.ladder import rederive
from quantkit.measure.capacity.search import Verdict, left_open, search_capacity
from quantkit.measure.stats import tail_bound
from quantkit.measure.stats.confidence import batch_means, judge
from quantkit.measure.stats.point import RequestResult, WindowSettings
from quantkit.measure.stats.slo import parse_slo
from quantkit.measure.stats.window import settle


def _requests(ttfts: list[float]) -> list[RequestResult]:
    return [RequestResult(ok=True, index=i, start_s=i * 0.1, ttft=t, tpot=0.01, e2e=t + 0.5, itl=[0.01] * 50,
                          completion_tokens=51) for i, t in enumerate(ttfts)]


def _window(n: int, over: int) -> list[RequestResult]:
    """n requests, `over` of them (spread evenly) over a 1 s TTFT bound."""
    slow = {round(i * n / over) for i in range(over)} if over else set()
    return _requests([2.0 if i in slow else 0.1 for i in range(n)])


@pytest.mark.parametrize("confidence", [0.95, 0.99])
@pytest.mark.parametrize("stat", ["p95", "p99"])
def test_a_window_s_percentile_bound_is_loadgen_s_verdict_at_its_confidence_with_its_count(confidence, stat):
    # under 50 requests no batch means are read: the binomial rule alone, which is tail_bound's
    slo = parse_slo(f"ttft_{stat}=1")
    for n in (10, 30, 49):
        for over in (0, 1, 2, 5, n):
            term = judge(slo, _window(n, over), confidence).terms[0]
            loadgen = tail_bound.verdict(n, over, float(stat[1:]) / 100, confidence)
            assert (term.decision, term.more) == ({"met": "pass", "broken": "fail"}.get(loadgen.decision, "undecided"),
                                                  loadgen.more), (n, over)


def test_an_undecided_p99_says_how_many_more_requests_it_needs():
    slo = parse_slo("ttft_p99=1")
    # none over the bound: at 95% a p99 is met from 299 requests on (LoadGen's rule), at 99% from 459
    verdict = judge(slo, _window(200, 0), 0.95)
    assert verdict.decision == "undecided" and verdict.more == 99
    assert verdict.reasons() == ["ttft_p99 0.1s vs 1s, 0/200 over (share 0.000..0.015): undecided (needs 99 more requests)"]
    assert judge(slo, _window(300, 0), 0.99).more == 159  # LoadGen: 459 requests for a p99 at 99%
    assert judge(slo, _window(300, 0), 0.95).decision == "pass"
    broken = judge(slo, _window(200, 20), 0.95)  # 10% over a bound that allows 1%
    assert broken.decision == "fail" and broken.more is None and broken.reasons()[0].endswith(": broken")


def test_exceedances_in_runs_keep_a_bound_undecided_and_the_count_follows_the_batch_means():
    # 40 of 656 over a p99 bound, all in one run of consecutive requests (the H200's bf16 at 33.99
    # req/s under the interactive tier): the binomial reading breaks it, the batch means cannot tell
    ttfts = [2.0 if 300 <= i < 340 else 0.1 for i in range(656)]
    slo = parse_slo("ttft_p99=1")
    assert tail_bound.verdict(656, 40, 0.99, 0.95).decision == "broken"
    term = judge(slo, _requests(ttfts), 0.95).terms[0]
    share, half = batch_means([t > 1 for t in ttfts], 0.95)
    assert term.decision == "undecided" and share - half <= 0.01
    # the interval narrows as 1/sqrt(requests): it clears the allowed share at n (half / gap)^2
    assert term.more == math.ceil(656 * (half / (share - 0.01)) ** 2) - 656 > 0
    assert "undecided (needs" in term.describe()


def test_a_pass_short_of_the_window_s_minimum_needs_the_rest_and_a_rising_one_cannot_say():
    settings = WindowSettings(min_requests=100)
    verdict, reasons, more, _ = settle(parse_slo("ttft_p95=1"), _window(80, 0), settings)
    assert (verdict, more) == ("undecided", 20) and "fewer than the 100 asked" in reasons[-1]
    # 3% of 1000 over the bound passes a p95, but all of them in the later half, 6% of it: not steady yet
    later = _window(500, 30)
    rising = _requests([0.1] * 500 + [r.ttft for r in later])
    assert judge(parse_slo("ttft_p95=1"), rising, 0.95).decision == "pass"
    verdict, reasons, more, _ = settle(parse_slo("ttft_p95=1"), rising, settings)
    assert (verdict, more) == ("undecided", None) and "still rising" in reasons[0]


def test_an_undecided_load_bounds_a_searched_capacity_from_neither_side():
    def measure(load):
        state = "pass" if load <= 4 else "undecided" if load == 5 else "fail"
        return Verdict.of_window(state, load / 4.5, more=120)

    found = search_capacity(measure, lo=1, hi=64)
    assert (found.capacity, found.undecided) == (4, [5])  # never the capacity, though its margin passes
    step = left_open(found)
    assert (step.load, step.more) == (5, 120)
    assert [s.more for s in found.steps if s.decided] == [None] * (len(found.steps) - 1)  # a decided step needs none


def test_a_ladder_names_its_undecided_load_with_the_requests_it_needs():
    # p95 <= 0.5 s: 2 req/s passes, 4.4 breaks it; at 4.2 req/s about 4% of the requests are over
    # 0.5 s, too close to the allowed 5% for 119 requests to tell
    result, stored = ladder([1, 2, 4.2, 4.4, 8])
    out = rederive(result, stored, parse_slo("ttft_p95=0.5"))
    assert [s.state for s in out.steps] == ["pass", "pass", "undecided", "fail", "fail"]
    step = next(s for s in out.steps if s.state == "undecided")
    assert step.more is not None and f"undecided (needs {step.more} more requests)" in step.reasons[0]
    assert (out.result.capacity.load, out.result.search.ceiling) == (2, 4.4)
    text = f"undecided at 4.2 req/s offered (needs {step.more} more requests)"
    assert out.result.open_text() == text and text in out.note
    # nothing passes under a p99 (119 requests, ~300 needed): the lowest undecided load is named
    p99 = rederive(result, stored, parse_slo("ttft_p99=0.7"))
    assert p99.coverage == "undecided" and p99.result.capacity is None
    assert p99.result.open_text() == f"undecided at 1 req/s offered (needs {p99.steps[0].more} more requests)"
    assert p99.steps[0].more == 299 - p99.steps[0].measured  # LoadGen's count for a p99 at the window's 95%


def test_the_tier_table_and_the_card_row_show_the_undecided_load_and_its_count():
    from quantkit.measure.capacity import profiles
    from quantkit.report.card_capacity import _row
    from quantkit.report.decision import capacity_cell
    from quantkit.report.tiers import TierResult, tier_lines, tier_table

    result, stored = ladder([1, 2, 4.2, 4.4, 8])
    out = rederive(result, stored, parse_slo("ttft_p95=0.5"))
    cell, text = capacity_cell(out.result), out.result.open_text()
    tiers = [TierResult(name="measured", slo="ttft_p95=100", source="the recipe's"),
             TierResult(name="mlperf-server", slo="ttft_p95=0.5", source="MLPerf", cells={"int8": cell},
                        coverage={"int8": out.coverage}, undecided={"int8": text})]
    _, _, rows, caption = tier_table(tiers)
    assert rows[1][1] == f"{cell.load_text()}; {text}" and "counted neither as a pass nor as a failure" in caption
    assert tier_lines(tiers)[1].endswith(f"; int8: {text}")
    row = _row("mlperf-server", cell, profiles.get("poisson"), out.coverage, text)
    assert row[1] == f"2-4.4 req/s offered; {text}"
