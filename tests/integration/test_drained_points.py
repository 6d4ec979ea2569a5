"""Each load point starts on an idle server (issue 39): against a server that keeps working on requests
whose client went away, a capacity point inherited 700 requests from the saturated one before it
and failed at a load the server sustains.

The server is the continuous-batching engine fixture (tests/fixtures/engine_server.py) with
`keep_abandoned`: it works on a request to its last token whatever the client does. A flood of
requests is abandoned (they time out on the client, or their point is stopped early, some of them
queued); the next point waits until /metrics shows the engine drained, and its first scrape sees
an idle server. With a drain limit shorter than the flood, the point is measured anyway and flagged
`started_busy`, in the store, the export and the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))

import engine_sim as sim  # noqa: E402
from engine_server import EngineServer  # noqa: E402

from quantkit.measure.capacity.bench import measure_point  # noqa: E402
from quantkit.measure.loadgen.generator import Target, run_point  # noqa: E402
from quantkit.measure.observe.metrics import parse  # noqa: E402
from quantkit.measure.loadgen.workload import Prompt  # noqa: E402
from quantkit.serve.server import RemoteServer  # noqa: E402


def prompts(n: int, seed: int, length: int = 64) -> list[Prompt]:
    return [Prompt(token_ids=[5 + (seed * 131 + i) % 997] * length) for i in range(n)]


def in_flight(url: str) -> float:
    gauges = parse(httpx.get(url + "/metrics", timeout=10).text).gauges
    return gauges["running"] + gauges["waiting"]


def abandon(fixture: EngineServer, how: str, n: int = 48, output_len: int = 160) -> None:
    """Leave `n` requests of `output_len` tokens with the engine, their client gone."""
    target = Target(api_url=fixture.api_url, model="engine")
    if how == "stopped-early":  # a point whose verdict was decided: its requests in flight are cancelled
        run_point(target, prompts(n, 1), output_len, concurrency=n, workers=1,
                  stop_when=lambda finished, elapsed: "decided" if elapsed >= 1 else None)
    else:  # "timed-out": every request outlives the client's request timeout
        run_point(target, prompts(n, 1), output_len, concurrency=n, workers=1, request_timeout=1.0)


FLOODS = {
    "timed-out": sim.EngineSpec(),
    "stopped-early": sim.EngineSpec(),
    "queued": sim.EngineSpec(max_num_seqs=8),  # most of the flood waits in the engine's queue
}


@pytest.mark.parametrize("flood", FLOODS)
def test_a_point_starts_once_the_server_has_finished_the_requests_left_behind(flood, monkeypatch):
    monkeypatch.setenv("QUANTKIT_DRAIN_TIMEOUT", "120")
    with EngineServer(FLOODS[flood], keep_abandoned=True) as fixture:
        abandon(fixture, "timed-out" if flood == "queued" else flood)
        left = in_flight(fixture.url)
        assert left > 0  # the engine kept them: what the next point must not inherit
        started = time.monotonic()
        point = measure_point(RemoteServer(fixture.url), Target(api_url=fixture.api_url, model="engine"),
                              prompts(4, 2), 16, concurrency=1, interval_s=0.5)
        waited = time.monotonic() - started
    metrics = point.server_metrics
    assert metrics["running"]["first"] == 0 and metrics["waiting"]["first"] == 0, (left, metrics)
    assert point.failures == 0 and waited > 1.0  # it waited for the flood to drain, then measured
    assert not point.started_busy and point.started_busy_reason is None


def test_a_point_that_could_not_wait_long_enough_is_flagged_in_the_store_the_export_and_the_table(
        smollm2_dir, tmp_path):
    from quantkit.store import Store

    # ~25 s of work for the engine (128 streams of 600 tokens): longer than the CLI's start and its 1-s drain limit
    with EngineServer(sim.EngineSpec(), model=smollm2_dir.name, keep_abandoned=True) as fixture:
        abandon(fixture, "timed-out", n=128, output_len=600)
        proc = subprocess.run(
            [sys.executable, "-m", "quantkit", "bench", str(smollm2_dir), "--url", fixture.api_url, "-c", "1", "-n", "2",
             "--warmup", "0", "--input-len", "8", "--output-len", "8", "--results-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=180, env={**os.environ, "QUANTKIT_DRAIN_TIMEOUT": "1"})
        assert in_flight(fixture.url) > 0  # still busy after the point: the flag was due
    assert proc.returncode == 0, proc.stderr[-2000:]
    exported = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    (point,) = exported["points"]
    reason = point["started_busy_reason"]
    assert point["started_busy"] and reason.startswith("the server still had ") and "QUANTKIT_DRAIN_TIMEOUT: 1 s" in reason
    with Store() as store:
        record = [r for r in store.records(kind="bench", status="done") if r.params.get("url") == fixture.api_url][-1]
        (stored,) = store.points(record.id)
    assert stored["started_busy_reason"] == reason
    table = [line for line in proc.stdout.splitlines() if line.strip().startswith("c=1")]
    assert table and table[0].split()[0] == "c=1*", proc.stdout
    assert f"* c=1: started busy: {reason}; its figures may carry that load" in " ".join(proc.stdout.split())
