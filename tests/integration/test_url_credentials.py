"""`quantkit bench --url http://user:password@host/v1` (issue 39): the credentials reach the server
on every request, and nothing quantkit stores, exports or prints holds them: not the store, the
bench JSON, `runs show`, the logs, the result on stdout or an error line.

The server is the standard library's, in a thread, behind HTTP Basic authentication (as a reverse
proxy in front of vLLM would be): it streams exactly the tokens asked, and counts the requests that
carried the credentials and those that did not. No vLLM.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from fixtures.json_http import JsonHandler

SECRET = "pw-S3cr3tValue0123456789"


class BasicAuthServer:
    """An OpenAI-compatible streaming server that wants `Authorization: Basic user:password`."""

    def __init__(self, model: str, user: str, password: str):
        self.expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.authorized = self.refused = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(model))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def _count(self, ok: bool) -> None:
        with self._lock:
            if ok:
                self.authorized += 1
            else:
                self.refused += 1

    def _handler(self, model: str):
        server = self

        class Handler(JsonHandler):

            def _allowed(self) -> bool:
                ok = self.headers.get("Authorization") == server.expected
                server._count(ok)
                if not ok:
                    self._json(401, {"error": "Unauthorized"})
                return ok

            def do_GET(self) -> None:  # noqa: N802
                if not self._allowed():
                    return
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
                elif self.path == "/version":
                    self._json(200, {"version": "0.0.0-basic-auth"})
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if not self._allowed():
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                n = int(body.get("max_tokens") or 16)
                for _ in range(n):
                    chunk = {"choices": [{"index": 0, "text": " t", "finish_reason": None}], "usage": None}
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                usage = {"prompt_tokens": len(body.get("prompt") or []), "completion_tokens": n,
                         "total_tokens": n + len(body.get("prompt") or [])}
                self.wfile.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        return Handler

    def stop(self) -> None:
        self._httpd.shutdown()


def _quantkit(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QUANTKIT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "300"}
    env.pop("OPENAI_API_KEY", None)
    env.pop("QUANTKIT_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "quantkit", *args], capture_output=True, text=True, timeout=180, env=env)


def _everything_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


# (user, password, how the URL spells them): a password, percent-escapes, a token as the user, no
# /v1 (the last two: `make test-slow`, the same path again)
SPELLINGS = [
    ("alice", SECRET, "http://alice:{password}@127.0.0.1:{port}/v1"),
    ("alice", f"p@ss:{SECRET}/x", "http://alice:{quoted}@127.0.0.1:{port}/v1"),
    pytest.param(SECRET, "", "http://{user}@127.0.0.1:{port}/v1/", marks=pytest.mark.slow),
    pytest.param("alice", SECRET, "http://alice:{password}@127.0.0.1:{port}", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("user, password, spelling", SPELLINGS)
def test_bench_with_credentials_in_the_url_sends_them_and_keeps_none(smollm2_dir, tmp_path, user, password, spelling):
    server = BasicAuthServer(smollm2_dir.name, user, password)
    url = spelling.format(user=user, password=password, quoted=quote(password, safe=""), port=server.port)
    home, results = tmp_path / "home", tmp_path / "results"
    try:
        proc = _quantkit(home, "bench", str(smollm2_dir), "--url", url, "-c", "2", "-n", "4", "--warmup", "0",
                         "--input-len", "8", "--output-len", "16", "--results-dir", str(results), "--json")
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr
    assert server.authorized >= 4 + 1 and server.refused == 0  # every request carried them (the 4, /v1/models, ...)
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    result = json.loads(proc.stdout)
    assert result["server"]["url"] == f"http://127.0.0.1:{server.port}" and result["points"][0]["successes"] == 4
    (export,) = results.glob("bench-*.json")
    stored = _everything_under(home) + _everything_under(results)
    assert SECRET.encode() not in stored and quote(SECRET).encode() not in stored
    assert json.loads(export.read_text())["server"]["url"] == f"http://127.0.0.1:{server.port}"
    from quantkit.store import Store

    with Store(home / "results.db") as store:
        (record,) = store.records()
    shown = _quantkit(home, "runs", "show", record.run_key, "--json")
    assert shown.returncode == 0 and SECRET not in shown.stdout + shown.stderr, shown.stdout
    assert json.loads(shown.stdout)["params"]["url"] == url.replace(url[len("http://"):url.index("@") + 1], "")


@pytest.mark.parametrize("case", ["unreachable", "wrong password",
                                  pytest.param("not an OpenAI server", marks=pytest.mark.slow)])
def test_an_error_line_never_shows_the_urls_credentials(smollm2_dir, tmp_path, case):
    server = BasicAuthServer(smollm2_dir.name, "alice", "the-right-one")
    url = {"unreachable": f"http://alice:{SECRET}@127.0.0.1:9/v1",
           "wrong password": f"http://alice:{SECRET}@127.0.0.1:{server.port}/v1",
           "not an OpenAI server": f"http://alice:the-right-one@127.0.0.1:{server.port}/nothing-here?token={SECRET}"}[case]
    try:
        proc = _quantkit(tmp_path / "home", "bench", str(smollm2_dir), "--url", url, "-c", "1", "--json")
    finally:
        server.stop()
    assert proc.returncode in (1, 2), proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert "127.0.0.1" in error and SECRET not in error and SECRET not in proc.stderr, proc.stderr
    assert SECRET.encode() not in _everything_under(tmp_path / "home")
