"""A steady-state load point is a time window: warm-up trimmed, cool-down excluded, verdict at a confidence.

A point of the `poisson` or `concurrency` profile keeps its load on (arrivals, or C staggered
streams) and measures only what a server sustains:
- **warm-up**: requests sent in the first `warmup_s` seconds (at least 1.5 median request durations
  at this load, so the server holds its steady batch before the window opens) are left out;
- **window**: the requests sent after the warm-up, in sending order, up to the last one such that
  every request sent before it has finished (the complete prefix): its statistics carry no bias
  towards the fast requests, since none of its slow ones is still running;
- **cool-down**: requests sent after the window closed, or still running when it closed, are left
  out too (counted, and said so);
- **verdict**: `confidence.judge` on the window's requests; the point ends once the verdict is
  decided and the window holds `min_requests` over at least `min_s` seconds (and at least
  `WINDOW_LIFETIMES` median request durations), or at `max_s` (`undecided` if the data still
  cannot tell);
- **saturation**: completions fall behind arrivals: the client's own count of requests in flight
  grows through the window by more than its steady-state noise (3 sqrt(L + 1), L in flight) and by more than 10%
  of the window's arrivals (achieved rate below 90% of offered). Its percentiles describe a queue
  that grows with the window's length, so the verdict is `saturated`, not a latency figure. The
  stop rule, which looks every tick, ends a point early only on growth beyond twice that noise;
  a marginal one runs on to the cap, where a queue keeps growing and noise does not.
- **stall**: no request finished at all (none failed either) while requests were sent: there is no
  latency to judge and no queue to measure, so the verdict is `stall`, never a saturation figure.
  The point ends once the warm-up and the shortest window have passed without a completion, and
  the first request has had `STALL_AFTER` times an idle request's duration: a slow server under
  a batch is not stalled. (On an AVX2 CPU serving emulated bf16, the demo's first point finished
  0 of 137 requests in 36 s; on float32 an idle request takes 4-5 s, and a point called after
  13 s without a completion was a false stall.) Where /metrics shows the server's token counters
  still growing, it is computing, not stalled: the point runs on, and a request that finishes makes
  it an ordinary window; one that finishes nothing in 3 times the wait is a stall after all.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, NamedTuple

from .confidence import SloVerdict, judge
from .point import RequestResult, Verdict, WindowSettings, WindowSummary, percentile

if TYPE_CHECKING:
    from .slo import Slo

SATURATION_SHARE = 0.10  # in-flight growth over the window / its arrivals at which arrivals outpace service
SATURATION_SIGMAS = 3.0  # ... and beyond this many standard deviations of a steady queue's noise
# the stop rule looks again every tick: it ends a point early only on growth this many times the noise
# threshold, and lets a marginal growth run to the window's cap, where the whole window is judged once
# (12-06, one H100: bf16 read "saturated" at 25.2 req/s, 29 of 27.9 needed, after 21 s; vLLM's client
# sustained 25.2 for 60 s, and the same ladder met 28.5-32.8). The 10% share is no noise term: a load
# 10-25% over capacity never grows by twice it, and would run every such point to its cap
SATURATION_CLEAR = 2.0
STALL_AFTER = 4.0  # no completion for this many idle request durations after the first send: a stall
MIN_IDLE_S = 5.0  # ... unless the server's token counters grew within that long (or this, if longer)
BUSY_GRACE = 3.0  # ... and not past this many times that wait: a server busy for so long and done with nothing
# is too slow for the load (a low load's window may stretch to minutes: profiles.stretched)
# a window spans at least this many median request durations (up to its cap): one shorter than a few
# request lifetimes cannot see the queue episodes of a full KV cache. 12-07, one H100, bf16 at 4,096 in /
# 512 out (requests of 14-20 s): a 21-s window passed 4.66 req/s; an 85-s one at 4.21 saw TTFT p95 2.1 s
WINDOW_LIFETIMES = 3.0


def _end(r: RequestResult) -> float | None:
    return r.start_s + r.e2e if r.ok and r.e2e is not None else None


def median_e2e(results: list[RequestResult]) -> float:
    """The median duration of the finished requests (0 before any finished)."""
    e2e = [r.e2e for r in results if r.ok and r.e2e is not None]
    return percentile(e2e, 50) if e2e else 0.0


def effective_warmup(results: list[RequestResult], settings: WindowSettings,
                     median_s: float | None = None) -> float:
    """The warm-up: `warmup_s`, or 1.5 median request durations at this load if longer (the batch
    fills in about one). The lengthening stops at a third of the cap; the warm-up asked for is
    always kept (it was once cut to a third of the cap too, silently: 10 s asked, 8.3 s used).
    `median_s`: `median_e2e(results)` when the caller has it already."""
    longer = 1.5 * (median_e2e(results) if median_s is None else median_s)
    return max(settings.warmup_s, min(longer, settings.max_s / 3))


def effective_min(results: list[RequestResult], settings: WindowSettings,
                  median_s: float | None = None) -> float:
    """The shortest window: `min_s`, or `WINDOW_LIFETIMES` median request durations at this load if
    longer, never past the cap `max_s`. `median_s` as for `effective_warmup`."""
    longer = WINDOW_LIFETIMES * (median_e2e(results) if median_s is None else median_s)
    return max(settings.min_s, min(longer, settings.max_s))


def split(results: list[RequestResult], warmup_s: float) -> tuple[list[RequestResult], int, int]:
    """(window, warm-up count, cool-down count) of the finished requests: the window is the
    complete prefix, in sending order, of the requests sent after the warm-up."""
    ordered = sorted(results, key=lambda r: (r.index if r.index is not None else 0, r.start_s))
    warm = [r for r in ordered if r.start_s < warmup_s]
    rest = [r for r in ordered if r.start_s >= warmup_s]
    window: list[RequestResult] = []
    expected = rest[0].index if rest and rest[0].index is not None else None
    for r in rest:
        if expected is not None and r.index is not None and r.index != expected:
            break  # an earlier-sent request has not finished: the prefix ends here
        window.append(r)
        expected = r.index + 1 if r.index is not None else None
    return window, len(warm), len(rest) - len(window)


def figures(results: list[RequestResult], window: list[RequestResult]) -> dict[str, float | None]:
    """Rates and Little's L over the window's span, from every finished request's own times."""
    if len(window) < 2:
        return {}
    t0, t1 = window[0].start_s, window[-1].start_s
    span = t1 - t0
    if span <= 0:
        return {}
    completions = sum(1 for r in results if (e := _end(r)) is not None and t0 <= e <= t1)
    tokens, busy = 0.0, 0.0
    for r in results:
        end = _end(r)
        if end is None:
            continue
        busy += max(0.0, min(end, t1) - max(r.start_s, t0))
        first = r.start_s + (r.ttft or 0.0)
        n = r.completion_tokens or 0
        if t0 <= first <= t1:
            tokens += 1
        if n > 1 and end > first:  # the rest of its tokens, spread over its decode span
            tokens += (n - 1) * max(0.0, min(end, t1) - max(first, t0)) / (end - first)
    return {"offered_req_s": (len(window) - 1) / span, "achieved_req_s": completions / span,
            "output_tok_s": tokens / span, "in_flight_mean": busy / span}


def growth(series: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(mean in flight over the later half of the series minus over the earlier half, overall
    mean) of (time, requests in flight) samples: a queue that grows by g per second reads g*T/2."""
    if len(series) < 4:
        return None
    half = len(series) // 2
    early = sum(n for _, n in series[:half]) / half
    late = sum(n for _, n in series[half:]) / (len(series) - half)
    return late - early, sum(n for _, n in series) / len(series)


SATURATED = "saturated: "  # how saturation's evidence begins, in a verdict and in a stop rule's reason
STALL = "stall: "  # ... and a stall's


def stall_reason(sent: int | None, seconds: float) -> str:
    many = f" ({sent} sent)" if sent else ""
    return (f"{STALL}no request finished in {seconds:.0f} s{many}: the server completed none at this load, so "
            "there is no latency to judge")


def saturation(series: list[tuple[float, float]], arrivals: int, span_s: float,
               noise: float = 1.0) -> tuple[str | None, float | None]:
    """Arrivals outpace completions: requests in flight grow through the span by more than 10% of
    its arrivals (half of that between the halves' means) and beyond a steady queue's noise (times
    `noise`)."""
    found = growth(series)
    if found is None or arrivals < 8:
        return None, None
    g, mean = found
    if g > SATURATION_SHARE / 2 * arrivals and g > noise * SATURATION_SIGMAS * math.sqrt(mean + 1):
        return (f"{SATURATED}requests in flight grew from {mean - g / 2:.0f} to {mean + g / 2:.0f} on average "
                f"between the two halves of {span_s:.0f} s ({arrivals} arrivals): completions fell behind"), g
    return None, g


def in_flight_series(starts: list[float], ends: list[float], t0: float, t1: float, samples: int = 40):
    """Requests in flight at `samples` times over [t0, t1] (an end of inf: never finished)."""
    if t1 <= t0:
        return []
    out = []
    for k in range(samples):
        t = t0 + (t1 - t0) * (k + 0.5) / samples
        out.append((t, float(sum(1 for s, e in zip(starts, ends) if s <= t < e))))
    return out


def summarize(slo: "Slo | None", results: list[RequestResult], settings: WindowSettings, *,
              cut_starts: list[float] | None = None, closed_by: str = "",
              open_loop: bool = True) -> tuple[WindowSummary, list[RequestResult]]:
    """The point's window and its verdict from its finished requests, and the send times of those
    cut off (still running, or sent, when the point ended)."""
    cut_starts = cut_starts or []
    if not results and cut_starts:  # nothing finished, nothing failed: a stall, not a measurement
        reason = closed_by if closed_by.startswith(STALL) else stall_reason(len(cut_starts), max(cut_starts))
        return WindowSummary(verdict="stall", confidence=settings.confidence, reasons=[reason],
                             warmup_s=settings.warmup_s, start_s=0.0, end_s=0.0, measured=0, warmup_excluded=0,
                             cooldown_excluded=0, cut_off=len(cut_starts), closed_by=closed_by), []
    warmup = effective_warmup(results, settings)
    window, warm, cool = split(results, warmup)
    fig = figures(results, window)
    saturated = None
    starts = [r.start_s for r in results] + cut_starts
    last_send = max(starts, default=0.0)
    if open_loop and last_send > warmup:
        ends = [(_end(r) or math.inf) for r in results] + [math.inf] * len(cut_starts)
        arrivals = sum(1 for t in starts if t >= warmup)
        saturated, fig["in_flight_growth"] = saturation(in_flight_series(starts, ends, warmup, last_send),
                                                        arrivals, last_send - warmup)
    if not saturated and closed_by.startswith(SATURATED):
        # the stop rule saw saturation in the in-flight count it sampled live and ended the point there:
        # what finished after that was cut off, so the reconstruction above may miss the growth it saw
        saturated = closed_by
    verdict: Verdict = "undecided"
    reasons: list[str] = []
    more: int | None = None
    if saturated:
        verdict, reasons = "saturated", [saturated]
    elif slo is not None and window:
        verdict, reasons, more, _ = settle(slo, window, settings)
    elif not window:
        reasons = ["no request finished inside the window"]
    summary = WindowSummary(
        verdict=verdict, confidence=settings.confidence, reasons=reasons, warmup_s=round(warmup, 3),
        start_s=window[0].start_s if window else 0.0, end_s=window[-1].start_s if window else 0.0,
        measured=len(window), warmup_excluded=warm, cooldown_excluded=cool, cut_off=len(cut_starts),
        saturation=saturated, closed_by=closed_by, more=more, **fig)
    return summary, window


class Settled(NamedTuple):
    verdict: Verdict
    reasons: list[str]
    more: int | None  # undecided: requests still to run before it could decide (None: not known)
    judged: SloVerdict


def settle(slo: "Slo", window: list[RequestResult], settings: WindowSettings) -> Settled:
    """A window's verdict on its requests: `confidence.judge`, and a pass that is still rising or
    holds fewer than `min_requests` is undecided (the count: unknown for a rising one, the requests
    short of the minimum for a short one). A live point and a stored one judged again
    (capacity/rejudge.py) alike."""
    judged = judge(slo, window, settings.confidence)
    verdict, reasons, more = judged.decision, judged.reasons(), judged.more
    if verdict == "pass" and (rising := still_rising(slo, window)):
        verdict, reasons, more = "undecided", [rising], None
    if len(window) < settings.min_requests and verdict == "pass":
        verdict, more = "undecided", settings.min_requests - len(window)
        reasons.append(f"{len(window)} requests in the window, fewer than the {settings.min_requests} asked")
    return Settled(verdict, reasons, more, judged)


def still_rising(slo: "Slo", window: list[RequestResult]) -> str | None:
    """A pass whose later half breaks a bound is no steady state yet: near saturation a server
    started empty takes far longer than one request to reach its stationary queue, and a window
    that opens early sees it still filling (the point then goes on, up to its cap)."""
    if len(window) < 40:
        return None
    later = window[len(window) // 2:]
    for t in slo.terms:
        values = [v for r in later if r.ok and (v := (getattr(r, t.metric) if t.metric != "itl" else
                                                        (percentile(r.itl, 50) if r.itl else None))) is not None]
        if not values:
            continue
        stat = sum(values) / len(values) if t.stat == "mean" else percentile(values, float(t.stat[1:]))
        if stat > t.limit_s:
            return (f"{t.key} of the window's later half is {stat:.3g}s, over {t.limit_s:g}s: latency still rising, "
                    "not yet a steady state")
    return None


class WindowStop:
    """`stop_when` for a window point: ends it once its verdict is decided (or saturated) over at
    least `min_s` and `min_requests`, or at the cap, whatever comes first. `offsets`, an open loop's
    send schedule, tell it how many requests were sent by now: the ones not finished are in flight.
    `request_s`, one request's duration on the idle server, sets how long it waits before a stall.
    `server_idle_s` (observe/metrics.idle_s on the point's scrapes) tells how long the server's
    token counters have not grown: a server still computing is no stall (None: no /metrics)."""

    def __init__(self, slo: "Slo | None", settings: WindowSettings, offsets: list[float] | None = None,
                 request_s: float = 0.0, server_idle_s: Callable[[], float | None] | None = None):
        self.slo, self.settings, self.offsets = slo, settings, offsets
        self.stall_after_s = STALL_AFTER * request_s + (offsets[0] if offsets else 0.0)
        self.idle_after_s = max(STALL_AFTER * request_s, MIN_IDLE_S)
        self.server_idle_s = server_idle_s
        self.series: list[tuple[float, float]] = []  # (elapsed, requests in flight)

    def _server_busy(self) -> bool:
        """The server's token counters grew lately: it works through a batch that finished nothing
        yet (12-07, a 2-core Zen 4: a Poisson draw sent 44 requests in 13 s at 1.95 req/s, 43 ran
        at once, 0.22 s a step, and the point was called a stall after 13 s with 1,162 tokens made)."""
        idle = self.server_idle_s() if self.server_idle_s is not None else None
        return idle is not None and idle < self.idle_after_s

    def __call__(self, finished: list[RequestResult], elapsed_s: float) -> str | None:
        import bisect

        s = self.settings
        median_s = median_e2e(finished)  # sorted once a tick: the warm-up and the window both need it
        warmup = effective_warmup(finished, s, median_s)
        sent = bisect.bisect_right(self.offsets, elapsed_s) if self.offsets is not None else None
        if sent is not None:
            self.series.append((elapsed_s, float(sent - len(finished))))
        if elapsed_s >= warmup + s.max_s:
            return f"the window reached its cap of {s.max_s:g} s"
        min_s = effective_min(finished, s, median_s)
        if elapsed_s < warmup + min_s or self.slo is None:
            return None
        if not finished:
            # a closed loop has sent its streams' first requests; an open one, two
            if (sent is None or sent >= 2) and elapsed_s >= self.stall_after_s and (
                    elapsed_s >= BUSY_GRACE * self.stall_after_s or not self._server_busy()):
                return stall_reason(sent, elapsed_s)
            return None
        if self.offsets is not None:
            recent = [(t, n) for t, n in self.series if t >= warmup]
            arrivals = sent - bisect.bisect_left(self.offsets, warmup)
            if saturation(recent, arrivals, elapsed_s - warmup)[0]:
                # growing, but not clearly (None): a longer window tells a queue from noise (the cap ends it)
                return saturation(recent, arrivals, elapsed_s - warmup, SATURATION_CLEAR)[0]
        summary, _ = summarize(self.slo, finished, s, open_loop=False)
        if summary.end_s - summary.start_s < min_s:  # the window itself spans min_s, not the point
            return None
        if summary.verdict == "fail" or (summary.verdict == "pass" and summary.measured >= s.min_requests):
            return f"decided: {summary.verdict} at {s.confidence:.0%} confidence over {summary.measured} requests"
        return None


def idle_request_s(warm: list[RequestResult], output_len: int) -> float:
    """One request's duration on the idle server at the search's output length, from the warm-up
    requests (shorter: their own TPOT scaled to the full length)."""
    ok = [r for r in warm if r.ok and r.e2e is not None and r.ttft is not None]
    if not ok:
        return 1.0
    r = ok[-1]  # the first ones pay one-time costs
    tpot = r.tpot if r.tpot is not None else 0.0
    return max(1e-3, r.ttft + tpot * max(output_len - 1, 0))
