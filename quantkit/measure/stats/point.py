"""One load point's data: per-request results, latency statistics, and the point's summary.

Statistics follow `vllm bench serve` (numpy's linear-interpolation percentiles), latencies are
seconds. A failed request is kept with its reason and counted; a point is never dropped.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, Field

from ...numbers import MAX_SECONDS, Count, Seconds
from . import load_kinds
from .percentiles import METRICS, STATS, Stats, percentile  # noqa: F401 (point.X for callers)
from .slo import Slo

SCHEMA_VERSION = 1


def token_timeline(start: float, first_choice: float | None, read_times, read_counts, exact: bool,
                   usage_tokens: int | None) -> tuple[float, list[float], float, int] | None:
    """TTFT, per-token gaps (ITL), E2E and the token count of one stream, from the network reads
    that carried its token chunks: `read_times[i]` is when read i was seen, `read_counts[i]` how
    many token chunks (or, with `exact`, tokens) it carried; `first_choice` is the first chunk with
    choices (TTFT, as `vllm bench serve` takes it). None when no token came.

    ITL means token cadence. `vllm bench serve` appends one gap per chunk, timed when the chunk is
    parsed: chunks that came in one read (a burst, when a client reads late) then get gaps of ~0,
    and a chunk of k tokens one gap worth k. Here the time since the previous read that carried
    tokens is shared evenly by the tokens of this read: the gaps of a stream sum to E2E - TTFT and
    number tokens - 1, so their mean is the stream's TPOT. Tokens beyond the first in the TTFT read
    get gaps of 0 (they did arrive together). Without per-chunk usage, when the server's final usage
    says more tokens than chunks (multi-token chunks), every chunk after the first is taken to
    carry an equal share of the rest.
    """
    if first_choice is None:
        return None
    counts = list(read_counts)
    chunks = sum(counts)
    tokens = usage_tokens if usage_tokens is not None and usage_tokens > 0 else max(chunks, 1)
    if not exact and chunks and tokens != chunks:
        counts = _spread(counts, tokens)
    itl: list[float] = []
    prev = first_choice
    for t, m in zip(read_times, counts):
        if m <= 0:
            continue
        if t <= first_choice:
            itl.extend([0.0] * (m - 1))
        else:
            itl.extend([(t - prev) / m] * m)
        prev = t
    ttft = first_choice - start
    return ttft, itl, prev - start, tokens


def _spread(counts: list[int], tokens: int) -> list[int]:
    """Per-read token counts when `tokens` came in sum(counts) chunks: the first chunk one token,
    each later chunk an equal share of the rest (cumulative rounding keeps the total exact)."""
    chunks = sum(counts)
    if chunks == 1:
        return [tokens if c else 0 for c in counts]

    def upto(c: int) -> int:  # tokens in chunks 0 .. c-1
        return 0 if c <= 0 else 1 + (c - 1) * (tokens - 1) // (chunks - 1)

    out, seen = [], 0
    for c in counts:
        out.append(upto(seen + c) - upto(seen))
        seen += c
    return out


class ClientStats(BaseModel):
    """How quantkit's own client fared during a point (it must never be the bottleneck)."""

    workers: int  # client worker processes (event loops) that shared the point
    event_loop: str = "asyncio"
    cpu_s: float  # CPU seconds the client's workers used during the point
    cores: float  # cpu_s / duration: cores the client kept busy
    busiest_worker: float  # the highest share of one core any worker used
    cpu_us_per_token: float | None = None  # cpu_s per streamed token, microseconds
    loop_lag_p50_ms: float | None = None  # how late a 20 ms timer fired on the workers' loops
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None
    send_lag_p50_ms: float | None = None  # rate profiles: how late sends were against the schedule
    send_lag_p99_ms: float | None = None
    send_lag_max_ms: float | None = None
    attempts: int = 1  # runs of this point: a saturated client retries it with more workers


# A point is client-limited when a worker's loop was saturated (its timestamps then come late and
# in bursts) or, at a rate, sends fell behind their schedule. Loop lag is judged against the
# cadence it would blur: a timer that fires 2 ms late is nothing beside a 100 ms ITL, and much
# beside a 5 ms one. Calibrated on the cadence fixture (benchmarks/loadgen_capacity.py).
BUSY_LIMIT = 0.85  # share of one core
LAG_P50_LIMIT_MS = 2.0  # or 5% of the point's ITL median, whichever is larger
LAG_P99_LIMIT_MS = 10.0  # or half the point's ITL median, whichever is larger
SEND_LAG_P99_LIMIT_MS = 20.0


def client_limit(stats: ClientStats, itl_p50_s: float | None = None, e2e_p50_s: float | None = None) -> str | None:
    """Why the client limited this point, or None. A send's lateness is judged against the
    requests' duration too (5% of the median E2E): latencies are timed from the actual send, so a
    send 30 ms late beside 2-s requests changes when load arrives, not what it measured (and a
    steady-state window reports the rate it really offered)."""
    why = []
    if stats.busiest_worker >= BUSY_LIMIT:
        why.append(f"a client worker used {stats.busiest_worker:.0%} of a core")
    itl_ms = 1000 * itl_p50_s if itl_p50_s else 0.0
    p50_limit, p99_limit = max(LAG_P50_LIMIT_MS, 0.05 * itl_ms), max(LAG_P99_LIMIT_MS, 0.5 * itl_ms)
    if stats.loop_lag_p99_ms is not None and (stats.loop_lag_p99_ms > p99_limit
                                              or (stats.loop_lag_p50_ms or 0) > p50_limit):
        text = (f"event-loop lag p50 {stats.loop_lag_p50_ms:.1f} ms, p99 {stats.loop_lag_p99_ms:.1f} ms "
                f"(limits {p50_limit:.3g} / {p99_limit:.3g} ms)")
        if stats.busiest_worker < 0.5:
            text += f" while the client used only {stats.busiest_worker:.0%} of a core: it was kept waiting, most likely by other processes on this host"
        why.append(text)
    send_limit = max(SEND_LAG_P99_LIMIT_MS, 50.0 * e2e_p50_s if e2e_p50_s else 0.0)
    if stats.send_lag_p99_ms is not None and stats.send_lag_p99_ms > send_limit:
        why.append(f"sends fell behind the schedule: p99 {stats.send_lag_p99_ms:.0f} ms late "
                   f"(limit {send_limit:.3g} ms)")
    return "; ".join(why) or None


class RequestResult(BaseModel):
    ok: bool
    error: str | None = None
    index: int | None = None  # the request's place in the point's sending order
    start_s: float = 0.0  # send time relative to the point's start
    ttft: float | None = None
    itl: list[float] = Field(default_factory=list)
    tpot: float | None = None
    e2e: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    usage_from_server: bool = True  # the server's usage was credited (tokens.credit)
    usage_mismatch: str | None = None  # why it was not: it disagreed with what the client received


# --------------------------------------------------------------------------------------------
# Points


Verdict = Literal["pass", "fail", "undecided", "saturated", "stall"]
# a load the server could not keep up with: `saturated` (completions fell behind arrivals) or `stall`
# (no request finished at all). Both fail every SLO, carry no latency margin, and so does any load above
OVERLOADED = ("saturated", "stall")


class WindowSettings(BaseModel):
    model_config = {"extra": "forbid", "allow_inf_nan": False}

    warmup_s: float = Field(5.0, ge=0, le=MAX_SECONDS)
    min_s: Seconds = 10.0
    max_s: Seconds = 60.0  # profiles.stretched raises it, never past MAX_SECONDS
    min_requests: Count = 50
    confidence: float = Field(0.95, gt=0.5, lt=1)  # confidence.DEFAULT_CONFIDENCE


class WindowSummary(BaseModel):
    """What a point's window held, and what it left out."""

    verdict: Verdict
    confidence: float
    reasons: list[str] = Field(default_factory=list)  # why it is not a pass (terms and their intervals)
    more: int | None = None  # undecided: requests still to run before it could decide (confidence.SloVerdict.more)
    warmup_s: float  # sends before this (s from the point's start) were the warm-up
    start_s: float  # the window: the first and last measured request's send time
    end_s: float
    measured: int
    warmup_excluded: int
    cooldown_excluded: int  # finished, but sent after the window closed
    cut_off: int = 0  # still running (or never sent) when the point ended: cancelled
    offered_req_s: float | None = None  # arrivals in the window / its span
    achieved_req_s: float | None = None  # completions in the window / its span
    output_tok_s: float | None = None  # tokens streamed in the window / its span
    in_flight_mean: float | None = None  # the client's time-average of requests in flight (Little's L)
    in_flight_growth: float | None = None  # mean in flight over the later half of the sends minus the earlier
    saturation: str | None = None  # the evidence, when saturated
    closed_by: str = ""  # decided, saturated, the cap (max_s), or the prompts ran out


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
    slo: Slo | None = None
    slo_met: bool | None = None
    slo_violations: list[str] = Field(default_factory=list)
    goodput_req_s: float | None = None  # requests/s that met every SLO term on their own
    slo_attainment: float | None = None  # share of the point's requests that met every SLO term
    stopped_early: str | None = None  # why the point was cut short (its verdict was already decided)
    server_metrics: dict[str, Any] | None = None  # measure.observe.metrics.ServerMetrics: vLLM's /metrics during the point
    gpus: list[dict[str, Any]] | None = None  # measure.observe.gpu.GpuSummary per GPU (NVML), where there are GPUs
    host: dict[str, Any] | None = None  # measure.observe.host.HostSummary: CPU of the server's processes and the client
    tokens_from_usage: bool = True
    partial: bool = False  # the server died during this point
    partial_reason: str | None = None
    client: ClientStats | None = None  # the client's own CPU and lag (None in points stored before)
    client_limited: bool = False  # the client, not the server, may have limited these figures
    client_limited_reason: str | None = None
    # the server's usage disagreed with the text received (tokens.credit): its tokens were counted from the text
    usage_mismatch: bool = False
    usage_mismatch_reason: str | None = None
    # the server still had requests running or waiting when the point started (drain.py): its figures may
    # carry an earlier point's load
    started_busy: bool = False
    started_busy_reason: str | None = None
    load_profile: str | None = None  # capacity's profile: poisson, concurrency (staggered) or burst
    # a capacity ladder measured this load again (capacity/live.contradictions): why, and the later point is the one judged
    superseded: str | None = None
    window: WindowSummary | None = None  # a steady-state point: its window and verdict (window.py)
    samples: str | None = None  # every request, packed (samples.py); kept in the store's points only

    @property
    def x(self) -> float:
        return float(load_kinds.kind(self.profile).load_of(self))


def summarize(results: list[RequestResult], duration: float, *, profile: str, concurrency: int | None,
              rate: float | None, output_len: int, input_len: int | None, api: str, started_at: str,
              max_in_flight: int = 0, partial_reason: str | None = None,
              client: ClientStats | None = None) -> BenchPoint:
    """The point's figures from its requests (the SLO verdict, if any, is slo.Slo.judge's)."""
    good = [r for r in results if r.ok]
    bad = [r for r in results if not r.ok]
    reasons = Counter(_reason_key(r.error or "unknown") for r in bad)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in good)
    completion_tokens = sum(r.completion_tokens or 0 for r in good)
    duration = max(round(duration, 6), 1e-9)  # one value for duration_s and every rate (goodput reads duration_s)
    point = BenchPoint(
        profile=profile, concurrency=concurrency, rate=rate, api=api, input_len=input_len, output_len=output_len,
        num_requests=len(results), started_at=started_at, duration_s=duration,
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
    if disputed := [r for r in results if r.usage_mismatch]:
        point.usage_mismatch = True
        point.usage_mismatch_reason = (f"{len(disputed)} of {len(results)} requests: {disputed[0].usage_mismatch}; "
                                       "their tokens were counted from the text received")
    if client is not None:
        point.client = client
        # a point no request succeeded in has no figure the client could have limited
        point.client_limited_reason = client_limit(client, point.itl.p50 if point.itl else None,
                                                   point.e2e.p50 if point.e2e else None) if good else None
        point.client_limited = point.client_limited_reason is not None
    return point


def _reason_key(error: str) -> str:
    # Group failures by kind: strip request-specific numbers so 64 timeouts make one entry.
    return re.sub(r"\b\d{4,}\b", "N", error)[:200]

