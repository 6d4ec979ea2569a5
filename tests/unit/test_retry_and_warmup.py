"""A point measured again waits for the server to drain first; the warm-up asked for is kept.

Seen on an H200 (docs/reports/h200/steady-2026-12-03): a point the client limited was measured
again at once, on 300-400 requests the first attempt had just cancelled; and a window asked to
warm up for 10 s with a 25-s cap warmed up for 8.3 s, silently."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from quantkit.measure.loadgen.drain import wait_idle
from quantkit.measure.stats.point import WindowSettings
from quantkit.measure.stats.window import effective_warmup


class Draining(BaseHTTPRequestHandler):
    """/metrics with a running gauge that falls by one per scrape: drained after `left` scrapes."""

    left = 3

    def do_GET(self):  # noqa: N802 - http.server's name
        body = (f"vllm:num_requests_running{{model_name=\"m\"}} {max(Draining.left, 0)}.0\n"
                "vllm:num_requests_waiting{model_name=\"m\"} 0.0\n").encode()
        Draining.left -= 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_retry_waits_until_the_server_has_nothing_running():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Draining)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        drained = asyncio.run(wait_idle(f"http://127.0.0.1:{server.server_port}", limit_s=10))
        assert Draining.left < 0 and drained.waited_s >= 1.0  # three 0.5-s polls with requests left
        assert drained.left == 0 and not drained.busy
    finally:
        server.shutdown()


def test_no_metrics_means_no_wait():
    drained = asyncio.run(wait_idle("http://127.0.0.1:9", limit_s=10))
    assert drained.left is None and not drained.busy


def test_the_warm_up_asked_for_is_kept():
    assert effective_warmup([], WindowSettings(warmup_s=10, min_s=20, max_s=25)) == 10
    assert effective_warmup([], WindowSettings(warmup_s=2, min_s=6, max_s=15)) == 2
