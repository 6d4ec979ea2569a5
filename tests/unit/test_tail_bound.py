"""The tail-latency bound against MLPerf LoadGen's own numbers (p, c = 0.99, d = 0).

Sources of the expected values, each printed by LoadGen itself (loadgen/results.cc's messages):
- Server, 100 queries all over a 15 ms bound (p99, resnet50): "Would need to run at least 12471
  more queries" (the LoadGen summary printed in an MLCommons CM tutorial).
- SingleStream, p90 estimate: "Processed at least 64 queries (N). Would discard D highest latency
  queries": (10000, 929) in mlcommons/inference's sample submission
  tools/submission/directory_structure_samples/sample_1/open/NVIDIA/results/Jetson-Thor_TRT/
  llama3.1-8b-edge/SingleStream/performance/run_1/mlperf_log_summary.txt; (201, 9), (659, 47),
  (708, 51), (79944, 7796) in LoadGen summaries published in other public repositories; with
  N = 201 and 659 also "Not enough queries processed for 99th percentile early stopping estimate
  (would need to process at least 662 total queries)".
- t = 0 at p99: 459 queries (ceil(log(0.01) / log(0.99)), the appendix's formula; also the
  mlcommons/endpoints port's reference value h_min(t=0, p99) = 459).
"""

from __future__ import annotations

import pytest

from quantkit.measure.stats import tail_bound


@pytest.mark.parametrize("over, percentile, fewest_under", [(0, 0.99, 459), (0, 0.90, 44), (1, 0.90, 63), (1, 0.99, 661),
                                                            (100, 0.99, 12471)])
def test_min_passing_is_loadgens(over, percentile, fewest_under):
    assert tail_bound.min_passing(over, percentile) == fewest_under
    # just below it the rule does not pass yet
    assert tail_bound.odds(fewest_under - 1, over, percentile) >= 1 - tail_bound.CONFIDENCE


@pytest.mark.parametrize("requests, discarded", [(201, 9), (659, 47), (708, 51), (10000, 929), (79944, 7796)])
def test_single_stream_discards_what_loadgen_discarded(requests, discarded):
    assert tail_bound.discarded(requests, 0.90) == discarded


def test_too_few_requests_for_an_estimate_say_so():
    assert tail_bound.discarded(63, 0.90) is None and tail_bound.discarded(64, 0.90) == 0
    assert tail_bound.discarded(661, 0.99) is None and tail_bound.discarded(662, 0.99) == 0
    latencies = [float(i) for i in range(1, 709)]  # 708 requests: the 52nd slowest is the estimate
    assert tail_bound.percentile_estimate(latencies, 0.90) == 708 - 51
    assert tail_bound.percentile_estimate(latencies[:63], 0.90) is None


def test_server_verdicts_met_undecided_with_the_requests_it_needs_and_broken():
    seen = tail_bound.verdict(100, 100, 0.99)
    assert seen.needed - seen.requests == 12471  # LoadGen: "Would need to run at least 12471 more queries"
    assert seen.decision == "broken"  # all 100 over a p99 bound: no p99 system shows that
    assert tail_bound.verdict(459, 0, 0.99).decision == "met"
    short = tail_bound.verdict(300, 0, 0.99)
    assert short.decision == "undecided" and short.more == 159 and "needs 159 more requests" in short.describe()
    one_over = tail_bound.verdict(459, 1, 0.99)
    assert one_over.decision == "undecided" and one_over.more == tail_bound.min_passing(1, 0.99) + 1 - 459 == 203
    # more requests with the same share over the bound: undecided becomes met (a 0.5% share is within p99)
    assert tail_bound.verdict(2000, 10, 0.99).decision == "undecided"
    assert tail_bound.verdict(20000, 100, 0.99).decision == "met"
    # and a 3% share over a p99 bound breaks it once there are enough requests to tell
    assert tail_bound.verdict(100, 3, 0.99).decision == "undecided"
    assert tail_bound.verdict(1000, 30, 0.99).decision == "broken"


def test_it_is_the_rule_measure_confidence_applies():
    from quantkit.measure.stats.confidence import requests_to_pass

    for percentile, over in [(0.95, 0), (0.95, 1), (0.99, 0), (0.90, 3)]:
        assert tail_bound.min_passing(over, percentile) + over == requests_to_pass(percentile, 0.99, over)


@pytest.mark.parametrize("args", [(10, 11, 0.99), (10, -1, 0.99), (10, 0, 1.0), (10, 0, 0.0)])
def test_impossible_counts_and_percentiles_are_refused(args):
    with pytest.raises(ValueError):
        tail_bound.verdict(*args)
