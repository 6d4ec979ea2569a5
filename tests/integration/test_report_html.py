"""report.html opens in headless Chromium with no network: screenshot, no console errors, the plots
render with non-zero size, and nothing is fetched.

Chromium is driven through the DevTools protocol over `--remote-debugging-pipe` (JSON messages,
NUL-terminated, on file descriptors 3 and 4), so the test needs only the standard library: no
websocket client, no Selenium. A control page with a broken image and a console error checks that
the harness does see such failures, so a clean result on the report means something.

Chromium is required (CI installs Debian's `chromium` package): a missing binary fails the test.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from quantkit import report as R

pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("QUANTKIT_CHROMIUM", "/usr/bin/chromium")
INSTALL = "apt-get update && apt-get install -y chromium"
WIDTH, HEIGHT = 1400, 2000


class Chromium:
    """A headless Chromium with a fresh profile, spoken to over the DevTools pipe."""

    def __init__(self, profile: Path, timeout: float = 60.0):
        if not Path(CHROMIUM).exists():
            pytest.fail(f"{CHROMIUM} is missing: the HTML report test needs Chromium ({INSTALL})")
        self.timeout = timeout
        self._log = profile.parent / (profile.name + "-chromium.log")
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        # The pipe protocol reads commands on fd 3 and writes replies on fd 4; the child dup2s the
        # pipe ends there, and pass_fds keeps 3 and 4 open through exec.
        # (via fds >= 10 first, so a pipe end that already is 3 or 4 is not overwritten).
        def fds():
            r, w = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars",
             "--remote-debugging-pipe", "about:blank"],
            # a file, not a pipe: Chromium's chatter must never fill a buffer nobody reads
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log.open("wb"),
            preexec_fn=fds, pass_fds=(3, 4), start_new_session=True,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        reply = self._wait(lambda m: m.get("id") == self._id)
        if "error" in reply:
            raise AssertionError(f"DevTools {method} failed: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str) -> dict:
        for e in self.events:
            if e.get("method") == method:
                return e
        return self._wait(lambda m: m.get("method") == method)

    def _wait(self, match) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "method" in msg:
                    self.events.append(msg)
                if match(msg):
                    return msg
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise AssertionError(f"no answer from Chromium within {self.timeout:.0f}s (exit {self.proc.poll()}); "
                                     f"its log: {self.log_tail()}")
            ready, _, _ = select.select([self._r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise AssertionError(f"Chromium closed the DevTools pipe; its log: {self.log_tail()}")
                self._buf += chunk

    def log_tail(self) -> str:
        return self._log.read_text(errors="replace")[-2000:] if self._log.exists() else "(none)"

    def close(self) -> None:
        try:
            os.write(self._w, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()  # only the process this test started
            self.proc.wait()
        finally:
            os.close(self._w)
            os.close(self._r)


def open_page(path: Path, profile: Path) -> dict:
    """Load `path`; return its images, the console errors, the non-local requests and a screenshot."""
    chrome = Chromium(profile)
    try:
        target = chrome.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = chrome.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            chrome.send(f"{domain}.enable", session=session)
        chrome.send("Emulation.setDeviceMetricsOverride",
                    {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}, session=session)
        chrome.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        chrome.wait_event("Page.loadEventFired")
        images = chrome.send("Runtime.evaluate", {"returnByValue": True, "expression": """
            [...document.images].map(i => ({plot: i.dataset.plot || null, complete: i.complete,
              naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight,
              width: i.getBoundingClientRect().width, height: i.getBoundingClientRect().height}))"""},
            session=session)["result"]["value"]
        text = chrome.send("Runtime.evaluate", {"expression": "document.body.innerText", "returnByValue": True},
                           session=session)["result"]["value"]
        shot = base64.b64decode(chrome.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"])
    finally:
        chrome.close()
    errors = []
    for e in chrome.events:
        p = e.get("params", {})
        if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
        elif e["method"] == "Runtime.exceptionThrown":
            errors.append("exception: " + p.get("exceptionDetails", {}).get("text", ""))
        elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append("log: " + p["entry"].get("text", ""))
    requests = [e["params"]["request"]["url"] for e in chrome.events if e["method"] == "Network.requestWillBeSent"]
    remote = [u for u in requests if not u.startswith(("file:", "data:", "about:"))]
    return {"images": images, "errors": errors, "remote": remote, "screenshot": shot, "text": text}


def variants() -> list[R.Variant]:
    """A baseline and two methods, as the real records' JSON shapes (see tests/unit/test_report.py
    for the same built through the pydantic models), plus a failed method."""

    def pt(c, tok_s, ttft, itl):
        s = lambda v: {"n": 8, "mean": v, "p50": v, "p90": v * 1.2, "p95": v * 1.3, "p99": v * 1.5,
                       "min": v / 2, "max": v * 2}
        return {"profile": "concurrency", "concurrency": c, "rate": None, "successes": 8, "failures": 0,
                "output_tok_s": tok_s, "ttft": s(ttft), "itl": s(itl), "partial": False}

    def bench(speed, lines):
        return {"kind": "quantkit.bench", "server": {"kv_cache_tokens": 93184, "vllm_version": "0.32.0",
                                                     "quant_lines": lines},
                "workload": {"input_len": 128, "output_len": 64, "num_prompts": 8, "api": "completions"},
                "points": [pt(c, t * speed, 0.1 * c / speed, 0.05 / speed)
                           for c, t in ((1, 20.0), (4, 60.0), (16, 90.0))], "knee": None}

    def ev(arc):
        return {"kind": "quantkit.eval", "tasks": [
            {"task": "arc_easy", "version": "1.0", "n_shot": 0, "limit": 100, "n_samples": 100,
             "chat_template": False, "add_bos_token": False, "data": {"source": "offline", "template": "stock:arc"},
             "primary_metric": "acc,none", "higher_is_better": True,
             "metrics": {"acc,none": {"value": arc, "stderr": 0.05}}}]}

    def rec(r, passed):
        return {"tasks": [], "mean_recovery": r, "mean_recovery_stderr": 0.1, "passed": passed,
                "gates": [{"gate": "min_recovery", "task": None, "threshold": 0.98, "value": r, "passed": passed}]}

    def conv(method, scheme, size):
        return {"method": method, "scheme": scheme, "group_size": None, "size_bytes": size, "wall_time_s": 30.0,
                "quantization_config": {"format": "int-quantized"}}

    return [
        R.Variant(name="baseline", method="bf16", model_dir="/m", size_bytes=270_000_000,
                  bench=bench(1.0, []), eval=ev(0.60)),
        R.Variant(name="int8", method="int8", model_dir="/m-int8", convert=conv("int8", "W8A8", 140_000_000),
                  bench=bench(1.6, ["Using CPUInt8ScaledMMLinearKernel for CompressedTensorsW8A8Int8"]),
                  eval=ev(0.59), recovery=rec(0.983, True)),
        R.Variant(name="fp8", method="fp8", model_dir="/m-fp8", convert=conv("fp8", "FP8_DYNAMIC", 140_000_000),
                  bench=bench(0.05, []), eval=ev(0.57), recovery=rec(0.95, False)),
        R.Variant(name="gptq", method="gptq", model_dir="/m-gptq", status="failed", error="convert: killed (OOM)"),
    ]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_report_html_renders_in_chromium(tmp_path):
    rep = R.build_report(variants(), title="HTML test report", environment={"device": "NVIDIA H200", "vllm": "0.32.0"},
                         recipe_hash="abc123")
    paths = R.write_report(rep, tmp_path / "report")
    # the HTML must stand alone: view it from a folder where the plots/ PNGs do not exist
    alone = tmp_path / "alone"
    alone.mkdir()
    html = alone / "report.html"
    html.write_bytes(paths["html"].read_bytes())

    page = open_page(html, tmp_path / "profile")

    assert page["errors"] == [], page["errors"]
    assert page["remote"] == [], f"the report fetched from the network: {page['remote']}"
    plots = {i["plot"]: i for i in page["images"] if i["plot"]}
    drawn = {p.name: paths[f"plot:{p.name}"] for p in rep.plots if p.drawn}
    assert set(plots) == set(drawn) == {"recovery_vs_throughput", "itl_vs_throughput", "ttft_vs_concurrency"}
    for name, img in plots.items():
        width, height = png_size(drawn[name].read_bytes())
        # decoded by the browser at the PNG's own size, and laid out with a non-zero box
        assert img["complete"] and (img["naturalWidth"], img["naturalHeight"]) == (width, height), (name, img)
        assert img["width"] > 100 and img["height"] > 50, (name, img)
    for name in ("baseline", "int8", "fp8", "gptq", "convert: killed (OOM)", "Batch-1 decode bound"):
        assert name in page["text"]

    shot = page["screenshot"]
    (tmp_path / "screenshot.png").write_bytes(shot)
    assert png_size(shot) == (WIDTH, HEIGHT)
    from PIL import Image  # matplotlib's own dependency

    image = Image.open(io.BytesIO(shot)).convert("RGB")
    colors = image.getcolors(maxcolors=1 << 20)
    # a blank or error page has a handful of colours; tables, text and plots have thousands
    assert colors is not None and len(colors) > 500, f"screenshot looks empty ({len(colors or [])} colours)"


def test_harness_sees_broken_images_and_console_errors(tmp_path):
    """The control: the same checks on a page with a missing image and a console error fail."""
    page_path = tmp_path / "broken.html"
    page_path.write_text('<!DOCTYPE html><html><body><img data-plot="missing" src="missing.png">'
                         '<script>console.error("boom from the page")</script></body></html>')
    page = open_page(page_path, tmp_path / "profile")
    assert any("boom from the page" in e for e in page["errors"]), page["errors"]
    img = next(i for i in page["images"] if i["plot"] == "missing")
    assert img["naturalWidth"] == 0
