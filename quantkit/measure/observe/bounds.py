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
- compute: no scheduler limit was reached: each engine step takes longer as the batch grows, so the
  latency bound breaks first (the GPU's utilization, where measured, says how busy it was);
- unknown: no /metrics reading saw the load (none exposed, or the point was shorter than the
  scrape interval).
Each bound names the knob that moves it. The thresholds are stated beside them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..stats import load_kinds

KV_FULL = 0.90  # KV-cache usage at or above which the cache is the limit
QUEUED = 1.0  # mean waiting requests at or above which requests queued through the point
STEP_FULL = 0.70  # tokens per engine step / --max-num-batched-tokens at or above which steps ran full
RUNNING_HELD = 0.90  # running mean / max at or above which the running count held at a ceiling

BoundKind = Literal["kv_cache", "token_budget", "batch_slots", "compute", "client", "unknown"]

# a bound's advice in words (CapacityBound.knob, stored): the levers that move it, serving knobs among
# them by their flags; not a list of knobs (that is serve/config.KNOBS, which these flags must name)
LEVERS: dict[str, str] = {
    "kv_cache": "more KV cache: --gpu-memory-utilization (VLLM_CPU_KVCACHE_SPACE on CPU), --kv-cache-dtype fp8, "
                "a lower --max-model-len, or more GPUs (--tensor-parallel-size)",
    "token_budget": "--max-num-batched-tokens (higher admits prompts faster: TTFT; lower keeps prefill chunks "
                    "from stalling decodes: ITL)",
    "batch_slots": "--max-num-seqs higher (while the KV cache has room)",
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
        return CapacityBound(kind="client", load=load, knob=LEVERS["client"],
                             evidence="quantkit's load generator limited this point"
                                      + (f" ({point['client_limited_reason']})" if point.get("client_limited_reason") else ""))
    sm = point.get("server_metrics")
    if not isinstance(sm, dict) or not sm.get("samples"):
        return CapacityBound(kind="unknown", load=load, knob=LEVERS["unknown"], evidence="no /metrics readings")
    if (_get(sm.get("running"), "max") or 0) == 0 and not (sm.get("deltas") or {}).get("preemptions"):
        return CapacityBound(kind="unknown", load=load, knob=LEVERS["unknown"],
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
    broke = " ".join(point.get("slo_violations") or []) + " " + " ".join((point.get("window") or {}).get("reasons") or [])
    if ("tpot" in broke or "itl" in broke) and "ttft" not in broke:
        # a steady state's usual bound: the decode batch grows with the load until each step is too slow
        return CapacityBound(kind="compute", load=load, figures=figures, knob=DECODE_KNOB,
                             evidence=text + f": the decode batch ({run_seen:.0f} running) grew until TPOT broke" + busy)
    if "ttft" in broke and "tpot" not in broke and "itl" not in broke:
        return CapacityBound(kind="compute", load=load, figures=figures, knob=PREFILL_KNOB,
                             evidence=text + ": prompts' prefill delayed the first token (TTFT broke, TPOT held)" + busy)
    return bound("compute", text + ": each step slows as the batch grows")


def classify_capacity(points: list[dict[str, Any]], capacity_index: int | None, ceiling_index: int | None,
                      serve_config: dict[str, Any] | None = None) -> CapacityBound | None:
    """The bound that stops a capacity search: read at the first load that broke the SLO (what
    stopped it), else at the capacity load itself; None when no point was measured."""
    for index in (ceiling_index, capacity_index):
        if index is not None and 0 <= index < len(points):
            p = points[index]
            return classify(p, serve_config, load=load_kinds.kind(p.get("profile")).load_of(p))
    return None
