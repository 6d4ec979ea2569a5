"""The precision-versus-throughput report: Variant records in, Markdown / HTML / JSON / PNG out.

`build_report(variants, ...)` (here) turns one `Variant` per checkpoint (the baseline and each method:
its convert record, BenchRun, EvalRun and RecoveryReport as JSON dicts) into a `Report`, the whole
content of the report as data (schema_version 1). The renderers only format a Report, so
`report.json`, `report.md` and `report.html` always say the same thing. Nothing is recomputed or
estimated from outside the records: a value that was not measured is None and prints as "—".

Choices worth knowing:
- "tok/s at the knee": the bench point at the knee the sweep found (`bench.knee.knee`); without a
  knee, the highest load measured that had a successful request ("highest" in the table).
- The baseline's recovery is 1 by definition (it is the reference), when it has eval results
  (its own, or its proxy's: `accuracy_from`).
- The batch-1 decode bound: at concurrency 1 every decode step reads all weights once, so
  tok/s <= bandwidth / weight bytes. Size on disk stands in for the weight bytes (it also counts
  the tokenizer files and the embedding rows a token does not read; KV-cache reads are ignored):
  an upper bound, approximate by a few percent. Bandwidth is given, or looked up for known GPUs.

`render.py` formats a Report (Markdown, HTML, JSON) and `plots.py` draws its figures; `gather.py`
builds the Variants from the store.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import UsageError
from ..evals.gates import overall_verdict
from ..measure.stats import load_kinds
from ..measure.capacity.bench import BenchWorkload
from ..measure.stats.point import OVERLOADED
from ..measure.stats.slo import Slo
from ..serve.config import args_of, parallel_of
from ..serve.hardware_fit import kv_cache_label
from ..serve.log import QUANT_NOISE
from ..serve.server import ServerInfo
from ..store import REPORTED_KINDS
from . import records
from .decision import CapacityCell, Decision, capacity_cell, decide, tuned_cell
from .dumps import written_when_set
from .fidelity import FidelityCell, fidelity_cell
from .tiers import TierResult
from .figures import lookup_bandwidth, pareto_front

SCHEMA_VERSION = 1

# ----------------------------------------------------------------------------------------------
# Input


# a variant in the report: every stage done, some results kept beside a failed stage, or none
VariantStatus = Literal["done", "partial", "failed"]


class Variant(BaseModel):
    """One row of the report: a checkpoint and what was measured on it. The stored results are
    validated once, here, into their models' tolerant forms (records.py): the report reads fields."""

    name: str  # "baseline", "awq", "int8", ...
    method: str  # "bf16" (the source dtype) for the baseline, else the quant method
    model_dir: str
    convert: records.Convert | None = None  # DIR/quantkit.json (ConvertRecord); None for the baseline
    bench: records.Bench | None = None  # a BenchRun (quantkit/measure/capacity/bench.py)
    eval: records.Eval | None = None  # an EvalRun (quantkit/evals/results.py)
    recovery: records.Recovery | None = None  # a RecoveryReport against the baseline (evals/gates.py)
    accuracy_from: str | None = None  # the model whose evals gave recovery and gate (a proxy: proxy.py)
    status: VariantStatus = "done"
    error: str | None = None  # why it failed (shown, never hidden)
    # Size of the checkpoint's files; needed for the baseline (it has no convert record).
    # None: convert.size_bytes is used.
    size_bytes: int | None = None
    # Memory vLLM reported for the weights once loaded ("Model loading took X GiB"), if known.
    weight_memory_bytes: int | None = None
    baseline: bool | None = None  # the reference variant (None: the one without a convert record)
    capacity: records.Capacity | None = None  # a CapacityResult: capacity under the SLO on the recipe's serve config
    tune: records.Tune | None = None  # a TuneResult (measure/tune/study.py): the best configuration found and its capacity
    fidelity: records.Fidelity | None = None  # a FidelityResult (fidelity/result.py): against the baseline, token by token

    model_config = ConfigDict(validate_assignment=True)

    @field_validator(*REPORTED_KINDS, "recovery", mode="before")
    @classmethod
    def _stored(cls, value: Any) -> Any:
        # a strict result model (not its tolerant form) is read again as its JSON
        if isinstance(value, BaseModel) and type(value).__module__ != records.__name__:
            return value.model_dump(mode="json", exclude_unset=True)
        return value


# ----------------------------------------------------------------------------------------------
# The report as data


class Point(BaseModel):
    """One bench load point, reduced to what the report shows (latencies in seconds)."""

    profile: str
    concurrency: int | None = None
    rate: float | None = None
    output_tok_s: float | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    itl_p50: float | None = None
    itl_p95: float | None = None
    tpot_p50: float | None = None
    ttft_p99: float | None = None
    tpot_p95: float | None = None
    tpot_p99: float | None = None
    e2e_p50: float | None = None
    verdict: str | None = None  # a steady-state window's: pass, fail, undecided, saturated
    successes: int = 0
    failures: int = 0
    partial: bool = False
    client_limited: bool = False  # quantkit's own client was saturated: figures may read low
    client_limited_reason: str | None = None
    usage_mismatch: bool = False  # the server's usage disagreed with the text received: tokens counted from the text
    started_busy: bool = False  # the server still had earlier requests when the point started

    @property
    def load(self) -> str:
        return load_kinds.kind(self.profile).text(self, "label")


class TaskScore(BaseModel):
    task: str
    metric: str  # lm-eval "name,filter"
    value: float
    stderr: float | None = None
    higher_is_better: bool = True
    recovery: float | None = None
    recovery_stderr: float | None = None
    recovery_low: float | None = None  # the 95% interval the gates read (paired when items were stored)
    recovery_high: float | None = None
    recovery_method: str | None = None
    n_items: int | None = None  # items paired with the baseline


class DecodeBound(BaseModel):
    """Batch-1 decode bound from memory bandwidth, beside the measured concurrency-1 figure."""

    weight_bytes: int | None = None
    bandwidth_gbs: float | None = None  # of one GPU
    gpus: int = 1  # tensor-parallel GPUs, each reading its share of the weights at the same time
    max_tok_s: float | None = None  # gpus x bandwidth / weight bytes
    measured_tok_s: float | None = None  # output tok/s at concurrency 1
    ratio: float | None = None  # measured / max


class Row(BaseModel):
    name: str
    method: str
    status: VariantStatus
    error: str | None = None
    model_dir: str
    baseline: bool = False
    format: str | None = None  # "W4A16 g128 (pack-quantized)", "bf16"
    size_bytes: int | None = None
    weight_memory_bytes: int | None = None  # summed over the GPUs the model is split across
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # vLLM's max concurrency at max_model_len
    convert_time_s: float | None = None
    kernels: list[str] = Field(default_factory=list)  # bench.server.quant_lines
    vllm_version: str | None = None
    workload: BenchWorkload | None = None
    serve_args: list[str] = Field(default_factory=list)  # the `vllm serve` flags the bench set
    tensor_parallel: int = 1
    points: list[Point] = Field(default_factory=list)
    ladder: list[Point] = Field(default_factory=list)  # the capacity search's points (steady-state windows)
    c1: Point | None = None
    top: Point | None = None  # the knee point, or the highest load measured
    top_kind: Literal["knee", "highest", "capacity"] | None = None
    scores: list[TaskScore] = Field(default_factory=list)
    perplexity: float | None = None  # wikitext word_perplexity
    recovery: float | None = None  # mean over accuracy tasks
    recovery_stderr: float | None = None
    recovery_low: float | None = None  # its 95% interval (paired: evals/paired.py)
    recovery_high: float | None = None
    recovery_method: str | None = None
    recovery_independent_stderr: float | None = None  # as if the two runs were unrelated (for comparison)
    # The accuracy verdict: "pass" / "fail" / "inconclusive" by the gates' intervals (the recovery
    # gates' and the fidelity gates'), "no gates", "reference" (the baseline), None (neither was
    # measured). `gates_passed` is the yes/no of it.
    gate: Literal["pass", "fail", "inconclusive", "no gates", "reference"] | None = None
    gate_detail: list[str] = Field(default_factory=list)
    accuracy_from: str | None = None  # recovery and gate are this model's evals of the same method, not this one's
    bound: DecodeBound = Field(default_factory=DecodeBound)
    pareto: bool = False
    capacity: CapacityCell | None = None  # under the SLO, on the recipe's serve config (vLLM's defaults)
    capacity_tuned: CapacityCell | None = None  # under the SLO, the tuner's best configuration
    fidelity: FidelityCell | None = None  # against the baseline, token by token (report/fidelity.py)

    _dump = written_when_set("fidelity")  # a row without fidelity figures: as before they existed

    @property
    def gates_passed(self) -> bool:
        """True only when gates were set and every one passed by its interval (never when
        inconclusive); the baseline, being the reference, is not gated."""
        return self.gate == "pass"


class ProtocolRow(BaseModel):
    task: str
    version: str | None = None
    n_shot: int | None = None
    limit: int | None = None
    n_samples: int | None = None
    chat_template: bool | None = None
    add_bos_token: bool | None = None
    primary_metric: str | None = None
    data: str | None = None  # "offline stock:arc/arc_easy.yaml"
    variants: list[str] = Field(default_factory=list)  # which variants ran this protocol
    # items scored per variant: a result grown until its gate was decided holds more items of the
    # same protocol (the same first `limit`, then the same seeded blocks); recovery pairs items
    items: dict[str, int] = Field(default_factory=dict)
    growth: str | None = None  # how grown results chose their extra items


class PlotInfo(BaseModel):
    name: str  # file stem: plots/<name>.png
    title: str
    drawn: bool
    note: str | None = None  # why it was skipped, or what it leaves out


class Report(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.report"
    title: str
    created_at: str
    environment: dict[str, Any] = Field(default_factory=dict)
    recipe_hash: str | None = None
    bandwidth_gbs: float | None = None
    bandwidth_source: str  # "given", "looked up: <device>", or why it is not known
    rows: list[Row]
    tasks: list[str] = Field(default_factory=list)  # accuracy columns, in first-seen order
    protocol: list[ProtocolRow] = Field(default_factory=list)
    plots: list[PlotInfo] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    baseline_provenance: str | None = None  # what the baseline is, when it is not the original release
    slo: Slo | None = None
    slo_definition: str | None = None
    decision: Decision | None = None  # the recommended deployment (report/decision.py)
    tiers: list[TierResult] = Field(default_factory=list)  # each SLO tier's capacities and decision (tiers.py)
    price_per_hour: float | None = None  # of the serving machine: the tier table's cost per million output tokens


# ----------------------------------------------------------------------------------------------
# Building


def decode_bound(weight_bytes: int | None, bandwidth_gbs: float | None, measured_tok_s: float | None,
                 gpus: int = 1) -> DecodeBound:
    """Max batch-1 tok/s = bandwidth / bytes read per token (all weights, once per step).

    With tensor parallelism each of `gpus` GPUs reads its share of every layer at the same time, so
    their bandwidths add; pipeline stages run one after another at batch 1 and do not."""
    bound = DecodeBound(weight_bytes=weight_bytes, bandwidth_gbs=bandwidth_gbs, gpus=gpus, measured_tok_s=measured_tok_s)
    if weight_bytes and bandwidth_gbs:
        bound.max_tok_s = gpus * bandwidth_gbs * 1e9 / weight_bytes
        if measured_tok_s is not None:
            bound.ratio = measured_tok_s / bound.max_tok_s
    return bound


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _stat(stats: Any, q: str) -> float | None:
    return _num(getattr(stats, q)) if stats is not None else None


def points_of(result: records.Bench | records.Capacity | None) -> list[Point]:
    """A bench's or a capacity search's load points as the report shows them (the card's too)."""
    out = []
    for p in (result.points if result is not None else None) or []:
        out.append(Point(
            profile=p.profile or "concurrency", concurrency=p.concurrency, rate=_num(p.rate),
            # a point with no successful request measured no throughput (0 would be invented)
            output_tok_s=_num(p.output_tok_s) if p.successes else None,
            ttft_p50=_stat(p.ttft, "p50"), ttft_p95=_stat(p.ttft, "p95"),
            itl_p50=_stat(p.itl, "p50"), itl_p95=_stat(p.itl, "p95"), tpot_p50=_stat(p.tpot, "p50"),
            ttft_p99=_stat(p.ttft, "p99"), tpot_p95=_stat(p.tpot, "p95"), tpot_p99=_stat(p.tpot, "p99"),
            e2e_p50=_stat(p.e2e, "p50"),
            verdict=p.window.verdict if p.window is not None else None, successes=int(p.successes or 0),
            failures=int(p.failures or 0), partial=bool(p.partial), client_limited=bool(p.client_limited),
            client_limited_reason=p.client_limited_reason, usage_mismatch=bool(p.usage_mismatch),
            started_busy=bool(p.started_busy),
        ))
    return out


def top_point(points: list[Point], knee: Any, capacity: CapacityCell | None = None,
              capacity_points: list[Point] | None = None) -> tuple[Point | None, str | None]:
    """The point at capacity, else at the knee, else the highest load with a success; and which it is."""
    if capacity is not None and capacity.load is not None:
        for p in capacity_points or []:
            if load_kinds.kind(p.profile).load_of(p) == capacity.load and p.successes:
                return p, "capacity"
    ok = [p for p in points if p.successes > 0]
    if knee is not None and knee.knee is not None:
        for p in ok:
            if p.profile in load_kinds.KINDS and load_kinds.kind(p.profile).load_of(p) == knee.knee:
                return p, "knee"
    if not ok:
        return None, None
    return max(ok, key=lambda p: (p.concurrency or 0, p.rate or 0)), "highest"


def _format(v: Variant) -> str | None:
    # the conversion's record, else the checkpoint as the bench described it (checkpoint.describe)
    described = v.convert if v.convert is not None else v.bench.checkpoint if v.bench is not None else None
    if described is None or (v.convert is None and not described.scheme):
        return v.method  # the baseline: its dtype
    parts = [str(described.scheme or described.method or v.method)]
    if described.group_size:
        parts.append(f"g{described.group_size}")
    qc = described.quantization_config
    if qc is not None and qc.format:
        parts.append(f"({qc.format})")
    if qc is not None and qc.kv_cache_scheme is not None:  # calibrated K/V scales, served with --kv-cache-dtype fp8
        parts.append(f"+ KV cache {kv_cache_label(qc.kv_cache_scheme)}")
    return " ".join(parts)


def _scores(v: Variant) -> tuple[list[TaskScore], float | None]:
    rec_by_task = {r.task: r for r in (v.recovery.tasks if v.recovery is not None else None) or []}
    scores, ppl = [], None
    for t in (v.eval.tasks if v.eval is not None else None) or []:
        metrics = t.metrics or {}
        for key, m in metrics.items():
            if key.split(",")[0] == "word_perplexity" and (t.task or "").startswith("wikitext"):
                ppl = _num(m.value)
        primary = metrics.get(t.primary_metric or "")
        if not primary or _num(primary.value) is None:
            continue
        r = rec_by_task.get(t.task)
        scores.append(TaskScore(
            task=t.task, metric=t.primary_metric, value=primary.value, stderr=_num(primary.stderr),
            higher_is_better=t.higher_is_better,
            recovery=_num(r.recovery) if r else None, recovery_stderr=_num(r.recovery_stderr) if r else None,
            recovery_low=_num(r.recovery_low) if r else None, recovery_high=_num(r.recovery_high) if r else None,
            recovery_method=r.method if r else None, n_items=r.n_items if r else None,
        ))
    return scores, ppl


def _gate(v: Variant, baseline: bool) -> tuple[str | None, list[str]]:
    """The row's verdict over its recovery gates and its fidelity gates, each by its interval, and
    each gate's line: a fidelity gate counts as an accuracy gate does (the decision and push)."""
    fidelity = list(v.fidelity.verdicts or []) if v.fidelity is not None else []
    fidelity_detail = [f"fidelity {f.describe()}" for f in fidelity]
    if v.recovery is None:
        if fidelity:
            return overall_verdict([f.verdict for f in fidelity]), fidelity_detail
        return ("reference", []) if baseline and (v.eval or v.accuracy_from) else (None, [])
    gates = v.recovery.gates
    if not gates and not fidelity:
        return "no gates", []
    detail = [g.summary() if g.verdict == "pass" else g.describe() + f": {g.verdict}" for g in gates]
    return overall_verdict([g.verdict for g in gates] + [f.verdict for f in fidelity]), detail + fidelity_detail


def row_of(v: Variant) -> Row:
    """One variant's row: everything the report (and a checkpoint's card) shows of it."""
    baseline = v.baseline if v.baseline is not None else v.convert is None
    bench = v.bench
    server = (bench.server if bench is not None else None) or (v.capacity.server if v.capacity is not None else None)
    cap_points = points_of(v.capacity)
    points = points_of(bench) or cap_points
    c1 = next((p for p in points if p.profile == "concurrency" and p.concurrency == 1 and p.successes), None)
    capacity = capacity_cell(v.capacity)
    tuned = tuned_cell(v.tune, capacity.slo if capacity else None)
    top, top_kind = top_point(points, bench.knee if bench is not None else None, capacity, cap_points)
    scores, ppl = _scores(v)
    recovery = v.recovery or records.Recovery()
    rec = _num(recovery.mean_recovery)
    rec_se = _num(recovery.mean_recovery_stderr)
    rec_low, rec_high = _num(recovery.mean_recovery_low), _num(recovery.mean_recovery_high)
    if baseline and v.recovery is None and (v.accuracy_from or any(s.higher_is_better for s in scores)):
        rec, rec_se = 1.0, None  # the reference: recovery against itself is 1 exactly
    gate, gate_detail = _gate(v, baseline)
    size = v.size_bytes if v.size_bytes is not None else v.convert.size_bytes if v.convert is not None else None
    if size is None and bench is not None:  # the folder is gone (results brought back from another machine): what the bench saw
        size = bench.checkpoint.weights_bytes if bench.checkpoint is not None else None
    server = server or records.tolerant(ServerInfo)()
    serve_config = server.serve_config  # ServeConfig's fields as stored: serve/config.py reads them
    tp, pp = parallel_of(serve_config)
    weights_gib = _num(server.weights_gib)  # vLLM logs one worker's share
    weight_memory = v.weight_memory_bytes or (int(weights_gib * tp * pp * 2**30) if weights_gib else None)
    return Row(
        name=v.name, method=v.method, status=v.status, error=v.error, model_dir=v.model_dir, baseline=baseline,
        format=_format(v), size_bytes=size, weight_memory_bytes=weight_memory,
        kv_cache_tokens=server.kv_cache_tokens, max_concurrency=_num(server.max_concurrency),
        convert_time_s=_num(v.convert.wall_time_s) if v.convert is not None else None, kernels=_kernel_lines(server),
        vllm_version=server.vllm_version, workload=bench.workload if bench is not None else None,
        serve_args=args_of(serve_config), tensor_parallel=tp,
        points=points, ladder=[p for p in cap_points if p.verdict is not None], c1=c1, top=top, top_kind=top_kind, scores=scores, perplexity=ppl,
        recovery=rec, recovery_stderr=rec_se, recovery_low=rec_low, recovery_high=rec_high,
        recovery_method=recovery.mean_method,
        recovery_independent_stderr=_num(recovery.mean_independent_stderr),
        gate=gate, gate_detail=gate_detail, accuracy_from=v.accuracy_from, capacity=capacity, capacity_tuned=tuned,
        fidelity=fidelity_cell(v.fidelity),
    )


def _protocol(variants: list[Variant]) -> list[ProtocolRow]:
    rows: dict[tuple, ProtocolRow] = {}
    for v in variants:
        for t in (v.eval.tasks if v.eval is not None else None) or []:
            data = t.data
            row = ProtocolRow(
                task=t.task or "?", version=t.version, n_shot=t.n_shot, limit=t.limit,
                n_samples=t.n_samples, chat_template=t.chat_template,
                add_bos_token=t.add_bos_token, primary_metric=t.primary_metric,
                data=" ".join(str(x) for x in (data.source, data.template) if x) or None if data else None,
            )
            # results that stored per-item scores are paired item by item: their item count is not
            # part of the protocol (a grown result keeps its protocol), older ones' is
            paired = bool(t.items is not None and t.items.ids)
            key = tuple(row.model_dump(exclude={"variants", "items", "growth"} | ({"n_samples"} if paired else set())).values())
            kept = rows.setdefault(key, row)
            kept.variants.append(v.name)
            kept.items[v.name] = t.n_samples
            if t.growth:
                g = t.growth
                kept.growth = (f"first {t.limit} items, then blocks of {g.step} "
                               f"from a permutation of the rest seeded {g.seed}")
    for row in rows.values():
        row.n_samples = max((n for n in row.items.values() if n is not None), default=row.n_samples)
    return list(rows.values())


def _plots(rows: list[Row]) -> list[PlotInfo]:
    live = [r for r in rows if r.status != "failed"]
    scatter = [r for r in live if r.top and r.top.output_tok_s is not None and r.recovery is not None]
    curves = [r for r in live if sum(p.itl_p95 is not None and p.output_tok_s is not None for p in r.points) >= 1]
    ttft = [r for r in live if any(p.profile == "concurrency" and p.ttft_p50 is not None for p in r.points)]

    def info(name, title, have, what):
        return PlotInfo(name=name, title=title, drawn=bool(have),
                        note=None if have else f"not drawn: no variant has {what}")

    capacity = [r for r in live if best_capacity(r) is not None and r.recovery is not None]
    first = info("recovery_vs_capacity", "Accuracy recovery vs capacity under the SLO (Pareto front)", capacity,
                 "both accuracy recovery and a capacity under the SLO") \
        if any(r.capacity is not None or r.capacity_tuned is not None for r in live) else \
        info("recovery_vs_throughput", "Accuracy recovery vs output throughput (Pareto front)", scatter,
             "both accuracy recovery and a measured throughput")
    ladders = [r for r in live if any(p.verdict not in (None, *OVERLOADED) for p in r.ladder)]
    steady = [info("latency_vs_offered_load", "TTFT and TPOT p95/p99 vs offered load, with the SLO tiers' limits",
                   ladders, "an unsaturated steady-state point")] if any(r.ladder for r in live) else []
    return [
        first, *steady,
        info("itl_vs_throughput", "Latency-throughput: ITL p95 vs output tok/s", curves, "bench points with ITL"),
        info("ttft_vs_concurrency", "TTFT vs concurrency", ttft, "concurrency points with TTFT"),
    ]


def build_report(variants: list[Variant], *, title: str, environment: dict, recipe_hash: str | None = None,
                 bandwidth_gbs: float | None = None, baseline_provenance: str | None = None,
                 notes: list[str] | None = None) -> Report:
    names = [v.name for v in variants]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        # rows are keyed by name (Pareto, plots): two rows of one name would silently merge
        raise UsageError(f"variant names must be unique in a report; repeated: {', '.join(dupes)}")
    rows = [row_of(v) for v in variants]
    notes = list(notes or [])
    device = environment.get("device")
    if bandwidth_gbs is not None:
        bw, source = float(bandwidth_gbs), "given"
    elif (bw := lookup_bandwidth(device)) is not None:
        source = f"looked up for {device} (datasheet peak)"
    else:
        source = f"not known for {device or 'this device'}; pass bandwidth_gbs"
    for r in rows:
        r.bound = decode_bound(r.size_bytes, bw, r.c1.output_tok_s if r.c1 else None, gpus=r.tensor_parallel)
    if any(best_capacity(r) is not None for r in rows):  # the trade-off under the SLO: recovery vs capacity
        front = pareto_front({r.name: (best_capacity(r).goodput, r.recovery) for r in rows
                              if r.status != "failed" and best_capacity(r) is not None and r.recovery is not None})
    else:
        front = pareto_front({r.name: (r.top.output_tok_s, r.recovery) for r in rows if r.status != "failed" and r.top
                              and r.top.output_tok_s is not None and r.recovery is not None})
    for r in rows:
        r.pareto = r.name in front
    tasks: list[str] = []
    for r in rows:
        tasks += [s.task for s in r.scores if s.higher_is_better and s.task not in tasks]
    protocol = _protocol(variants)
    for task in {p.task for p in protocol if sum(q.task == p.task for q in protocol) > 1}:
        notes.append(f"task {task} ran on different protocols across variants (see the protocol table): "
                     "its scores are not comparable")
    if baseline_provenance:
        notes.append(f"the baseline is {baseline_provenance}; recovery is measured against it")
    versions = {r.vllm_version for r in rows if r.vllm_version}
    if len(versions) > 1:
        notes.append(f"variants were served by different vLLM versions: {', '.join(sorted(versions))}")
    decision = decide(rows)
    from ..measure.stats.slo import SLO_DEFINITION

    return Report(
        title=title, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        environment=dict(environment), recipe_hash=recipe_hash, bandwidth_gbs=bw, bandwidth_source=source,
        rows=rows, tasks=tasks, protocol=protocol, plots=_plots(rows), notes=notes,
        baseline_provenance=baseline_provenance,
        slo=decision.slo, slo_definition=SLO_DEFINITION if decision.slo else None,
        decision=decision if decision.status != "no_capacity" else None,
    )


def best_capacity(row: Row) -> CapacityCell | None:
    """The row's higher capacity under the SLO (tuned or on defaults); None when neither met it."""
    cells = [c for c in (row.capacity, row.capacity_tuned) if c is not None and c.load is not None]
    return max(cells, key=lambda c: c.goodput) if cells else None


def _kernel_lines(server: ServerInfo) -> list[str]:
    # lines stored before the pattern learned a notice (vLLM 0.26's "Kernel JIT monitor") are cleaned here
    return [x for x in server.quant_lines or [] if not QUANT_NOISE.search(x)]
