"""`quantkit bench --url` against servers whose misbehaviour is known: figures never come from
requests that were not served (issue 31's misreports and hangs).

- every request answered HTTP 500: the bench fails (exit 1, one line), not a 0 tok/s point;
- 3 of the 16 tokens asked, then [DONE]: each such request is a failure ("short response"), never
  a fast request, and the bench fails with the reason;
- a server that accepts a completion and never answers: each request fails after the request
  timeout (QUANTKIT_REQUEST_TIMEOUT), with a progress line meanwhile, not 600 s of silence.
The servers are the standard library's, in a thread: the truth of each is what it is written to do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


def _server(mode: str, model: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _json(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            self._json(200, {"object": "list", "data": [{"id": model, "object": "model"}]})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if mode == "500":
                return self._json(500, {"error": {"message": "internal error"}})
            if mode == "mute":
                time.sleep(30)  # accepts, never answers within the test's timeout
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(3):  # "short": 3 tokens, whatever was asked
                chunk = {"choices": [{"index": 0, "text": " t", "finish_reason": None}], "usage": None}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
                time.sleep(0.01)
            usage = {"prompt_tokens": len(body.get("prompt") or []), "completion_tokens": 3, "total_tokens": 3}
            self.wfile.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def bench(smollm2_dir, url, tmp_path, **env):
    return subprocess.run(
        [sys.executable, "-m", "quantkit", "bench", str(smollm2_dir), "--url", url, "-c", "2", "-n", "4",
         "--warmup", "0", "--input-len", "8", "--output-len", "16", "--results-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **env})


@pytest.mark.parametrize("mode, expect", [("500", "HTTP 500"), ("short", "short response: 3 of 16 tokens")])
def test_a_point_without_served_requests_fails_with_the_reason(smollm2_dir, tmp_path, mode, expect):
    server = _server(mode, smollm2_dir.name)
    try:
        proc = bench(smollm2_dir, f"http://127.0.0.1:{server.server_address[1]}", tmp_path)
    finally:
        server.shutdown()
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "every request of the point at concurrency 2 failed" in last and expect in last, proc.stderr
    exported = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    point = exported["points"][0]
    assert point["successes"] == 0 and point["failures"] == 4 and not point["client_limited"]
    assert point["output_tok_s"] == 0 and exported["error"]  # kept, and said to have failed


def test_a_server_that_never_answers_times_out_with_progress(smollm2_dir, tmp_path):
    server = _server("mute", smollm2_dir.name)
    started = time.monotonic()
    try:
        proc = bench(smollm2_dir, f"http://127.0.0.1:{server.server_address[1]}", tmp_path,
                     QUANTKIT_REQUEST_TIMEOUT="4")
    finally:
        server.shutdown()
    took = time.monotonic() - started
    assert proc.returncode == 1 and took < 60, (took, proc.stderr)
    assert "no request finished in the last" in proc.stderr
    assert "no complete answer within the request timeout of 4 s" in proc.stderr.strip().splitlines()[-1]
