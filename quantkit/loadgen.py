"""Load generator: an async streaming client for OpenAI-compatible servers (vLLM).

Workloads
- random: seeded prompts of exactly `input_len` tokens, sent as token-id lists so the server does
  not re-tokenize (lengths are exact), `max_tokens=output_len` with `ignore_eos` so every request
  generates exactly `output_len` tokens. Each point gets fresh prompts (seed, point index): vLLM's
  prefix cache would otherwise serve a repeated prompt's prefill for free.
- dataset: prompts from a local JSONL file (field `prompt`, `text`, or chat `messages`).

Profiles: fixed concurrency (at most C requests in flight, sent back to back) or a Poisson request
rate (seeded exponential inter-arrival times). Warm-up requests are sent before a run and excluded.

Timing follows `vllm bench serve` so the two agree (benchmarks/bench_agreement.py): monotonic
clock (perf_counter) from just before the request; TTFT at the first streamed chunk with choices,
ITL between successive such chunks, E2E at the last one, TPOT = (E2E - TTFT) / (tokens - 1); token
counts from the server's `usage` (stream_options.include_usage). Throughput = tokens of the
successful requests / wall time of the whole point (first send to last completion).

A failed request is kept with its reason and counted; a point is never dropped. If the server dies
during a point, the requests not yet sent are failed as "server died" and the point is `partial`.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal

import httpx
from pydantic import BaseModel, Field

from .errors import UsageError, did_you_mean

SCHEMA_VERSION = 1
METRICS = ("ttft", "itl", "tpot", "e2e")
STATS = ("mean", "p50", "p90", "p95", "p99")

# --------------------------------------------------------------------------------------------
# Statistics


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default, which `vllm bench serve` uses)."""
    if not values:
        raise ValueError("percentile of no values")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


class Stats(BaseModel):
    """Seconds."""

    n: int
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> "Stats | None":
        if not values:
            return None
        return cls(
            n=len(values), mean=sum(values) / len(values),
            p50=percentile(values, 50), p90=percentile(values, 90), p95=percentile(values, 95),
            p99=percentile(values, 99), min=min(values), max=max(values),
        )

    def get(self, stat: str) -> float:
        return getattr(self, stat)


# --------------------------------------------------------------------------------------------
# SLO: `ttft_p95=0.5,itl_p95=0.05`


class SloTerm(BaseModel):
    metric: Literal["ttft", "itl", "tpot", "e2e"]
    stat: Literal["mean", "p50", "p90", "p95", "p99"]
    limit_s: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}"


class Slo(BaseModel):
    terms: list[SloTerm]

    def __str__(self) -> str:
        return ",".join(f"{t.key}={t.limit_s:g}" for t in self.terms)

    def violations(self, point: "BenchPoint") -> list[str]:
        """The terms a point breaks, e.g. `ttft_p95 0.81s > 0.5s`; a metric with no data breaks it."""
        out = []
        for t in self.terms:
            stats: Stats | None = getattr(point, t.metric)
            if stats is None:
                out.append(f"{t.key} has no data")
            elif stats.get(t.stat) > t.limit_s:
                out.append(f"{t.key} {stats.get(t.stat):.3g}s > {t.limit_s:g}s")
        return out

    def request_ok(self, r: "RequestResult") -> bool:
        """Per-request test for goodput: TTFT, TPOT, E2E of the request itself; for ITL, the
        request's own statistic of its ITLs (its p95 for itl_p95)."""
        if not r.ok:
            return False
        for t in self.terms:
            if t.metric == "itl":
                if not r.itl:
                    continue
                value = sum(r.itl) / len(r.itl) if t.stat == "mean" else percentile(r.itl, float(t.stat[1:]))
            else:
                value = getattr(r, t.metric)
            if value is None or value > t.limit_s:
                return False
        return True


_SLO_SYNTAX = "expected METRIC_STAT=SECONDS[,...] such as ttft_p95=0.5,itl_p95=0.05 (or 50ms)"


def parse_slo(text: str | None) -> Slo | None:
    """`ttft_p95=0.5,itl_p95=50ms` -> Slo. Seconds by default; `ms` and `s` suffixes accepted."""
    if text is None or not text.strip():
        return None
    terms: list[SloTerm] = []
    seen: set[str] = set()
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep:
            raise UsageError(f"bad --slo term '{item}': {_SLO_SYNTAX}")
        metric, _, stat = key.partition("_")
        if metric == "e2el":
            metric = "e2e"
        if metric not in METRICS:
            raise UsageError(f"bad --slo term '{item}': unknown metric '{metric}'; {did_you_mean(metric, list(METRICS))}")
        if stat not in STATS:
            raise UsageError(f"bad --slo term '{item}': unknown statistic '{stat}'; {did_you_mean(stat or '?', list(STATS))}")
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s)?\s*", value.lower())
        if not m:
            raise UsageError(f"bad --slo term '{item}': '{value.strip()}' is not a number of seconds; {_SLO_SYNTAX}")
        limit = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
        if limit <= 0:
            raise UsageError(f"bad --slo term '{item}': the limit must be positive")
        if key in seen:
            raise UsageError(f"bad --slo: '{key}' given twice")
        seen.add(key)
        terms.append(SloTerm(metric=metric, stat=stat, limit_s=limit))
    if not terms:
        raise UsageError(f"empty --slo; {_SLO_SYNTAX}")
    return Slo(terms=terms)


# --------------------------------------------------------------------------------------------
# Workloads


class Prompt(BaseModel):
    token_ids: list[int] | None = None  # exact-length random prompts
    text: str | None = None  # dataset prompts (completions)
    messages: list[dict[str, Any]] | None = None  # dataset prompts (chat)


class PromptSource:
    """Builds the prompts of each point; the tokenizer is loaded once (transformers, main env)."""

    def __init__(self, tokenizer_dir: Path | None, input_len: int, seed: int = 0,
                 dataset: Path | None = None, api: str = "completions"):
        if input_len < 1:
            raise UsageError("--input-len must be at least 1")
        self.input_len = input_len
        self.seed = seed
        self.api = api
        self.dataset = Path(dataset) if dataset else None
        self._rows: list[dict[str, Any]] | None = None
        self._tokenizer = None
        self._allowed: list[int] | None = None
        if self.dataset is not None:
            self._rows = load_dataset(self.dataset)
        if self.dataset is None or api == "chat":
            if tokenizer_dir is None:
                raise UsageError("random prompts need the checkpoint's tokenizer: give the model folder")
            self._load_tokenizer(Path(tokenizer_dir))

    def _load_tokenizer(self, folder: Path) -> None:
        if not (folder / "tokenizer_config.json").exists() and not (folder / "tokenizer.json").exists():
            raise UsageError(f"{folder} has no tokenizer (tokenizer.json / tokenizer_config.json)")
        from transformers import AutoTokenizer  # heavy: only when prompts are built

        self._tokenizer = AutoTokenizer.from_pretrained(str(folder))
        special = set(self._tokenizer.all_special_ids or [])
        size = len(self._tokenizer)
        # Random ids exclude special tokens: a stray <|im_end|> mid-prompt is not a realistic input.
        self._allowed = [i for i in range(size) if i not in special]

    def prompts(self, n: int, stream: int) -> list[Prompt]:
        """n prompts for point number `stream` (0, 1, ...); -1 is the warm-up stream."""
        rng = random.Random(f"{self.seed}:{stream}")
        if self._rows is not None:
            rows = [self._rows[rng.randrange(len(self._rows))] for _ in range(n)]
            return [self._from_row(row) for row in rows]
        out = []
        for _ in range(n):
            ids = [self._allowed[rng.randrange(len(self._allowed))] for _ in range(self.input_len)]
            if self.api == "chat":
                out.append(Prompt(messages=[{"role": "user", "content": self._tokenizer.decode(ids)}]))
            else:
                out.append(Prompt(token_ids=ids))
        return out

    def _from_row(self, row: dict[str, Any]) -> Prompt:
        if self.api == "chat":
            if "messages" in row:
                return Prompt(messages=row["messages"])
            return Prompt(messages=[{"role": "user", "content": _row_text(row)}])
        return Prompt(text=_row_text(row))


def _row_text(row: dict[str, Any]) -> str:
    for key in ("prompt", "text", "question", "input"):
        if isinstance(row.get(key), str):
            return row[key]
    if isinstance(row.get("messages"), list):
        return "\n".join(str(m.get("content", "")) for m in row["messages"])
    raise UsageError(f"dataset row has none of the fields prompt/text/question/input/messages: {str(row)[:120]}")


def load_dataset(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise UsageError(f"dataset {path} does not exist")
    from .jsonl import read_jsonl

    rows = read_jsonl(path)
    if bad := next((number for number, row in enumerate(rows, 1) if not isinstance(row, dict)), None):
        raise UsageError(f"{path}: row {bad} is not a JSON object; give one object per line")
    if not rows:
        raise UsageError(f"dataset {path} has no rows")
    _row_text(rows[0])  # fail now, not at the first request, if the fields are wrong
    return rows


def poisson_schedule(n: int, rate: float, seed: int = 0) -> list[float]:
    """Send offsets (seconds from the start) of n requests arriving as a Poisson process."""
    if rate <= 0:
        raise UsageError("a request rate must be positive")
    rng = random.Random(f"poisson:{seed}")
    t, out = 0.0, []
    for i in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


# --------------------------------------------------------------------------------------------
# Requests


class RequestResult(BaseModel):
    ok: bool
    error: str | None = None
    start_s: float = 0.0  # send time relative to the point's start
    ttft: float | None = None
    itl: list[float] = Field(default_factory=list)
    tpot: float | None = None
    e2e: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    usage_from_server: bool = True


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


# --------------------------------------------------------------------------------------------
# Points


class BenchPoint(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.bench.point"
    profile: Literal["concurrency", "rate"]
    concurrency: int | None = None
    rate: float | None = None  # requests/s (Poisson)
    api: str = "completions"
    input_len: int | None = None  # requested; None for dataset prompts
    output_len: int
    num_requests: int
    started_at: str
    duration_s: float
    successes: int
    failures: int
    failure_reasons: dict[str, int] = Field(default_factory=dict)
    prompt_tokens: int
    completion_tokens: int
    output_tok_s: float
    total_tok_s: float
    req_s: float
    ttft: Stats | None = None
    itl: Stats | None = None
    tpot: Stats | None = None
    e2e: Stats | None = None
    max_in_flight: int = 0
    slo: str | None = None
    slo_met: bool | None = None
    slo_violations: list[str] = Field(default_factory=list)
    goodput_req_s: float | None = None  # requests/s that met every SLO term on their own
    tokens_from_usage: bool = True
    partial: bool = False  # the server died during this point
    partial_reason: str | None = None

    @property
    def x(self) -> float:
        return float(self.concurrency if self.profile == "concurrency" else self.rate)


def summarize(results: list[RequestResult], duration: float, *, profile: str, concurrency: int | None,
              rate: float | None, output_len: int, input_len: int | None, api: str, started_at: str,
              slo: Slo | None = None, max_in_flight: int = 0, partial_reason: str | None = None) -> BenchPoint:
    good = [r for r in results if r.ok]
    bad = [r for r in results if not r.ok]
    reasons = Counter(_reason_key(r.error or "unknown") for r in bad)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in good)
    completion_tokens = sum(r.completion_tokens or 0 for r in good)
    duration = max(duration, 1e-9)
    point = BenchPoint(
        profile=profile, concurrency=concurrency, rate=rate, api=api, input_len=input_len, output_len=output_len,
        num_requests=len(results), started_at=started_at, duration_s=round(duration, 4),
        successes=len(good), failures=len(bad), failure_reasons=dict(reasons),
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        output_tok_s=completion_tokens / duration, total_tok_s=(prompt_tokens + completion_tokens) / duration,
        req_s=len(good) / duration,
        ttft=Stats.of([r.ttft for r in good if r.ttft is not None]),
        itl=Stats.of([x for r in good for x in r.itl]),
        tpot=Stats.of([r.tpot for r in good if r.tpot is not None]),
        e2e=Stats.of([r.e2e for r in good if r.e2e is not None]),
        max_in_flight=max_in_flight,
        tokens_from_usage=all(r.usage_from_server for r in good),
        partial=partial_reason is not None, partial_reason=partial_reason,
    )
    if slo is not None:
        point.slo = str(slo)
        point.slo_violations = slo.violations(point)
        if bad:
            point.slo_violations.append(f"{len(bad)} failed requests")
        point.slo_met = not point.slo_violations
        point.goodput_req_s = sum(1 for r in good if slo.request_ok(r)) / duration
    return point


def _reason_key(error: str) -> str:
    # Group failures by kind: strip request-specific numbers so 64 timeouts make one entry.
    return re.sub(r"\b\d{4,}\b", "N", error)[:200]


SERVER_DIED = "server died before the request was sent"


async def run_point_async(target: Target, prompts: list[Prompt], output_len: int, *, concurrency: int | None = None,
                          rate: float | None = None, seed: int = 0, slo: Slo | None = None,
                          alive: Callable[[], bool] | None = None, input_len: int | None = None,
                          request_timeout: float = 600.0) -> BenchPoint:
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
    in_flight = 0
    max_in_flight = 0
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    timeout = httpx.Timeout(request_timeout, connect=10.0)
    limits = httpx.Limits(max_connections=limit + 4, max_keepalive_connections=limit + 4)

    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        t0 = time.perf_counter()

        async def one(prompt: Prompt, offset: float) -> RequestResult:
            nonlocal in_flight, max_in_flight
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            async with semaphore:
                if dead.is_set():
                    return RequestResult(ok=False, error=SERVER_DIED, start_s=time.perf_counter() - t0)
                in_flight += 1
                max_in_flight = max(max_in_flight, in_flight)
                try:
                    return await send_request(client, target, prompt, output_len, t0)
                finally:
                    in_flight -= 1

        async def watch() -> None:
            while True:
                await asyncio.sleep(1.0)
                if alive is not None and not await asyncio.to_thread(alive):
                    dead.set()
                    return

        watcher = asyncio.create_task(watch())
        try:
            results = await asyncio.gather(*(one(p, o) for p, o in zip(prompts, offsets)))
        finally:
            watcher.cancel()
        # the wall time of the whole point, as `vllm bench serve` measures it
        duration = time.perf_counter() - t0
    if not dead.is_set() and alive is not None and any(not r.ok for r in results) and not alive():
        dead.set()
    return summarize(
        list(results), duration, profile=profile, concurrency=concurrency, rate=rate, output_len=output_len,
        input_len=input_len, api=target.api, started_at=started_at, slo=slo, max_in_flight=max_in_flight,
        partial_reason="the server died during this point" if dead.is_set() else None,
    )


def run_point(*args, **kwargs) -> BenchPoint:
    return asyncio.run(run_point_async(*args, **kwargs))


def warmup(target: Target, prompts: list[Prompt], output_len: int) -> list[RequestResult]:
    """Requests sent before measuring (first-request costs: connection, kernel selection, caches)."""

    async def go():
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0)) as client:
            return await asyncio.gather(*(send_request(client, target, p, output_len) for p in prompts))

    return list(asyncio.run(go()))
