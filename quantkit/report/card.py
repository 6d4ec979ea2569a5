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
from ..evals.gates import GateVerdict
from .gather import Evidence
from .card_capacity import capacity_lines
from .render import fmt, fmt_bytes, fmt_ci, fmt_ms, fmt_pm, fmt_str

# The card's word for a measurement that is not stored (the report's tables print "—"); every
# number is formatted by render.py's formatters, so the card and the report write them alike.
MISSING = "missing"


def _quantiles(stats: dict[str, Any] | None, *keys: str) -> tuple[float | None, ...]:
    """The named quantiles of a stored latency's stats, None where the record lacks them."""
    return tuple((stats or {}).get(key) for key in keys)


def _metric_name(key: str) -> str:
    """lm-eval's "name,filter" as a readable name: "acc_norm", "exact_match (strict-match)"."""
    name, _, filt = key.partition(",")
    return name if filt in ("", "none") else f"{name} ({filt})"


def _bits(convert: dict[str, Any] | None) -> int | None:
    """The checkpoint's weight bits: what its quantization config says, else what its scheme's
    name spells (W4A16, FP8_DYNAMIC), else its method's registered bits (methods.py), so a method
    whose scheme's name does not spell them still gets its bit tag."""
    if not convert:
        return None
    qc = convert.get("quantization_config") or {}
    for group in (qc.get("config_groups") or {}).values():
        bits = ((group or {}).get("weights") or {}).get("num_bits")
        if bits:
            return int(bits)
    if qc.get("bits"):
        return int(qc["bits"])
    m = re.match(r"w(\d+)", str(convert.get("scheme", "")).lower())
    if m:
        return int(m.group(1))
    if "fp8" in str(convert.get("scheme", "")).lower():
        return 8
    method = METHODS.get(convert.get("method"))
    return method.weight_bits if method else None


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def base_model_of(convert: dict[str, Any] | None, override: str | None = None) -> str | None:
    """The Hub id of the model this checkpoint was made from, when it is known to be one: the
    given one (`--base-model`); a Hub reference itself; a built-in alias's release; a local folder's
    own naming of it (its config's `_name_or_path`, or a Hub cache folder `models--org--name`)."""
    if override:
        return override
    source = (convert or {}).get("source") or {}
    ref, kind = source.get("ref"), source.get("kind")
    if kind == "hub" and ref:
        return ref
    if kind == "builtin" and ref in BUILTIN_BASE:
        return BUILTIN_BASE[ref]
    if kind == "local" and source.get("path"):
        return _named_by_folder(Path(source["path"]))
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
    recovery = {t["task"]: t for t in (ev.recovery or {}).get("tasks", [])}
    baseline = {t["task"]: t for t in ((ev.baseline_eval.result or {}).get("tasks", []) if ev.baseline_eval else [])}
    for t in (ev.eval or {}).get("tasks", []):
        metric = t["primary_metric"]
        q = t["metrics"].get(metric) or {}
        b = (baseline.get(t["task"]) or {}).get("metrics", {}).get(metric) if ev.variant != "baseline" else None
        r = recovery.get(t["task"]) or {}
        rows.append({
            "task": t["task"], "metric": metric, "n_shot": t.get("n_shot"), "n_samples": t.get("n_samples"),
            "n_available": t.get("n_available"), "higher_is_better": t.get("higher_is_better", True),
            "quantized": q.get("value"), "quantized_stderr": q.get("stderr"),
            "baseline": (b or {}).get("value"), "baseline_stderr": (b or {}).get("stderr"),
            "recovery": r.get("recovery"), "recovery_stderr": r.get("recovery_stderr"),
            "recovery_low": r.get("recovery_low"), "recovery_high": r.get("recovery_high"),
            "method": r.get("method"), "n_items": r.get("n_items"),
            "independent_stderr": r.get("independent_stderr"),
            "version": t.get("version"), "chat_template": t.get("chat_template"),
            "add_bos_token": t.get("add_bos_token"), "data": t.get("data") or {}, "limit": t.get("limit"),
            "growth": t.get("growth"),
        })
    return rows


def _source_name(convert: dict[str, Any]) -> str:
    """The source as the card names it: an alias or Hub id as given, a local path by its name only
    (a card names no folder of the machine it was made on)."""
    source = convert.get("source") or {}
    ref = source.get("ref")
    if not ref:
        return MISSING
    return Path(ref).name if source.get("kind") in ("local", "gguf") else ref


def baseline_provenance(convert: dict[str, Any] | None, model: str | None) -> str | None:
    """What the baseline is in words, when it is not the original release (the demo's GGUF)."""
    source = (convert or {}).get("source") or {}
    ref = source.get("ref") if source.get("kind") == "builtin" else model
    return BUILTIN_PROVENANCE.get(ref) if ref else None


def _bench_points(store: Store, record: Record | None) -> list[dict[str, Any]]:
    if record is None:
        return []
    result = record.result or {}
    points = result.get("points")
    if not points and record.status != "done":
        points = store.points(record.id)  # a bench that stopped early keeps the points it stored
    return list(points or [])


def _serve_command(repo: str, ev: Evidence) -> tuple[list[str], str]:
    """`vllm serve REPO ...` with the tuned knobs when `quantkit tune` ran, else those its capacity or
    benchmark was measured with."""
    tune = ev.tune.result if ev.tune is not None else None
    if tune is not None and (tune.get("best") or {}).get("config") is not None:
        best = tune["best"]
        values = {k: v for k, v in best["config"].items() if k in KNOBS}
        extra = {k: v for k, v in best["config"].items() if k not in KNOBS}
        try:
            config = ServeConfig(**values, extra=extra)
            why = (f"tuned by `quantkit tune` ({best.get('label')}: {tune.get('best_reason') or 'best'}"
                   + (f", SLO {tune['slo']}" if tune.get("slo") else "") + ")")
            return config.to_args(mask=True), why
        except ValueError:
            pass
    for kind, why in (("capacity", "the configuration whose capacity was measured"),
                      ("bench", "the configuration that was benchmarked")):
        record = ev.stages.get(kind)
        result = record.result if record is not None and record.status == "done" and record.result else {}
        serve_config = (result.get("server") or {}).get("serve_config")
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

    convert = ev.convert or {}
    name = repo or ev.checkpoint.name
    base = base_model_of(ev.convert, base_model)
    method = convert.get("method") or ("none" if ev.variant == "baseline" else MISSING)
    scheme = convert.get("scheme")
    bits = _bits(ev.convert)
    quant_method = (convert.get("quantization_config") or {}).get("quant_method")
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
    mean = _mean_row(ev.recovery or {})
    if ev.variant != "baseline" and mean["recovery"] is not None:
        eval_results.append(EvalResult(
            task_type="text-generation", dataset_type="quantkit/mean-recovery", dataset_name="mean over accuracy tasks",
            metric_type="recovery", metric_value=round(mean["recovery"], 4),
            metric_name=f"mean recovery vs the baseline ({_interval_words(mean)})",
            metric_args={**_interval_args(mean), "gate": (ev.recovery or {}).get("verdict") or "no gates"},
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

    convert = ev.convert or {}
    out: list[str] = [f"# {name.split('/')[-1]}", ""]
    method, scheme = convert.get("method"), convert.get("scheme")
    base_link = f"[{base}](https://huggingface.co/{base})" if base else (
        f"`{_source_name(convert)}` (not a Hub model; base model unknown: `--base-model` names it)")
    if ev.convert:
        out.append(f"{method} ({scheme}) quantization of {base_link}, made with quantkit {__version__} "
                   f"({convert.get('backend') or MISSING} backend) and measured in vLLM.")
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
        calib = convert.get("calibration") or {}
        recipe = convert.get("recipe") or {}
        if calib:  # what the conversion used (the recipe's numbers may have been overridden)
            calib_text = (f"{calib.get('dataset', MISSING)}: {calib.get('num_samples', MISSING)} samples x "
                          f"{calib.get('seq_len', MISSING)} tokens ({calib.get('tokens', MISSING)} tokens), "
                          f"seed {calib.get('seed', MISSING)}")
        elif recipe.get("calibration"):
            calib_text = f"{MISSING} (the recipe names calibration data, the conversion record does not)"
        else:
            calib_text = "none (this method needs no calibration data)"
        hw = convert.get("hardware") or {}
        out += ["| | |", "|---|---|",
                f"| method | {method} ({convert.get('backend') or MISSING}) |",
                f"| scheme | {scheme or MISSING} |",
                f"| group size | {convert.get('group_size') if convert.get('group_size') is not None else 'none (per channel)'} |",
                f"| ignored layers | {', '.join(recipe.get('ignore') or []) or 'none'} |",
                f"| calibration | {calib_text} |",
                f"| source | `{_source_name(convert)}` ({(convert.get('source') or {}).get('fingerprint') or 'fingerprint missing'}) |",
                f"| quantized on | {hw.get('gpu') or hw.get('cpu') or MISSING} ({hw.get('cpu_count') or '?'} CPUs) "
                f"in {fmt(convert.get('wall_time_s'), missing=MISSING)} s |",
                f"| checkpoint size | {fmt_bytes(convert.get('size_bytes'), missing=MISSING)} |", ""]
        for note in convert.get("notes") or []:
            out.append(f"- {note}")
        if convert.get("notes"):
            out.append("")
        out += [f"quantkit recipe `{convert.get('recipe_name', MISSING)}` (hash {convert.get('recipe_hash', MISSING)}):", "",
                "```yaml", yaml.safe_dump(recipe, sort_keys=False).rstrip() if recipe else f"# {MISSING}", "```", ""]
    else:
        out += [f"No conversion record is stored for this checkpoint (method, scheme and calibration are {MISSING}).", ""]

    # accuracy
    out += ["## Accuracy", ""]
    provenance = baseline_provenance(ev.convert, ev.model)
    if not rows:
        out += [f"No eval is stored for this checkpoint: accuracy is {MISSING}.", ""]
    else:
        er = ev.eval or {}
        server = er.get("server") or {}
        versions = er.get("versions") or {}
        out.append(f"lm-eval {versions.get('lm_eval', MISSING)} (`local-completions`, token ids) against vLLM "
                   f"{server.get('vllm_version') or MISSING}. Recovery = quantized / baseline on the same items "
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
            if ev.variant != "baseline" and r["recovery"] is not None and not str(r.get("method") or "").startswith("paired"):
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
            gates = [GateVerdict.model_validate(g) for g in ev.recovery.get("gates", [])]
            if gates:
                out.append(f"Gates ({ev.gates_source}): **{ev.recovery.get('verdict') or 'none'}**. A gate passes when "
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
        br = ev.bench.result or {}
        server = br.get("server") or {}
        hw = br.get("hardware") or {}
        wl = br.get("workload") or {}
        device = hw.get("gpu") or hw.get("cpu") or MISSING
        count = f"{hw.get('gpu_count')} x " if hw.get("gpu") and hw.get("gpu_count") else ""
        out.append(f"quantkit's streaming load generator against vLLM {server.get('vllm_version') or MISSING} on "
                   f"{count}{device}" + (f" ({hw['cpu_count']} CPUs)" if not hw.get('gpu') and hw.get('cpu_count') else "")
                   + f"; prompts of {wl.get('input_len') or MISSING} tokens, {wl.get('output_len') or MISSING} output "
                   f"tokens, server flags `{' '.join(args_of(server.get('serve_config'))) or 'defaults'}`."
                   + ("" if ev.bench.status == "done" and br.get("complete", True) else
                      f" The benchmark stopped early ({ev.bench.status}: {ev.bench.error or 'no reason stored'}); "
                      "these are the points it finished."))
        base_points = {(_px(p)): p for p in _bench_points(store, ev.baseline_bench)} if ev.variant != "baseline" else {}
        head = "| load | requests (failed) | output tok/s |"
        if base_points:
            head += " baseline output tok/s |"
        head += " TTFT p50 / p95 (ms) | ITL p50 / p95 (ms) | E2E p50 (s) |"
        out += ["", head, "|" + "---|" * (head.count("|") - 1)]
        for p in points:
            load = f"concurrency {p.get('concurrency')}" if p.get("profile") == "concurrency" else f"rate {p.get('rate')}/s"
            cells = [load, f"{p.get('num_requests', MISSING)} ({p.get('failures', MISSING)})",
                     fmt(p.get("output_tok_s"), missing=MISSING)]
            if base_points:
                bp = base_points.get(_px(p))
                cells.append(fmt(bp.get("output_tok_s"), missing=MISSING) if bp else MISSING)
            cells += [fmt_ms(_quantiles(p.get("ttft"), "p50", "p95"), missing=MISSING),
                      fmt_ms(_quantiles(p.get("itl"), "p50", "p95"), missing=MISSING),
                      fmt((p.get("e2e") or {}).get("p50"), missing=MISSING)]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        operating = _operating_point(points, br)
        if operating:
            out += [operating, ""]
        if server.get("quant_lines"):
            out += ["Kernels vLLM chose: " + "; ".join(f"`{line}`" for line in server["quant_lines"]), ""]

    out += capacity_lines(store, ev)

    # how to serve
    args, why = _serve_command(name, ev)
    out += ["## How to serve", "", "```bash", " ".join(["vllm serve", name, *args]), "```", "",
            f"Flags: {why}.", ""]

    # provenance
    out += ["## Provenance", ""]
    versions = dict((convert.get("versions") or {}))
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
    low, high = row.get("recovery_low"), row.get("recovery_high")
    if low is None or high is None:
        return "no interval"
    return f"95% interval {low:.4f} to {high:.4f}, {row.get('method') or 'method ' + MISSING}"


def _interval_args(row: dict[str, Any]) -> dict[str, Any]:
    return {"low": _round(row.get("recovery_low")), "high": _round(row.get("recovery_high")), "confidence": 0.95,
            "method": row.get("method"), "items": row.get("n_items")}


def _mean_row(recovery: dict[str, Any]) -> dict[str, Any]:
    """The average's figures in a task row's keys."""
    items = [t.get("n_items") for t in recovery.get("tasks", []) if t.get("higher_is_better", True)]
    return {"recovery": recovery.get("mean_recovery"), "recovery_stderr": recovery.get("mean_recovery_stderr"),
            "recovery_low": recovery.get("mean_recovery_low"), "recovery_high": recovery.get("mean_recovery_high"),
            "method": recovery.get("mean_method"), "independent_stderr": recovery.get("mean_independent_stderr"),
            "n_items": sum(items) if items and all(items) else None}


def _protocol(ev: Evidence, rows: list[dict[str, Any]]) -> list[str]:
    """The evaluation protocol, per task: what a reader needs to repeat the numbers."""
    er = ev.eval or {}
    protocol = er.get("protocol") or {}
    out = ["### Evaluation protocol", "",
           "| task | lm-eval task version | n-shot | items (limit) | chat template | BOS | data |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        data = r["data"]
        source = " ".join(str(x) for x in (data.get("source"), data.get("template")) if x) or MISSING
        limit = "all" if r["limit"] is None else r["limit"]
        out.append(f"| {r['task']} | {fmt_str(r['version'], missing=MISSING)} | "
                   f"{fmt_str(r['n_shot'], missing=MISSING)} | {fmt_str(r['n_samples'], missing=MISSING)} ({limit}) | "
                   f"{'yes' if r['chat_template'] else 'no'} | {'yes' if r['add_bos_token'] else 'no'} | {source} |")
    out.append("")
    seeds = protocol.get("seeds") or {}
    if seeds:
        out += ["Seeds: " + ", ".join(f"{k} {v}" for k, v in seeds.items()) + ".", ""]
    for r in rows:
        if r["growth"]:
            g = r["growth"]
            out.append(f"- {r['task']}: grown until its gate was decided: the first {r['limit']} items, then "
                       f"{g.get('blocks')} block(s) of {g.get('step')} from a permutation of the rest seeded {g.get('seed')}.")
        if data_note := r["data"].get("note"):
            out.append(f"- {r['task']}: {' '.join(str(data_note).split())}")
    if out[-1] != "":
        out.append("")
    return out


def _operating_point(points: list[dict[str, Any]], bench: dict[str, Any]) -> str | None:
    """The load this checkpoint was measured to sustain: the sweep's knee, else the highest load
    with successful requests."""
    ok = [p for p in points if p.get("successes")]
    if not ok:
        return None
    knee = (bench.get("knee") or {}).get("knee")
    chosen = next((p for p in ok if knee is not None and knee in (p.get("concurrency"), p.get("rate"))), None)
    why = "the knee of the throughput curve"
    if chosen is None:
        chosen = max(ok, key=lambda p: (p.get("concurrency") or 0, p.get("rate") or 0))
        why = "the highest load measured (no knee was searched)"
    load = (f"concurrency {chosen.get('concurrency')}" if chosen.get("profile") == "concurrency"
            else f"{chosen.get('rate')} requests/s")
    return (f"Operating point ({why}): {load}, {fmt(chosen.get('output_tok_s'), missing=MISSING)} output tok/s, "
            f"TTFT p95 {fmt_ms(_quantiles(chosen.get('ttft'), 'p95'), missing=MISSING)} ms, "
            f"ITL p95 {fmt_ms(_quantiles(chosen.get('itl'), 'p95'), missing=MISSING)} ms.")


def _px(p: dict[str, Any]) -> tuple:
    return (p.get("profile"), p.get("concurrency"), p.get("rate"), p.get("input_len"), p.get("output_len"))
