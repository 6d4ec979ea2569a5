"""Load generator: async streaming over an OpenAI-compatible API (vLLM), with headroom to spare.

Prompts come from `workload.py` (exact-length random token ids, or a dataset); every request asks
for `max_tokens=output_len` with `ignore_eos`, so it generates exactly `output_len` tokens.

Profiles: fixed concurrency (at most C requests in flight, sent back to back) or a Poisson request
rate (seeded exponential inter-arrival times). Warm-up requests are sent before a run and excluded.

The client must never be the bottleneck (issue 13): the streaming path is `client.py` (aiohttp,
uvloop, bytes scanning), and a point is shared by several worker processes, each with its own event
loop, when the load calls for it: a concurrency point's workers take request indices from one
shared counter, each keeping its share of the C slots full; a rate point's workers each send
every W-th request at its scheduled time. All share one start time (perf_counter is the system's
monotonic clock on Linux). The worker count is automatic (one per 256 streams, at most half the
usable cores) or set with `workers=`. Every point records the client's own CPU use and event-loop
lag (and, at a rate, how late sends were); a point where the client was saturated is run again
with twice the workers where the cores allow it (one kept waiting by other processes, where no
worker can be added, once more as it was), and otherwise is marked `client_limited`, with
the figures, never silently biased.

Timing follows `vllm bench serve` (benchmarks/bench_agreement.py, benchmarks/loadgen_capacity.py):
monotonic clock from just before the request; TTFT at the first streamed chunk with choices; E2E at
the last one; TPOT = (E2E - TTFT) / (tokens - 1); ITL as token cadence (`point.token_timeline`);
token counts from the chunks received, the server's `usage` (stream_options.include_usage) credited
only where the text received can hold it (`tokens.py`; a point where it cannot is `usage_mismatch`;
`vllm bench serve` takes the usage whole). Throughput = tokens of the successful requests / wall
time of the whole point (first send to last completion). Each point starts on a drained server
(`drain.py`).

A failed request is kept with its reason and counted; a point is never dropped. If the server dies
during a point, the requests not yet sent are failed as "server died" and the point is `partial`.
`stop_when(finished, elapsed_s)`, checked every second, may end a point whose verdict is already
decided (capacity/live.py): the requests in flight are cancelled (vLLM aborts them), those not sent are
never sent, both are left out of the point, and `stopped_early` says why. With one worker (in
this process) `finished` holds every finished request; with worker processes their requests are
theirs until the point ends, so `stop_when` sees none and only its other signals (the server's
metrics, the time) can end the point.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from datetime import datetime, timezone
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

from ...console import warn
from ...errors import BackendError, UsageError
from ..stats.point import BenchPoint, ClientStats, RequestResult, percentile, summarize, token_timeline
from ..stats.samples import encode as encode_samples
from ..stats.slo import Slo
from ..stats.window import WindowSettings
from ..stats.window import summarize as window_summary
from . import client
from .client import SERVER_DIED, STOPPED, Job, Raw, WorkerReport
from .drain import Drain, mark as mark_drain, wait_idle
from .tokens import credit, prompt as credit_prompt
from .watchers import Stop, quiet_watch, stop_watch, watch
from .workload import Prompt, fresh_prompts, poisson_schedule, stagger

__all__ = ["Target", "run_point", "run_point_async", "warmup", "auto_workers", "max_workers", "SERVER_DIED", "STOPPED"]

STREAMS_PER_WORKER = 256  # one worker keeps ~256 streams at well under half a core (loadgen_capacity.py)
MAX_ATTEMPTS = 3


class Target(BaseModel):
    api_url: str  # http://host:port/v1
    model: str
    api: Literal["completions", "chat"] = "completions"
    api_key: str | None = Field(None, exclude=True, repr=False)  # sent, never dumped or shown


def max_workers() -> int:
    """Worker processes a point may use: half the usable cores (the server, on the same host, needs
    the rest), at least 1; QUANTKIT_CLIENT_MAX_WORKERS overrides."""
    if value := os.environ.get("QUANTKIT_CLIENT_MAX_WORKERS"):
        return max(1, int(value))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(16, cpus // 2))


def auto_workers(concurrency: int | None, rate: float | None) -> int:
    """The first worker count tried for a point (a saturated one is retried with more)."""
    streams = concurrency if concurrency is not None else STREAMS_PER_WORKER
    return max(1, min(max_workers(), math.ceil(streams / STREAMS_PER_WORKER)))


def request_body(target: Target, prompt: Prompt, output_len: int) -> bytes:
    if target.api == "chat":
        body: dict[str, Any] = {"model": target.model, "messages": prompt.messages, "max_completion_tokens": output_len}
    else:
        body = {"model": target.model, "prompt": prompt.token_ids if prompt.token_ids is not None else prompt.text,
                "max_tokens": output_len}
    # Sampling parameters stay the server's defaults, as `vllm bench serve` sends none: the two
    # tools then do the same work per token (greedy and sampled decoding differ in cost).
    body.update({"ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    return json.dumps(body, separators=(",", ":")).encode()


def endpoint(target: Target) -> str:
    return target.api_url + ("/chat/completions" if target.api == "chat" else "/completions")


def to_result(raw: Raw, t0: float, expected: int | None = None, sent: tuple[int | None, int] | None = None
              ) -> RequestResult:
    """A worker's raw record -> RequestResult (tokens by `tokens.credit`, TTFT/ITL/E2E/TPOT from
    `point.token_timeline`). `expected`: the tokens asked (max_tokens with ignore_eos): a shorter
    answer is a failure, never a fast request (a server that stops early would be credited with
    speed it did not have). `sent`: the prompt's token ids (None for text) and the body's bytes,
    which bound the prompt tokens credited (`tokens.prompt`)."""
    base = {"start_s": raw.start - t0, "index": raw.index}
    if raw.error is not None:
        return RequestResult.model_construct(ok=False, error=raw.error, itl=[], usage_from_server=True, **base)
    credited = credit(raw)
    prompt_tokens, prompt_mismatch = credit_prompt(raw.prompt_tokens, *(sent or (None, None)))
    base["usage_mismatch"] = "; ".join(m for m in (credited.mismatch, prompt_mismatch) if m) or None
    timeline = token_timeline(raw.start, raw.first_choice, raw.read_times, credited.counts, credited.exact,
                              credited.tokens)
    if timeline is None:
        return RequestResult.model_construct(ok=False, error="no token received", itl=[], usage_from_server=True,
                                             **base)
    ttft, itl, e2e, tokens = timeline
    if expected is not None and tokens < expected:
        return RequestResult.model_construct(ok=False, error=f"short response: {tokens} of {expected} tokens",
                                             itl=[], usage_from_server=True, **base)
    return RequestResult.model_construct(
        ok=True, error=None, ttft=ttft, itl=itl, e2e=e2e, tpot=(e2e - ttft) / (tokens - 1) if tokens > 1 else None,
        prompt_tokens=prompt_tokens, completion_tokens=tokens, usage_from_server=credited.from_usage, **base)


class Converted:
    """The finished requests as RequestResults, each converted once: the stop rule asks every
    second, and converting every finished request again from its reads each time grew with the
    point, on the loop that sends (~100 ms a check at 1,500 requests of 256 tokens: an H200's
    steady-state points were each called client-limited for it, 2026-12-03)."""

    def __init__(self, done: list[Raw], t0: float):
        self.done, self.t0 = done, t0
        self.results: list[RequestResult] = []

    def __call__(self) -> list[RequestResult]:
        self.results.extend(to_result(r, self.t0) for r in self.done[len(self.results):])
        return self.results


def _max_in_flight(results: list[RequestResult]) -> int:
    events = []
    for r in results:
        if r.ok and r.e2e is not None:
            events += [(r.start_s, 1), (r.start_s + r.e2e, -1)]
    level = best = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        level += step
        best = max(best, level)
    return best


def _client_stats(reports: list[WorkerReport], duration: float, tokens: int, raws: list[Raw]) -> ClientStats:
    lags = [x for rep in reports for x in rep.lag_ms]
    sends = [r.send_lag * 1000 for r in raws if r.send_lag is not None]
    cpu = sum(rep.cpu_s for rep in reports)

    def q(values, p):
        return round(percentile(values, p), 3) if values else None

    return ClientStats(
        workers=len(reports), event_loop=client.event_loop_name(), cpu_s=round(cpu, 4),
        cores=round(cpu / max(duration, 1e-9), 4),
        busiest_worker=round(max(rep.cpu_s / rep.wall_s for rep in reports), 4),
        cpu_us_per_token=round(1e6 * cpu / tokens, 2) if tokens else None,
        loop_lag_p50_ms=q(lags, 50), loop_lag_p99_ms=q(lags, 99), loop_lag_max_ms=round(max(lags), 3) if lags else None,
        send_lag_p50_ms=q(sends, 50), send_lag_p99_ms=q(sends, 99),
        send_lag_max_ms=round(max(sends), 3) if sends else None,
    )


def _alive_after_a_moment(alive: Callable[[], bool], wait_s: float = 1.0) -> bool:
    """A server killed a moment ago refuses connections at once, before its process is reaped and
    `alive()` can say so: failed requests at the end of a point get that moment to tell."""
    deadline = time.monotonic() + wait_s
    while alive():
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False


async def _in_process(job: Job, alive, stop_when: Stop | None = None,
                      reason: list[str] | None = None) -> tuple[list[WorkerReport], float]:
    """One worker on this process's event loop (low loads: no process to start). The server's
    liveness is asked only every 10 s and after a failed request: `alive()` runs in this process
    (a remote server's costs an HTTP client, milliseconds of CPU under the GIL), and a dead server
    shows itself by failing requests."""
    flag, halt = client.Flag(), client.Flag()
    failed = asyncio.Event()
    done: list[Raw] = []
    started = time.perf_counter()
    watchers = [asyncio.create_task(watch(alive, flag.set, every=10.0, failed=failed)),
                asyncio.create_task(quiet_watch(done, job))]
    if stop_when is not None:
        watchers.append(asyncio.create_task(stop_watch(stop_when, Converted(done, started), started, halt.set,
                                                       reason)))
    try:
        report = await client.run_job(job, None, client.Counter().take, flag.is_set, on_failure=failed.set,
                                      halted=halt.is_set if stop_when is not None else None, on_done=done.append)
    finally:
        for watcher in watchers:
            watcher.cancel()
    return [report], report.t0


async def _in_processes(jobs: list[Job], alive, stop_when: Stop | None = None,
                        reason: list[str] | None = None) -> tuple[list[WorkerReport], float]:
    """Worker processes (`python -m quantkit.measure.loadgen.client`: a fresh interpreter each, no forked
    threads or locks), one shared request counter and stop flag, one common start time once all
    are ready."""
    import subprocess
    import sys
    import tempfile

    from . import wire

    with tempfile.TemporaryDirectory(prefix="quantkit-loadgen-") as tmp:
        schedule = client.SharedSchedule.create(schedule_path(tmp))
        procs: list[subprocess.Popen] = []
        readers = [FinishedReader(os.path.join(tmp, f"finished-{w}")) for w in range(len(jobs))] if stop_when else []
        for job, reader in zip(jobs, readers):
            job.finished_path = reader.path
        try:
            for w, job in enumerate(jobs):
                job_path = os.path.join(tmp, f"job-{w}")
                wire.write_file(job_path, job)
                err = open(os.path.join(tmp, f"worker-{w}.err"), "wb")
                proc = subprocess.Popen([sys.executable, "-m", "quantkit.measure.loadgen.client", schedule_path(tmp),
                                         job_path, report_path(tmp, w)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
                err.close()
                procs.append(proc)
            for w, proc in enumerate(procs):
                message = await asyncio.to_thread(_recv, proc, tmp, w)
                if message[0] != "ready":
                    raise BackendError(f"a load-generator worker did not start: {message[1]}")
            t0 = time.perf_counter() + 0.1  # every worker is waiting on its pipe: they start together
            for proc in procs:
                wire.send(proc.stdin, ("go", t0))
            watchers = [asyncio.create_task(watch(alive, schedule.stop))]
            if stop_when is not None:  # the requests every worker finished so far, from their files
                seen: list[RequestResult] = []

                def finished() -> list[RequestResult]:
                    seen.extend(to_result(raw, t0) for reader in readers for raw in reader.read())
                    return seen

                watchers.append(asyncio.create_task(stop_watch(stop_when, finished, t0, schedule.halt, reason)))
            try:
                messages = await asyncio.gather(*(asyncio.to_thread(_report, proc, tmp, w)
                                                  for w, proc in enumerate(procs)))
            finally:
                for watcher in watchers:
                    watcher.cancel()
            failed = [m[1] for m in messages if m[0] != "done"]
            if failed:
                raise BackendError(f"a load-generator worker failed: {failed[0]}")
            return [m[1] for m in messages], t0
        finally:
            schedule.stop()
            for proc in procs:
                if proc.poll() is None:
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            schedule.close()


class FinishedReader:
    """A worker's finished requests (pickled Raws appended to a file), read as far as written."""

    def __init__(self, path: str):
        self.path, self.offset = path, 0

    def read(self) -> list[Raw]:
        """The Raws written since the last call."""
        import pickle

        new: list[Raw] = []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                while True:
                    try:
                        new.append(pickle.load(f))
                    except (EOFError, pickle.UnpicklingError, ValueError):
                        break  # the end, or a record still being written: read again next time
                    self.offset = f.tell()
        except FileNotFoundError:  # the worker has finished nothing yet
            pass
        return new


def schedule_path(tmp: str) -> str:
    return os.path.join(tmp, "schedule")


def report_path(tmp: str, w: int) -> str:
    return os.path.join(tmp, f"report-{w}")


def _recv(proc, tmp: str, w: int):
    """A worker's handshake message ("ready") from its stdout pipe."""
    import subprocess

    from . import wire

    try:
        return wire.receive(proc.stdout)
    except Exception as exc:  # noqa: BLE001 - the end of the stream, or a message that cannot be read
        # never a traceback for a worker's stream: the point fails with the reason. The worker is
        # given 5 s to exit, then killed: one whose message did not check may still be writing
        # into the pipe, and waiting on it then would wait for ever (the H200 run's hang)
        ended = isinstance(exc, EOFError)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        what = (f"exited ({proc.returncode})" if ended else
                f"sent a message that could not be read ({type(exc).__name__}: {str(exc)[:160]}; "
                f"exit code {proc.returncode})")
        return ("failed", f"the worker process {what}: {_last_line(tmp, w)}")


def _report(proc, tmp: str, w: int):
    """A worker's report, from its file once it has exited (it never waits on the parent)."""
    from . import wire

    proc.wait()
    try:
        return wire.read_file(report_path(tmp, w))
    except Exception as exc:  # noqa: BLE001 - none, or one that cannot be read: the point fails with why
        what = ("left no report" if isinstance(exc, FileNotFoundError) else
                f"left a report that could not be read ({type(exc).__name__}: {str(exc)[:160]})")
        return ("failed", f"the worker process {what}; exit code {proc.returncode}: {_last_line(tmp, w)}")


def _last_line(tmp: str, w: int) -> str:
    with open(os.path.join(tmp, f"worker-{w}.err"), "rb") as f:
        tail = [line for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    return tail[-1] if tail else "no output"


def plan_jobs(target: Target, bodies: list[bytes], workers: int, limit: int, offsets: list[float] | None,
              request_timeout: float, start_delays: list[float] | None = None,
              max_tokens: int | None = None) -> list[Job]:
    url, chat = endpoint(target), target.api == "chat"
    workers = max(1, min(workers, limit, len(bodies)))
    jobs = []
    for w in range(workers):
        slots = limit // workers + (1 if w < limit % workers else 0)
        indices = list(range(w, len(bodies), workers)) if offsets is not None else None
        delays = start_delays[w::workers][:slots] if start_delays else None
        jobs.append(Job(url=url, bodies=bodies, chat=chat, slots=slots, offsets=offsets, indices=indices,
                        request_timeout=request_timeout, headers=client.headers(target.api_key),
                        start_delays=delays, max_tokens=max_tokens))
    return jobs


async def _measure_once(target: Target, prompts: list[Prompt], output_len: int, *, concurrency, rate, seed,
                        alive, input_len, request_timeout, workers, stop_when: Stop | None = None,
                        window: WindowSettings | None = None, ramp_s: float = 0.0,
                        slo: Slo | None = None) -> tuple[BenchPoint, list[RequestResult]]:
    profile = "rate" if rate is not None else "concurrency"
    n = len(prompts)
    offsets = poisson_schedule(n, rate, seed) if rate is not None else None
    limit = concurrency or n
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    bodies = [request_body(target, p, output_len) for p in prompts]
    delays = stagger(limit, ramp_s, seed) if offsets is None and ramp_s > 0 else None
    jobs = plan_jobs(target, bodies, workers, limit, offsets, request_timeout, delays, max_tokens=output_len)
    reason: list[str] = []  # why stop_when ended the point, if it did
    if len(jobs) == 1:
        reports, t0 = await _in_process(jobs[0], alive, stop_when, reason)
    else:
        reports, t0 = await _in_processes(jobs, alive, stop_when, reason)
    # the wall time of the whole point, as `vllm bench serve` measures it
    duration = max(rep.end for rep in reports) - t0
    # requests an early stop cut off or never sent were not measured: not the server's failures
    cut_starts = [r.start - t0 for rep in reports for r in rep.raws if r.error == STOPPED and r.sent]
    raws = sorted((r for rep in reports for r in rep.raws if r.error != STOPPED), key=lambda r: r.index)
    sent = [(len(p.token_ids) if p.token_ids is not None else None, len(b)) for p, b in zip(prompts, bodies)]
    results = [to_result(r, t0, output_len, sent[r.index]) for r in raws]
    dead = any(r.error == SERVER_DIED for r in results)
    if not dead and alive is not None and any(not r.ok for r in results) and not _alive_after_a_moment(alive):
        dead = True
    tokens = sum(r.completion_tokens or 0 for r in results if r.ok)
    measured, summary = results, None
    if window is not None:
        closed_by = reason[0] if reason else "every request was sent and finished"
        summary, measured = window_summary(slo, results, window, cut_starts=cut_starts, closed_by=closed_by,
                                           open_loop=offsets is not None)
    point = summarize(
        measured, duration, profile=profile, concurrency=concurrency, rate=rate, output_len=output_len,
        input_len=input_len, api=target.api, started_at=started_at, max_in_flight=_max_in_flight(results),
        partial_reason="the server died during this point" if dead else None,
        client=_client_stats(reports, duration, tokens, raws),
    )
    if summary is not None:
        point.window = summary
        span = max(summary.end_s - summary.start_s, 1e-9)
        if summary.achieved_req_s is not None:  # the window's rates, not the whole point's
            point.duration_s = round(span, 6)
            point.req_s = summary.achieved_req_s
            point.output_tok_s = summary.output_tok_s or 0.0
            point.total_tok_s = point.output_tok_s + point.prompt_tokens / span
        point.samples = encode_samples(results, {r.index for r in measured}, summary.warmup_s)
    else:
        point.stopped_early = reason[0] if reason else None
    return point, measured


async def run_point_async(target: Target, prompts: list[Prompt], output_len: int, *, concurrency: int | None = None,
                          rate: float | None = None, seed: int = 0, slo: Slo | None = None,
                          alive: Callable[[], bool] | None = None, input_len: int | None = None,
                          request_timeout: float | None = None, workers: int | None = None,
                          stop_when: Stop | None = None, window: WindowSettings | None = None,
                          ramp_s: float = 0.0, drained: Drain | None = None,
                          restart: Callable[[], Stop | None] | None = None) -> BenchPoint:
    """One measured point: all prompts under a concurrency cap, or at a Poisson rate (optionally
    also capped by `concurrency`). `workers`: client worker processes (None: automatic, and a
    saturated client retries the point with more). `window`: a steady-state point (window.py):
    statistics over its window only, a verdict at a confidence; `stop_when` then closes it.
    `ramp_s`: a concurrency point's streams start spread over this many seconds. `drained`: how the
    wait for an idle server before the point ended (drain.py); a point measured again waits again,
    and the point is flagged `started_busy` when the wait before its last attempt ran out.
    `restart`, called before a point is measured again, gives the next attempt's `stop_when`: the
    caller's samples and stop rule then describe the last attempt only, as the point's figures do."""
    if concurrency is None and rate is None:
        raise UsageError("a point needs a concurrency or a rate")
    if concurrency is not None and concurrency < 1:
        raise UsageError("concurrency must be at least 1")
    if workers is not None and workers < 1:
        raise UsageError("client workers must be at least 1")
    if request_timeout is None:
        from ...settings import request_timeout as configured

        request_timeout = configured()
    count = workers or auto_workers(concurrency, rate)
    attempt, waited_again = 1, False
    while True:
        point, results = await _measure_once(target, prompts, output_len, concurrency=concurrency, rate=rate,
                                             seed=seed, alive=alive, input_len=input_len,
                                             request_timeout=request_timeout, workers=count, stop_when=stop_when,
                                             window=window, ramp_s=ramp_s, slo=slo)
        more = min(max_workers(), count * 2)
        # a client that was idle but kept waiting (other processes had the cores: on a small host,
        # the server under test) is measured once more as it was, where no worker can be added
        kept_waiting = point.client_limited and point.client is not None and point.client.busiest_worker < 0.5
        again = more if more > count else count if kept_waiting and not waited_again else None
        fresh = fresh_prompts(prompts, attempt) if point.client_limited else None
        if (not point.client_limited or workers is not None or point.partial or point.stopped_early or again is None
                or attempt >= MAX_ATTEMPTS or fresh is None):
            break
        if again == count:
            waited_again = True
            warn(f"the load generator was kept waiting on this point ({point.client_limited_reason}); "
                 "measuring it once more")
        else:
            warn(f"the load generator limited this point ({point.client_limited_reason}); "
                 f"measuring it again with {again} client workers")
        count, prompts, attempt = again, fresh, attempt + 1
        # the next attempt starts on an idle server, not on the requests the last one left behind
        drained = await wait_idle(target.api_url.removesuffix("/v1"), headers=client.headers(target.api_key))
        if restart is not None:
            stop_when = restart()
    point.client.attempts = attempt
    if drained is not None:
        mark_drain(point, drained)
    point = slo.judge(point, results) if slo is not None else point
    if point.window is not None and point.slo is not None:  # the verdict at a confidence decides
        point.slo_met = point.window.verdict == "pass"
        point.slo_violations = [] if point.slo_met else (point.window.reasons or [point.window.verdict])
    if point.stopped_early and point.slo is not None:
        point.slo_met = False
        point.slo_violations.append(f"stopped early: {point.stopped_early}")
    return point


def run_point(*args, **kwargs) -> BenchPoint:
    return client.run_loop(run_point_async(*args, **kwargs))


def warmup(target: Target, prompts: list[Prompt], output_len: int) -> list[RequestResult]:
    """Requests sent before measuring (first-request costs: connection, kernel selection, caches),
    each given the request timeout a point's requests get (QUANTKIT_REQUEST_TIMEOUT)."""
    from ...settings import request_timeout

    if not prompts:
        return []
    bodies = [request_body(target, p, output_len) for p in prompts]
    (job,) = plan_jobs(target, bodies, 1, len(bodies), None, request_timeout(), max_tokens=output_len)

    async def go():
        return await _in_process(job, None)

    reports, t0 = client.run_loop(go())
    return [to_result(r, t0) for r in sorted(reports[0].raws, key=lambda r: r.index)]
