"""Capacity under an SLO: the highest load a server sustains while the SLO holds.

`run_capacity(server, model_dir, slo, settings)` drives `search.search_capacity` with real load
points against a server it is given: concurrency (default) or Poisson request rate, grown until
the SLO breaks and narrowed to `tolerance` (10%). Every point scrapes vLLM's /metrics (and NVML on
GPU machines, and the CPU of the server's processes: observe/host.py) and is kept, in order, with
its verdict; the capacity is reported as concurrency, requests/s and output tokens/s at the highest
load that met the SLO, with the bound that stops it (bounds.py) and the number of points spent.

A point stops early (`EarlyStop`) once it cannot pass any more, instead of running to its end:
- its verdict is decided: enough requests already broke a bound that its statistic over the whole
  point must break it (e.g. more than 5% of the point's requests over a p95 limit), or a request
  failed (a failed request breaks the SLO);
- it is over-saturated: the server's waiting queue grows through the point and TTFT climbs with
  the time a request was sent (arrivals outpace service: under a Poisson rate the queue never
  drains, so waiting for the point's end only burns minutes).
A point quantkit's own client limited (`client_limited`, set by the load generator) is not
trusted: the search ends there and says so.
"""

from __future__ import annotations

import itertools
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field

from ...console import info
from ...errors import BackendError, UsageError
from ...files import atomic_write_json, unique_path
from ...machine import hardware
from ...secrets import mask_secrets
from ...serve.server import Server, ServerInfo
from ..loadgen.generator import Target, warmup
from ..loadgen.workload import PromptSource, poisson_schedule
from ..observe.bounds import CapacityBound, classify_capacity
from ..observe.gpu import gpus_of
from ..observe.host import open_host
from ..observe.metrics import PointMonitor, Scrape, slope
from ..stats import load_kinds
from ..stats import tiers
from ..stats.confidence import requests_needed, verdict_word
from ..stats.point import OVERLOADED, BenchPoint, RequestResult, percentile
from ..stats.slo import Slo
from ..stats.window import WindowSettings, WindowStop, idle_request_s
from . import profiles
from .settings import CapacitySettings
from .bench import checkpoint_info, measure_point, results_dir, stamp
from .rejudge import LadderStep, judge_step, start_from, tighten
from .search import FLOOR_DIVISOR, CapacitySearch, Verdict, floor_of, left_open, search_capacity

# A steady state's latency is flat, then climbs steeply near saturation: a power law through two
# flat points predicts no crossing at all, so growth is capped harder than a burst's (8x)
STEADY_GROWTH = 4.0
SCHEMA_VERSION = 2  # 2: load profiles by name (poisson, concurrency, burst) and steady-state windows


class Recheck(BaseModel):
    """A load the ladder measured twice: it was overloaded (saturated, stalled) below a load of the
    same ladder that held its SLO, which cannot both be the server's steady state."""

    load: float
    held: float  # the higher load that passed
    first: str  # the first point's verdict
    again: str  # the second point's verdict: the one the searches read

    def text(self, label: Callable[[float], str]) -> str:
        same = self.again in OVERLOADED
        return (f"{label(self.load)} was {self.first} below {label(self.held)}, which held; measured again it was "
                f"{self.again}" + (" again: the ladder is not monotone there, and the capacity below it is the "
                                   "cautious reading" if same else ""))


class CapacityFigures(BaseModel):
    """The capacity point: the highest load that met the SLO, as users size a deployment. Under
    Poisson arrivals `goodput_req_s` is the offered rate x the share of requests that met the SLO."""

    load: float
    profile: str | None = None  # poisson, concurrency or burst (None: stored before profiles had names)
    concurrency: float | None = None  # the concurrency (closed loop, burst) or the mean in flight (Little's law)
    rate: float | None = None  # offered rate (poisson)
    req_s: float
    output_tok_s: float
    goodput_req_s: float | None = None
    point_index: int


class CapacityResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.capacity"
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    model_dir: str
    model_name: str | None = None
    checkpoint: dict[str, Any] = Field(default_factory=dict)
    server: ServerInfo | None = None
    slo: Slo
    settings: CapacitySettings
    window: WindowSettings | None = None  # the window every point used (steady-state profiles)
    hardware: dict[str, Any] = Field(default_factory=dict)
    points: list[BenchPoint] = Field(default_factory=list)
    search: CapacitySearch | None = None
    capacity: CapacityFigures | None = None  # None: the SLO failed at the lowest load
    bound: CapacityBound | None = None
    points_spent: int = 0
    complete: bool = False
    error: str | None = None
    spans: dict[str, Any] = Field(default_factory=dict)  # settings.span: each SLO's capacity, ceiling, reason
    rechecks: list[Recheck] = Field(default_factory=list)  # loads measured again: the ladder contradicted them
    derived_from: Slo | None = None  # re-derived from a ladder measured under this SLO (ladder.py), not measured under `slo`
    coverage_note: str | None = None  # re-derived: what the ladder cannot tell under `slo`, and what to run
    path: str | None = None

    def write(self) -> None:
        if self.path:
            atomic_write_json(Path(self.path), mask_secrets(self.model_dump(mode="json", exclude={"path"})))

    def open_text(self) -> str | None:
        """`undecided at 33.99 req/s offered (needs 1093 more requests)`: the load the search left
        undecided between its capacity and its ceiling (search.left_open), or None."""
        step = left_open(self.search)
        if step is None:
            return None
        return f"undecided at {profiles.get(self.settings.profile).label(step.load)}" + (
            f" (needs {step.more} more requests)" if step.more is not None else "")

    def summary(self) -> str:
        profile = profiles.get(self.settings.profile)
        if self.capacity is None:
            where = profile.label(self.settings.start)
            if self.search and self.search.reason == "untrusted":  # the search stopped at its last point
                last = self.points[-1] if self.points else None
                load = getattr(last, "concurrency", None) or getattr(last, "rate", None)
                if load is not None:
                    where = profile.label(load)
                why = f": {last.client_limited_reason}" if last and last.client_limited_reason else ""
                return (f"no capacity: the point at {where} was limited by quantkit's client, not the server, "
                        f"so it decides nothing{why}")
            low = min(self.points, key=lambda p: p.rate or p.concurrency or 0, default=None)
            lowest = profile.label(low.rate or low.concurrency) if low is not None else where
            floor = (f" (the search's floor: --capacity-start {self.settings.start:g} / {FLOOR_DIVISOR})"
                     if self.search and self.search.floor is not None else "")
            if low is not None and low.window is not None and low.window.verdict == "stall":
                return (f"the SLO {self.slo} is not sustained even at {lowest}{floor}: the server stalled (no request "
                        "finished in the point); it is far too slow for this workload: a shorter --input-len/"
                        "--output-len, or a faster dtype or machine")
            if low is not None and low.window is not None and low.window.verdict == "saturated":  # whatever its p95s read
                return (f"the SLO {self.slo} is not sustained even at {lowest}{floor}: saturated "
                        "(arrivals outpaced completions: a growing queue); measure lower loads (--capacity-start)")
            if (left := self.open_text()) is not None:
                return f"no capacity decided under {self.slo}: {left}"
            return f"the SLO {self.slo} is not met even at {where}" + (f" ({self.bound.kind})" if self.bound else "")
        c = self.capacity
        load = profile.label(c.load)
        more = " or more (the top of the range)" if self.search and self.search.reason == "max_reached" else ""
        ceiling = ""
        left = self.open_text()
        if self.search and self.search.ceiling and self.search.reason == "bracketed":
            undecided = self.search.ceiling in self.search.undecided
            if not (undecided and left):  # an undecided ceiling is said below, with the requests it needs
                ceiling = f", {'undecided' if undecided else 'breaks'} at {profile.label(self.search.ceiling)}"
        little = (f", {c.concurrency:.0f} in flight" if profile.kind.open_loop and c.concurrency is not None else "")
        left = f"; {left}" if left is not None else ""
        # a recheck that found the same overload again leaves the ladder non-monotone: said with the capacity
        odd = "".join(f"; {r.text(profile.label)}" for r in self.rechecks if r.again in OVERLOADED)
        return (f"capacity {load}{more}{ceiling}: {c.req_s:.2f} req/s{little}, {c.output_tok_s:.0f} output tok/s "
                f"within {self.slo} ({self.points_spent} points" + (f"; bound: {self.bound.kind}" if self.bound else "")
                + f"){left}{odd}")


# --------------------------------------------------------------------------------------------
# Stopping a point that cannot pass


def _decided_fail(slo: Slo, finished: list[RequestResult], total: int, output_len: int) -> str | None:
    """A bound the whole point must break, given the requests finished so far (the rest unknown)."""
    bad = [r for r in finished if not r.ok]
    if bad:
        return f"{len(bad)} request(s) failed ({bad[0].error})"
    for t in slo.terms:
        if t.metric == "itl":
            values = [x for r in finished for x in r.itl]
            n = total * max(output_len - 1, 0)
        else:
            values = [getattr(r, t.metric) for r in finished if getattr(r, t.metric) is not None]
            n = total
        if not values or n < 2:
            continue
        over = sum(1 for v in values if v > t.limit_s)
        if t.stat == "mean":
            if sum(values) / n > t.limit_s:  # the unfinished ones only add (latencies are >= 0)
                return f"{t.key} is above {t.limit_s:g} s whatever the rest does"
            continue
        q = float(t.stat[1:]) / 100.0
        # the percentile at position (n-1)q is over the limit once fewer than floor((n-1)q)+1
        # values can still be under it
        if n - over <= math.floor((n - 1) * q):
            return f"{over} of {n} {t.metric.upper()} values already exceed {t.limit_s:g} s: {t.key} cannot pass"
    if slo.attainment is not None:
        missed = sum(1 for r in finished if not slo.request_ok(r))
        if missed > (1 - slo.attainment) * total + 1e-9:
            return f"{missed} of {total} requests already missed the SLO: attainment {slo.attainment:g} cannot be reached"
    return None


def oversaturated(series: list[Scrape], finished: list[RequestResult], min_span_s: float = 6.0) -> str | None:
    """Arrivals outpace service: the waiting queue grows through the point and TTFT climbs with the
    send time (both, where /metrics exists; TTFT alone, doubled, where it does not)."""
    done = sorted((r for r in finished if r.ok and r.ttft is not None), key=lambda r: r.start_s)
    if len(done) < 8 or done[-1].start_s - done[0].start_s < min_span_s:
        return None
    half = len(done) // 2
    early = percentile([r.ttft for r in done[:half]], 50)
    late = percentile([r.ttft for r in done[half:]], 50)
    ttft_slope = slope([r.start_s for r in done], [r.ttft for r in done]) or 0.0
    climbing = ttft_slope > 0 and late > 1.5 * early
    waits = [(s.t, s.gauges["waiting"]) for s in series if "waiting" in s.gauges]
    if len(waits) >= 4:
        mid = len(waits) // 2
        first = sum(w for _, w in waits[:mid]) / mid
        last = sum(w for _, w in waits[mid:]) / (len(waits) - mid)
        growing = (slope([t for t, _ in waits], [w for _, w in waits]) or 0) > 0 and last >= max(2.0, 1.5 * first)
        if growing and climbing:
            return (f"over-saturated: the waiting queue grew from {first:.1f} to {last:.1f} and TTFT p50 climbed "
                    f"from {early:.2f} s to {late:.2f} s")
        return None
    if climbing and late > 2 * early:
        return f"over-saturated: TTFT p50 climbed from {early:.2f} s to {late:.2f} s through the point"
    return None


class EarlyStop:
    """`stop_when` for run_point: the reason to end a point now, or None."""

    def __init__(self, slo: Slo, total: int, output_len: int, monitor: PointMonitor | None, profile: str):
        self.slo, self.total, self.output_len, self.monitor, self.profile = slo, total, output_len, monitor, profile

    def __call__(self, finished: list[RequestResult], elapsed_s: float) -> str | None:
        decided = _decided_fail(self.slo, finished, self.total, self.output_len)
        if decided:
            return decided
        if load_kinds.kind(self.profile).open_loop:  # a fixed concurrency cannot queue without bound
            return oversaturated(self.monitor.series() if self.monitor else [], finished)
        return None


# --------------------------------------------------------------------------------------------
# The search against a server


def run_capacity(server: Server, model_dir: Path, slo: Slo, settings: CapacitySettings | None = None, *,
                 prompts: PromptSource | None = None, start: float | None = None, out_dir: Path | None = None,
                 on_point: Callable[[BenchPoint], None] | None = None, label: str = "") -> CapacityResult:
    """Search the capacity of `server` (already started) under `slo`; the export is rewritten after
    every point, so an interrupted search keeps the points it measured."""
    settings = settings or CapacitySettings()
    if settings.max < settings.start:
        raise UsageError(f"capacity range {settings.start:g}..{settings.max:g}: the start is above the maximum")
    if settings.span and not profiles.get(settings.profile).steady:
        raise UsageError(f"capacity span {', '.join(settings.span)} needs a steady-state profile (poisson or "
                         "concurrency): a burst's points have no windows to judge again")
    model_dir = Path(model_dir).expanduser().absolute()
    prompts = prompts or PromptSource(model_dir, settings.input_len, seed=settings.seed)
    profile = profiles.get(settings.profile)
    gpus = gpus_of(server)
    host = open_host(server)
    window = settings.window or profiles.default_window(gpu=gpus is not None)
    result = CapacityResult(
        model_dir=str(model_dir), model_name=server.model_name, checkpoint=checkpoint_info(model_dir),
        server=server.info, slo=slo, settings=settings, window=window if profile.steady else None,
        hardware=hardware(),
        path=str(unique_path(Path(out_dir) if out_dir else results_dir(model_dir), "capacity-", ".json", stamp())),
    )
    result.write()
    target = Target(api_url=server.api_url, model=server.model_name, api_key=getattr(server, "api_key", None))
    request_s = 1.0
    if settings.warmup:
        done = warmup(target, prompts.prompts(settings.warmup, -1), min(settings.output_len, 16))
        failed = [r for r in done if not r.ok]
        if failed:
            if gpus is not None:
                gpus.close()
            result.error = f"warm-up request failed: {failed[0].error}"
            result.write()
            raise BackendError(f"{result.error} (server {server.url})")
        request_s = idle_request_s(done, settings.output_len)
    index = itertools.count()
    prefix = f"{label}: " if label else ""

    spans = [tiers.resolve(item) for item in settings.span]
    # every point must be able to pass the strictest SLO it will be judged under (a p99 needs ~300 requests)
    needed = max(requests_needed(s, window.confidence) for s in [slo, *(x for _, x in spans)])
    kept: dict[float, BenchPoint] = {}  # load -> point with its requests, to judge again under the spans

    def measure_at(load: float, slo: Slo, why: str = "") -> BenchPoint:
        plan = profile.plan(load, settings, window, request_s, needed)
        number = next(index)
        what = profile.label(load)
        size = f"{plan.requests} requests" if plan.window is None else (
            f"window {plan.window.min_s:g}-{plan.window.max_s:g} s after a {plan.window.warmup_s:g} s warm-up"
            + (f" (stretched: a pass needs {needed} requests)" if plan.window.max_s > window.max_s else ""))
        info(f"{prefix}capacity point {number + 1}: {what}, {size}{why}")
        if plan.window is not None:  # an open loop's stop rule counts the sends from the same schedule
            offsets = poisson_schedule(plan.requests, plan.rate, settings.seed + number) if plan.rate else None
            stop = lambda monitor, w=plan.window: WindowStop(  # noqa: E731
                slo, w, offsets, request_s, monitor.server_idle_s if monitor is not None else None)
        else:
            stop = (lambda monitor: EarlyStop(slo, plan.requests, settings.output_len, monitor, "concurrency")) \
                if settings.early_stop else None
        point = measure_point(server, target, prompts.prompts(plan.requests, number), settings.output_len, slo=slo,
                              concurrency=plan.concurrency, rate=plan.rate, seed=settings.seed + number,
                              input_len=settings.input_len, interval_s=settings.interval_s, gpus=gpus,
                              host=host, stop_factory=stop, window=plan.window, ramp_s=plan.ramp_s)
        point.load_profile = profile.name
        if on_point:
            on_point(point)  # the store keeps every request (point.samples); the result keeps the figures
        kept[float(load)] = point  # with its requests
        point = point.model_copy(update={"samples": None})
        result.points.append(point)
        result.points_spent = len(result.points)
        result.write()
        if point.partial or (point.failures and not server.alive()):
            result.error = f"the server died during the capacity point at {what}: {server.exit_reason()}"
            result.write()
            raise BackendError(f"{result.error}; {len(result.points)} points kept in {result.path}")
        info(f"{prefix}  {what}: {describe_point(point)}")
        return point

    def search(measure: Callable[[float], Verdict], start: float | None, hi: float | None = None) -> CapacitySearch:
        return search_capacity(measure, lo=settings.start, hi=settings.max if hi is None else hi,
                               tolerance=settings.tolerance,
                               integer=profile.kind.integer, start=start,
                               max_growth=STEADY_GROWTH if profile.steady else 8.0,
                               floor=floor_of(settings.start, profile.kind.integer))

    def main_verdict(load: float) -> Verdict:
        if float(load) in kept:  # searching again after a recheck: a load the ladder holds is judged from its requests
            step = judge_step(kept[float(load)], slo, window)
            return Verdict.of_window(step.state, step.margin, more=step.more)
        return verdict_of(measure_at(load, slo), slo)

    def searches() -> CapacitySearch:
        found = within(search(main_verdict, start), slo, kept, window)
        for name, extra in spans:  # the main SLO's answer is `found`, whatever points the spans add
            spanned = span_search(extra, name, kept, window, search,
                                  lambda load, x=extra, n=name: measure_at(load, x, f" (for {n})"), found.capacity,
                                  settings.start)
            result.spans[name] = spanned.model_dump(mode="json", include={"capacity", "ceiling", "reason"})
            result.write()
        return found

    try:
        if start is None and profile.kind.open_loop:  # begin near 4 requests in flight, not at the range's floor
            start = min(settings.max, max(settings.start, float(f"{4.0 / request_s:.3g}")))
        found = searches()
        if recheck := contradictions(kept)[:MAX_RECHECKS]:  # one round: a load measured twice keeps its second verdict
            for load, held in recheck:
                first = kept[load].window.verdict
                again = measure_at(load, slo, f" (again: it was {first}, yet {profile.label(held)} above it held)")
                for p in reversed(result.points[:-1]):  # the record's copy of the first point
                    if p.x == load and p.superseded is None:
                        p.superseded = f"measured again at {again.started_at}: {profile.label(held)} above it held"
                        break
                result.rechecks.append(Recheck(load=load, held=held, first=first,
                                               again=again.window.verdict if again.window else "undecided"))
                info(f"{prefix}  recheck: {result.rechecks[-1].text(profile.label)}")
            found = searches()
    finally:
        if gpus is not None:
            gpus.close()
    finish(result, found)
    result.write()
    info(f"{prefix}{result.summary()}")
    return result


MAX_RECHECKS = 2  # loads a ladder measures again (about one point each)


def contradictions(kept: dict[float, BenchPoint]) -> list[tuple[float, float]]:
    """(load, held): loads judged overloaded (saturated, stalled) below a load that held, each with
    the highest such load; lowest first. Saturation is no property of an SLO: a server that keeps
    up at a higher rate keeps up at a lower one, so one of the two verdicts is noise (12-06, one
    H100: bf16 "saturated" at 25.2 and 30 req/s in 20-s windows, yet met 28.5-32.8 on the same
    ladder; vLLM's own client sustained 25.2 for 60 s) or the server was not yet warm."""
    held = [x for x, p in kept.items() if p.window is not None and p.window.verdict == "pass" and not p.client_limited]
    top = max(held, default=None)
    if top is None:
        return []
    return sorted((x, max(h for h in held if h > x)) for x, p in kept.items()
                  if x < top and p.window is not None and p.window.verdict in OVERLOADED)


def within(found: CapacitySearch, slo: Slo, kept: dict[float, BenchPoint], window: WindowSettings,
           judged: dict[float, LadderStep] | None = None) -> CapacitySearch:
    """`found`'s bracket narrowed by the ladder's points inside it (rejudge.tighten), said when it moves.
    Only those points are judged, each once: `judged` holds the loads a caller judged under `slo` already."""
    if found.capacity is None or found.ceiling is None:
        return found
    judged = judged or {}
    narrowed = tighten(found, [judged.get(x) or judge_step(p, slo, window) for x, p in kept.items()
                               if found.capacity < x < found.ceiling])
    if narrowed is not found:
        info(f"  the ladder holds loads inside the bracket {found.capacity:g}-{found.ceiling:g}: "
             f"under {slo} it is {narrowed.capacity:g}-{narrowed.ceiling:g}")
    return narrowed


def span_search(slo: Slo, name: str, kept: dict[float, BenchPoint], window: WindowSettings, search: Callable,
                measure_at: Callable[[float], BenchPoint], near: float | None,
                search_floor: float = 0.0) -> CapacitySearch:
    """Search the ladder for `slo` too: a load the ladder holds is judged again from its requests
    (ladder.judge_step), only the loads it lacks are measured (and judged live under `slo`)."""
    judged = {x: judge_step(p, slo, window) for x, p in kept.items()}  # each stored point judged once

    def measure(load: float) -> Verdict:
        if float(load) not in kept:
            measure_at(load)  # kept, with its requests, by measure_at
        if float(load) not in judged:  # measured by this search: judged once, and read again by `within`
            judged[float(load)] = judge_step(kept[float(load)], slo, window)
        step = judged[float(load)]
        return Verdict.of_window(step.state, step.margin, more=step.more)

    # a load the server could not keep up with fails every SLO, and so does any load above it: the span
    # searches below the ladder's lowest saturated load (on the H200, starting blind at fp8's pass at
    # 40 req/s, it grew to 83.5 and 57.8, both saturated, although 43.8 and 48 had saturated already)
    saturated = [x for x, s in judged.items() if s.state in OVERLOADED and x > search_floor]
    found = within(search(measure, start_from(list(judged.values())) or near, min(saturated, default=None)),
                   slo, kept, window, judged)
    info(f"  ladder spans {name}: " + (f"capacity {found.capacity:g} ({found.reason})" if found.capacity is not None
                                       else f"not met ({found.reason})"))
    return found


def describe_point(point: BenchPoint) -> str:
    w = point.window
    if w is None:
        verdict = "meets" if point.slo_met else "breaks"
        return (f"{point.output_tok_s:.1f} out tok/s, {verdict} the SLO (burst)"
                + (f" ({'; '.join(point.slo_violations)})" if not point.slo_met else ""))
    rates = (f"{w.achieved_req_s or 0:.2f} req/s done of {w.offered_req_s or 0:.2f} offered, "
             f"{w.in_flight_mean or 0:.0f} in flight, " if w.offered_req_s is not None else "")
    why = f" ({'; '.join(w.reasons[:2])})" if w.verdict != "pass" and w.reasons else ""
    return (f"{rates}{point.output_tok_s:.1f} out tok/s over {w.measured} requests in "
            f"{w.end_s - w.start_s:.0f} s: {verdict_word(w.verdict, w.more)}{why}")


def verdict_of(point: BenchPoint, slo: Slo) -> Verdict:
    """What a point tells the search. A window's `undecided` steers by its point estimate (below the
    limits: the search grows past it) but is never reported as the capacity; `saturated` fails and
    its percentiles give no margin."""
    w = point.window
    # a late client offers less than asked, never more: completions falling behind even so are the server's
    trusted = not point.client_limited or (w is not None and w.verdict in OVERLOADED)
    if w is None:
        return Verdict(passed=bool(point.slo_met), margin=None if point.stopped_early else slo.margin(point),
                       trusted=trusted)
    return Verdict.of_window(w.verdict, slo.margin(point), trusted, w.more)


def _index_of(points: list[BenchPoint], load: float | None, axis: str) -> int | None:
    if load is None:
        return None
    for i in range(len(points) - 1, -1, -1):  # the latest point at the load: a recheck supersedes the first
        if load_kinds.kind(axis).load_of(points[i]) == load:
            return i
    return None


def finish(result: CapacityResult, search: CapacitySearch) -> CapacityResult:
    """Fill the capacity figures and the bound from the search and the measured points."""
    result.search = search
    axis = result.settings.axis
    cap_i = _index_of(result.points, search.capacity, axis)
    ceil_i = _index_of(result.points, search.ceiling, axis)
    if cap_i is not None:
        p = result.points[cap_i]
        in_flight = None
        if load_kinds.kind(axis).open_loop:  # Little's law: the mean number of requests in the server
            in_flight = p.window.in_flight_mean if p.window and p.window.in_flight_mean is not None else (
                p.req_s * p.e2e.mean if p.e2e is not None else None)
        result.capacity = CapacityFigures(
            load=search.capacity, profile=result.settings.profile,
            concurrency=float(p.concurrency) if p.concurrency else in_flight,
            rate=p.rate, req_s=p.req_s, output_tok_s=p.output_tok_s, goodput_req_s=_goodput_at(p), point_index=cap_i)
    serve_config = (result.server.serve_config if result.server else None) or {}
    points = [p.model_dump(mode="json") for p in result.points]
    if search.reason == "untrusted":
        result.bound = classify_capacity(points, None, len(points) - 1, serve_config)
    else:  # max_reached: the SLO held to the top of the range; the server's state there, for the record
        result.bound = classify_capacity(points, cap_i, ceil_i, serve_config)
    result.points_spent = len(result.points)
    result.complete = True
    return result


def _goodput_at(p: BenchPoint) -> float | None:
    return goodput_at(p.rate, p.slo_attainment, p.goodput_req_s, windowed=p.window is not None)


def goodput_at(rate: float | None, attainment: float | None, counted: float | None, *, windowed: bool) -> float | None:
    """Goodput at a capacity point. Under open-loop arrivals the load is the rate offered, so the
    goodput a deployment gets there is rate x attainment: the window's own count over its span
    (`counted`) adds the arrivals' Poisson noise (about 9% in a 20-s window at 6 req/s), which is
    no property of the server. A closed loop sets no rate: its count is the figure."""
    if windowed and rate is not None and attainment is not None:
        return float(rate) * float(attainment)
    return counted


def capacity(model_dir: Path, slo: Slo | None, settings: CapacitySettings | None = None, *, url: str | None = None,
             config: Any = None, port: int | None = None, startup_timeout: float = 600.0,
             out_dir: Path | None = None, on_point: Callable[[BenchPoint], None] | None = None) -> CapacityResult:
    """`quantkit bench DIR --slo ... --capacity`: serve (or attach), search, record in the store."""
    from ...serve.config import ServeConfig
    from ...serve.server import open_server
    from ...store import Store, standalone

    if slo is None:
        raise UsageError("--capacity needs an --slo, e.g. --slo ttft_p95=1,tpot_p95=0.1")
    settings = settings or CapacitySettings()
    model_dir = Path(model_dir).expanduser().absolute()
    if not model_dir.is_dir():
        raise UsageError(f"model folder {model_dir} does not exist")
    if settings.max < settings.start:
        raise UsageError(f"--capacity-max {settings.max:g} is below --capacity-start {settings.start:g}")
    prompts = PromptSource(model_dir, settings.input_len, seed=settings.seed)
    with Store() as store, open_server(model_dir, url, config, port=port, startup_timeout=startup_timeout) as server:
        with standalone(store, "capacity", model_dir, config or ServeConfig(), settings, slo=str(slo), url=url) as rec:
            def point_done(point: BenchPoint) -> None:
                rec.add_point(point.model_dump(mode="json"))
                if on_point:
                    on_point(point)

            result = run_capacity(server, model_dir, slo, settings, prompts=prompts, out_dir=out_dir, on_point=point_done)
            rec.finish(result.model_dump(mode="json", exclude={"path"}), result.path)
    return result
