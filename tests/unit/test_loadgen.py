"""Load-generator logic that needs no server: statistics, SLO parsing, goodput, schedules."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from quantkit.errors import UsageError
from quantkit.measure.stats.point import RequestResult, Stats, percentile, summarize
from quantkit.measure.stats.slo import Slo, parse_slo
from quantkit.measure.loadgen.workload import load_dataset, poisson_schedule


def numpy_percentile(values, q):
    # numpy's default ("linear") written out: the definition `vllm bench serve` reports
    data = sorted(values)
    h = (len(data) - 1) * q / 100
    return data[math.floor(h)] + (h - math.floor(h)) * (data[math.ceil(h)] - data[math.floor(h)])


def test_percentile_matches_linear_interpolation():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)
    rng = random.Random(1)
    values = [rng.random() for _ in range(101)]
    for q in (50, 90, 95, 99):
        assert percentile(values, q) == pytest.approx(numpy_percentile(values, q))
    assert percentile(values, 50) == pytest.approx(statistics.median(values))
    with pytest.raises(ValueError):
        percentile([], 50)


def test_stats_of():
    s = Stats.of([0.1, 0.2, 0.3, 0.4])
    assert s.n == 4 and s.mean == pytest.approx(0.25) and s.p50 == pytest.approx(0.25)
    assert s.min == 0.1 and s.max == 0.4
    assert Stats.of([]) is None


def test_parse_slo_terms_and_units():
    slo = parse_slo("ttft_p95=0.5, itl_p95=50ms,e2e_mean=2s")
    assert [(t.metric, t.stat, t.limit_s) for t in slo.terms] == [
        ("ttft", "p95", 0.5), ("itl", "p95", 0.05), ("e2e", "mean", 2.0)]
    assert str(slo) == "ttft_p95=0.5,itl_p95=0.05,e2e_mean=2"
    assert parse_slo(None) is None and parse_slo("  ") is None


@pytest.mark.parametrize("text, message", [
    ("ttft=0.5", "names no statistic"),
    ("ttfb_p95=0.5", "did you mean 'ttft'"),
    ("ttft_p95", "expected METRIC_STAT=SECONDS"),
    ("ttft_p95=fast", "not a number"),
    ("ttft_p95=0", "must be positive"),
    ("ttft_p95=1,ttft_p95=2", "given twice"),
    (",", "empty --slo"),
    ("ttft_p95=1,attainment=1", "attainment=0.99"),  # every request: no window could show it
    ("ttft_p95=1,attainment=100%", "attainment=0.99"),
    ("ttft_p95=1,attainment=1.5", r"in \(0, 1\)"),
])
def test_parse_slo_errors_are_one_line(text, message):
    with pytest.raises(UsageError, match=message) as info:
        parse_slo(text)
    assert "\n" not in info.value.one_line()


def test_an_attainment_of_every_request_is_refused_before_anything_counts_requests_for_it():
    # confidence.requests_needed counted requests forever for it: no finite window bounds a share at 1
    with pytest.raises(ValueError):
        Slo(terms=parse_slo("ttft_p95=1").terms, attainment=1.0)
    from quantkit.measure.stats.confidence import requests_needed

    assert requests_needed(parse_slo("ttft_p95=1,attainment=0.99")) == 299  # the largest share still allowed ends


def test_the_cli_refuses_an_attainment_of_1_in_one_line_with_exit_2():
    from typer.testing import CliRunner

    from quantkit.cli import app

    result = CliRunner().invoke(app, ["compare", "--slo", "ttft_p95=1,attainment=1"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "attainment=0.99" in lines[0] and lines[0].startswith("error: "), result.stderr


def req(ttft, itl, tokens=None, ok=True, error=None):
    tokens = tokens or len(itl) + 1
    e2e = ttft + sum(itl)
    return RequestResult(ok=ok, error=error, ttft=ttft, itl=itl, e2e=e2e, prompt_tokens=10,
                         completion_tokens=tokens, tpot=(e2e - ttft) / (tokens - 1) if ok else None)


def test_summarize_throughput_and_goodput():
    results = [
        req(0.1, [0.02, 0.02, 0.02]),          # meets both terms
        req(0.9, [0.02, 0.02, 0.02]),          # TTFT too slow
        req(0.1, [0.02, 0.02, 0.30]),          # its own ITL p95 too slow
        RequestResult(ok=False, error="HTTP 500: boom"),
        RequestResult(ok=False, error="HTTP 500: boom"),
    ]
    slo = parse_slo("ttft_p95=0.5,itl_p95=0.1")
    p = slo.judge(summarize(results, 2.0, profile="concurrency", concurrency=4, rate=None, output_len=4,
                            input_len=10, api="completions", started_at="t"), results)
    assert p.successes == 3 and p.failures == 2 and p.failure_reasons == {"HTTP 500: boom": 2}
    assert p.completion_tokens == 12 and p.output_tok_s == pytest.approx(6.0)
    assert p.total_tok_s == pytest.approx((30 + 12) / 2.0) and p.req_s == pytest.approx(1.5)
    assert p.goodput_req_s == pytest.approx(0.5)  # one good request in 2 s
    assert p.slo_met is False
    assert any(v.startswith("ttft_p95") for v in p.slo_violations)
    assert "2 failed requests" in p.slo_violations
    assert p.itl.n == 9 and p.tpot.n == 3 and p.partial is False


def test_slo_met_when_all_terms_hold():
    results = [req(0.1, [0.02] * 5) for _ in range(4)]
    slo = Slo(terms=parse_slo("ttft_p99=0.2,tpot_p50=0.03").terms)
    p = slo.judge(summarize(results, 1.0, profile="rate", concurrency=None, rate=2.0, output_len=6, input_len=10,
                            api="completions", started_at="t"), results)
    assert p.slo_met is True and p.slo_violations == [] and p.goodput_req_s == pytest.approx(4.0)


def test_poisson_schedule_is_seeded_and_has_the_rate():
    a = poisson_schedule(2000, rate=4.0, seed=7)
    assert a == poisson_schedule(2000, rate=4.0, seed=7)
    assert a != poisson_schedule(2000, rate=4.0, seed=8)
    assert a[0] == 0.0 and all(x < y for x, y in zip(a, a[1:]))
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.08)
    # exponential gaps: standard deviation close to the mean (a fixed schedule would have 0)
    assert statistics.pstdev(gaps) == pytest.approx(0.25, rel=0.12)
    with pytest.raises(UsageError):
        poisson_schedule(3, rate=0)


def test_dataset_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi"}\nnot json\n')
    with pytest.raises(UsageError, match="bad.jsonl:2"):
        load_dataset(bad)
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"answer": "x"}\n')
    with pytest.raises(UsageError, match="none of the fields"):
        load_dataset(wrong)
    good = tmp_path / "good.jsonl"
    good.write_text('{"prompt": "a"}\n\n{"text": "b"}\n')
    assert len(load_dataset(good)) == 2
