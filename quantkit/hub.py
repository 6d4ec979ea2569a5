"""`quantkit push` / `quantkit card`: a model card of stored measurements, and the upload to the Hub.

What counts as validated (the push gate)
----------------------------------------
The gates are, in this order: those given to `push` on the command line (`--min-recovery`,
`--min-task-recovery`, `--gate TASK=MIN`); else the `gates:` of the recipe whose `quantkit run`
stored the checkpoint's eval (they travel with the eval record); else a mean recovery of 0.95. A
checkpoint folder DIR is found in the store by its records: a convert record whose
result.output_dir is DIR, or bench/eval records whose params.checkpoint is DIR (paths compared
after resolving). For each stage the newest finished record decides: a newer failed eval is not
hidden by an older success (stricter than `quantkit compare`, which shows the newest success,
because a publish gate should not rest on a result the latest attempt could not repeat). DIR is
validated when
  1. its newest eval record is `done`,
  2. that eval started after the newest conversion of DIR finished (a re-conversion rewrites the
     weights in the same folder, so an older eval measured other weights), and
  3. for a quantized checkpoint (any variant but the model's `baseline`): the model's baseline
     has a `done` eval on the same protocol, and the recovery (quantized / baseline, computed by
     compare/evals_core) passes every gate.
A quantized checkpoint without a stored baseline eval is NOT validated: its gates cannot be
checked, and a card saying "validated" would then claim something nobody measured. A benchmark is
not required (the gates are about accuracy); a missing one is shown as missing in the card.
`push` refuses anything else with GateFailed (exit 3, one line). `--force` pushes anyway and the
card says at the top, in plain words, that the checkpoint was not validated and why.

The card
--------
Built with huggingface_hub's ModelCard / ModelCardData / EvalResult (the YAML header is the
client's, never written by hand). Every number comes from the store records found above; the
card has no timestamps of its own, so the same store gives a byte-identical card and a re-push
of an unchanged checkpoint is a no-op. A measurement that is not stored is written "missing".

The upload
----------
create_repo(exist_ok=True), then ONE create_commit with every file (quantkit's own result folders
quantkit-bench/ and quantkit-eval/ stay local: their numbers are in the card, and they carry
local paths, server logs and per-item samples; quantkit.json is included). create_commit is
used rather than upload_folder because, with hf_xet installed, upload_folder may split a folder
into several commits; a single commit is atomic: an upload that dies before it leaves the repo
as it was. Files whose remote hash equals the local one are skipped by the client, and a commit
with nothing left is not made; `push` reports "nothing changed" then.
The token comes from huggingface_hub's usual sources (HF_TOKEN, the stored login); quantkit
never prints, logs or stores it, and scrubs it from any error text it passes on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__
from .errors import BackendError, GateFailed, SetupError, UsageError
from .store import Record, Store

DEFAULT_MIN_RECOVERY = 0.95
# quantkit's result folders: their numbers are in the card; the files hold local paths and logs
LOCAL_ONLY_DIRS = {"quantkit-bench", "quantkit-eval", ".cache", ".git"}
# Hub ids of quantkit's built-in aliases (models.BUILTIN_MODELS ship a GGUF of these models)
BUILTIN_BASE = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}
MISSING = "missing"


# ----------------------------------------------------------------------------------------------
# What the store knows about a checkpoint


@dataclass
class Evidence:
    checkpoint: Path
    model: str | None = None
    variant: str | None = None
    stages: dict[str, Record] = field(default_factory=dict)  # newest record per kind for DIR
    baseline_eval: Record | None = None  # newest done baseline eval of the same model
    baseline_bench: Record | None = None
    convert: dict[str, Any] | None = None  # the convert record's result, else DIR/quantkit.json
    recovery: dict[str, Any] | None = None  # evals_core.RecoveryReport as a dict
    gates: dict[str, Any] = field(default_factory=dict)
    gates_source: str = "given on the command line"
    validated: bool = False
    reason: str = ""  # why not validated (or the verdict when validated)

    @property
    def eval(self) -> dict[str, Any] | None:
        r = self.stages.get("eval")
        return r.result if r is not None and r.status == "done" else None

    @property
    def bench(self) -> Record | None:
        return self.stages.get("bench")


def _norm(path: str | Path | None) -> Path | None:
    if not path:
        return None
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return None


def _record_dir(r: Record) -> Path | None:
    if r.kind == "convert":
        return _norm((r.result or {}).get("output_dir"))
    return _norm(r.params.get("checkpoint"))


def _newest(records: list[Record]) -> Record | None:
    # the newest record of a stage decides (a later failed eval is not hidden by an older success),
    # except that a later 'running' row of a live or killed process does not replace a finished one
    finished = [r for r in records if r.status != "running"]
    return (finished or records)[-1] if records else None


def gather_evidence(store: Store, checkpoint: Path, gates: dict[str, Any] | None) -> Evidence:
    """What the store holds for CHECKPOINT and the verdict. `gates` None: the recipe's gates stored
    with the eval, else mean recovery >= DEFAULT_MIN_RECOVERY."""
    from .compare import _variant

    checkpoint = _norm(checkpoint) or Path(checkpoint)
    ev = Evidence(checkpoint=checkpoint)
    mine = [r for r in store.records() if _record_dir(r) == checkpoint]
    if mine:
        ev.model, ev.variant = mine[-1].model, mine[-1].variant
        mine = [r for r in mine if r.model == ev.model]
        for kind in ("convert", "bench", "eval"):
            newest = _newest([r for r in mine if r.kind == kind])
            if newest is not None:
                ev.stages[kind] = newest
    if gates is None:
        eval_rec = ev.stages.get("eval")
        stored = (eval_rec.params or {}).get("gates") if eval_rec is not None else None
        if stored and any(stored.values()):
            gates, ev.gates_source = stored, "of the recipe that ran the eval"
        else:
            gates, ev.gates_source = {"min_recovery": DEFAULT_MIN_RECOVERY}, "by default"
    ev.gates = {k: v for k, v in gates.items() if v}
    if mine:
        base = [r for r in store.records(model=ev.model, status="done") if r.variant == "baseline"]
        ev.baseline_eval = next((r for r in reversed(base) if r.kind == "eval"), None)
        ev.baseline_bench = next((r for r in reversed(base) if r.kind == "bench"), None)
    convert = ev.stages.get("convert")
    if convert is not None and convert.status == "done" and convert.result:
        ev.convert = convert.result
    else:
        ev.convert = _read_convert_file(checkpoint)
    _decide(store, ev, _variant)
    return ev


def _read_convert_file(checkpoint: Path) -> dict[str, Any] | None:
    path = checkpoint / "quantkit.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("kind") == "quantkit.convert" else None


def _decide(store: Store, ev: Evidence, variant_fn) -> None:
    gate_text = _gates_text(ev.gates)
    if not ev.stages:
        ev.reason = f"no stored runs for {ev.checkpoint} (quantkit run stores them)"
        return
    eval_rec = ev.stages.get("eval")
    if eval_rec is None:
        ev.reason = f"no stored eval for {ev.checkpoint}"
        return
    if eval_rec.status != "done":
        ev.reason = f"its latest eval is {eval_rec.status}: {eval_rec.error or 'no reason stored'}"
        return
    convert = ev.stages.get("convert")
    if convert is not None and convert.status == "done" and convert.finished_at and eval_rec.started_at < convert.finished_at:
        ev.reason = (f"its eval ({eval_rec.started_at}) predates the latest conversion of this folder "
                     f"({convert.finished_at}): the weights were rewritten since; evaluate them again")
        return
    if ev.variant == "baseline":
        ev.validated, ev.reason = True, "the unquantized baseline: evaluated (no recovery gate applies)"
        return
    if ev.baseline_eval is None:
        ev.reason = f"no stored baseline eval for model '{ev.model}', so recovery gates ({gate_text}) cannot be checked"
        return
    stages = {k: r for k, r in ev.stages.items()}
    v = variant_fn(store, ev.variant, stages, ev.baseline_eval.result, ev.gates or None)
    if v.recovery is None:
        ev.reason = f"recovery against the baseline cannot be computed: {v.error or 'unknown reason'}"
        return
    ev.recovery = v.recovery
    failures = [g for g in v.recovery.get("gates", []) if not g.get("passed")]
    if failures:
        ev.reason = "gate failed: " + "; ".join(_describe_gate(g) for g in failures)
        return
    if not v.recovery.get("gates"):
        ev.reason = "no gate was given (--min-recovery / --min-task-recovery / --gate)"
        return
    ev.validated = True
    ev.reason = f"passed {gate_text}"


def _describe_gate(g: dict[str, Any]) -> str:
    what = g.get("task") or "average"
    if g.get("value") is None:
        return f"{what}: recovery undefined against min {g['threshold']:g}"
    return f"{what} recovery {g['value']:.4f} < {g['threshold']:g}"


def _gates_text(gates: dict[str, Any]) -> str:
    parts = []
    if gates.get("min_recovery"):
        parts.append(f"mean recovery >= {gates['min_recovery']:g}")
    if gates.get("min_task_recovery"):
        parts.append(f"every task's recovery >= {gates['min_task_recovery']:g}")
    for task, value in (gates.get("tasks") or {}).items():
        parts.append(f"{task} recovery >= {value:g}")
    return ", ".join(parts) or "no gates"


# ----------------------------------------------------------------------------------------------
# The card


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return MISSING
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pm(value: float | None, stderr: float | None, digits: int = 4) -> str:
    if value is None:
        return MISSING
    return f"{value:.{digits}f}" + (f" ± {stderr:.{digits}f}" if stderr is not None else "")


def _ms(stats: dict[str, Any] | None, key: str) -> str:
    if not stats or stats.get(key) is None:
        return MISSING
    return f"{stats[key] * 1000:.1f}"


def _metric_name(key: str) -> str:
    """lm-eval's "name,filter" as a readable name: "acc_norm", "exact_match (strict-match)"."""
    name, _, filt = key.partition(",")
    return name if filt in ("", "none") else f"{name} ({filt})"


def _size(n: int | None) -> str:
    return MISSING if n is None else f"{n / 1e6:.1f} MB ({n} bytes)"


def _bits(convert: dict[str, Any] | None) -> int | None:
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
    return 8 if "fp8" in str(convert.get("scheme", "")).lower() else None


def base_model_of(convert: dict[str, Any] | None, override: str | None = None) -> str | None:
    """The Hub id of the model this checkpoint was made from, when it is known to be one."""
    if override:
        return override
    source = (convert or {}).get("source") or {}
    ref, kind = source.get("ref"), source.get("kind")
    if kind == "hub" and ref:
        return ref
    if kind == "builtin" and ref in BUILTIN_BASE:
        return BUILTIN_BASE[ref]
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
        })
    return rows


def _bench_points(store: Store, record: Record | None) -> list[dict[str, Any]]:
    if record is None:
        return []
    result = record.result or {}
    points = result.get("points")
    if not points and record.status != "done":
        points = store.points(record.id)  # a bench that stopped early keeps the points it stored
    return list(points or [])


def _serve_command(repo: str, ev: Evidence) -> tuple[list[str], str]:
    """`vllm serve REPO ...` with the tuned knobs when `quantkit tune` ran, else the benchmarked ones."""
    from .engine import ServeConfig, _KNOBS

    tune = _newest_tune(ev.checkpoint)
    if tune is not None and (tune.get("best") or {}).get("config") is not None:
        best = tune["best"]
        values = {k: v for k, v in best["config"].items() if k in _KNOBS}
        extra = {k: v for k, v in best["config"].items() if k not in _KNOBS}
        try:
            config = ServeConfig(**values, extra=extra)
            why = (f"tuned by `quantkit tune` ({best.get('label')}: {tune.get('best_reason') or 'best'}"
                   + (f", SLO {tune['slo']}" if tune.get("slo") else "") + ")")
            return config.to_args(), why
        except ValueError:
            pass
    bench = ev.bench.result if ev.bench is not None and ev.bench.result else None
    serve_config = ((bench or {}).get("server") or {}).get("serve_config")
    if serve_config:
        try:
            return ServeConfig.model_validate(serve_config).to_args(), "the configuration that was benchmarked"
        except ValueError:
            pass
    return [], "vLLM's defaults (no benchmark or tune result is stored)"


def _newest_tune(checkpoint: Path) -> dict[str, Any] | None:
    folder = checkpoint / "quantkit-bench"
    for path in sorted(folder.glob("tune-*.json"), reverse=True) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("kind") == "quantkit.tune":
            return data
    return None


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
        eval_results.append(EvalResult(
            task_type="text-generation", dataset_type=row["task"], dataset_name=row["task"],
            metric_type=metric, metric_value=row["quantized"], metric_name=metric,
            dataset_args={"num_few_shot": row["n_shot"]} if row["n_shot"] is not None else None,
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
        f"`{(convert.get('source') or {}).get('ref') or MISSING}` (not a Hub model; base model unknown)")
    if ev.convert:
        out.append(f"{method} ({scheme}) quantization of {base_link}, made with quantkit {__version__} "
                   f"({convert.get('backend') or MISSING} backend) and measured in vLLM.")
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
                f"| source | `{(convert.get('source') or {}).get('ref') or MISSING}` ({(convert.get('source') or {}).get('fingerprint') or 'fingerprint missing'}) |",
                f"| quantized on | {hw.get('gpu') or hw.get('cpu') or MISSING} ({hw.get('cpu_count') or '?'} CPUs) in {_fmt(convert.get('wall_time_s'), 1)} s |",
                f"| checkpoint size | {_size(convert.get('size_bytes'))} |", ""]
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
    if not rows:
        out += [f"No eval is stored for this checkpoint: accuracy is {MISSING}.", ""]
    else:
        er = ev.eval or {}
        server = er.get("server") or {}
        versions = er.get("versions") or {}
        out.append(f"lm-eval {versions.get('lm_eval', MISSING)} (`local-completions`, token ids, no chat template unless "
                   f"noted) against vLLM {server.get('vllm_version') or MISSING}; recovery = quantized / baseline on the "
                   "same protocol (baseline / quantized for perplexities), ± one standard error.")
        out += ["", "| task | metric | n-shot | items | baseline | quantized | recovery |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            items = f"{r['n_samples']} of {r['n_available']}" if r["n_samples"] is not None else MISSING
            rec = _pm(r["recovery"], r["recovery_stderr"], 3) if ev.variant != "baseline" else "n/a (baseline)"
            base_cell = _pm(r["baseline"], r["baseline_stderr"]) if ev.variant != "baseline" else "n/a"
            out.append(f"| {r['task']} | {_metric_name(r['metric'])} | {_fmt(r['n_shot'])} | {items} | "
                       f"{base_cell} | {_pm(r['quantized'], r['quantized_stderr'])} | {rec} |")
        out.append("")
        if ev.recovery:
            out.append(f"Mean recovery over accuracy tasks: "
                       f"{_pm(ev.recovery.get('mean_recovery'), ev.recovery.get('mean_recovery_stderr'), 3)}.")
            for g in ev.recovery.get("gates", []):
                out.append(f"- gate {g['gate']}{' ' + g['task'] if g.get('task') else ''}: "
                           f"{_fmt(g.get('value'))} vs min {g['threshold']:g}: {'passed' if g['passed'] else 'FAILED'}")
            out.append("")
        elif ev.variant != "baseline":
            out += [f"Recovery is {MISSING}: no baseline eval on the same protocol is stored.", ""]

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
                   f"tokens, server flags `{' '.join(_server_flags(server)) or 'defaults'}`."
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
            cells = [load, f"{p.get('num_requests', MISSING)} ({p.get('failures', MISSING)})", _fmt(p.get("output_tok_s"), 1)]
            if base_points:
                bp = base_points.get(_px(p))
                cells.append(_fmt(bp.get("output_tok_s"), 1) if bp else MISSING)
            cells += [f"{_ms(p.get('ttft'), 'p50')} / {_ms(p.get('ttft'), 'p95')}",
                      f"{_ms(p.get('itl'), 'p50')} / {_ms(p.get('itl'), 'p95')}",
                      _fmt((p.get("e2e") or {}).get("p50"), 2)]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        if server.get("quant_lines"):
            out += ["Kernels vLLM chose: " + "; ".join(f"`{line}`" for line in server["quant_lines"]), ""]

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


def _px(p: dict[str, Any]) -> tuple:
    return (p.get("profile"), p.get("concurrency"), p.get("rate"), p.get("input_len"), p.get("output_len"))


def _server_flags(server: dict[str, Any]) -> list[str]:
    from .engine import ServeConfig

    try:
        return ServeConfig.model_validate(server.get("serve_config") or {}).to_args()
    except ValueError:
        return []


# ----------------------------------------------------------------------------------------------
# Commands


def _checkpoint(model_dir: str | Path) -> Path:
    path = Path(model_dir).expanduser()
    if not path.is_dir():
        raise UsageError(f"{path} is not a folder")
    if not (path / "config.json").is_file():
        raise UsageError(f"{path} is not a model checkpoint folder (no config.json)")
    return path.resolve()


def card(model_dir: str | Path, output: str | Path | None = None, *, repo: str | None = None,
         base_model: str | None = None, gates: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the card for review; it says whether the checkpoint would pass `push`'s gates."""
    path = _checkpoint(model_dir)
    with Store() as store:
        ev = gather_evidence(store, path, gates)
        model_card = build_card(store, ev, repo, base_model=base_model)
    out = Path(output) if output else path / "README.md"
    out.write_text(str(model_card))
    return {"path": str(out), "validated": ev.validated, "reason": ev.reason, "model": ev.model, "variant": ev.variant}


def _commit_files(checkpoint: Path) -> list[tuple[str, Path]]:
    files = []
    for p in sorted(checkpoint.rglob("*")):
        rel = p.relative_to(checkpoint)
        if not p.is_file() or rel.parts[0] in LOCAL_ONLY_DIRS or rel.as_posix() == "README.md":
            continue
        if p.name.endswith((".tmp", ".lock")) or p.name.startswith(".~"):
            continue  # a half-written file of a running process
        files.append((rel.as_posix(), p))
    return files


def push(model_dir: str | Path, repo: str, *, private: bool = False, revision: str | None = None,
         create_pr: bool = False, commit_message: str | None = None, force: bool = False,
         base_model: str | None = None, gates: dict[str, Any] | None = None) -> dict[str, Any]:
    path = _checkpoint(model_dir)
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo or ""):
        raise UsageError(f"--repo must be ORG/NAME (got '{repo}')")
    with Store() as store:
        ev = gather_evidence(store, path, gates)
        if not ev.validated and not force:
            raise GateFailed(f"not pushing {path.name}: not validated ({ev.reason}); --force pushes it with a card that says so")
        model_card = build_card(store, ev, repo, base_model=base_model, forced=not ev.validated)
    files = _commit_files(path)
    if not any(name.endswith((".safetensors", ".bin")) for name, _ in files):
        raise UsageError(f"{path} has no weight files to push")

    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise SetupError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (a token with write access)")
    try:
        result = _upload(path, repo, files, str(model_card).encode(), token=token, private=private,
                         revision=revision, create_pr=create_pr,
                         commit_message=commit_message or f"quantkit {__version__}: {ev.convert.get('method') if ev.convert else path.name} checkpoint with measured model card")
    except BaseException as exc:  # noqa: BLE001 - mapped to one line below, re-raised otherwise
        mapped = _map_error(exc, repo, token)
        if mapped is None:
            raise
        raise mapped from None
    return {**result, "validated": ev.validated, "reason": ev.reason, "files": len(files) + 1,
            "bytes": sum(p.stat().st_size for _, p in files)}


def _upload(path: Path, repo: str, files: list[tuple[str, Path]], readme: bytes, *, token: str, private: bool,
            revision: str | None, create_pr: bool, commit_message: str) -> dict[str, Any]:
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import RevisionNotFoundError

    from .console import info

    api = HfApi(token=token)
    url = api.create_repo(repo, private=True if private else None, exist_ok=True, repo_type="model")
    if revision and revision != "main" and not create_pr:
        api.create_branch(repo, branch=revision, exist_ok=True)
    target = revision or "main"
    try:
        head = api.repo_info(repo, revision=target).sha
    except RevisionNotFoundError:
        head = None
    ops = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(p)) for name, p in files]
    ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=readme))
    info(f"pushing {len(ops)} files of {path.name} to {repo} ({target}) in one commit")
    commit = api.create_commit(repo, ops, commit_message=commit_message, revision=revision, create_pr=create_pr)
    # The client drops files whose remote hash equals the local one and, when none is left,
    # makes no commit and returns the branch head: the head did not move, nothing changed.
    changed = commit.oid != head if not create_pr else bool(commit.pr_url)
    return {"repo": repo, "url": str(url), "revision": target, "commit": commit.oid, "changed": changed,
            "commit_url": commit.commit_url if changed else None, "pr_url": commit.pr_url}


def _scrub(text: str, token: str | None) -> str:
    text = " ".join(str(text).split())
    if token:
        text = text.replace(token, "***")
    return re.sub(r"hf_[A-Za-z0-9]{8,}", "***", text)


def _map_error(exc: BaseException, repo: str, token: str | None) -> Exception | None:
    import httpx
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        code = exc.response.status_code
        if code in (401, 403):
            return BackendError(
                f"the Hub refused the token (HTTP {code}): it is invalid, expired, or has no write access to "
                f"'{repo.split('/')[0]}'; set HF_TOKEN or run `hf auth login` with a write token")
        server = exc.server_message or ""
        return BackendError(f"the Hub answered HTTP {code} for {exc.response.request.method} "
                            f"{exc.response.request.url.path}: {_scrub(server, token)[:300] or 'no message'}; "
                            "nothing was published")
    transport = (httpx.TransportError, ConnectionError, TimeoutError)
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, transport):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return BackendError(
            f"network error while pushing to {repo} ({type(cause).__name__}: {_scrub(str(cause), token)[:200]}): "
            "the commit did not complete, so nothing was published; it is safe to re-run")
    if isinstance(exc, ValueError) and "metadata" in str(exc):
        return BackendError(f"the Hub rejected the card's metadata: {_scrub(str(exc), token)[:300]}")
    return None
