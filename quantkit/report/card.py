"""The model card's body and metadata, from one checkpoint's stored evidence only.

Built with huggingface_hub's ModelCard / ModelCardData / EvalResult (the YAML header is the
client's, never written by hand). Every number comes from the store records in the Evidence; the
card has no timestamps of its own, so the same store gives a byte-identical card and a re-push
of an unchanged checkpoint is a no-op. A measurement that is not stored is written "missing".
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .. import __version__
from ..methods import METHODS
from ..models import BUILTIN_BASE, BUILTIN_PROVENANCE
from ..serve.config import KNOBS, ServeConfig, args_of
from ..store import Record, Store
from ..checkpoint import ConvertRecord
from ..evals.gates import RecoveryReport
from ..evals.results import EvalRun
from ..measure.bench import BenchRun
from ..measure.capacity import CapacityResult
from ..measure import load_kinds
from ..measure.point import BenchPoint, Stats
from ..measure.tune import TuneResult
from ..serve.server import ServerInfo
from . import records
from .gather import Evidence
from .card_capacity import capacity_lines
from .render import fmt, fmt_bytes, fmt_ci, fmt_ms, fmt_pm, fmt_str

# The card's word for a measurement that is not stored (the report's tables print "—"); every
# number is formatted by render.py's formatters, so the card and the report write them alike.
MISSING = "missing"


def _quantiles(stats: Stats | None, *keys: str) -> tuple[float | None, ...]:
    """The named quantiles of a stored latency's stats, None where the record lacks them."""
    return tuple(getattr(stats, key) if stats is not None else None for key in keys)


def _metric_name(key: str) -> str:
    """lm-eval's "name,filter" as a readable name: "acc_norm", "exact_match (strict-match)"."""
    name, _, filt = key.partition(",")
    return name if filt in ("", "none") else f"{name} ({filt})"


def _bits(convert: ConvertRecord | None) -> int | None:
    """The checkpoint's weight bits: what its quantization config says, else what its scheme's
    name spells (W4A16, FP8_DYNAMIC), else its method's registered bits (methods.py), so a method
    whose scheme's name does not spell them still gets its bit tag."""
    if not convert:
        return None
    if convert.quantization_config is not None and convert.quantization_config.weight_bits:
        return convert.quantization_config.weight_bits
    scheme = str(convert.scheme if convert.scheme is not None else "").lower()
    m = re.match(r"w(\d+)", scheme)
    if m:
        return int(m.group(1))
    if "fp8" in scheme:
        return 8
    method = METHODS.get(convert.method)
    return method.weight_bits if method else None


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def base_model_of(convert: ConvertRecord | None, override: str | None = None) -> str | None:
    """The Hub id of the model this checkpoint was made from, when it is known to be one: the
    given one (`--base-model`); a Hub reference itself; a built-in alias's release; a local folder's
    own naming of it (its config's `_name_or_path`, or a Hub cache folder `models--org--name`)."""
    if override:
        return override
    source = convert.source if convert is not None else None
    if source is None:
        return None
    ref, kind = source.ref, source.kind
    if kind == "hub" and ref:
        return ref
    if kind == "builtin" and ref in BUILTIN_BASE:
        return BUILTIN_BASE[ref]
    if kind == "local" and source.path:
        return _named_by_folder(Path(source.path))
    return None


def _named_by_folder(folder: Path) -> str | None:
    try:
        named = json.loads((folder / "config.json").read_text()).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        named = None
    if isinstance(named, str) and HUB_ID.fullmatch(named) and not Path(named).expanduser().exists():
        return named
    for part in reversed(folder.parts):  # ~/.cache/huggingface/hub/models--org--name/snapshots/<sha>
        if part.startswith("models--") and part.count("--") >= 2:
            return part.removeprefix("models--").replace("--", "/", 1)
    return None


def _task_rows(ev: Evidence) -> list[dict[str, Any]]:
    """One row per evaluated task: baseline, quantized, recovery (each value or None)."""
    rows = []
    recovery = {t.task: t for t in ev.recovery.tasks or []} if ev.recovery is not None else {}
    base_run = records.read(EvalRun, ev.baseline_eval.result) if ev.baseline_eval is not None else None
    baseline = {t.task: t for t in base_run.tasks or []} if base_run is not None else {}
    evaluated = ev.eval
    for t in (evaluated.tasks if evaluated is not None else None) or []:
        metric = t.primary_metric
        q = (t.metrics or {}).get(metric)
        b = (baseline[t.task].metrics or {}).get(metric) if ev.variant != "baseline" and t.task in baseline else None
        r = recovery.get(t.task)
        rows.append({
            "task": t.task, "metric": metric, "n_shot": t.n_shot, "n_samples": t.n_samples,
            "n_available": t.n_available, "higher_is_better": t.higher_is_better,
            "quantized": q.value if q else None, "quantized_stderr": q.stderr if q else None,
            "baseline": b.value if b else None, "baseline_stderr": b.stderr if b else None,
            "recovery": r.recovery if r else None, "recovery_stderr": r.recovery_stderr if r else None,
            "recovery_low": r.recovery_low if r else None, "recovery_high": r.recovery_high if r else None,
            "method": r.method if r else None, "n_items": r.n_items if r else None,
            "independent_stderr": r.independent_stderr if r else None,
            "version": t.version, "chat_template": t.chat_template,
            "add_bos_token": t.add_bos_token, "data": t.data, "limit": t.limit, "growth": t.growth,
        })
    return rows


def _source_name(convert: ConvertRecord) -> str:
    """The source as the card names it: an alias or Hub id as given, a local path by its name only
    (a card names no folder of the machine it was made on)."""
    source = convert.source
    if source is None or not source.ref:
        return MISSING
    return Path(source.ref).name if source.kind in ("local", "gguf") else source.ref


def baseline_provenance(convert: ConvertRecord | None, model: str | None) -> str | None:
    """What the baseline is in words, when it is not the original release (the demo's GGUF)."""
    source = convert.source if convert is not None else None
    ref = source.ref if source is not None and source.kind == "builtin" else model
    return BUILTIN_PROVENANCE.get(ref) if ref else None


def _bench_points(store: Store, record: Record | None) -> list[BenchPoint]:
    if record is None:
        return []
    result = records.read(BenchRun, record.result or {})
    points = result.points
    if not points and record.status != "done":
        # a bench that stopped early keeps the points it stored
        points = [records.read(BenchPoint, p) for p in store.points(record.id)]
    return list(points or [])


def _serve_command(repo: str, ev: Evidence) -> tuple[list[str], str]:
    """`vllm serve REPO ...` with the tuned knobs when `quantkit tune` ran, else those its capacity or
    benchmark was measured with."""
    tune = records.read(TuneResult, ev.tune.result) if ev.tune is not None else None
    if tune is not None and tune.best is not None and tune.best.config is not None:
        best = tune.best
        values = {k: v for k, v in best.config.items() if k in KNOBS}
        extra = {k: v for k, v in best.config.items() if k not in KNOBS}
        try:
            config = ServeConfig(**values, extra=extra)
            why = (f"tuned by `quantkit tune` ({best.label}: {tune.best_reason or 'best'}"
                   + (f", SLO {tune.slo}" if tune.slo else "") + ")")
            return config.to_args(mask=True), why
        except ValueError:
            pass
    for kind, model, why in (("capacity", CapacityResult, "the configuration whose capacity was measured"),
                             ("bench", BenchRun, "the configuration that was benchmarked")):
        result = ev.result(kind, model)
        serve_config = result.server.serve_config if result is not None and result.server is not None else None
        if serve_config:
            try:
                return ServeConfig.model_validate(serve_config).to_args(mask=True), why
            except ValueError:
                pass
    return [], "vLLM's defaults (no benchmark or tune result is stored)"


def build_card(store: Store, ev: Evidence, repo: str | None, *, base_model: str | None = None,
               forced: bool = False):
    """The ModelCard for the checkpoint of `ev` (nothing is measured or invented here)."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    convert = ev.convert or records.Convert()
    name = repo or ev.checkpoint.name
    base = base_model_of(ev.convert, base_model)
    method = convert.method or ("none" if ev.variant == "baseline" else MISSING)
    scheme = convert.scheme
    bits = _bits(ev.convert)
    quant_method = convert.quantization_config.quant_method if convert.quantization_config is not None else None
    tags = [t for t in (method if method not in (MISSING, "none") else None,
                        str(scheme).lower() if scheme else None,
                        f"{bits}-bit" if bits else None,
                        "compressed-tensors" if quant_method in (None, "compressed-tensors") and ev.convert else quant_method,
                        "vllm", "quantkit") if t]
    rows = _task_rows(ev)
    eval_results = []
    for row in rows:
        if row["quantized"] is None:
            continue
        metric = _metric_name(row["metric"])
        shots = {"num_few_shot": row["n_shot"]} if row["n_shot"] is not None else None
        eval_results.append(EvalResult(
            task_type="text-generation", dataset_type=row["task"], dataset_name=row["task"],
            metric_type=metric, metric_value=row["quantized"], metric_name=metric, dataset_args=shots,
        ))
        if ev.variant != "baseline" and row["recovery"] is not None:
            eval_results.append(EvalResult(
                task_type="text-generation", dataset_type=row["task"], dataset_name=row["task"], dataset_args=shots,
                metric_type="recovery", metric_value=round(row["recovery"], 4),
                metric_name=f"{metric} recovery vs the baseline ({_interval_words(row)})",
                metric_args=_interval_args(row),
            ))
    mean = _mean_row(ev.recovery or records.Recovery())
    if ev.variant != "baseline" and mean["recovery"] is not None:
        eval_results.append(EvalResult(
            task_type="text-generation", dataset_type="quantkit/mean-recovery", dataset_name="mean over accuracy tasks",
            metric_type="recovery", metric_value=round(mean["recovery"], 4),
            metric_name=f"mean recovery vs the baseline ({_interval_words(mean)})",
            metric_args={**_interval_args(mean), "gate": (ev.recovery.verdict if ev.recovery else None) or "no gates"},
        ))
    data = ModelCardData(
        base_model=base, library_name="transformers", pipeline_tag="text-generation", tags=tags,
        model_name=name, eval_results=eval_results or None,
        **({"base_model_relation": "quantized"} if base and ev.convert else {}),
    )
    body = _body(store, ev, name, base, rows, forced)
    template = "---\n{{ card_data }}\n---\n\n{{ body }}\n"
    return ModelCard.from_template(data, template_str=template, body=body)


def _body(store: Store, ev: Evidence, name: str, base: str | None, rows: list[dict[str, Any]], forced: bool) -> str:
    import yaml

    convert = ev.convert or records.Convert()
    out: list[str] = [f"# {name.split('/')[-1]}", ""]
    method, scheme = convert.method, convert.scheme
    base_link = f"[{base}](https://huggingface.co/{base})" if base else (
        f"`{_source_name(convert)}` (not a Hub model; base model unknown: `--base-model` names it)")
    if ev.convert:
        out.append(f"{method} ({scheme}) quantization of {base_link}, made with quantkit {__version__} "
                   f"({convert.backend or MISSING} backend) and measured in vLLM.")
        if provenance := baseline_provenance(ev.convert, ev.model):
            out.append(f"Its source, and the baseline its recovery is measured against, is `{_source_name(convert)}`: "
                       f"{provenance}.")
    else:
        out.append(f"Checkpoint `{ev.checkpoint.name}` ({'the unquantized baseline' if ev.variant == 'baseline' else 'no quantkit.json'}), "
                   f"measured in vLLM with quantkit {__version__}.")
    out.append("")
    if ev.validated:
        out.append(f"**Validated:** {ev.reason}" + (f" (recovery against the stored baseline eval, gates {ev.gates_source})."
                                                     if ev.recovery else "."))
    else:
        out.append(f"> **Not validated.** This checkpoint was pushed with `--force`: {ev.reason}. "
                   "The numbers below are only what was measured; no quality gate vouches for it."
                   if forced else f"> **Not validated:** {ev.reason}.")
    out.append("")

    # what was done
    out += ["## What was done", ""]
    if ev.convert:
        calib, recipe = convert.calibration, convert.recipe
        recipe = recipe if recipe is not None and recipe.model_fields_set else None
        if calib is not None and calib.model_fields_set:  # what the conversion used (the recipe's may be overridden)
            c = [fmt_str(x, missing=MISSING) for x in (calib.dataset, calib.num_samples, calib.seq_len, calib.tokens,
                                                        calib.seed)]
            calib_text = f"{c[0]}: {c[1]} samples x {c[2]} tokens ({c[3]} tokens), seed {c[4]}"
        elif recipe is not None and recipe.calibration is not None:
            calib_text = f"{MISSING} (the recipe names calibration data, the conversion record does not)"
        else:
            calib_text = "none (this method needs no calibration data)"
        hw = convert.hardware
        fingerprint = convert.source.fingerprint if convert.source is not None else None
        out += ["| | |", "|---|---|",
                f"| method | {method} ({convert.backend or MISSING}) |",
                f"| scheme | {scheme or MISSING} |",
                f"| group size | {convert.group_size if convert.group_size is not None else 'none (per channel)'} |",
                f"| ignored layers | {', '.join((recipe.ignore if recipe else None) or []) or 'none'} |",
                f"| calibration | {calib_text} |",
                f"| source | `{_source_name(convert)}` ({fingerprint or 'fingerprint missing'}) |",
                f"| quantized on | {hw.device or MISSING} ({hw.cpu_count or '?'} CPUs) "
                f"in {fmt(convert.wall_time_s, missing=MISSING)} s |",
                f"| checkpoint size | {fmt_bytes(convert.size_bytes, missing=MISSING)} |", ""]
        for note in convert.notes or []:
            out.append(f"- {note}")
        if convert.notes:
            out.append("")
        out += [f"quantkit recipe `{fmt_str(convert.recipe_name, missing=MISSING)}` "
                f"(hash {fmt_str(convert.recipe_hash, missing=MISSING)}):", "",
                "```yaml", yaml.safe_dump(recipe.model_dump(mode="json", exclude_unset=True), sort_keys=False).rstrip()
                if recipe else f"# {MISSING}", "```", ""]
    else:
        out += [f"No conversion record is stored for this checkpoint (method, scheme and calibration are {MISSING}).", ""]

    # accuracy
    out += ["## Accuracy", ""]
    provenance = baseline_provenance(ev.convert, ev.model)
    if not rows:
        out += [f"No eval is stored for this checkpoint: accuracy is {MISSING}.", ""]
    else:
        er = ev.eval
        versions = er.versions or {}  # package -> version: a mapping by nature, read by key
        vllm = er.server.vllm_version if er.server is not None else None
        out.append(f"lm-eval {versions.get('lm_eval', MISSING)} (`local-completions`, token ids) against vLLM "
                   f"{vllm or MISSING}. Recovery = quantized / baseline on the same items "
                   "(baseline / quantized for perplexities), with its 95% interval from the paired per-item scores "
                   "(delta method with their covariance; perplexity: documents resampled together, seeded).")
        if provenance and ev.variant != "baseline":
            out += ["", f"The baseline is {provenance}."]
        elif provenance:
            out += ["", f"This checkpoint is {provenance}."]
        out += ["", "| task | metric | n-shot | items | baseline | quantized | recovery [95% interval] |",
                "|---|---|---|---|---|---|---|"]
        for r in rows:
            items = f"{r['n_samples']} of {r['n_available']}" if r["n_samples"] is not None else MISSING
            rec = fmt_ci(r["recovery"], r["recovery_low"], r["recovery_high"], missing=MISSING) if ev.variant != "baseline" else "n/a (baseline)"
            if ev.variant != "baseline" and r["recovery"] is not None and not str(r["method"] or "").startswith("paired"):
                rec += " (independent: no per-item scores stored)"
            base_cell = fmt_pm(r["baseline"], r["baseline_stderr"], missing=MISSING) if ev.variant != "baseline" else "n/a"
            quantized = fmt_pm(r["quantized"], r["quantized_stderr"], missing=MISSING)
            out.append(f"| {r['task']} | {_metric_name(r['metric'])} | {fmt_str(r['n_shot'], missing=MISSING)} | "
                       f"{items} | {base_cell} | {quantized} | {rec} |")
        out.append("")
        if ev.recovery:
            mean = _mean_row(ev.recovery)
            line = f"Mean recovery over accuracy tasks: {fmt_ci(mean['recovery'], mean['recovery_low'], mean['recovery_high'], missing=MISSING)}"
            if mean["independent_stderr"] is not None and mean["recovery_stderr"] is not None:
                line += (f" (paired stderr {mean['recovery_stderr']:.4f}; the same runs treated as independent would "
                         f"give {mean['independent_stderr']:.4f})")
            out += [line + ".", ""]
            gates = ev.recovery.gates or []
            if gates:
                out.append(f"Gates ({ev.gates_source}): **{ev.recovery.verdict or 'none'}**. A gate passes when "
                           "the interval's lower bound reaches it, fails when its upper bound is below it, and is "
                           "inconclusive otherwise.")
                out.append("")
            for g in gates:
                out.append(f"- {g.gate}{' ' + g.task if g.task else ''}: "
                           + (g.summary() if g.verdict == "pass" else f"{g.describe()}: {g.verdict}"))
            if gates:
                out.append("")
        elif ev.variant != "baseline":
            out += [f"Recovery is {MISSING}: no baseline eval on the same protocol is stored.", ""]
        out += _protocol(ev, rows)

    # throughput / latency
    out += ["## Throughput and latency", ""]
    points = _bench_points(store, ev.bench)
    if not points:
        out += [f"No benchmark is stored for this checkpoint: throughput and latency are {MISSING}.", ""]
    else:
        br = ev.bench_run or records.Bench()
        server = br.server or records.tolerant(ServerInfo)()
        hw, wl = br.hardware, br.workload
        count = f"{hw.gpu_count} x " if hw.gpu and hw.gpu_count else ""
        out.append(f"quantkit's streaming load generator against vLLM {server.vllm_version or MISSING} on "
                   f"{count}{hw.device or MISSING}" + (f" ({hw.cpu_count} CPUs)" if not hw.gpu and hw.cpu_count else "")
                   + f"; prompts of {wl.input_len or MISSING} tokens, {wl.output_len or MISSING} output "
                   f"tokens, server flags `{' '.join(args_of(server.serve_config)) or 'defaults'}`."
                   + ("" if ev.bench.status == "done" and (br.complete or "complete" not in br.model_fields_set) else
                      f" The benchmark stopped early ({ev.bench.status}: {ev.bench.error or 'no reason stored'}); "
                      "these are the points it finished."))
        base_points = {(_px(p)): p for p in _bench_points(store, ev.baseline_bench)} if ev.variant != "baseline" else {}
        head = "| load | requests (failed) | output tok/s |"
        if base_points:
            head += " baseline output tok/s |"
        head += " TTFT p50 / p95 (ms) | ITL p50 / p95 (ms) | E2E p50 (s) |"
        out += ["", head, "|" + "---|" * (head.count("|") - 1)]
        for p in points:
            load = load_kinds.kind(p.profile).text(p, "phrase")
            cells = [load, f"{fmt_str(p.num_requests, missing=MISSING)} ({fmt_str(p.failures, missing=MISSING)})",
                     fmt(p.output_tok_s, missing=MISSING)]
            if base_points:
                bp = base_points.get(_px(p))
                cells.append(fmt(bp.output_tok_s, missing=MISSING) if bp else MISSING)
            cells += [fmt_ms(_quantiles(p.ttft, "p50", "p95"), missing=MISSING),
                      fmt_ms(_quantiles(p.itl, "p50", "p95"), missing=MISSING),
                      fmt(_quantiles(p.e2e, "p50")[0], missing=MISSING)]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        operating = _operating_point(points, br)
        if operating:
            out += [operating, ""]
        if server.quant_lines:
            out += ["Kernels vLLM chose: " + "; ".join(f"`{line}`" for line in server.quant_lines), ""]

    out += capacity_lines(store, ev)

    # how to serve
    args, why = _serve_command(name, ev)
    out += ["## How to serve", "", "```bash", " ".join(["vllm serve", name, *args]), "```", "",
            f"Flags: {why}.", ""]

    # provenance
    out += ["## Provenance", ""]
    versions = dict(convert.versions or {})
    out.append(f"Card written by quantkit {__version__} from its result store.")
    if versions:
        out.append("Conversion: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
    for kind in ("convert", "bench", "eval"):
        r = ev.stages.get(kind)
        out.append(f"- {kind}: " + (f"run `{r.run_key}` ({r.status}, finished {r.finished_at or MISSING})" if r else MISSING))
    if ev.variant != "baseline":
        for kind, r in (("baseline eval", ev.baseline_eval), ("baseline bench", ev.baseline_bench)):
            out.append(f"- {kind}: " + (f"run `{r.run_key}` (finished {r.finished_at or MISSING})" if r else MISSING))
    return "\n".join(out).rstrip() + "\n"


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def _interval_words(row: dict[str, Any]) -> str:
    low, high = row["recovery_low"], row["recovery_high"]
    if low is None or high is None:
        return "no interval"
    return f"95% interval {low:.4f} to {high:.4f}, {row['method'] or 'method ' + MISSING}"


def _interval_args(row: dict[str, Any]) -> dict[str, Any]:
    return {"low": _round(row["recovery_low"]), "high": _round(row["recovery_high"]), "confidence": 0.95,
            "method": row["method"], "items": row["n_items"]}


def _mean_row(recovery: RecoveryReport) -> dict[str, Any]:
    """The average's figures in a task row's keys."""
    items = [t.n_items for t in recovery.tasks or [] if t.higher_is_better is not False]
    return {"recovery": recovery.mean_recovery, "recovery_stderr": recovery.mean_recovery_stderr,
            "recovery_low": recovery.mean_recovery_low, "recovery_high": recovery.mean_recovery_high,
            "method": recovery.mean_method, "independent_stderr": recovery.mean_independent_stderr,
            "n_items": sum(items) if items and all(items) else None}


def _protocol(ev: Evidence, rows: list[dict[str, Any]]) -> list[str]:
    """The evaluation protocol, per task: what a reader needs to repeat the numbers."""
    er = ev.eval
    protocol = er.protocol if er is not None else None
    out = ["### Evaluation protocol", "",
           "| task | lm-eval task version | n-shot | items (limit) | chat template | BOS | data |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        data = r["data"]
        source = " ".join(str(x) for x in (data.source, data.template) if x) or MISSING if data else MISSING
        limit = "all" if r["limit"] is None else r["limit"]
        out.append(f"| {r['task']} | {fmt_str(r['version'], missing=MISSING)} | "
                   f"{fmt_str(r['n_shot'], missing=MISSING)} | {fmt_str(r['n_samples'], missing=MISSING)} ({limit}) | "
                   f"{'yes' if r['chat_template'] else 'no'} | {'yes' if r['add_bos_token'] else 'no'} | {source} |")
    out.append("")
    seeds = (protocol.seeds if protocol is not None else None) or {}  # lm-eval's seed name -> seed
    if seeds:
        out += ["Seeds: " + ", ".join(f"{k} {v}" for k, v in seeds.items()) + ".", ""]
    for r in rows:
        if r["growth"]:
            g = r["growth"]
            out.append(f"- {r['task']}: grown until its gate was decided: the first {r['limit']} items, then "
                       f"{g.blocks} block(s) of {g.step} from a permutation of the rest seeded {g.seed}.")
        if data_note := (r["data"].note if r["data"] else None):
            out.append(f"- {r['task']}: {' '.join(str(data_note).split())}")
    if out[-1] != "":
        out.append("")
    return out


def _operating_point(points: list[BenchPoint], bench: BenchRun) -> str | None:
    """The load this checkpoint was measured to sustain: the sweep's knee, else the highest load
    with successful requests."""
    ok = [p for p in points if p.successes]
    if not ok:
        return None
    knee = bench.knee.knee if bench.knee is not None else None
    chosen = next((p for p in ok if knee is not None and knee in (p.concurrency, p.rate)), None)
    why = "the knee of the throughput curve"
    if chosen is None:
        chosen = max(ok, key=lambda p: (p.concurrency or 0, p.rate or 0))
        why = "the highest load measured (no knee was searched)"
    load = load_kinds.kind(chosen.profile).text(chosen, "sentence")
    return (f"Operating point ({why}): {load}, {fmt(chosen.output_tok_s, missing=MISSING)} output tok/s, "
            f"TTFT p95 {fmt_ms(_quantiles(chosen.ttft, 'p95'), missing=MISSING)} ms, "
            f"ITL p95 {fmt_ms(_quantiles(chosen.itl, 'p95'), missing=MISSING)} ms.")


def _px(p: BenchPoint) -> tuple:
    return (p.profile, p.concurrency, p.rate, p.input_len, p.output_len)
