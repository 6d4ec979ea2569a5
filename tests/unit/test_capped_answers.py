"""A server's answers are read to a cap (issue 39: a 400 MB /v1/models was read whole, 1.78 GB of
memory, and accepted). Each reader of a server's answer is given a huge one by a scripted loopback
server that counts what it managed to send: the reader refuses it, or cannot say, having let through
no more than its cap and a few socket buffers; answers of the wrong shape are one-line errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fixtures.scripted_server import ScriptedServer, endless, models_answer
from quantkit.errors import BackendError
from quantkit.serve.server import RemoteServer

API_LIMIT, METRICS_LIMIT = 4 << 20, 32 << 20  # serve/answers.py's caps


def _socket_slack() -> int:
    """What a loopback connection can hold beyond what the reader took: the kernel's largest send
    and receive buffers (tcp_wmem, tcp_rmem: they grow while the reader is slow to run, as beside
    another test worker) and 2 MiB of the client's own. A fixed 8 MiB failed on 12-06 under two
    pytest-xdist workers: 42.7 MB sent against a 32 MiB cap where this kernel allows 4 + 32 MiB."""
    try:
        most = sum(int(Path(f"/proc/sys/net/ipv4/{name}").read_text().split()[2]) for name in ("tcp_wmem", "tcp_rmem"))
    except (OSError, ValueError, IndexError):
        return 8 << 20
    return most + (2 << 20)


SLACK = _socket_slack()
# answers large enough that a reader which read them whole would exceed its cap and the slack twice over
HUGE = max(64 << 20, 2 * (API_LIMIT + SLACK))
HUGE_METRICS = max(4 * METRICS_LIMIT, 2 * (METRICS_LIMIT + SLACK))


def test_a_huge_model_list_is_refused_not_read_whole():
    with ScriptedServer(models=models_answer("huge", "scripted", HUGE)) as server:
        with pytest.raises(BackendError) as caught:
            RemoteServer(server.url)
        assert server.sent < API_LIMIT + SLACK, server.sent
    assert str(caught.value) == (f"{server.api_url}/models answered with more than 4 MiB; "
                                 "is it an OpenAI-compatible server?")


@pytest.mark.parametrize("kind", ["list", "data-string", "null", "not-json"])
def test_a_model_list_of_the_wrong_shape_is_one_line(kind):
    with ScriptedServer(models=models_answer(kind, "scripted")) as server:
        with pytest.raises(BackendError) as caught:
            RemoteServer(server.url)
    assert str(caught.value) == (f"{server.api_url}/models did not answer a model list (JSON: an object with a "
                                 "`data` list); is it an OpenAI-compatible server?")


def test_the_liveness_check_reads_no_body():
    with ScriptedServer() as server:
        remote = RemoteServer(server.url)
        server.models = models_answer("huge", "scripted", HUGE)
        before = server.sent
        assert remote.alive()
        assert server.sent - before < SLACK, server.sent - before


def metrics_of(size: int):
    return lambda: list(endless(b"vllm:num_requests_running 1\n" * 2048, size))


def test_a_huge_metrics_page_is_no_series():
    from quantkit.measure.observe.metrics import PointMonitor

    with ScriptedServer(metrics=metrics_of(HUGE_METRICS)) as server:
        monitor = PointMonitor(server.url, interval_s=60).start()
        monitor.stop()
        assert monitor.scrapes == [] and "more than 32 MiB" in monitor.error
        assert server.sent < 2 * (METRICS_LIMIT + SLACK), server.sent  # two scrapes: start and stop


def test_a_huge_metrics_page_cannot_say_whether_the_server_drained():
    from quantkit.measure.loadgen.drain import wait_idle

    with ScriptedServer(metrics=metrics_of(HUGE_METRICS)) as server:
        drained = asyncio.run(wait_idle(server.url, limit_s=5))
        assert drained.left is None and not drained.busy
        assert server.sent < METRICS_LIMIT + SLACK, server.sent
