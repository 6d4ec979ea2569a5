"""The precision-versus-throughput report: Variant records in, Markdown / HTML / JSON / PNG out.

`build_report(variants, ...)` turns one `Variant` per checkpoint (the baseline and each method:
its convert record, BenchRun, EvalRun and RecoveryReport as JSON dicts) into a `Report`, the whole
content of the report as data (schema_version 1). The renderers only format a Report, so
`report.json`, `report.md` and `report.html` always say the same thing. Nothing is recomputed or
estimated from outside the records: a value that was not measured is None and prints as "—".

Choices worth knowing:
- "tok/s at the knee": the bench point at the knee the sweep found (`bench.knee.knee`); without a
  knee, the highest load measured that had a successful request ("highest" in the table).
- The baseline's recovery is 1 by definition (it is the reference), when it has eval results.
- The batch-1 decode bound: at concurrency 1 every decode step reads all weights once, so
  tok/s <= bandwidth / weight bytes. Size on disk stands in for the weight bytes (it also counts
  the tokenizer files and the embedding rows a token does not read; KV-cache reads are ignored):
  an upper bound, approximate by a few percent. Bandwidth is given, or looked up for known GPUs.

Heavy imports (matplotlib, jinja2) happen inside the functions that need them.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

SCHEMA_VERSION = 1
DASH = "—"

# Peak memory bandwidth in GB/s from the vendors' datasheets. Matched in order against the device
# name (torch.cuda.get_device_name: "NVIDIA H100 80GB HBM3" is the SXM part, "NVIDIA H100 PCIe").
BANDWIDTH_GBS: list[tuple[str, float]] = [
    (r"H200", 4800.0),
    (r"H100.*PCIe", 2000.0),
    (r"H100.*NVL", 3900.0),
    (r"H100", 3350.0),
    (r"A100.*80\s*GB.*PCIe|A100.*PCIe.*80\s*GB", 1935.0),
    (r"A100.*80\s*GB", 2039.0),
    (r"A100", 1555.0),
    (r"L40S", 864.0),
]


# ----------------------------------------------------------------------------------------------
# Input


class Variant(BaseModel):
    """One row of the report: a checkpoint and what was measured on it."""

    name: str  # "baseline", "awq", "int8", ...
    method: str  # "bf16" (the source dtype) for the baseline, else the quant method
    model_dir: str
    convert: dict | None = None  # DIR/quantkit.json (ConvertRecord); None for the baseline
    bench: dict | None = None  # a BenchRun JSON (quantkit/bench.py)
    eval: dict | None = None  # an EvalRun JSON (quantkit/evals_core.py)
    recovery: dict | None = None  # a RecoveryReport JSON against the baseline
    status: str = "done"  # "done" | "failed" | "partial"
    error: str | None = None  # why it failed (shown, never hidden)
    # Size of the checkpoint's files; needed for the baseline (it has no convert record).
    # None: convert.size_bytes is used.
    size_bytes: int | None = None
    # Memory vLLM reported for the weights once loaded ("Model loading took X GiB"), if known.
    weight_memory_bytes: int | None = None


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
    successes: int = 0
    failures: int = 0
    partial: bool = False

    @property
    def load(self) -> str:
        return f"c={self.concurrency}" if self.profile == "concurrency" else f"rate={self.rate:g}/s"


class TaskScore(BaseModel):
    task: str
    metric: str  # lm-eval "name,filter"
    value: float
    stderr: float | None = None
    higher_is_better: bool = True
    recovery: float | None = None
    recovery_stderr: float | None = None


class Bound(BaseModel):
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
    status: str
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
    workload: dict[str, Any] | None = None
    serve_args: list[str] = Field(default_factory=list)  # the `vllm serve` flags the bench set
    tensor_parallel: int = 1
    points: list[Point] = Field(default_factory=list)
    c1: Point | None = None
    top: Point | None = None  # the knee point, or the highest load measured
    top_kind: Literal["knee", "highest"] | None = None
    scores: list[TaskScore] = Field(default_factory=list)
    perplexity: float | None = None  # wikitext word_perplexity
    recovery: float | None = None  # mean over accuracy tasks
    recovery_stderr: float | None = None
    gate: Literal["pass", "fail", "no gates", "reference"] | None = None
    gate_detail: list[str] = Field(default_factory=list)
    bound: Bound = Field(default_factory=Bound)
    pareto: bool = False


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


# ----------------------------------------------------------------------------------------------
# Building


def lookup_bandwidth(device: str | None) -> float | None:
    """Peak memory bandwidth (GB/s) of a known GPU by name; None for CPUs and unknown devices."""
    if not device:
        return None
    for pattern, gbs in BANDWIDTH_GBS:
        if re.search(pattern, device, re.IGNORECASE):
            return gbs
    return None


def decode_bound(weight_bytes: int | None, bandwidth_gbs: float | None, measured_tok_s: float | None,
                 gpus: int = 1) -> Bound:
    """Max batch-1 tok/s = bandwidth / bytes read per token (all weights, once per step).

    With tensor parallelism each of `gpus` GPUs reads its share of every layer at the same time, so
    their bandwidths add; pipeline stages run one after another at batch 1 and do not."""
    bound = Bound(weight_bytes=weight_bytes, bandwidth_gbs=bandwidth_gbs, gpus=gpus, measured_tok_s=measured_tok_s)
    if weight_bytes and bandwidth_gbs:
        bound.max_tok_s = gpus * bandwidth_gbs * 1e9 / weight_bytes
        if measured_tok_s is not None:
            bound.ratio = measured_tok_s / bound.max_tok_s
    return bound


def pareto_front(points: dict[str, tuple[float, float]]) -> set[str]:
    """Names not dominated when both coordinates are better higher (throughput, recovery): a point
    is dominated if another is >= in both and > in at least one."""
    front = set()
    for name, (x, y) in points.items():
        dominated = any(
            (ox >= x and oy >= y) and (ox > x or oy > y)
            for other, (ox, oy) in points.items() if other != name
        )
        if not dominated:
            front.add(name)
    return front


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _stat(point: dict, metric: str, q: str) -> float | None:
    block = point.get(metric)
    return _num(block.get(q)) if isinstance(block, dict) else None


def _points(bench: dict) -> list[Point]:
    out = []
    for p in bench.get("points") or []:
        out.append(Point(
            profile=p.get("profile") or "concurrency", concurrency=p.get("concurrency"), rate=_num(p.get("rate")),
            # a point with no successful request measured no throughput (0 would be invented)
            output_tok_s=_num(p.get("output_tok_s")) if p.get("successes") else None,
            ttft_p50=_stat(p, "ttft", "p50"), ttft_p95=_stat(p, "ttft", "p95"),
            itl_p50=_stat(p, "itl", "p50"), itl_p95=_stat(p, "itl", "p95"),
            successes=int(p.get("successes") or 0), failures=int(p.get("failures") or 0),
            partial=bool(p.get("partial")),
        ))
    return out


def _top_point(points: list[Point], knee: dict | None) -> tuple[Point | None, str | None]:
    ok = [p for p in points if p.successes > 0]
    if isinstance(knee, dict) and knee.get("knee") is not None:
        for p in ok:
            if p.profile == "concurrency" and p.concurrency == knee["knee"]:
                return p, "knee"
            if p.profile == "rate" and p.rate == knee["knee"]:
                return p, "knee"
    if not ok:
        return None, None
    return max(ok, key=lambda p: (p.concurrency or 0, p.rate or 0)), "highest"


def _format(v: Variant) -> str | None:
    c = v.convert
    if c is None:
        checkpoint = (v.bench or {}).get("checkpoint") or {}
        if checkpoint.get("scheme"):
            c = checkpoint
        else:
            return v.method  # the baseline: its dtype
    parts = [str(c.get("scheme") or c.get("method") or v.method)]
    if c.get("group_size"):
        parts.append(f"g{c['group_size']}")
    fmt = (c.get("quantization_config") or {}).get("format")
    if fmt:
        parts.append(f"({fmt})")
    return " ".join(parts)


def _scores(v: Variant) -> tuple[list[TaskScore], float | None]:
    rec_by_task = {r.get("task"): r for r in (v.recovery or {}).get("tasks") or []}
    scores, ppl = [], None
    for t in (v.eval or {}).get("tasks") or []:
        metrics = t.get("metrics") or {}
        for key, m in metrics.items():
            if key.split(",")[0] == "word_perplexity" and t.get("task", "").startswith("wikitext"):
                ppl = _num(m.get("value"))
        primary = metrics.get(t.get("primary_metric") or "")
        if not primary or _num(primary.get("value")) is None:
            continue
        r = rec_by_task.get(t.get("task")) or {}
        scores.append(TaskScore(
            task=t["task"], metric=t["primary_metric"], value=primary["value"], stderr=_num(primary.get("stderr")),
            higher_is_better=t.get("higher_is_better", True),
            recovery=_num(r.get("recovery")), recovery_stderr=_num(r.get("recovery_stderr")),
        ))
    return scores, ppl


def _gate(v: Variant, baseline: bool) -> tuple[str | None, list[str]]:
    if v.recovery is None:
        return ("reference", []) if baseline and v.eval else (None, [])
    gates = v.recovery.get("gates") or []
    if not gates:
        return "no gates", []
    detail = []
    for g in gates:
        what = g.get("task") or "average"
        value = _num(g.get("value"))
        shown = f"{value:.4f}" if value is not None else "undefined"
        detail.append(f"{what} recovery {shown} {'>=' if g.get('passed') else '<'} {g.get('threshold'):g}"
                      + ("" if g.get("passed") else " (failed)"))
    return ("pass" if v.recovery.get("passed", all(g.get("passed") for g in gates)) else "fail"), detail


def _row(v: Variant) -> Row:
    baseline = v.convert is None
    bench = v.bench or {}
    server = bench.get("server") or {}
    points = _points(bench)
    c1 = next((p for p in points if p.profile == "concurrency" and p.concurrency == 1 and p.successes), None)
    top, top_kind = _top_point(points, bench.get("knee"))
    scores, ppl = _scores(v)
    rec = _num((v.recovery or {}).get("mean_recovery"))
    rec_se = _num((v.recovery or {}).get("mean_recovery_stderr"))
    if baseline and v.recovery is None and any(s.higher_is_better for s in scores):
        rec, rec_se = 1.0, None  # the reference: recovery against itself is 1 exactly
    gate, gate_detail = _gate(v, baseline)
    size = v.size_bytes if v.size_bytes is not None else (v.convert or {}).get("size_bytes")
    if size is None:  # the folder is gone (results brought back from another machine): what the bench saw
        size = (bench.get("checkpoint") or {}).get("weights_bytes")
    serve_config = server.get("serve_config") or {}
    tp = int(serve_config.get("tensor_parallel_size") or 1)
    pp = int(serve_config.get("pipeline_parallel_size") or 1)
    weights_gib = _num(server.get("weights_gib"))  # vLLM logs one worker's share
    weight_memory = v.weight_memory_bytes or (int(weights_gib * tp * pp * 2**30) if weights_gib else None)
    return Row(
        name=v.name, method=v.method, status=v.status, error=v.error, model_dir=v.model_dir, baseline=baseline,
        format=_format(v), size_bytes=size, weight_memory_bytes=weight_memory,
        kv_cache_tokens=server.get("kv_cache_tokens"), max_concurrency=_num(server.get("max_concurrency")),
        convert_time_s=_num((v.convert or {}).get("wall_time_s")), kernels=_kernel_lines(server),
        vllm_version=server.get("vllm_version"), workload=bench.get("workload"),
        serve_args=_serve_args(serve_config), tensor_parallel=tp,
        points=points, c1=c1, top=top, top_kind=top_kind, scores=scores, perplexity=ppl,
        recovery=rec, recovery_stderr=rec_se, gate=gate, gate_detail=gate_detail,
    )


def _protocol(variants: list[Variant]) -> list[ProtocolRow]:
    rows: dict[tuple, ProtocolRow] = {}
    for v in variants:
        for t in (v.eval or {}).get("tasks") or []:
            data = t.get("data") or {}
            row = ProtocolRow(
                task=t.get("task", "?"), version=t.get("version"), n_shot=t.get("n_shot"), limit=t.get("limit"),
                n_samples=t.get("n_samples"), chat_template=t.get("chat_template"),
                add_bos_token=t.get("add_bos_token"), primary_metric=t.get("primary_metric"),
                data=" ".join(str(x) for x in (data.get("source"), data.get("template")) if x) or None,
            )
            key = tuple(row.model_dump(exclude={"variants"}).values())
            rows.setdefault(key, row).variants.append(v.name)
    return list(rows.values())


def _plots(rows: list[Row]) -> list[PlotInfo]:
    live = [r for r in rows if r.status != "failed"]
    scatter = [r for r in live if r.top and r.top.output_tok_s is not None and r.recovery is not None]
    curves = [r for r in live if sum(p.itl_p95 is not None and p.output_tok_s is not None for p in r.points) >= 1]
    ttft = [r for r in live if any(p.profile == "concurrency" and p.ttft_p50 is not None for p in r.points)]

    def info(name, title, have, what):
        return PlotInfo(name=name, title=title, drawn=bool(have),
                        note=None if have else f"not drawn: no variant has {what}")

    return [
        info("recovery_vs_throughput", "Accuracy recovery vs output throughput (Pareto front)", scatter,
             "both accuracy recovery and a measured throughput"),
        info("itl_vs_throughput", "Latency-throughput: ITL p95 vs output tok/s", curves, "bench points with ITL"),
        info("ttft_vs_concurrency", "TTFT vs concurrency", ttft, "concurrency points with TTFT"),
    ]


def build_report(variants: list[Variant], *, title: str, environment: dict, recipe_hash: str | None = None,
                 bandwidth_gbs: float | None = None) -> Report:
    names = [v.name for v in variants]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        from .errors import UsageError

        # rows are keyed by name (Pareto, plots): two rows of one name would silently merge
        raise UsageError(f"variant names must be unique in a report; repeated: {', '.join(dupes)}")
    rows = [_row(v) for v in variants]
    notes: list[str] = []
    device = environment.get("device")
    if bandwidth_gbs is not None:
        bw, source = float(bandwidth_gbs), "given"
    elif (bw := lookup_bandwidth(device)) is not None:
        source = f"looked up for {device} (datasheet peak)"
    else:
        source = f"not known for {device or 'this device'}; pass bandwidth_gbs"
    for r in rows:
        r.bound = decode_bound(r.size_bytes, bw, r.c1.output_tok_s if r.c1 else None, gpus=r.tensor_parallel)
    front = pareto_front({r.name: (r.top.output_tok_s, r.recovery) for r in rows
                          if r.status != "failed" and r.top and r.top.output_tok_s is not None and r.recovery is not None})
    for r in rows:
        r.pareto = r.name in front
    tasks: list[str] = []
    for r in rows:
        tasks += [s.task for s in r.scores if s.higher_is_better and s.task not in tasks]
    protocol = _protocol(variants)
    for task in {p.task for p in protocol if sum(q.task == p.task for q in protocol) > 1}:
        notes.append(f"task {task} ran on different protocols across variants (see the protocol table): "
                     "its scores are not comparable")
    versions = {r.vllm_version for r in rows if r.vllm_version}
    if len(versions) > 1:
        notes.append(f"variants were served by different vLLM versions: {', '.join(sorted(versions))}")
    return Report(
        title=title, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        environment=dict(environment), recipe_hash=recipe_hash, bandwidth_gbs=bw, bandwidth_source=source,
        rows=rows, tasks=tasks, protocol=protocol, plots=_plots(rows), notes=notes,
    )


# ----------------------------------------------------------------------------------------------
# Formatting (shared by Markdown and HTML: the same strings in both)


def fmt(value: float | None, digits: int = 3) -> str:
    """Significant digits without scientific notation for everyday magnitudes; "—" for None."""
    if value is None:
        return DASH
    if value == 0:
        return "0"
    mag = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - mag)
    return f"{value:,.{decimals}f}"


def fmt_pm(value: float | None, stderr: float | None, digits: int = 4) -> str:
    if value is None:
        return DASH
    text = f"{value:.{digits}f}"
    return text + (f" ± {stderr:.{digits}f}" if stderr is not None else "")


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return DASH
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def fmt_ms(pair: tuple[float | None, float | None]) -> str:
    """p50 / p95 in milliseconds."""
    if pair[0] is None and pair[1] is None:
        return DASH
    return " / ".join(fmt(x * 1000 if x is not None else None) for x in pair)


def _tok_s(p: Point | None, kind: str | None = None) -> str:
    if p is None or p.output_tok_s is None:
        return DASH
    text = fmt(p.output_tok_s)
    if kind:
        text += f" ({kind} {p.load})"
    if p.failures:
        text += f" [{p.failures} failed]"
    return text


def _score(s: TaskScore | None) -> str:
    return fmt_pm(s.value, s.stderr) if s else DASH


def _kernel_lines(server: dict[str, Any]) -> list[str]:
    from .engine import QUANT_NOISE

    # lines stored before the pattern learned a notice (vLLM 0.26's "Kernel JIT monitor") are cleaned here
    return [x for x in server.get("quant_lines") or [] if not QUANT_NOISE.search(x)]


def _serve_args(serve_config: dict[str, Any]) -> list[str]:
    if not serve_config:
        return []
    from .engine import ServeConfig

    try:
        return ServeConfig.model_validate(serve_config).to_args()
    except ValueError:  # a record from a quantkit whose knobs differ: show what it stored
        return [f"{k}={v}" for k, v in serve_config.items() if v not in (None, False, {})]


def tables(report: Report) -> list[tuple[str, list[str], list[list[str]], str | None]]:
    """(title, header, rows, caption) for every table; both renderers print exactly these."""
    r_ = report.rows
    out = []
    out.append(("Checkpoints", ["variant", "method", "status", "format", "size on disk", "weight memory",
                                "KV cache (tokens)", "conversion time", "kernel vLLM chose"],
                [[r.name, r.method, r.status + (f": {r.error}" if r.error else ""), r.format or DASH,
                  fmt_bytes(r.size_bytes), fmt_bytes(r.weight_memory_bytes),
                  f"{r.kv_cache_tokens:,}" if r.kv_cache_tokens is not None else DASH,
                  f"{fmt(r.convert_time_s)} s" if r.convert_time_s is not None else DASH,
                  _short_kernel(r.kernels)] for r in r_],
                "size on disk: all files of the checkpoint; weight memory: what vLLM loaded, summed over GPUs; "
                "kernel: the vLLM log's line naming the linear kernel (every quantization/kernel line is listed "
                "below)"))
    out.append(("Throughput and latency", ["variant", "output tok/s c=1", "output tok/s at knee",
                                           "TTFT p50 / p95 (ms) c=1", "TTFT p50 / p95 (ms) at knee",
                                           "ITL p50 / p95 (ms) c=1", "ITL p50 / p95 (ms) at knee"],
                [[r.name, _tok_s(r.c1), _tok_s(r.top, r.top_kind),
                  fmt_ms((r.c1.ttft_p50, r.c1.ttft_p95)) if r.c1 else DASH,
                  fmt_ms((r.top.ttft_p50, r.top.ttft_p95)) if r.top else DASH,
                  fmt_ms((r.c1.itl_p50, r.c1.itl_p95)) if r.c1 else DASH,
                  fmt_ms((r.top.itl_p50, r.top.itl_p95)) if r.top else DASH] for r in r_],
                "at knee: the knee of the sweep, or the highest load measured (\"highest\") when there was no sweep"))
    acc_rows = []
    for r in r_:
        by_task = {s.task: s for s in r.scores}
        recovery = fmt_pm(r.recovery, r.recovery_stderr) + (" (reference)" if r.gate == "reference" else "")
        gate = r.gate or DASH
        if r.gate == "fail":
            gate += ": " + "; ".join(d.removesuffix(" (failed)") for d in r.gate_detail if d.endswith(" (failed)"))
        acc_rows.append([r.name] + [_score(by_task.get(t)) for t in report.tasks]
                        + [recovery if r.recovery is not None else DASH, fmt(r.perplexity), gate,
                           "yes" if r.pareto else ""])
    out.append(("Accuracy", ["variant"] + report.tasks + ["recovery (mean)", "wikitext word ppl", "gate", "Pareto"],
                acc_rows, "primary metric ± stderr per task; recovery = quantized / baseline on the same protocol, "
                "averaged over accuracy tasks, ± delta-method stderr (conservative)"))
    out.append(("Batch-1 decode bound from memory bandwidth", ["variant", "weight bytes", "bandwidth (GB/s)",
                                                                 "bound tok/s", "measured tok/s c=1", "measured / bound"],
                [[r.name, fmt_bytes(r.bound.weight_bytes), _bandwidth(r.bound), fmt(r.bound.max_tok_s),
                  fmt(r.bound.measured_tok_s), fmt(r.bound.ratio * 100) + "%" if r.bound.ratio is not None else DASH]
                 for r in r_],
                "bound = bandwidth / bytes read per token (size on disk), bandwidths added over tensor-parallel "
                f"GPUs; bandwidth: {report.bandwidth_source}"))
    out.append(("Evaluation protocol", ["task", "version", "n-shot", "limit", "items", "chat template", "BOS",
                                        "primary metric", "data", "variants"],
                [[p.task, p.version or DASH, _s(p.n_shot), _s(p.limit, "all"), _s(p.n_samples), _yn(p.chat_template),
                  _yn(p.add_bos_token), p.primary_metric or DASH, p.data or DASH, ", ".join(p.variants)]
                 for p in report.protocol], None))
    workloads = []
    for r in r_:
        if r.workload:
            w = r.workload
            workloads.append([r.name, _s(w.get("input_len")), _s(w.get("output_len")), _s(w.get("num_prompts")),
                              w.get("dataset") or "random", w.get("api") or DASH,
                              ", ".join(p.load for p in r.points) or DASH, " ".join(r.serve_args) or DASH])
    out.append(("Bench workload", ["variant", "input tokens", "output tokens", "requests per point", "dataset",
                                   "API", "points", "vllm serve flags"], workloads, None))
    env = [[k, str(v) if v not in (None, "") else DASH] for k, v in report.environment.items()]
    env.append(["recipe hash", report.recipe_hash or DASH])
    env.append(["memory bandwidth", (fmt(report.bandwidth_gbs, 4) + " GB/s, " if report.bandwidth_gbs else "")
                + report.bandwidth_source])
    out.append(("Environment", ["item", "value"], env, None))
    return out


def _s(value: Any, none: str = DASH) -> str:
    return none if value is None else str(value)


def _yn(value: bool | None) -> str:
    return DASH if value is None else ("yes" if value else "no")


def _bandwidth(bound: Bound) -> str:
    if bound.bandwidth_gbs is None or bound.gpus == 1:
        return fmt(bound.bandwidth_gbs, 4)
    return f"{fmt(bound.gpus * bound.bandwidth_gbs, 4)} ({bound.gpus} × {fmt(bound.bandwidth_gbs, 4)})"


def _short_kernel(lines: list[str]) -> str:
    """The line naming the linear-layer kernel if there is one (the log also names the attention
    backend and the quantization config); the table cell is short, the full list follows."""
    if not lines:
        return DASH
    first = next((x for x in lines if re.search(r"linear|kernel|marlin|machete|gemm|scaled_?mm", x, re.I)), lines[0])
    return first if len(first) <= 80 else first[:77] + "..."


# ----------------------------------------------------------------------------------------------
# Markdown


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _version(report: Report) -> str:
    from . import __version__

    return str(report.environment.get("quantkit") or __version__)


# The plots go after the first three tables (what each variant is, its speed, its accuracy): the
# reader sees the trade-off before the detail tables.
PLOTS_AFTER = 3


def render_markdown(report: Report) -> str:
    lines = [f"# {report.title}", "", f"Generated {report.created_at} by quantkit {_version(report)}.", ""]
    failed = [r for r in report.rows if r.status != "done"]
    for r in failed:
        lines.append(f"> **{r.name}: {r.status}**" + (f": {_md_cell(r.error)}" if r.error else ""))
    if failed:
        lines.append("")
    for note in report.notes:
        lines += [f"> note: {_md_cell(note)}", ""]
    for i, (title, header, rows, caption) in enumerate(tables(report)):
        if i == PLOTS_AFTER:
            lines += _md_plots(report)
        lines += [f"## {title}", ""]
        if not rows:
            lines += [f"{DASH} (nothing measured)", ""]
            continue
        lines.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
        lines.append("|" + "|".join("---" for _ in header) + "|")
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
        lines.append("")
        if caption:
            lines += [f"_{_md_cell(caption)}_", ""]
    kernel_rows = [r for r in report.rows if r.kernels]
    if kernel_rows:
        lines += ["## Kernels and schemes vLLM chose (from its log)", ""]
        for r in kernel_rows:
            lines += [f"**{r.name}**", "", "```"] + r.kernels + ["```", ""]
    gate_rows = [r for r in report.rows if r.gate_detail]
    if gate_rows:
        lines += ["## Gates", ""]
        for r in gate_rows:
            lines += [f"- **{r.name}**: " + "; ".join(r.gate_detail)]
        lines.append("")
    return "\n".join(lines)


def _md_plots(report: Report) -> list[str]:
    lines = ["## Plots", ""]
    for p in report.plots:
        lines += [f"![{p.title}](plots/{p.name}.png)" if p.drawn else f"- {p.title}: {p.note}", ""]
    return lines


# ----------------------------------------------------------------------------------------------
# HTML (self-contained: inline CSS, images as data URIs, no script, nothing fetched)

_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{ report.title }}</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1600px; }
table { border-collapse: collapse; margin: 0.5em 0 0.3em; font-size: 13px; }
th, td { border: 1px solid #bbb; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
tr.failed td { background: #fde8e8; }
tr.pareto td:first-child { font-weight: bold; }
.caption { font-size: 12px; color: #555; margin-bottom: 1.2em; }
.alert { background: #fde8e8; border-left: 4px solid #c0392b; padding: 0.4em 0.8em; margin: 0.4em 0; }
.note { background: #fff6dd; border-left: 4px solid #e0a800; padding: 0.4em 0.8em; margin: 0.4em 0; }
img.plot { display: block; max-width: 100%; margin: 0.5em 0 1.5em; border: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 0.5em; font-size: 12px; white-space: pre-wrap; }
</style></head>
<body>
{% macro plots() %}<h2>Plots</h2>
{% for p in report.plots %}
{% if p.drawn and images.get(p.name) %}
<h3>{{ p.title }}</h3>
<img class="plot" alt="{{ p.title }}" data-plot="{{ p.name }}" src="data:image/png;base64,{{ images[p.name] }}">
{% else %}<p class="note">{{ p.title }}: {{ p.note or 'image not embedded' }}</p>{% endif %}
{% endfor %}{% endmacro %}
<h1>{{ report.title }}</h1>
<p>Generated {{ report.created_at }} by quantkit {{ version }}.</p>
{% for r in report.rows if r.status != 'done' %}
<div class="alert"><b>{{ r.name }}: {{ r.status }}</b>{% if r.error %}: {{ r.error }}{% endif %}</div>
{% endfor %}
{% for n in report.notes %}<div class="note">note: {{ n }}</div>{% endfor %}
{% for title, header, rows, caption in tables %}
{% if loop.index0 == plots_after %}{{ plots() }}{% endif %}
<h2>{{ title }}</h2>
{% if rows %}
<table><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr class="{{ row_class.get(title, {}).get(row[0], '') }}">{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if caption %}<div class="caption">{{ caption }}</div>{% endif %}
{% else %}<p>{{ dash }} (nothing measured)</p>{% endif %}
{% endfor %}
{% if kernel_rows %}<h2>Kernels and schemes vLLM chose (from its log)</h2>
{% for r in kernel_rows %}<h3>{{ r.name }}</h3><pre>{{ r.kernels | join('\n') }}</pre>{% endfor %}{% endif %}
{% if gate_rows %}<h2>Gates</h2><ul>
{% for r in gate_rows %}<li><b>{{ r.name }}</b>: {{ r.gate_detail | join('; ') }}</li>{% endfor %}</ul>{% endif %}
</body></html>
"""


def render_html(report: Report, images: dict[str, bytes] | None = None) -> str:
    """The report as one HTML file; `images` maps plot name -> PNG bytes (embedded as data URIs)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    row_class = {"Checkpoints": {r.name: "failed" for r in report.rows if r.status == "failed"},
                 "Accuracy": {r.name: "pareto" for r in report.rows if r.pareto}}
    return env.from_string(_HTML).render(
        report=report, tables=tables(report), dash=DASH, row_class=row_class, version=_version(report),
        plots_after=PLOTS_AFTER,
        images={k: base64.b64encode(v).decode("ascii") for k, v in (images or {}).items()},
        kernel_rows=[r for r in report.rows if r.kernels], gate_rows=[r for r in report.rows if r.gate_detail],
    )


# ----------------------------------------------------------------------------------------------
# Writing


def write_report(report: Report, out_dir: Path) -> dict[str, Path]:
    """Write report.md, report.html, report.json and plots/<name>.png into out_dir.

    Returns {"md", "html", "json", "plot:<name>"} -> path. Each file is written to a temporary name
    and renamed, so a reader never sees half a report."""
    from .report_plots import draw

    out_dir = Path(out_dir)
    (out_dir / "plots").mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    images: dict[str, bytes] = {}
    for plot in report.plots:
        if not plot.drawn:
            continue
        png = draw(plot.name, report)
        images[plot.name] = png
        paths[f"plot:{plot.name}"] = _atomic_write(out_dir / "plots" / f"{plot.name}.png", png)
    paths["md"] = _atomic_write(out_dir / "report.md", render_markdown(report).encode())
    paths["html"] = _atomic_write(out_dir / "report.html", render_html(report, images).encode())
    paths["json"] = _atomic_write(out_dir / "report.json",
                                  (json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode())
    return paths


def _atomic_write(path: Path, data: bytes) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def read_report(path: Path) -> Report:
    """A report.json back into a Report (schema_version checked)."""
    from .errors import UsageError

    data = json.loads(Path(path).read_text())
    if data.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"{path} has report schema_version {data.get('schema_version')}, this quantkit reads {SCHEMA_VERSION}")
    return Report.model_validate(data)
