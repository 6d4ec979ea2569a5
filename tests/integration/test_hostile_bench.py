"""`quantkit bench --url` against servers whose misbehaviour is known: figures never come from
requests that were not served (issue 31's misreports and hangs), nor from a server's word (issue 39).

- every request answered HTTP 500: the bench fails (exit 1, one line), not a 0 tok/s point;
- 3 of the 16 tokens asked, then [DONE]: each such request is a failure ("short response"), never
  a fast request, and the bench fails with the reason;
- a server that accepts a completion and never answers: each request fails after the request
  timeout (QUANTKIT_REQUEST_TIMEOUT), with a progress line meanwhile, not 600 s of silence; the
  warm-up's requests too;
- a usage the text received cannot hold: the point counts what came and is flagged, in the store,
  the export and the table;
- events that are not chunk objects: the bench fails in one line, never with a traceback;
- a /v1/models answer over its cap or of the wrong shape, from `--url` or from a vLLM quantkit starts:
  refused in one line, having read no more than the cap.
The servers are the standard library's, in a thread: the truth of each is what it is written to do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer

import pytest

from fixtures.json_http import JsonHandler
from fixtures.scripted_server import DONE, ScriptedServer, chunk, event, fake_vllm, models_answer, usage


def _server(mode: str, model: str) -> ThreadingHTTPServer:
    class Handler(JsonHandler):

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


@pytest.mark.parametrize("command, timeout", [(["-c", "2", "-n", "4"], "2"),
                                              (["--capacity", "--slo", "ttft_p95=1", "--capacity-profile", "burst"], "3.5")])
def test_the_warm_up_honours_the_request_timeout(smollm2_dir, tmp_path, command, timeout):
    """The warm-up's requests had 600 s hard-coded: a silent server was reported after 610 s."""
    server = _server("mute", smollm2_dir.name)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "quantkit", "bench", str(smollm2_dir), "--url", f"http://127.0.0.1:{server.server_address[1]}",
             *command, "--warmup", "1", "--input-len", "8", "--output-len", "16", "--results-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "QUANTKIT_REQUEST_TIMEOUT": timeout})
    finally:
        server.shutdown()
    took = time.monotonic() - started
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert f"warm-up request failed: no complete answer within the request timeout of {timeout} s" in last, last
    assert took < 25, took  # the mute server would answer nothing for 30 s


def scripted_bench(smollm2_dir, tmp_path, server, *extra):
    return subprocess.run(
        [sys.executable, "-m", "quantkit", "bench", str(smollm2_dir), "--url", server.api_url, "-c", "2", "-n", "4",
         "--warmup", "0", "--input-len", "8", "--output-len", "16", "--results-dir", str(tmp_path), *extra],
        capture_output=True, text=True, timeout=120)


# each class's spellings are in tests/unit/test_hostile_streams.py; here, that the verdict reaches the user
CLAIMS = {  # 16 tokens asked, 16 chunks of " tok" received
    "twenty-million": lambda: [event(chunk()) for _ in range(16)] + [event(usage(20_000_000)), DONE],
    "per-chunk-leap": lambda: [event(chunk(" tok", {"prompt_tokens": 8, "completion_tokens": c}))
                               for c in [*range(1, 16), 20_000_000]] + [DONE],
}


@pytest.mark.parametrize("name", CLAIMS)
def test_a_usage_the_text_cannot_hold_is_flagged_in_the_store_the_export_and_the_table(smollm2_dir, tmp_path, name):
    """Issue 39: 16 chunks then usage 20,000,000 was stored `done` at 8,245,722,531 out tok/s."""
    from quantkit.store import Store

    with ScriptedServer(stream=lambda body: CLAIMS[name](), model=smollm2_dir.name) as server:
        proc = scripted_bench(smollm2_dir, tmp_path, server)
    assert proc.returncode == 0, proc.stderr[-2000:]
    exported = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    (point,) = exported["points"]
    assert point["successes"] == 4 and point["completion_tokens"] == 4 * 16
    assert point["output_tok_s"] < 64 / point["duration_s"] * 1.01  # what came, in the time it took
    assert point["usage_mismatch"] and point["usage_mismatch_reason"].startswith("4 of 4 requests: usage claimed")
    with Store() as store:
        record = [r for r in store.records(kind="bench", status="done") if r.params.get("url") == server.api_url][-1]
        (stored,) = store.points(record.id)
    assert stored["usage_mismatch_reason"] == point["usage_mismatch_reason"] and stored["completion_tokens"] == 64
    table = [line for line in proc.stdout.splitlines() if line.strip().startswith("c=2")]
    assert table and table[0].split()[0] == "c=2*", proc.stdout
    assert f"* c=2: usage mismatch: the server's token counts disagreed with the text it sent: {point['usage_mismatch_reason']}" \
        in " ".join(proc.stdout.split()), proc.stdout
    assert "usage mismatch" in proc.stderr  # the progress line


NOT_CHUNKS = {
    "null": (b"data: null\n\n", "an event that is null, not a JSON object"),
    "not-json": (b'data: {"choices":[{"text":" tok"}\n\n', "an event that is not JSON"),
}


@pytest.mark.parametrize("name", NOT_CHUNKS)
def test_events_that_are_not_chunks_fail_the_bench_in_one_line(smollm2_dir, tmp_path, name):
    bad, said = NOT_CHUNKS[name]
    with ScriptedServer(stream=lambda body: [event(chunk()), bad] + [event(chunk())] * 15 + [DONE],
                        model=smollm2_dir.name) as server:
        proc = scripted_bench(smollm2_dir, tmp_path, server)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "every request of the point at concurrency 2 failed (4 x the server sent " + said in last, last


@pytest.mark.parametrize("kind", ["huge", "list"])  # the other shapes: tests/unit/test_capped_answers.py
@pytest.mark.parametrize("started", ["url", "vllm"])
def test_a_model_list_over_its_cap_or_of_the_wrong_shape_is_refused_in_one_line(smollm2_dir, tmp_path, kind, started):
    """Issue 39: a 400 MB /v1/models was read whole (RSS 1.78 GB) and accepted; `[]` was a raw
    AttributeError while quantkit waited for the vLLM it started."""
    sent = tmp_path / "sent"
    if started == "url":
        with ScriptedServer(stream=lambda body: [DONE], model=smollm2_dir.name,
                            models=models_answer(kind, smollm2_dir.name), sent_file=str(sent)) as server:
            proc = scripted_bench(smollm2_dir, tmp_path, server)
        where = server.api_url + "/models"
    else:
        env = {**os.environ, "QUANTKIT_VLLM": str(fake_vllm(tmp_path)), "SCRIPTED_MODELS": kind,
               "SCRIPTED_SENT": str(sent)}
        proc = subprocess.run([sys.executable, "-m", "quantkit", "bench", str(smollm2_dir), "-c", "1",
                               "--startup-timeout", "60", "--results-dir", str(tmp_path)],
                              capture_output=True, text=True, timeout=120, env=env)
        where = "/v1/models"
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    said = "answered with more than 4 MiB" if kind == "huge" else "did not answer a model list"
    assert said in last and where in last, last
    if started == "vllm":
        assert "is not answering as vLLM does" in last
    if kind == "huge":
        # of 64 MB: the cap and a few socket buffers (no file: killed before its first piece went out)
        assert (int(sent.read_text()) if sent.exists() else 0) < 12 << 20
