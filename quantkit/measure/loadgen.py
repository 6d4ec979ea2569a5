"""Load generator: an async streaming client for OpenAI-compatible servers (vLLM).

Prompts come from `workload.py` (exact-length random token ids, or a dataset); every request asks
for `max_tokens=output_len` with `ignore_eos`, so it generates exactly `output_len` tokens.

Profiles: fixed concurrency (at most C requests in flight, sent back to back) or a Poisson request
rate (seeded exponential inter-arrival times). Warm-up requests are sent before a run and excluded.

Timing follows `vllm bench serve` so the two agree (benchmarks/bench_agreement.py): monotonic
clock (perf_counter) from just before the request; TTFT at the first streamed chunk with choices,
ITL between successive such chunks, E2E at the last one, TPOT = (E2E - TTFT) / (tokens - 1); token
counts from the server's `usage` (stream_options.include_usage). Throughput = tokens of the
successful requests / wall time of the whole point (first send to last completion).

A failed request is kept with its reason and counted; a point is never dropped. If the server dies
during a point, the requests not yet sent are failed as "server died" and the point is `partial`.
`stop_when(finished, elapsed_s)`, checked every second, may end a point whose verdict is already
decided (capacity.py): the requests in flight are cancelled (vLLM aborts them), those not sent are
never sent, both are left out of the point, and `stopped_early` says why.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone
from typing import Any, Callable, Literal

import httpx
from pydantic import BaseModel

from ..errors import UsageError
from .point import BenchPoint, RequestResult, summarize
from .slo import Slo
from .workload import Prompt, poisson_schedule

class Target(BaseModel):
    api_url: str  # http://host:port/v1
    model: str
    api: Literal["completions", "chat"] = "completions"


async def send_request(client: httpx.AsyncClient, target: Target, prompt: Prompt, output_len: int,
                       t0: float = 0.0) -> RequestResult:
    if target.api == "chat":
        url = target.api_url + "/chat/completions"
        body: dict[str, Any] = {"model": target.model, "messages": prompt.messages, "max_completion_tokens": output_len}
    else:
        url = target.api_url + "/completions"
        body = {"model": target.model, "prompt": prompt.token_ids if prompt.token_ids is not None else prompt.text,
                "max_tokens": output_len}
    # Sampling parameters stay the server's defaults, as `vllm bench serve` sends none: the two
    # tools then do the same work per token (greedy and sampled decoding differ in cost).
    body.update({"ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    result = RequestResult(ok=False, start_s=start - t0)
    last = start
    chunks = 0
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                result.error = f"HTTP {response.status_code}: {_error_message(text)}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators and SSE comments (pings)
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                data = json.loads(payload)
                if data.get("error"):
                    result.error = f"stream error: {_error_message(json.dumps(data))}"
                    return result
                if data.get("choices"):
                    # every chunk with choices is one engine step, even if its text is empty
                    now = time.perf_counter()
                    if chunks == 0:
                        result.ttft = now - start
                    else:
                        result.itl.append(now - last)
                    last = now
                    chunks += 1
                if usage := data.get("usage"):
                    result.prompt_tokens = usage.get("prompt_tokens")
                    result.completion_tokens = usage.get("completion_tokens")
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {str(exc)[:200] or 'connection lost'}"
        return result
    except json.JSONDecodeError:
        result.error = "server sent a chunk that is not JSON"
        return result
    if chunks == 0:
        result.error = "no token received"
        return result
    result.e2e = last - start
    if result.completion_tokens is None:
        # a server without include_usage support: count chunks, and say so in the point
        result.completion_tokens = chunks
        result.usage_from_server = False
    if result.completion_tokens > 1:
        result.tpot = (result.e2e - result.ttft) / (result.completion_tokens - 1)
    result.ok = True
    return result


def _error_message(text: str) -> str:
    try:
        data = json.loads(text)
        err = data.get("error", data)
        msg = err.get("message") if isinstance(err, dict) else err
        return " ".join(str(msg or data.get("detail") or text).split())[:300]
    except (ValueError, AttributeError):
        return " ".join(text.split())[:300]


SERVER_DIED = "server died before the request was sent"
STOPPED = "the point was stopped early"


async def run_point_async(target: Target, prompts: list[Prompt], output_len: int, *, concurrency: int | None = None,
                          rate: float | None = None, seed: int = 0, slo: Slo | None = None,
                          alive: Callable[[], bool] | None = None, input_len: int | None = None,
                          request_timeout: float = 600.0,
                          stop_when: Callable[[list[RequestResult], float], str | None] | None = None) -> BenchPoint:
    """One measured point: all prompts under a concurrency cap, or at a Poisson rate (optionally
    also capped by `concurrency`)."""
    if concurrency is None and rate is None:
        raise UsageError("a point needs a concurrency or a rate")
    if concurrency is not None and concurrency < 1:
        raise UsageError("concurrency must be at least 1")
    profile = "rate" if rate is not None else "concurrency"
    n = len(prompts)
    offsets = poisson_schedule(n, rate, seed) if rate is not None else [0.0] * n
    limit = concurrency or n
    semaphore = asyncio.Semaphore(limit)
    dead = asyncio.Event()
    stopped: list[str] = []  # the reason, once stop_when gave one
    finished: list[RequestResult] = []
    in_flight = 0
    max_in_flight = 0
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    timeout = httpx.Timeout(request_timeout, connect=10.0)
    limits = httpx.Limits(max_connections=limit + 4, max_keepalive_connections=limit + 4)

    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        t0 = time.perf_counter()

        async def one(prompt: Prompt, offset: float) -> RequestResult:
            nonlocal in_flight, max_in_flight
            try:
                delay = t0 + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                async with semaphore:
                    if dead.is_set():
                        return RequestResult(ok=False, error=SERVER_DIED, start_s=time.perf_counter() - t0)
                    if stopped:
                        return RequestResult(ok=False, error=STOPPED, start_s=time.perf_counter() - t0)
                    in_flight += 1
                    max_in_flight = max(max_in_flight, in_flight)
                    try:
                        result = await send_request(client, target, prompt, output_len, t0)
                        finished.append(result)
                        return result
                    finally:
                        in_flight -= 1
            except asyncio.CancelledError:  # stop_when ended the point
                return RequestResult(ok=False, error=STOPPED, start_s=time.perf_counter() - t0)

        tasks = [asyncio.create_task(one(p, o)) for p, o in zip(prompts, offsets)]

        async def watch() -> None:
            while True:
                await asyncio.sleep(1.0)
                if alive is not None and not await asyncio.to_thread(alive):
                    dead.set()
                    return
                if stop_when is not None and not stopped:
                    reason = stop_when(list(finished), time.perf_counter() - t0)
                    if reason:
                        stopped.append(reason)
                        for task in tasks:
                            task.cancel()

        watcher = asyncio.create_task(watch())
        try:
            results = await asyncio.gather(*tasks)
        finally:
            watcher.cancel()
        # the wall time of the whole point, as `vllm bench serve` measures it
        duration = time.perf_counter() - t0
    if not dead.is_set() and alive is not None and any(not r.ok for r in results) and not alive():
        dead.set()
    if stopped:  # the requests cut off were never measured: they are not the server's failures
        results = [r for r in results if r.error != STOPPED]
    point = summarize(
        list(results), duration, profile=profile, concurrency=concurrency, rate=rate, output_len=output_len,
        input_len=input_len, api=target.api, started_at=started_at, max_in_flight=max_in_flight,
        partial_reason="the server died during this point" if dead.is_set() else None,
    )
    point.stopped_early = stopped[0] if stopped else None
    point = slo.judge(point, list(results)) if slo is not None else point
    if point.stopped_early and point.slo is not None:
        point.slo_met = False
        point.slo_violations.append(f"stopped early: {point.stopped_early}")
    return point


def run_point(*args, **kwargs) -> BenchPoint:
    return asyncio.run(run_point_async(*args, **kwargs))


def warmup(target: Target, prompts: list[Prompt], output_len: int) -> list[RequestResult]:
    """Requests sent before measuring (first-request costs: connection, kernel selection, caches)."""

    async def go():
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0)) as client:
            return await asyncio.gather(*(send_request(client, target, p, output_len) for p in prompts))

    return list(asyncio.run(go()))
