"""The model card's body and metadata, from one checkpoint's stored evidence only.

Built with huggingface_hub's ModelCard / ModelCardData / EvalResult (the YAML header is the
client's, never written by hand). Every number comes from the store records in the Evidence, as the
report has them: the checkpoint's and its baseline's Row, TaskScore and Point (report/build.py),
formatted and tabled by render.py. The card has no timestamps of its own, so the same store gives a
byte-identical card and a re-push of an unchanged checkpoint is a no-op. A measurement that is not
stored is written "missing".
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..checkpoint import ConvertRecord
from ..evals.results import EvalRun, TaskResult
from ..labels import BASELINE
from ..measure.stats import load_kinds
from ..measure.capacity.bench import BenchRun, BenchWorkload
from ..measure.capacity.live import CapacityResult
from ..measure.tune.study import TuneResult
from ..methods import METHODS
from ..models import BUILTIN_BASE, BUILTIN_PROVENANCE
from ..errors import UsageError
from ..safeload import read_config
from ..serve.config import KNOBS, ServeConfig
from ..serve.server import ServerInfo
from ..store import MEASURED_KINDS, REPORTED_KINDS, Store
from . import records
from .build import Point, Row, TaskScore, Variant, points_of, row_of, top_point
from .card_capacity import capacity_lines
from .fidelity import CAPTION as FIDELITY_CAPTION, TITLE as FIDELITY_TITLE, fidelity_table
from .gather import Evidence, variant_of
from .render import Md, fmt, fmt_bytes, fmt_ms, fmt_pm, markdown_table, md_code, md_escape, md_fence
from .text import fmt_ci, fmt_str

# The card's provenance line starts so: a README.md holding it is a card quantkit wrote (hub.card
# replaces one without --force)
CARD_MARK = "Card written by quantkit"

# The card's word for a measurement that is not stored (the report's tables print "—"); every
# number is formatted by render.py's formatters, so the card and the report write them alike.
MISSING = "missing"


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
        named = read_config(folder).get("_name_or_path")
    except UsageError:  # no config, or a broken one: the folder's own name may still say
        named = None
    if isinstance(named, str) and HUB_ID.fullmatch(named) and not Path(named).expanduser().exists():
        return named
    for part in reversed(folder.parts):  # ~/.cache/huggingface/hub/models--org--name/snapshots/<sha>
        if part.startswith("models--") and part.count("--") >= 2:
            return part.removeprefix("models--").replace("--", "/", 1)
    return None


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
            why = Md("tuned by " + md_code("quantkit tune") + " " + md_escape(
                f"({best.label}: {tune.best_reason or 'best'}" + (f", SLO {tune.slo}" if tune.slo else "") + ")"))
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


@dataclass
class CardFigures:
    """This checkpoint's and its baseline's stored results as gather reads them (Variant), and what
    the report's build makes of them (Row: task scores, mean recovery, kernels; build.points_of: load
    points): the card shows the report's figures, in the report's formats."""

    variant: Variant
    row: Row
    baseline: Variant | None = None  # beside a quantized checkpoint: its eval and bench
    baseline_row: Row | None = None


def card_figures(store: Store, ev: Evidence) -> CardFigures:
    v = variant_of(store, ev.variant or ev.checkpoint.name, ev.stages, None, None)
    v.recovery = ev.recovery  # against the baseline and gates push decided on (hub.gather_evidence)
    out = CardFigures(variant=v, row=row_of(v))
    stored = {kind: r for kind, r in (("eval", ev.baseline_eval), ("bench", ev.baseline_bench)) if r is not None}
    if ev.variant != BASELINE and stored:
        out.baseline = variant_of(store, BASELINE, stored, None, None)
        out.baseline_row = row_of(out.baseline)
    return out


def build_card(store: Store, ev: Evidence, repo: str | None, *, base_model: str | None = None,
               forced: bool = False):
    """The ModelCard for the checkpoint of `ev` (nothing is measured or invented here)."""
    from huggingface_hub import ModelCard, ModelCardData

    convert = ev.convert or records.Convert()
    name = repo or ev.checkpoint.name
    base = base_model_of(ev.convert, base_model)
    method = convert.method or ("none" if ev.variant == BASELINE else MISSING)
    scheme = convert.scheme
    bits = _bits(ev.convert)
    quant_method = convert.quantization_config.quant_method if convert.quantization_config is not None else None
    tags = [t for t in (method if method not in (MISSING, "none") else None,
                        str(scheme).lower() if scheme else None,
                        f"{bits}-bit" if bits else None,
                        "compressed-tensors" if quant_method in (None, "compressed-tensors") and ev.convert else quant_method,
                        "vllm", "quantkit") if t]
    fig = card_figures(store, ev)
    data = ModelCardData(
        base_model=base, library_name="transformers", pipeline_tag="text-generation", tags=tags,
        model_name=name, eval_results=_eval_results(ev, fig) or None,
        **({"base_model_relation": "quantized"} if base and ev.convert else {}),
    )
    body = [*_header(ev, name, base, forced), *_what_was_done(ev), *_accuracy(ev, fig), *_fidelity(fig),
            *_throughput(ev, fig),
            *capacity_lines(store, ev, fig.row.capacity), *_how_to_serve(name, ev), *_provenance(ev)]
    template = "---\n{{ card_data }}\n---\n\n{{ body }}\n"
    return ModelCard.from_template(data, template_str=template, body="\n".join(body).rstrip() + "\n")


def _scored(fig: CardFigures) -> list[tuple[TaskResult, TaskScore | None]]:
    """Each evaluated task with its score as the report has it (None: no score stored)."""
    scores = {s.task: s for s in fig.row.scores}
    return [(t, scores.get(t.task)) for t in (fig.variant.eval.tasks if fig.variant.eval is not None else None) or []]


def _mean(row: Row) -> TaskScore | None:
    """The mean recovery over accuracy tasks as a score of its own (None without one): the interval
    helpers read a task's and the mean's alike."""
    if row.recovery is None:
        return None
    items = [s.n_items for s in row.scores if s.higher_is_better and s.recovery is not None]
    return TaskScore(task="mean", metric="recovery", value=row.recovery, recovery=row.recovery,
                     recovery_low=row.recovery_low, recovery_high=row.recovery_high,
                     recovery_method=row.recovery_method, n_items=sum(items) if items and all(items) else None)


def _eval_results(ev: Evidence, fig: CardFigures) -> list:
    """The metadata's eval results: each task's score and, for a quantized checkpoint, its recovery."""
    from huggingface_hub import EvalResult

    out = []
    for t, s in _scored(fig):
        if s is None:
            continue
        metric = _metric_name(t.primary_metric)
        shots = {"num_few_shot": t.n_shot} if t.n_shot is not None else None
        out.append(EvalResult(task_type="text-generation", dataset_type=t.task, dataset_name=t.task, metric_type=metric,
                              metric_value=s.value, metric_name=metric, dataset_args=shots))
        if ev.variant != BASELINE and s.recovery is not None:
            out.append(EvalResult(
                task_type="text-generation", dataset_type=t.task, dataset_name=t.task, dataset_args=shots,
                metric_type="recovery", metric_value=round(s.recovery, 4),
                metric_name=f"{metric} recovery vs the baseline ({_interval_words(s)})", metric_args=_interval_args(s)))
    mean = _mean(fig.row)
    if ev.variant != BASELINE and ev.recovery is not None and mean is not None:
        out.append(EvalResult(
            task_type="text-generation", dataset_type="quantkit/mean-recovery", dataset_name="mean over accuracy tasks",
            metric_type="recovery", metric_value=round(mean.recovery, 4),
            metric_name=f"mean recovery vs the baseline ({_interval_words(mean)})",
            metric_args={**_interval_args(mean), "gate": ev.recovery.verdict or "no gates"}))
    return out


def _header(ev: Evidence, name: str, base: str | None, forced: bool) -> list[str]:
    """The title, what the checkpoint is, and the verdict."""
    convert = ev.convert or records.Convert()
    out = [f"# {md_escape(name.split('/')[-1])}", ""]
    source = md_code(_source_name(convert))
    if base and HUB_ID.fullmatch(base):
        base_link = f"[{md_escape(base)}](https://huggingface.co/{base})"
    else:
        base_link = md_code(base) if base else (
            f"{source} (not a Hub model; base model unknown: `--base-model` names it)")
    if ev.convert:
        out.append(f"{md_escape(f'{convert.method} ({convert.scheme})')} quantization of {base_link}, made with quantkit "
                   f"{__version__} ({md_escape(convert.backend or MISSING)} backend) and measured in vLLM.")
        if provenance := baseline_provenance(ev.convert, ev.model):
            out.append(f"Its source, and the baseline its recovery is measured against, is {source}: "
                       f"{md_escape(provenance)}.")
    else:
        out.append(f"Checkpoint {md_code(ev.checkpoint.name)} ({'the unquantized baseline' if ev.variant == 'baseline' else 'no quantkit.json'}), "
                   f"measured in vLLM with quantkit {__version__}.")
    out.append("")
    reason = md_escape(ev.reason)
    if ev.validated:
        out.append(f"**Validated:** {reason}" + (f" (recovery against the stored baseline eval, gates {ev.gates_source})."
                                                  if ev.recovery else "."))
    else:
        out.append(f"> **Not validated.** This checkpoint was pushed with `--force`: {reason}. "
                   "The numbers below are only what was measured; no quality gate vouches for it."
                   if forced else f"> **Not validated:** {reason}.")
    return out + [""]


def _what_was_done(ev: Evidence) -> list[str]:
    """The conversion: method, scheme, calibration, source, machine and recipe."""
    import yaml

    out = ["## What was done", ""]
    if not ev.convert:
        return out + [f"No conversion record is stored for this checkpoint (method, scheme and calibration are {MISSING}).", ""]
    convert, calib = ev.convert, ev.convert.calibration
    recipe = convert.recipe if convert.recipe is not None and convert.recipe.model_fields_set else None
    if calib is not None and calib.model_fields_set:  # what the conversion used (the recipe's may be overridden)
        c = [fmt_str(x, missing=MISSING) for x in (calib.dataset, calib.num_samples, calib.seq_len, calib.tokens, calib.seed)]
        calib_text = f"{c[0]}: {c[1]} samples x {c[2]} tokens ({c[3]} tokens), seed {c[4]}"
    elif recipe is not None and recipe.calibration is not None:
        calib_text = f"{MISSING} (the recipe names calibration data, the conversion record does not)"
    else:
        calib_text = "none (this method needs no calibration data)"
    fingerprint = convert.source.fingerprint if convert.source is not None else None
    out += markdown_table(["", ""], [
        ["method", f"{convert.method} ({convert.backend or MISSING})"],
        ["scheme", convert.scheme or MISSING],
        ["group size", str(convert.group_size) if convert.group_size is not None else "none (per channel)"],
        ["ignored layers", ", ".join((recipe.ignore if recipe else None) or []) or "none"],
        ["calibration", calib_text],
        ["source", Md(md_code(_source_name(convert)) + " " + md_escape(f"({fingerprint or 'fingerprint missing'})"))],
        ["quantized on", f"{convert.hardware.device or MISSING} ({convert.hardware.cpu_count or '?'} CPUs) "
                         f"in {fmt(convert.wall_time_s, missing=MISSING)} s"],
        ["checkpoint size", fmt_bytes(convert.size_bytes, missing=MISSING)]]) + [""]
    out += [f"- {md_escape(note)}" for note in convert.notes or []] + ([""] if convert.notes else [])
    dumped = yaml.safe_dump(recipe.model_dump(mode="json", exclude_unset=True), sort_keys=False).rstrip() if recipe else None
    return out + [f"quantkit recipe {md_code(fmt_str(convert.recipe_name, missing=MISSING))} "
                  f"{md_escape(f'(hash {fmt_str(convert.recipe_hash, missing=MISSING)}):')}", "",
                  *md_fence((dumped or f"# {MISSING}").splitlines(), "yaml"), ""]


def _accuracy(ev: Evidence, fig: CardFigures) -> list[str]:
    """Each task's score beside the baseline's, its recovery with its interval, the mean and the gates."""
    out = ["## Accuracy", ""]
    scored, run = _scored(fig), fig.variant.eval
    if not scored:
        return out + [f"No eval is stored for this checkpoint: accuracy is {MISSING}.", ""]
    versions = run.versions or {}  # package -> version: a mapping by nature, read by key
    vllm = run.server.vllm_version if run.server is not None else None
    out.append(f"lm-eval {md_escape(versions.get('lm_eval', MISSING))} (`local-completions`, token ids) against vLLM "
               f"{md_escape((vllm or MISSING) + _computing_in(run.server))}. Recovery = quantized / baseline on the same items "
               "(baseline / quantized for perplexities), with its 95% interval from the paired per-item scores "
               "(delta method with their covariance; perplexity: documents resampled together, seeded).")
    if provenance := baseline_provenance(ev.convert, ev.model):
        out += ["", md_escape(f"The baseline is {provenance}." if ev.variant != BASELINE else f"This checkpoint is {provenance}.")]
    quantized = ev.variant != BASELINE
    base = {s.task: s for s in fig.baseline_row.scores} if fig.baseline_row is not None else {}
    rows = []
    for t, s in scored:
        rec = fmt_ci(*_interval(s), missing=MISSING) if quantized else "n/a (baseline)"
        if quantized and s is not None and s.recovery is not None and not str(s.recovery_method or "").startswith("paired"):
            rec += " (independent: no per-item scores stored)"
        b = base.get(t.task)
        rows.append([t.task, _metric_name(t.primary_metric), fmt_str(t.n_shot, missing=MISSING),
                     f"{t.n_samples} of {t.n_available}" if t.n_samples is not None else MISSING,
                     fmt_pm(b.value if b else None, b.stderr if b else None, missing=MISSING) if quantized else "n/a",
                     fmt_pm(s.value if s else None, s.stderr if s else None, missing=MISSING), rec])
    out += ["", *markdown_table(["task", "metric", "n-shot", "items", "baseline", "quantized",
                                 "recovery [95% interval]"], rows), ""]
    return out + _gates(ev, fig.row) + _protocol(run)


def _fidelity(fig: CardFigures) -> list[str]:
    """The report's fidelity table for this checkpoint, when one was measured (none: no section)."""
    table = fidelity_table([fig.row], MISSING)
    if table is None:
        return []
    _, header, rows, _ = table
    return [f"## {FIDELITY_TITLE}", "", "The next-token distributions of this checkpoint against its baseline's, "
            "served by vLLM on the same token windows.", "", *markdown_table(header, rows), "",
            md_escape(FIDELITY_CAPTION[0].upper() + FIDELITY_CAPTION[1:]), ""]


def _gates(ev: Evidence, row: Row) -> list[str]:
    """The mean recovery and each gate's verdict by its interval."""
    if ev.recovery is None:
        return [f"Recovery is {MISSING}: no baseline eval on the same protocol is stored.", ""] if ev.variant != BASELINE else []
    line = f"Mean recovery over accuracy tasks: {fmt_ci(*_interval(_mean(row)), missing=MISSING)}"
    if row.recovery_independent_stderr is not None and row.recovery_stderr is not None:
        line += (f" (paired stderr {row.recovery_stderr:.4f}; the same runs treated as independent would "
                 f"give {row.recovery_independent_stderr:.4f})")
    out = [line + ".", ""]
    gates = ev.recovery.gates or []
    if gates:
        out += [f"Gates ({ev.gates_source}): **{md_escape(ev.recovery.verdict or 'none')}**. A gate passes when the interval's "
                "lower bound reaches it, fails when its upper bound is below it, and is inconclusive otherwise.", ""]
        out += ["- " + md_escape(f"{g.gate}{' ' + g.task if g.task else ''}: "
                               + (g.summary() if g.verdict == "pass" else f"{g.describe()}: {g.verdict}")) for g in gates] + [""]
    return out


def _protocol(run: EvalRun) -> list[str]:
    """The evaluation protocol, per task: what a reader needs to repeat the numbers."""
    rows = []
    for t in run.tasks or []:
        source = " ".join(str(x) for x in (t.data.source, t.data.template) if x) or MISSING if t.data else MISSING
        rows.append([t.task, fmt_str(t.version, missing=MISSING), fmt_str(t.n_shot, missing=MISSING),
                     f"{fmt_str(t.n_samples, missing=MISSING)} ({'all' if t.limit is None else t.limit})",
                     "yes" if t.chat_template else "no", "yes" if t.add_bos_token else "no", source])
    out = ["### Evaluation protocol", "", *markdown_table(["task", "lm-eval task version", "n-shot", "items (limit)",
                                                           "chat template", "BOS", "data"], rows), ""]
    seeds = (run.protocol.seeds if run.protocol is not None else None) or {}  # lm-eval's seed name -> seed
    if seeds:
        out += [md_escape("Seeds: " + ", ".join(f"{k} {v}" for k, v in seeds.items()) + "."), ""]
    for t in run.tasks or []:
        if g := t.growth:
            out.append("- " + md_escape(f"{t.task}: grown until its gate was decided: the first {t.limit} items, then "
                                        f"{g.blocks} block(s) of {g.step} from a permutation of the rest seeded {g.seed}."))
        if note := (t.data.note if t.data else None):
            out.append("- " + md_escape(f"{t.task}: {note}"))
    return out + ([""] if out[-1] != "" else [])


def _computing_in(server: Any) -> str:
    """', computing in float32 (AVX2 has no bf16 arithmetic: ...)' for a server whose dtype is known."""
    dtype = getattr(server, "dtype", None)
    if not dtype:
        return ""
    reason = getattr(server, "dtype_reason", None)
    return f", computing in {dtype}" + (f" ({reason})" if reason else "")


def _throughput(ev: Evidence, fig: CardFigures) -> list[str]:
    """The benchmark's load points beside the baseline's, its operating point and the kernels vLLM chose."""
    out = ["## Throughput and latency", ""]
    bench, row = fig.variant.bench, fig.row
    keyed = _by_load(bench)
    if not keyed:
        return out + [f"No benchmark is stored for this checkpoint: throughput and latency are {MISSING}.", ""]
    hw, wl = bench.hardware, row.workload or BenchWorkload()
    server = bench.server or records.tolerant(ServerInfo)()
    count = f"{hw.gpu_count} x " if hw.gpu and hw.gpu_count else ""
    finished = ev.bench.status == "done" and (bench.complete or "complete" not in bench.model_fields_set)
    out.append(md_escape(f"quantkit's streaming load generator against vLLM {server.vllm_version or MISSING} on "
                         f"{count}{hw.device or MISSING}" + (f" ({hw.cpu_count} CPUs)" if not hw.gpu and hw.cpu_count else "")
                         + _computing_in(server) + f"; prompts of {wl.input_len or MISSING} tokens, "
                         f"{wl.output_len or MISSING} output tokens, server flags ")
               + md_code(" ".join(row.serve_args) or "defaults") + "."
               + ("" if finished else " " + md_escape(f"The benchmark stopped early ({ev.bench.status}: "
                                                      f"{ev.bench.error or 'no reason stored'}); these are the points it finished.")))
    base = dict(_by_load(fig.baseline.bench)) if fig.baseline is not None else {}
    rows = []
    for key, p in keyed:
        cells = [load_kinds.kind(p.profile).text(p, "phrase"), f"{p.successes + p.failures} ({p.failures})",
                 fmt(p.output_tok_s, missing=MISSING)]
        if base:
            bp = base.get(key)
            cells.append(fmt(bp.output_tok_s, missing=MISSING) if bp else MISSING)
        rows.append(cells + [fmt_ms((p.ttft_p50, p.ttft_p95), missing=MISSING),
                             fmt_ms((p.itl_p50, p.itl_p95), missing=MISSING), fmt(p.e2e_p50, missing=MISSING)])
    header = ["load", "requests (failed)", "output tok/s", *(["baseline output tok/s"] if base else []),
              "TTFT p50 / p95 (ms)", "ITL p50 / p95 (ms)", "E2E p50 (s)"]
    out += ["", *markdown_table(header, rows), ""]
    top, kind = top_point([p for _, p in keyed], bench.knee)
    if top is not None:
        why = "the knee of the throughput curve" if kind == "knee" else "the highest load measured (no knee was searched)"
        out += [md_escape(f"Operating point ({why}): {load_kinds.kind(top.profile).text(top, 'sentence')}, "
                          f"{fmt(top.output_tok_s, missing=MISSING)} output tok/s, "
                          f"TTFT p95 {fmt_ms((top.ttft_p95,), missing=MISSING)} ms, "
                          f"ITL p95 {fmt_ms((top.itl_p95,), missing=MISSING)} ms."), ""]
    if row.kernels:
        out += ["Kernels vLLM chose: " + "; ".join(md_code(line) for line in row.kernels), ""]
    return out


def _by_load(bench: Any) -> list[tuple[tuple, Point]]:
    """A benchmark's points as the report shows them, each with its load and prompt lengths: the
    baseline's point beside one is the point at the same load of the same workload."""
    stored = (bench.points if bench is not None else None) or []
    return [((p.profile, p.concurrency, p.rate, s.input_len, s.output_len), p) for p, s in zip(points_of(bench), stored)]


def _how_to_serve(name: str, ev: Evidence) -> list[str]:
    """The `vllm serve` line, shell-quoted: pasted, every argument reaches vLLM as one word and none
    runs (`$(...)`, `;`, a glob); a masked secret reads '***'."""
    args, why = _serve_command(name, ev)
    return ["## How to serve", "", *md_fence([shlex.join(["vllm", "serve", name, *args])], "bash"), "",
            f"Flags: {md_escape(why)}.", ""]


def _provenance(ev: Evidence) -> list[str]:
    """The versions and the store's runs behind every number."""
    out = ["## Provenance", "", f"{CARD_MARK} {__version__} from its result store."]
    versions = dict((ev.convert.versions if ev.convert is not None else None) or {})
    if versions:
        out.append(md_escape("Conversion: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "."))
    # the runs measured under no workload; a capacity's workload and hardware are its own section's
    for kind in (k for k in REPORTED_KINDS if k not in MEASURED_KINDS and (k != "fidelity" or k in ev.stages)):
        r = ev.stages.get(kind)
        out.append(f"- {kind}: " + (f"run {md_code(r.run_key)} {md_escape(f'({r.status}, finished {r.finished_at or MISSING})')}"
                                    if r else MISSING))
    if ev.variant != BASELINE:
        for kind, r in (("baseline eval", ev.baseline_eval), ("baseline bench", ev.baseline_bench)):
            out.append(f"- {kind}: " + (f"run {md_code(r.run_key)} {md_escape(f'(finished {r.finished_at or MISSING})')}"
                                        if r else MISSING))
    return out


def _interval(s: TaskScore | None) -> tuple[float | None, float | None, float | None]:
    """(recovery, low, high) of a task's score (or the mean's: `_mean`)."""
    return (s.recovery, s.recovery_low, s.recovery_high) if s is not None else (None, None, None)


def _interval_words(s: TaskScore) -> str:
    if s.recovery_low is None or s.recovery_high is None:
        return "no interval"
    return f"95% interval {s.recovery_low:.4f} to {s.recovery_high:.4f}, {s.recovery_method or 'method ' + MISSING}"


def _interval_args(s: TaskScore) -> dict[str, Any]:
    def rounded(x: float | None) -> float | None:
        return None if x is None else round(float(x), 4)

    return {"low": rounded(s.recovery_low), "high": rounded(s.recovery_high), "confidence": 0.95,
            "method": s.recovery_method, "items": s.n_items}
