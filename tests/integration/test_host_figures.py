"""The CPU of a server's processes, sampled through a load point, against the processes' own clocks.

The server is the continuous-batching engine fixture (tests/fixtures/engine_server.py) found as
`bench --url` finds a local server: by the process listening on its port. It runs a child titled as
vLLM titles its engine core (`VLLM::EngineCore`) that keeps a known share of a core busy and writes
its own CPU time; the fixture's process is the API server and reports its CPU time; the test's
process is quantkit's client. The point's stored `host` figures must agree with all three.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))

import engine_sim as sim  # noqa: E402
from engine_server import EngineServer  # noqa: E402

from quantkit.measure.capacity.bench import measure_point  # noqa: E402
from quantkit.measure.loadgen.generator import Target  # noqa: E402
from quantkit.measure.loadgen.workload import Prompt  # noqa: E402
from quantkit.measure.observe.bounds import classify  # noqa: E402
from quantkit.measure.observe.host import HostSummary, open_host  # noqa: E402
from quantkit.serve.server import RemoteServer  # noqa: E402

SHARE = 0.4  # of a core, burnt by the engine core's stand-in


def close(sampled: float, truth: float) -> bool:
    """Within 0.05 CPU-seconds and 10%: the truths are read a few ms outside the sampler's window,
    and the burner writes its clock every 50 ms."""
    return abs(sampled - truth) <= 0.05 + 0.10 * truth


def test_the_sampled_cpu_of_each_process_is_its_own_clocks(tmp_path):
    with EngineServer(sim.EngineSpec(), engine_core_cpu=SHARE, engine_core_file=tmp_path / "core-cpu") as fixture:
        deadline = time.monotonic() + 10
        while fixture.engine_core_cpu_s() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        server = RemoteServer(fixture.url)
        host = open_host(server)
        assert host.server_pid == fixture.proc.pid and host.unmeasured is None, host.source
        target = Target(api_url=fixture.api_url, model="engine")
        prompts = [Prompt(token_ids=[5 + i % 997] * 64) for i in range(96)]
        api0, core0, client0 = fixture.stats()["cpu_s"], fixture.engine_core_cpu_s(), time.process_time()
        point = measure_point(server, target, prompts, 64, concurrency=16, host=host, interval_s=0.5, workers=1)
        client1, core1, api1 = time.process_time(), fixture.engine_core_cpu_s(), fixture.stats()["cpu_s"]
    h = HostSummary.model_validate(point.host)
    print(f"\nwindow {h.duration_s} s, {h.samples} samples: " + "; ".join(
        f"{role} {r.cpu_s:.3f} CPU-s, {r.cores_mean:.2f} cores (max {r.cores_max:.2f}, busiest {r.busiest:.2f})"
        for role, r in h.roles.items()) + f"; truths: engine core {core1 - core0:.3f}, API server {api1 - api0:.3f}, "
        f"client {client1 - client0:.3f} CPU-s")
    assert h.samples >= 5 and h.duration_s >= 2 and "listening on port" in h.source
    core, api, client = h.roles["engine_core"], h.roles["api_server"], h.roles["client"]
    assert core.names == ["VLLM::EngineCore"] and core.processes == 1 and api.processes == 1
    assert close(core.cpu_s, core1 - core0), (core.cpu_s, core1 - core0)
    assert close(api.cpu_s, api1 - api0), (api.cpu_s, api1 - api0)
    # the client's clock was read around the whole of measure_point (its drain check, the summaries):
    # the sampled window lies between the load generator's own CPU in it and that
    assert point.client.cpu_s * 0.9 <= client.cpu_s <= client1 - client0 + 0.02, (point.client, client1 - client0)
    # one process each: the busiest is the role's own mean, and at most the share it was asked for
    assert core.busiest == pytest.approx(core.cores_mean, abs=0.02) and core.cores_mean <= SHARE + 0.05
    bound = classify(point.model_dump(mode="json"))
    assert bound.figures["engine_core_busiest"] == core.busiest and bound.figures["api_server_busiest"] == api.busiest
    assert bound.kind != "host" or api.busiest >= 0.9  # a CPU backend: the engine core never names the host
