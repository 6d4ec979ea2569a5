"""One load-generator worker: an event loop that streams requests and watches itself.

The hot path per streamed chunk is kept small, because a client that spends its core on parsing
reads tokens late, in bursts, and then measures itself instead of the server (issue 13):
- aiohttp (its C HTTP parser) and uvloop where installed; `benchmarks/loadgen_choices.py`
  measured httpx at ~4-5x the CPU per token of this path.
- SSE events are cut out of each network read as bytes, and each is parsed (orjson where
  installed, ~1 us a chunk) and checked as the object it must be (`_tally`): a chunk a server sends
  is evidence to check, not a count to trust. An event that is not one (not JSON, not an object,
  a usage that is no count) fails its request, never the program; so does an event over
  MAX_EVENT_BYTES, or more token chunks than the `max_tokens` asked (each carries at least one
  token), which also bounds every per-request list.
- Per request only raw facts are kept: the time of each network read that carried token chunks,
  how many it carried, the text's size, and what the server's usage claimed. `tokens.credit`
  decides what is counted and `point.token_timeline` turns it into TTFT / ITL / E2E afterwards,
  off the hot path.

The worker also measures itself: its process CPU time over the point, and the lag of its event
loop (how late a 20 ms timer fires, sampled all through the point); for rate profiles, how late
each send was against its schedule. `loadgen` runs one worker in its own process for low loads
or several in worker processes that share the schedule.

This module imports only the standard library and aiohttp (and uvloop/orjson if present), so
worker processes start fast.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import threading
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable

try:
    import orjson

    loads: Callable[[bytes], Any] = orjson.loads
    JSON_LIB = "orjson"
except ImportError:  # pragma: no cover - the lock pins orjson; a bare install still works
    loads = json.loads
    JSON_LIB = "json"

LAG_PROBE_S = 0.02
SERVER_DIED = "server died before the request was sent"
STOPPED = "the point was stopped early"  # its verdict was decided: cut off or never sent, not measured
MAX_EVENT_BYTES = 1 << 20  # one SSE event: vLLM's chunks are ~300 bytes, a few KB with logprobs
MAX_ERROR_BODY_BYTES = 64 << 10  # of a non-200 answer: the first 300 characters are shown
SPARE_CHUNKS = 1  # token chunks beyond max_tokens taken: a closing chunk that carries only the finish
# An idle pooled connection is reused only this long, well inside the server's own keep-alive: vLLM's
# uvicorn closes an idle one after VLLM_HTTP_TIMEOUT_KEEP_ALIVE = 5 s, aiohttp would keep it 15 s, and
# a worker whose loop runs late picks the closed socket before it reads the FIN, so the request fails
# ("Server disconnected") without reaching the server: 1 of 87 requests in a 12-07 H100 point, judged broken.
KEEPALIVE_S = 2.0


class BadEvent(ValueError):
    """An event that is not what a completion stream sends: its request fails with this reason."""


def event_loop_name() -> str:
    try:
        import uvloop  # noqa: F401

        return "uvloop"
    except ImportError:
        return "asyncio"


def run_loop(coro):
    """Run a coroutine on uvloop where installed (its callbacks cost about half of asyncio's).

    Where the program has its own SIGINT/SIGTERM handler (quantkit's CLI raises KeyboardInterrupt
    from it), a signal that arrives while the loop runs cancels the coroutine, whose clean-up runs
    as CancelledError, and the program's handler is called once the loop has stopped. Raised inside
    the loop, the KeyboardInterrupt would land in whatever callback was running, where uvloop logs
    it as a transport error and carries on (CI saw a Ctrl-C end as one failed request and exit 0).

    The signal is caught by a plain Python handler set before the loop starts and put back after it
    has closed, not by `loop.add_signal_handler`: that one hands the signal over through the loop's
    self-pipe, and a signal that arrived while the coroutine's last stretch ran without yielding was
    still in the pipe when the handler was removed, so nothing ever saw it (CI: a tune ran on to
    exit 0 through a Ctrl-C)."""
    caught: list[int] = []
    running: dict[str, Any] = {}

    def on_signal(signum, frame) -> None:  # noqa: ARG001
        caught.append(signum)
        loop, task = running.get("loop"), running.get("task")
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if callable(handler) and handler is not signal.default_int_handler:
                previous[signum] = signal.signal(signum, on_signal)

    async def guarded():
        running.update(loop=asyncio.get_running_loop(), task=asyncio.current_task())
        if caught:  # the signal came before the loop ran
            coro.close()
            raise asyncio.CancelledError
        try:
            return await coro
        finally:
            running.clear()

    try:
        from uvloop import run
    except ImportError:
        run = asyncio.run
    # A full collection scans every object: ~0.5 M with torch and llm-compressor imported, 200-400 ms
    # that made the demo's sends 344 ms late. Frozen, the old objects are left out of the scans.
    gc.freeze()
    try:
        try:
            result = run(guarded())
        except asyncio.CancelledError:
            if not caught:
                raise
            result = None
    finally:
        gc.unfreeze()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if caught:
        handler = previous.get(caught[0])
        if callable(handler):
            handler(caught[0], None)
        raise KeyboardInterrupt
    return result


@dataclass
class Job:
    """What a worker sends: plain data, so it pickles to worker processes."""

    url: str
    bodies: list[bytes]
    chat: bool = False
    slots: int = 1  # requests this worker keeps in flight at most
    offsets: list[float] | None = None  # rate profile: send times (s from t0) per request index
    indices: list[int] | None = None  # rate profile: the request indices this worker sends
    request_timeout: float = 600.0
    headers: dict[str, str] = field(default_factory=dict)
    finished_path: str | None = None  # where a worker appends each finished Raw (the parent's stop rule reads it)
    start_delays: list[float] | None = None  # concurrency profile: each slot's first send (s after t0), a staggered start
    max_tokens: int | None = None  # what each request asks: no stream may carry more token chunks


@dataclass
class Raw:
    """One request as the worker saw it (times are perf_counter seconds, a clock all processes share).
    Every list grows by at most one entry per token chunk, and a stream may carry no more than
    `asked` + SPARE_CHUNKS of them: the lists are bounded by the tokens asked, whatever the server says."""

    index: int
    asked: int | None = None  # max_tokens of the request
    start: float = 0.0
    error: str | None = None
    status_ok: bool = False
    read_times: array = field(default_factory=lambda: array("d"))  # reads that carried token chunks
    read_chunks: array = field(default_factory=lambda: array("i"))  # token chunks in each of those reads
    # per-chunk usage (continuous_usage_stats): the tokens claimed so far at each of those reads, -1 where none
    read_claims: array = field(default_factory=lambda: array("q"))
    chunks: int = 0  # token chunks: a completions chunk with a choice, a chat delta with content
    text_chunks: int = 0  # of those, the ones whose text was not empty
    text_bytes: int = 0  # the UTF-8 bytes of the text they carried
    first_choice: float | None = None  # first chunk with choices (TTFT, as vLLM bench takes it)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None  # what the server's last usage claimed (tokens.credit checks it)
    send_lag: float | None = None  # rate profile: how late the send was against its schedule
    sent: bool = False  # it reached the server (a STOPPED one was then cut off in flight, else never sent)


@dataclass
class WorkerReport:
    raws: list[Raw]
    cpu_s: float  # this worker's process CPU time between its start signal and its end
    wall_s: float
    end: float  # perf_counter of the last completion
    lag_ms: array  # event-loop lag samples
    t0: float = 0.0  # the point's start (perf_counter)


def headers(api_key: str | None = None) -> dict[str, str]:
    """Request headers: the server's API key (the one quantkit started it with, or QUANTKIT_API_KEY
    for --url), else OPENAI_API_KEY, as a bearer token."""
    out = {"Content-Type": "application/json"}
    if key := api_key or os.environ.get("OPENAI_API_KEY"):
        out["Authorization"] = f"Bearer {key}"  # as vLLM bench sends it
    return out


def _error_message(text: str) -> str:
    try:
        data = json.loads(text)
        err = data.get("error", data)
        msg = err.get("message") if isinstance(err, dict) else err
        return " ".join(str(msg or data.get("detail") or text).split())[:300]
    except (ValueError, AttributeError):
        return " ".join(text.split())[:300]


def _kind(value: Any) -> str:
    return "null" if value is None else {bool: "a boolean", int: "a number", float: "a number", str: "a string",
                                         list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _count(usage: dict, key: str) -> int | None:
    value = usage.get(key)
    if value is None or (type(value) is int and value >= 0):
        return value
    raise BadEvent(f"a usage whose {key} is {value!r:.40}, not a count of tokens")


def _text(holder: dict, key: str) -> str:
    value = holder.get(key)
    if value is None:
        return ""
    if type(value) is not str:
        raise BadEvent(f"a {key} that is {_kind(value)}, not text")
    return value


def _tally(obj: Any, chat: bool, raw: Raw, now: float) -> tuple[int, int | None]:
    """Check one parsed event as the chunk it must be and record it in `raw`: (token chunks it
    carried, 0 or 1; the tokens its per-chunk usage claims so far, or None). Raises BadEvent for
    anything else: the hot path, so plain type checks, not a pydantic model per chunk."""
    if type(obj) is not dict:
        raise BadEvent(f"an event that is {_kind(obj)}, not a JSON object")
    choices, usage = obj.get("choices"), obj.get("usage")
    claimed = None
    if usage is not None:
        if type(usage) is not dict:
            raise BadEvent(f"a usage that is {_kind(usage)}, not an object")
        claimed = _count(usage, "completion_tokens")
        raw.prompt_tokens = _count(usage, "prompt_tokens")
        raw.completion_tokens = claimed
    if choices is None:
        return 0, None
    if type(choices) is not list:
        raise BadEvent(f"choices that are {_kind(choices)}, not a list")
    if not choices:
        return 0, None
    choice = choices[0]
    if type(choice) is not dict:
        raise BadEvent(f"a choice that is {_kind(choice)}, not an object")
    if raw.first_choice is None:
        raw.first_choice = now
    if chat:
        delta = choice.get("delta")
        if delta is None:
            return 0, claimed
        if type(delta) is not dict:
            raise BadEvent(f"a delta that is {_kind(delta)}, not an object")
        text = _text(delta, "content") + _text(delta, "reasoning_content") + _text(delta, "reasoning")
        tools = delta.get("tool_calls")
        if tools is not None and type(tools) is not list:
            raise BadEvent(f"tool_calls that are {_kind(tools)}, not a list")
        if not (text or tools):
            return 0, claimed  # the role chunk, or an empty delta: no token
    else:
        text = _text(choice, "text")  # vLLM sends a chunk per engine output: a token, though its text may be empty
    raw.chunks += 1
    if text:
        raw.text_chunks += 1
        raw.text_bytes += len(text.encode())
    if raw.asked is not None and raw.chunks > raw.asked + SPARE_CHUNKS:
        raise BadEvent(f"more token chunks than the {raw.asked} tokens asked")
    return 1, claimed


async def _error_body(response) -> str:
    """The start of a non-200 answer (MAX_ERROR_BODY_BYTES at most: it is shown, never stored whole)."""
    body = bytearray()
    while len(body) < MAX_ERROR_BODY_BYTES:
        piece = await response.content.read(MAX_ERROR_BODY_BYTES - len(body))
        if not piece:
            break
        body += piece
    return bytes(body).decode(errors="replace")


async def stream(session, url: str, body: bytes, chat: bool, raw: Raw, hdrs: dict[str, str],
                 timeout_s: float | None = None) -> None:
    """Send one request and record its stream into `raw` (never raises for request failures: a
    server's misbehaviour fails the request, with the reason)."""
    import aiohttp

    raw.start = time.perf_counter()
    raw.sent = True
    perf = time.perf_counter
    times, chunks, claims = raw.read_times, raw.read_chunks, raw.read_claims
    try:
        async with session.post(url, data=body, headers=hdrs) as response:
            if response.status != 200:
                raw.error = f"HTTP {response.status}: {_error_message(await _error_body(response))}"
                return
            content = response.content
            rest = b""
            done = False
            while not done:
                data = await content.readany()
                if not data:
                    if not rest.strip():
                        break
                    data, done = b"\n\n", True  # a last event the server did not end with a blank line
                now = perf()
                if rest:
                    data = rest + data
                if b"\r" in data:
                    data = data.replace(b"\r\n", b"\n")
                events = data.split(b"\n\n")
                rest = events.pop()
                if len(rest) > MAX_EVENT_BYTES:
                    raise BadEvent(f"an event of more than {MAX_EVENT_BYTES} bytes")
                k = 0
                claim = -1
                for event in events:
                    if not event.startswith(b"data:"):
                        continue  # SSE comments (pings) and blank keep-alives
                    payload = event[5:].lstrip()
                    if payload.startswith(b"[DONE]"):
                        done = True
                        break
                    try:
                        obj = loads(payload)
                    except ValueError:
                        raise BadEvent(f"an event that is not JSON ({payload[:40]!r})") from None
                    if type(obj) is dict and obj.get("error"):
                        raw.error = f"stream error: {_error_message(json.dumps(obj))}"
                        return
                    carried, claimed = _tally(obj, chat, raw, now)
                    k += carried
                    if carried and claimed is not None:
                        claim = claimed
                if k:
                    times.append(now)
                    chunks.append(k)
                    claims.append(claim)
            raw.status_ok = True
    except asyncio.TimeoutError as exc:  # aiohttp's total timeout: the server never finished answering
        raw.error = (f"no complete answer within the request timeout of {timeout_s:g} s (QUANTKIT_REQUEST_TIMEOUT)"
                     if timeout_s else f"TimeoutError: {str(exc)[:200] or 'no answer'}")
    except (aiohttp.ClientError, OSError) as exc:
        raw.error = f"{type(exc).__name__}: {str(exc)[:200] or 'connection lost'}"
    except BadEvent as exc:
        raw.error = f"the server sent {exc}"
    except ValueError as exc:  # an answer aiohttp could not read as HTTP
        raw.error = f"the server sent an answer that could not be read: {str(exc)[:200]}"


class Counter:
    """The next request index, in one process (a shared counter replaces it across processes)."""

    def __init__(self):
        self.value = 0

    def take(self) -> int:
        i = self.value
        self.value += 1
        return i


class Flag:
    def __init__(self):
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True


def pool(slots: int):
    """The worker's connection pool: a socket per stream (and spare), reused only while fresh."""
    import aiohttp

    return aiohttp.TCPConnector(limit=slots + 4, limit_per_host=slots + 4, ttl_dns_cache=300,
                                keepalive_timeout=KEEPALIVE_S)


async def run_job(job: Job, t0: float | None, take: Callable[[], int], stopped: Callable[[], bool],
                  on_failure: Callable[[], None] | None = None, ready=None,
                  halted: Callable[[], bool] | None = None,
                  on_done: Callable[[Raw], None] | None = None) -> WorkerReport:
    """Send this worker's share of a point from t0 on (None: as soon as the session is ready): a concurrency profile takes request indices
    from `take` (shared by all workers) while it has a free slot; a rate profile sends its own
    `indices` at `offsets`. `stopped` says the server died: the requests not yet sent fail.
    `on_failure` is called after a request failed (the caller may then ask whether the server lives).
    `ready`, a coroutine function, is awaited once the loop and the HTTP session exist; it returns t0
    (worker processes wait for the common start there, everything already set up). `halted` says
    the point was ended early (its verdict decided): the requests in flight are cancelled (vLLM
    aborts them) and no more are sent, both marked STOPPED. `on_done` sees each finished request."""
    import aiohttp

    n = len(job.bodies)
    hdrs = job.headers or headers()
    raws: list[Raw] = []
    lags = array("d")
    running = True

    async def probe() -> None:
        sleep, perf = asyncio.sleep, time.perf_counter
        while running:
            before = perf()
            await sleep(LAG_PROBE_S)
            lags.append((perf() - before - LAG_PROBE_S) * 1000)

    connector = pool(job.slots)
    timeout = aiohttp.ClientTimeout(total=job.request_timeout, sock_connect=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        if ready is not None:
            t0 = await ready()
        if t0 is None:
            t0 = time.perf_counter()
        delay = t0 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        cpu0 = time.process_time()
        prober = asyncio.create_task(probe())

        async def send(raw: Raw, i: int) -> None:
            try:
                await stream(session, job.url, job.bodies[i], job.chat, raw, hdrs, job.request_timeout)
            except asyncio.CancelledError:
                raw.error = STOPPED  # ended by `halted`: cut off, not the server's failure
                raise
            if on_done is not None:
                on_done(raw)
            if raw.error is not None and on_failure is not None:
                on_failure()

        def refused(raw: Raw) -> bool:
            """Mark a request that will not be sent, and say so."""
            if stopped():
                raw.start, raw.error = time.perf_counter(), SERVER_DIED
            elif halted is not None and halted():
                raw.start, raw.error = time.perf_counter(), STOPPED
            else:
                return False
            return True

        async def slot(delay: float = 0.0) -> None:
            if delay > 0:  # a staggered start: the streams do not send in lock step
                await asyncio.sleep(max(0.0, t0 + delay - time.perf_counter()))
            while True:
                i = take()
                if i >= n:
                    return
                raw = Raw(index=i, asked=job.max_tokens)
                raws.append(raw)
                if not refused(raw):
                    await send(raw, i)

        async def scheduled(i: int, semaphore: asyncio.Semaphore) -> None:
            raw = Raw(index=i, asked=job.max_tokens)
            raws.append(raw)
            wait = t0 + job.offsets[i] - time.perf_counter()
            try:
                if wait > 0:
                    await asyncio.sleep(wait)
                raw.send_lag = max(time.perf_counter() - (t0 + job.offsets[i]), 0.0)
                async with semaphore:
                    if not refused(raw):
                        await send(raw, i)
            except asyncio.CancelledError:
                if raw.error is None:
                    raw.start, raw.error = time.perf_counter(), STOPPED
                raise

        async def halt_watch(tasks: list[asyncio.Task]) -> None:
            while not halted():
                await asyncio.sleep(0.2)
            for task in tasks:
                task.cancel()

        try:
            if job.offsets is None:
                delays = job.start_delays or [0.0] * job.slots
                tasks = [asyncio.ensure_future(slot(delays[k] if k < len(delays) else 0.0)) for k in range(job.slots)]
            else:
                semaphore = asyncio.Semaphore(job.slots)
                tasks = [asyncio.ensure_future(scheduled(i, semaphore)) for i in job.indices or []]
            watcher = asyncio.ensure_future(halt_watch(tasks)) if halted is not None else None
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)  # a cancelled slot ends its share
            if watcher is not None:
                watcher.cancel()
            broken = [o for o in outcomes if isinstance(o, Exception)]  # CancelledError is not one
            if broken:  # a slot that broke (its callbacks) must fail the point, never end it short
                raise broken[0]
            if job.offsets is None and halted is not None and halted():
                while (i := take()) < n:  # what the cancelled slots never took: not sent, and said so
                    raws.append(Raw(index=i, start=time.perf_counter(), error=STOPPED))
        finally:
            running = False
            end = time.perf_counter()
            cpu = time.process_time() - cpu0
            prober.cancel()
    return WorkerReport(raws=raws, cpu_s=cpu, wall_s=max(end - t0, 1e-9), end=end, lag_ms=lags, t0=t0)


class SharedSchedule:
    """The request counter and stop flag that worker processes share: 16 bytes of a file, taken
    under flock (a few microseconds, once per request). Plain files rather than multiprocessing's
    primitives: workers then run as `python -m quantkit.measure.loadgen.client`, whatever the caller's
    `__main__` is (multiprocessing's spawn re-imports it, which breaks unguarded scripts)."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDWR)

    def take(self) -> int:
        import fcntl

        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            i = int.from_bytes(os.pread(self.fd, 8, 0), "little")
            os.pwrite(self.fd, (i + 1).to_bytes(8, "little"), 0)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        return i

    def stopped(self) -> bool:
        return os.pread(self.fd, 1, 8) != b"\0"

    def stop(self) -> None:
        os.pwrite(self.fd, b"\1", 8)

    def halted(self) -> bool:
        return os.pread(self.fd, 1, 9) != b"\0"

    def halt(self) -> None:
        """End the point early (its verdict is decided): every worker stops sending and cuts off."""
        os.pwrite(self.fd, b"\1", 9)

    def close(self) -> None:
        os.close(self.fd)

    @staticmethod
    def create(path: str) -> "SharedSchedule":
        with open(path, "wb") as f:
            f.write(bytes(16))
        return SharedSchedule(path)


def main() -> None:
    """A worker process, `python -m quantkit.measure.loadgen.client SCHEDULE JOB REPORT`: read its Job
    from the JOB file, say ready on stdout, wait for the common start time on stdin, run, and
    leave the report in the REPORT file (`wire` messages all; the large ones go through files)."""
    import pickle
    import sys

    from . import wire

    schedule = SharedSchedule(sys.argv[1])
    job, report_path = wire.read_file(sys.argv[2]), sys.argv[3]
    read, write = sys.stdin.buffer, sys.stdout.buffer

    async def ready() -> float:
        wire.send(write, ("ready", os.getpid()))
        message, t0 = await asyncio.to_thread(wire.receive, read)
        if message != "go":
            raise SystemExit(0)
        return t0

    # a point with a stop rule: each finished request goes to a file the parent reads every second
    # (the rule needs every worker's requests; a pickle each, flushed, costs tens of microseconds)
    finished = open(job.finished_path, "ab") if job.finished_path else None

    def done(raw: Raw) -> None:
        pickle.dump(raw, finished, protocol=pickle.HIGHEST_PROTOCOL)
        finished.flush()

    try:
        report = run_loop(run_job(job, None, schedule.take, schedule.stopped, ready=ready, halted=schedule.halted,
                                  on_done=done if finished is not None else None))
    except BaseException as exc:  # the parent must hear why
        wire.write_file(report_path, ("failed", f"{type(exc).__name__}: {exc}"))
        raise
    wire.write_file(report_path, ("done", report))


if __name__ == "__main__":
    from quantkit.measure.loadgen.client import main as worker_main  # the module's own name: its classes pickle

    worker_main()
