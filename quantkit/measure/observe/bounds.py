"""Why a configuration saturates: the bound at its capacity, named from vLLM's own /metrics.

`classify(point, serve_config)` reads a load point's `server_metrics` (metrics.ServerMetrics as
stored) and names what limits it, in this order:
- client: quantkit's own load generator limited the point (its latencies are not the server's);
- kv_cache: the KV cache ran (nearly) full or requests were preempted;
- token_budget: requests waited while engine steps ran full at `--max-num-batched-tokens` (tokens
  per step from vLLM's counters), or while slots and KV cache were free;
- batch_slots: requests waited while `--max-num-seqs` requests ran (within one request or 10%),
  by the once-a-second running gauge or by the counters' decode batch (tokens generated per
  engine step), or, that knob unset, while the running count held at its ceiling;
- host: no scheduler limit was reached and a Python process of the server held a core (host.py
  measures them): an API server process (detokenizing, streaming), or, on a GPU server whose GPU was
  not saturated, the engine core (scheduling, output processing: the GPU waited for it; with one GPU
  the engine core also runs the model and may spin while it waits for the GPU, so its busy time
  alone proves nothing: the GPU's idle share does). On a CPU backend (no GPU figures) the engine
  core's time is the compute's, so only an API server names it;
- compute: no scheduler limit was reached: each engine step takes longer as the batch grows, so the
  latency bound breaks first (the GPU's utilization, where measured, says how busy it was);
- unknown: no /metrics reading saw the load (none exposed, or the point was shorter than the
  scrape interval).
Each bound names the knob that moves it. The thresholds are stated beside them. A point without
the host's figures (stored before host.py, or a server on another machine) never names host: its
verdict is the one it had before them.
"""

from __future__ import annotations

from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

from ..stats import load_kinds

KV_FULL = 0.90  # KV-cache usage at or above which the cache is the limit
QUEUED = 1.0  # mean waiting requests at or above which requests queued through the point
STEP_FULL = 0.70  # tokens per engine step / --max-num-batched-tokens at or above which steps ran full
RUNNING_HELD = 0.90  # running mean / max at or above which the running count held at a ceiling
HOST_BUSY = 0.90  # a server process's mean cores at or above which its one Python thread is saturated
GPU_BUSY = 90.0  # GPU utilization (%, NVML) below which a saturated engine core kept the GPU waiting

BoundKind = Literal["kv_cache", "token_budget", "batch_slots", "host", "compute", "client", "unknown"]

# a bound's advice in words (CapacityBound.knob, stored): the levers that move it, serving knobs among
# them by their flags; not a list of knobs (that is serve/config.KNOBS, which these flags must name)
LEVERS: dict[str, str] = {
    "kv_cache": "more KV cache: --gpu-memory-utilization (VLLM_CPU_KVCACHE_SPACE on CPU), --kv-cache-dtype fp8, "
                "a lower --max-model-len, or more GPUs (--tensor-parallel-size)",
    "token_budget": "--max-num-batched-tokens (higher admits prompts faster: TTFT; lower keeps prefill chunks "
                    "from stalling decodes: ITL)",
    "batch_slots": "--max-num-seqs higher (while the KV cache has room)",
    "host": "the server's Python processes: more API servers (--api-server-count), fewer stream chunks "
            "(--stream-interval), async scheduling (--async-scheduling: the next step scheduled while this one "
            "runs), CUDA graphs and compilation (leave out --enforce-eager; --max-cudagraph-capture-size, "
            "--optimization-level)",
    "compute": "the step itself: a faster precision, more GPUs (--tensor-parallel-size), or a lower "
               "--max-num-batched-tokens where ITL is the bound that breaks",
    "client": "run the load generator where it has CPU to spare (its own points say it limited them)",
    "unknown": "no /metrics reading during the load (none exposed, or points shorter than the scrape interval)",
}


# the compute bound's levers by which latency broke (steady state: TPOT with a growing decode
# batch; TTFT with prompts' prefill)
DECODE_KNOB = ("a --max-num-seqs cap (a smaller decode batch, each step faster: TPOT), --kv-cache-dtype fp8, "
               "or a faster precision")
PREFILL_KNOB = "--max-num-batched-tokens and chunked prefill (admit prompts faster: TTFT), or a faster precision"


class CapacityBound(BaseModel):
    kind: BoundKind
    evidence: str
    knob: str
    load: float | None = None  # the load point it was read at
    figures: dict[str, float] = Field(default_factory=dict)  # the readings behind it


def _get(block: dict | None, key: str) -> float | None:
    if not isinstance(block, dict):
        return None
    value = block.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def slots_reached(seqs: int) -> float:
    """The sampled running count from which --max-num-seqs counts as reached."""
    return max(1.0, min(seqs - 1.0, float(int(RUNNING_HELD * seqs))))


def classify(point: dict[str, Any], serve_config: dict[str, Any] | None = None,
             load: float | None = None) -> CapacityBound:
    """The bound a point (BenchPoint as JSON) shows; see the module's docstring for the rules."""
    serve_config = serve_config or {}
    if point.get("client_limited"):
        return CapacityBound(kind="client", load=load, knob=LEVERS["client"], figures=host_figures(point),
                             evidence="quantkit's load generator limited this point"
                                      + (f" ({point['client_limited_reason']})" if point.get("client_limited_reason") else ""))
    sm = point.get("server_metrics")
    if not isinstance(sm, dict) or not sm.get("samples"):
        return CapacityBound(kind="unknown", load=load, knob=LEVERS["unknown"], evidence="no /metrics readings",
                             figures=host_figures(point))
    if (_get(sm.get("running"), "max") or 0) == 0 and not (sm.get("deltas") or {}).get("preemptions"):
        return CapacityBound(kind="unknown", load=load, knob=LEVERS["unknown"], figures=host_figures(point),
                             evidence=f"the point ended before /metrics saw a request running ({sm.get('samples')} readings, "
                                      f"every {sm.get('interval_s')} s)")
    kv_max = _get(sm.get("kv_usage"), "max")
    preempted = (sm.get("deltas") or {}).get("preemptions") or 0.0
    waiting = _get(sm.get("waiting"), "mean") or 0.0
    waiting_max = _get(sm.get("waiting"), "max") or 0.0
    run_mean, run_max = _get(sm.get("running"), "mean") or 0.0, _get(sm.get("running"), "max") or 0.0
    figures = {k: v for k, v in (("kv_usage_max", kv_max), ("preemptions", preempted), ("waiting_mean", waiting),
                                 ("running_mean", run_mean), ("running_max", run_max)) if v is not None}
    gpu_util = [g.get("util_mean") for g in point.get("gpus") or [] if isinstance(g.get("util_mean"), (int, float))]
    busy = f"; GPU utilization {max(gpu_util):.0f}%" if gpu_util else ""
    if gpu_util:
        figures["gpu_util_mean"] = max(gpu_util)
    figures.update(host_figures(point))
    if "gpu_sm_clock_mhz" in figures:
        busy += f" at {figures['gpu_sm_clock_mhz']:.0f} MHz"
    if figures.get("gpu_power_capped"):
        busy += f", its clock held by the power limit {figures['gpu_power_capped']:.0%} of the time"
        if "gpu_out_tokens_per_joule" in figures:  # what a power-held GPU can make is power x this
            busy += f" ({figures['gpu_out_tokens_per_joule']:.1f} output tokens per joule)"
    if unmeasured := (point.get("host") or {}).get("unmeasured"):
        busy += f"; host CPU not measured ({unmeasured})"

    def bound(kind: BoundKind, evidence: str) -> CapacityBound:
        return CapacityBound(kind=kind, evidence=evidence + busy, knob=LEVERS[kind], load=load, figures=figures)

    if preempted > 0 or (kv_max is not None and kv_max >= KV_FULL):
        return bound("kv_cache", f"KV cache {kv_max or 0:.0%} full at most, {preempted:.0f} preemptions")
    queued = waiting >= QUEUED
    seqs = serve_config.get("max_num_seqs")
    budget = serve_config.get("max_num_batched_tokens")
    per_step = sm.get("tokens_per_step")
    if per_step is not None:
        figures["tokens_per_step"] = per_step
    # the running gauge is read once a second: a slot freed between two engine steps reads empty
    # then, so a ceiling within one request (or 10%) of --max-num-seqs is the ceiling (CI saw 3
    # of 4 in a 4-s point on 2 cores, and "token budget" was named on that reading alone). The
    # counters span the whole point: tokens generated per engine step is the mean decode batch
    # (one token per running sequence per step); CI saw a 1.25-s point read 1 of 4 by the gauge
    # and 3.9 by the counters.
    deltas = sm.get("deltas") or {}
    steps, generated = sm.get("steps"), deltas.get("generation_tokens")
    decoding = generated / steps if steps and isinstance(generated, (int, float)) else None
    if decoding is not None:
        figures["decode_batch_mean"] = decoding
    run_seen = max(run_max, decoding or 0.0)
    if queued and seqs and run_seen >= slots_reached(seqs):
        return bound("batch_slots", f"{run_seen:.0f} requests ran at most (--max-num-seqs {seqs}; the gauge is read "
                                    f"once a second, the decode batch from the counters) while {waiting:.1f} waited "
                                    f"on average (at most {waiting_max:.0f})")
    if queued and budget and per_step is not None and per_step >= STEP_FULL * budget:
        return bound("token_budget", f"engine steps carried {per_step:.0f} tokens on average against "
                                     f"--max-num-batched-tokens {budget} while {waiting:.1f} requests waited")
    if queued and seqs:
        return bound("token_budget", f"{waiting:.1f} requests waited on average while only {run_max:.0f} of "
                                     f"{seqs} slots ran and the KV cache had room: the step's token budget admitted no more")
    if queued and run_max > 0 and run_mean >= RUNNING_HELD * run_max:
        # vLLM does not expose its scheduler limits: a ceiling with both knobs at their defaults is
        # read as the slots (the token budget holds prefill-heavy loads; then tokens per step say so)
        return bound("batch_slots", f"the running count held at {run_max:.0f} (the server's max-num-seqs) while "
                                    f"{waiting:.1f} requests waited on average"
                                    + (f"; steps carried {per_step:.0f} tokens" if per_step is not None else ""))
    if queued:
        return bound("token_budget", f"{waiting:.1f} requests waited on average while at most {run_max:.0f} ran and "
                                     "the KV cache had room: the scheduler admitted no more")
    text = (f"no scheduler limit reached (KV cache {kv_max or 0:.0%}, {run_max:.0f} running, "
            f"{waiting:.1f} waiting on average)")
    if held := host_held(figures, max(gpu_util) if gpu_util else None):
        return bound("host", f"{text}: {held}")
    broke = " ".join(point.get("slo_violations") or []) + " " + " ".join((point.get("window") or {}).get("reasons") or [])
    if ("tpot" in broke or "itl" in broke) and "ttft" not in broke:
        # a steady state's usual bound: the decode batch grows with the load until each step is too slow
        return CapacityBound(kind="compute", load=load, figures=figures, knob=DECODE_KNOB,
                             evidence=text + f": the decode batch ({run_seen:.0f} running) grew until TPOT broke" + busy)
    if "ttft" in broke and "tpot" not in broke and "itl" not in broke:
        return CapacityBound(kind="compute", load=load, figures=figures, knob=PREFILL_KNOB,
                             evidence=text + ": prompts' prefill delayed the first token (TTFT broke, TPOT held)" + busy)
    return bound("compute", text + ": each step slows as the batch grows")


def host_figures(point: dict[str, Any]) -> dict[str, float]:
    """The figures the host bound reads, where the point has them (points stored before host.py
    have none): per server role and the client, cores busy (mean, busiest interval) and the
    busiest process's mean; the GPUs' SM clock, power-capped share and output tokens per joule;
    the wall time per engine step."""
    out: dict[str, float] = {}
    roles = (point.get("host") or {}).get("roles") or {}
    for role in ("api_server", "engine_core", "worker", "client"):
        cpu = roles.get(role)
        if isinstance(cpu, dict):
            for key, name in (("cores_mean", "cores"), ("cores_max", "cores_max"), ("busiest", "busiest")):
                if (value := _get(cpu, key)) is not None:
                    out[f"{role}_{name}"] = value
    # the busiest GPU's, as its utilization is quoted; power-capped: its clock held by the power limit
    for key, name in (("sm_clock_mean_mhz", "gpu_sm_clock_mhz"), ("power_capped", "gpu_power_capped")):
        readings = [(g.get("util_mean") or 0.0, g[key]) for g in point.get("gpus") or []
                    if isinstance(g.get(key), (int, float))]
        if readings:
            out[name] = max(readings)[1]
    # output tokens per joule of every GPU's board power: where the power limit holds the clock,
    # the most a configuration can make is the limit times this (issue 43: fp8 ~1.2x bf16's on H100s)
    power = sum(g["power_mean_w"] for g in point.get("gpus") or [] if isinstance(g.get("power_mean_w"), (int, float)))
    if power > 0 and isinstance(tok_s := point.get("output_tok_s"), (int, float)):
        out["gpu_out_tokens_per_joule"] = tok_s / power
    if (step := _get(point.get("server_metrics"), "step_s")) is not None:
        out["step_s"] = step
    return out


def host_held(figures: dict[str, float], gpu_util: float | None) -> str | None:
    """Why the host bounds the point (the rules in the module's docstring), or None."""
    api, core = figures.get("api_server_busiest"), figures.get("engine_core_busiest")
    why = []
    if api is not None and api >= HOST_BUSY:
        why.append(f"an API server process kept {api:.2f} of a core busy (detokenizing, streaming)")
    if gpu_util is not None and gpu_util < GPU_BUSY and core is not None and core >= HOST_BUSY:
        why.append(f"the engine core kept {core:.2f} of a core busy (scheduling, output processing) while the GPU "
                   f"was {gpu_util:.0f}% busy")
    return "; ".join(why) or None


# (figure, how it is shown) in the order figures_text shows them
_SHOWN: tuple[tuple[str, Callable[[float], str]], ...] = (
    ("engine_core_busiest", lambda v: f"engine core {v:.2f} cores"),
    ("api_server_busiest", lambda v: f"API server {v:.2f} cores"),
    ("worker_cores", lambda v: f"workers {v:.2f} cores"),
    ("client_cores", lambda v: f"client {v:.2f} cores"),
    ("gpu_util_mean", lambda v: f"GPU {v:.0f}% busy"),
    ("gpu_sm_clock_mhz", lambda v: f"SM clock {v:.0f} MHz"),
    ("gpu_power_capped", lambda v: f"power-capped {v:.0%} of the time"),
    ("gpu_out_tokens_per_joule", lambda v: f"{v:.1f} output tokens per joule"),
    ("step_s", lambda v: f"step {v * 1000:.3g} ms"),
    ("decode_batch_mean", lambda v: f"decode batch {v:.1f}"),
)


def has_host_figures(figures: dict[str, float] | None) -> bool:
    """Whether a bound was read with the server's CPU figures (points stored before host.py were not)."""
    return bool(figures) and any(k.startswith(("engine_core_", "api_server_")) for k in figures)


def figures_text(figures: dict[str, float] | None) -> str:
    """The bound's host figures in one line (engine core, API server: the busiest process's mean
    cores), or "" for a bound read without them."""
    if not has_host_figures(figures):
        return ""
    return ", ".join(show(figures[key]) for key, show in _SHOWN if figures.get(key) is not None)


def classify_capacity(points: list[dict[str, Any]], capacity_index: int | None, ceiling_index: int | None,
                      serve_config: dict[str, Any] | None = None) -> CapacityBound | None:
    """The bound that stops a capacity search: read at the first load that broke the SLO (what
    stopped it), else at the capacity load itself; None when no point was measured.

    One exception: an overload's backlog fills the KV cache whatever bound the server (requests
    arrive faster than they finish and wait in it), so a full cache at the failing load, where the
    met load below it used a small share, is the backlog's, not the bound: the bound is then read at
    the met load, and the evidence says so (12-07, an H100: bf16 and int8 named kv_cache at their
    first failing loads, while every met load kept the cache at most 34% full and the GPU ran at
    its power limit)."""
    def at(index: int | None) -> CapacityBound | None:
        if index is None or not 0 <= index < len(points):
            return None
        p = points[index]
        return classify(p, serve_config, load=_load(p))

    ceiling = at(ceiling_index)
    if ceiling is None or ceiling.kind != "kv_cache":
        return ceiling or at(capacity_index)
    met = at(capacity_index)
    projected = backlog_projection(met, ceiling) if met is not None else None
    if projected is None or projected >= KV_BACKLOG:
        return ceiling
    why = (f"at {ceiling.load:g} the KV cache filled ({ceiling.figures.get('kv_usage_max', 0):.0%}, "
           f"{ceiling.figures.get('preemptions', 0):.0f} preemptions) with the overload's backlog: at {met.load:g} it "
           f"was {met.figures.get('kv_usage_max', 0):.0%} full at most, {projected:.0%} at {ceiling.load:g} by that "
           f"share per request/s; so read at {met.load:g}: ")
    return met.model_copy(update={"evidence": why + met.evidence})


# the met load's KV-cache use, scaled to the failing load, below which a full cache at the failing
# load is the backlog's (a server whose cache binds holds it near full at the loads it still meets)
KV_BACKLOG = 0.5


def backlog_projection(met: CapacityBound, failed: CapacityBound) -> float | None:
    """The met load's peak KV-cache use scaled by the failing load over its own (the cache a
    request/s needs, at the failing rate), from the two bounds' readings; None without them, or
    where the met load preempted (the cache's bound already)."""
    kv = met.figures.get("kv_usage_max")
    if kv is None or not met.load or not failed.load or met.figures.get("preemptions", 0) > 0:
        return None
    return kv * failed.load / met.load


def _load(point: dict[str, Any]) -> float | None:
    return load_kinds.kind(point.get("profile")).load_of(point)
