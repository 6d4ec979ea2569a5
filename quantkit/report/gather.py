"""`quantkit compare`: gather a model's results from the store (never recomputing) into a report.

`gather` groups a model's records by variant; `variant_of` turns one variant's records into the
report's `Variant` (the card's evidence uses it too); `compare` builds and writes the report.

Per variant (baseline first, then methods in the order first stored) the newest `done` record of
each stage is used; a stage that only failed or was interrupted makes the variant `failed` /
`partial` with its reason, and a bench that stopped early still contributes the points it
stored. Recovery and gates are derived here from the stored eval scores (or, with
`accuracy_from`, another model's: proxy.py).

Capacity and tune records are compared only within one workload (prompt and output lengths, load
profile, SLO): a model measured at 512/256 and at 4,096/512 has two decisions, not one mixed
from whichever record is newest. The report shows the newest workload unless one is asked for,
and names the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from .. import settings
from ..checkpoint import RECORD_FILE, ConvertRecord, method_of, weight_bytes
from ..errors import UsageError
from ..labels import BASELINE
from ..safeload import read_json
from ..measure.stats.slo import Slo
from ..files import is_path_name, resolved
from ..models import BUILTIN_PROVENANCE
from ..evals.gates import VERDICTS, RecoveryReport, overall_verdict, recovery_of
from ..measure.capacity.bench import BenchRun
from ..measure.capacity import profiles
from ..measure.capacity.live import CapacityResult
from ..store import MEASURED_KINDS, REPORTED_KINDS, Record, Store, result_kind
from . import records
from .build import Variant, build_report

M = TypeVar("M", bound=BaseModel)
Workload = tuple[Any, Any, Any, Any]  # (profile, input_len, output_len, slo)


def workload_from(capacity: Any, slo: Slo | None) -> Workload:
    """The workload of capacity settings (a CapacitySettings, or one stored: records.StoredWorkload)
    under an SLO."""
    return (profiles.canonical(capacity.profile), capacity.input_len, capacity.output_len, slo)


def workload_of(record: Record) -> Workload | None:
    """A capacity or tune record's workload; None for a tune stored before tune records named it."""
    params = records.params(record)
    if record.kind not in MEASURED_KINDS or params.capacity is None or params.capacity.input_len is None:
        return None
    return workload_from(params.capacity, params.slo)


def workload_text(w: Workload) -> str:
    known = profiles.find(w[0])
    profile = known.workload_text if known is not None else f", {w[0]} profile"
    return f"{w[1]} in / {w[2]} out{profile} under {w[3]}"


def parse_workload(text: str) -> tuple[int, int]:
    """`--workload IN/OUT` (e.g. 4096/512): prompt and output lengths in tokens."""
    parts = text.replace("x", "/").split("/")
    try:
        lengths = tuple(int(p) for p in parts)
    except ValueError:
        lengths = ()
    if len(lengths) != 2 or min(lengths) < 1:
        raise UsageError(f"--workload {text!r} is not IN/OUT token lengths; give e.g. --workload 512/256")
    return lengths  # type: ignore[return-value]


def pick_workload(records: list[Record], wanted: tuple | None) -> tuple[list[Record], list[str]]:
    """The records of one workload (`wanted`: (input_len, output_len) or a whole Workload; None: the
    newest finished capacity's) with every other kind, and a note naming the workloads left out."""
    seen: list[Workload] = []
    for r in sorted((r for r in records if r.status == "done"), key=lambda r: r.id, reverse=True):
        if (w := workload_of(r)) is not None and w not in seen:
            seen.append(w)  # newest first
    if wanted is None:
        matching = seen
    else:
        same = (lambda w: w) if len(wanted) == 4 else (lambda w: w[1:3])
        matching = [w for w in seen if same(w) == tuple(wanted)]
        if not matching and len(wanted) == 2:
            raise UsageError(f"no capacity was measured at {wanted[0]} in / {wanted[1]} out; measured: "
                             f"{'; '.join(workload_text(w) for w in seen) or 'none'}")
    if not seen:
        return records, []
    chosen = matching[0] if matching else None  # None: this recipe's workload has no finished capacity
    # a recipe's own workload keeps its unfinished records (a failed capacity shows as failed)
    target = chosen if chosen is not None else tuple(wanted) if wanted is not None else None
    kept = [r for r in records if r.kind not in MEASURED_KINDS or workload_of(r) in (target, None)]
    others = [w for w in seen if w != chosen]
    if not others:
        return kept, []
    shown = f"capacity shown for {workload_text(chosen)}" if chosen else "no capacity of this workload is stored"
    return kept, [f"{shown}; also measured: {'; '.join(workload_text(w) for w in others)} "
                  "(`quantkit compare --workload IN/OUT` shows one of them)"]


def _latest(records: list[Record]) -> Record | None:
    done = [r for r in records if r.status == "done"]
    if done:
        return done[-1]
    return records[-1] if records else None


def gather(store: Store, model: str | None = None, keys: list[str] | None = None,
           workload: tuple | None = None) -> tuple[str, dict[str, dict[str, Record]], list[str]]:
    if not model and not keys:
        models = store.models()
        if len(models) == 1:
            model = models[0]
        else:
            raise UsageError(f"name a model with --model ({', '.join(models) or 'the store is empty'})")
    records = store.records(model=model, keys=keys)
    if not records:
        known = store.models()
        what = f"model '{model}'" if model else f"run keys {', '.join(keys or [])}"
        raise UsageError(f"nothing stored for {what}; the store has: {', '.join(known) or 'nothing yet (run quantkit run)'}")
    model = model or records[0].model
    records, notes = pick_workload(records, workload)
    grouped: dict[str, dict[str, list[Record]]] = {}
    for r in records:
        grouped.setdefault(r.variant, {}).setdefault(r.kind, []).append(r)
    order = sorted(grouped, key=lambda v: (v != BASELINE, min(r.id for rs in grouped[v].values() for r in rs)))
    return model, {v: {k: _latest(grouped[v].get(k, [])) for k in REPORTED_KINDS if grouped[v].get(k)} for v in order}, notes


def variant_of(store: Store, name: str, stages: dict[str, Record], baseline_eval: dict | None,
               gates: dict | None) -> Variant:
    """One variant's newest records as a report Variant, with its recovery against the baseline."""
    convert = stages.get("convert")
    bench = stages.get("bench")
    eval_ = stages.get("eval")
    problems = [f"{r.kind} {r.status}" + (f": {r.error}" if r.error and r.error != r.status else "")
                for r in stages.values() if r.status != "done"]  # not "capacity interrupted: interrupted"
    # the store's boundary: each stored result is validated here, once, into its model (records.py)
    bench_result = records.read(BenchRun, bench.result) if bench else None
    if bench is not None and bench.status != "done":
        # keep what finished: the points stored before the stage stopped
        points = store.points(bench.id)
        bench_result = records.read(BenchRun, {**(bench.result or {}), "points": points, "complete": False}) \
            if points else None
    convert_result = records.read(ConvertRecord, convert.result) if convert else None
    capacity, tune, fidelity = stages.get("capacity"), stages.get("tune"), stages.get("fidelity")
    capacity_result = records.read(CapacityResult, capacity.result) if capacity is not None else None
    if capacity is not None and capacity.status != "done":
        # keep what finished: a search cut short still has its ladder, judged from its own points
        capacity_result = ladder_judged_again(store, capacity)
        if capacity_result is not None:
            shown = f" (shown: the {len(capacity_result.points)} points it measured)"
            problems = [p + shown if p.startswith("capacity ") else p for p in problems]
    model_dir = convert_result.output_dir if convert_result is not None else None
    model_dir = model_dir or next((folder for r in (bench, eval_, capacity, fidelity)
                                   if r is not None and (folder := records.params(r).checkpoint)), "")
    recovery = None
    if eval_ is not None and eval_.status == "done" and baseline_eval is not None and name != BASELINE:
        try:
            recovery = recovery_of(eval_.result, baseline_eval, gates)
        except UsageError as exc:
            problems.append(f"recovery: {exc.message}")
    if convert:
        method = (convert_result.method if convert_result is not None else None) or name
    else:  # a checkpoint quantkit did not convert here: its own quantization, or the source dtype
        described = next((records.read(model, r.result).checkpoint for r, model in ((bench, BenchRun), (capacity, CapacityResult))
                          if r is not None and r.result), None)
        method = method_of(described) or "bf16"
    status = "done" if not problems else ("partial" if bench_result or capacity_result or any(
        r is not None and r.status == "done" for r in (eval_, fidelity)) else "failed")
    size = None
    if convert is None and model_dir and Path(model_dir).is_dir():  # the baseline or a checkpoint brought in
        size = weight_bytes(Path(model_dir))
    return Variant(name=name, method=method, model_dir=str(model_dir), size_bytes=size, baseline=name == BASELINE,
                   capacity=capacity_result,
                   tune=tune.result if tune is not None and tune.status == "done" else None,
                   fidelity=fidelity.result if fidelity is not None and fidelity.status == "done" else None,
                   convert=convert_result if convert and convert.status == "done" else None,
                   bench=bench_result, eval=eval_.result if eval_ and eval_.status == "done" else None,
                   recovery=recovery, status=status, error="; ".join(problems) or None)


def ladder_judged_again(store: Store, record: Record) -> CapacityResult | None:
    """A capacity record's stored points judged under its own SLO (measure/capacity/ladder.py), so
    the figures are its ladder's: an interrupted or failed search as far as it got (never a finished
    search's claim), or a finished one whose search may have stepped over a pass (report/ladders.py);
    None when it kept no result or no steady-state points (a burst)."""
    from ..measure.capacity.ladder import rederive

    if not record.result or not (points := store.points(record.id)):
        return None
    try:
        result = CapacityResult.model_validate(record.result)  # whole, as rederive judges it
        return rederive(result, points, result.slo).result
    except (UsageError, ValueError):  # pydantic's ValidationError too: a result rederive could not judge
        return None


def _served(v: Variant) -> Any:
    """The server a variant was measured on (its capacity search's, bench's or eval's), or None."""
    for result in (v.capacity, v.bench):
        if result is not None and result.model_fields_set and result.server is not None:
            return result.server
    return v.eval.server if v.eval is not None and v.eval.model_fields_set else None


def _served_dtype(variants: list[Variant]) -> str | None:
    """'float32 (why)' when every variant served in one dtype, else each variant's."""
    found = {v.name: (s.dtype, getattr(s, "dtype_reason", None)) for v in variants
             if (s := _served(v)) is not None and getattr(s, "dtype", None)}
    if not found:
        return None
    if len(set(found.values())) == 1:
        dtype, reason = next(iter(found.values()))
        return dtype + (f" ({reason})" if reason else "")
    return "; ".join(f"{name}: {dtype}" + (f" ({reason})" if reason else "") for name, (dtype, reason) in found.items())


def environment(variants: list[Variant]) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for v in variants:
        if (served := _served(v)) is not None and getattr(served, "cpu_isa", None):
            env.setdefault("cpu_isa", served.cpu_isa)
        if v.bench is not None and v.bench.model_fields_set:
            env.setdefault("device", v.bench.hardware.device)
            env.setdefault("cpu_count", v.bench.hardware.cpu_count)
            if v.bench.hardware.driver:
                env.setdefault("driver", v.bench.hardware.driver)
            env.setdefault("vllm", v.bench.server.vllm_version if v.bench.server is not None else None)
        if v.convert is not None and v.convert.model_fields_set:
            for name, version in (v.convert.versions or {}).items():
                env.setdefault(name, version)
        if v.eval is not None and v.eval.model_fields_set:
            for name, version in (v.eval.versions or {}).items():
                env.setdefault(name, version)
    env["served dtype"] = _served_dtype(variants)
    return {k: val for k, val in env.items() if val is not None}


def compare(store: Store, *, model: str | None = None, keys: list[str] | None = None, out_dir: Path | None = None,
            gates: dict | None = None, bandwidth_gbs: float | None = None, title: str | None = None,
            workload: tuple | None = None, accuracy_from: str | None = None, slo: Slo | None = None,
            stored_gates: bool = True, price_per_hour: float | None = None, about: str | None = None,
            fidelity_gates: Any = None) -> dict[str, Any]:
    """The report of a model's stored results; `slo` (a measure.stats.slo.Slo) re-derives every capacity
    under it from the stored ladders (ladders.py) instead of showing the SLO they were measured under.
    Without `gates`, the gates the run itself used (stored with its evals) apply, unless `stored_gates`
    is False; the report says which applied. `about`: what the run that measured it was (its
    recipe's name and description: the demo's recipe differs by CPU), the report's first note.
    `fidelity_gates` (a fidelity.gate.FidelityGates) judges every stored fidelity result again on
    its stored intervals, as `--slo` judges the ladders: nothing is served."""
    from .ladders import apply_slo
    from .tiers import tier_results
    from .proxy import borrow_accuracy
    from .render import write_report

    model, by_variant, notes = gather(store, model, keys, workload)
    out = Path(out_dir) if out_dir else report_dir(model)
    notes = ([f"recipe {about}"] if about else []) + notes
    base = by_variant.get(BASELINE, {}).get("eval")
    baseline_eval = base.result if base is not None and base.status == "done" else None
    gates = {k: v for k, v in (gates or {}).items() if v}
    if gates:
        notes = notes + [f"gates: {gates_text(gates)} (given for this report)"]
    elif stored_gates and (run_gates := gates_of_run(by_variant)):
        gates = run_gates
        notes = notes + [f"gates: {gates_text(gates)}, the run's own (stored with its evals; "
                         "`quantkit compare --min-recovery X` sets others, `--no-run-gates` none)"]
    variants = [variant_of(store, name, stages, baseline_eval, gates) for name, stages in by_variant.items()]
    if accuracy_from:
        notes = notes + borrow_accuracy(store, model, accuracy_from, variants, gates)
    if slo is not None:
        notes = notes + apply_slo(store, by_variant, variants, slo)
    if fidelity_gates is not None:
        notes = notes + regate_fidelity(variants, fidelity_gates)
    recipe_hashes = sorted({s.recipe_hash for st in by_variant.values() for s in st.values() if s.recipe_hash})
    report = build_report(variants, title=title or f"quantkit report: {model}", environment=environment(variants),
                          recipe_hash=",".join(recipe_hashes) or None, bandwidth_gbs=bandwidth_gbs,
                          baseline_provenance=baseline_provenance(model, variants), notes=notes)
    report.tiers = tier_results(store, by_variant, variants, report.rows, asked=slo is not None)
    report.price_per_hour = price_per_hour if price_per_hour is not None else settings.price_per_hour()
    paths = write_report(report, out)
    gated = {row.name: row.gate for row in report.rows if row.gate in VERDICTS}
    counts = {verdict: 0 for verdict in VERDICTS}
    for v in variants:
        for g in [*((v.recovery.gates if v.recovery is not None else None) or []),
                  *((v.fidelity.verdicts if v.fidelity is not None else None) or [])]:
            counts[g.verdict] += 1
    return {"model": model, "paths": paths, "report": report,
            "gates_passed": (overall_verdict(list(gated.values())) == "pass") if gated else None,
            "gate_verdict": overall_verdict(list(gated.values())), "verdicts": gated, "gate_counts": counts,
            "variants": [{"name": v.name, "status": v.status, "error": v.error, "accuracy_from": v.accuracy_from}
                         for v in variants]}


def regate_fidelity(variants: list, gates: Any) -> list[str]:
    """Each stored fidelity result's verdicts decided again under `gates` from its stored
    intervals (the figures do not depend on a gate); the note that says so."""
    from ..fidelity.gate import GATE_FIGURES, decide, gates_text as fidelity_gates_text

    judged = 0
    for v in variants:
        result = v.fidelity
        if result is None or not result.figures:
            continue
        # a record read tolerantly may lack a gated figure: no verdict then, rather than a guess
        complete = all(figure in result.figures for figure, _ in GATE_FIGURES.values())
        found, overall = decide(gates, result.figures) if complete else ([], None)
        v.fidelity = result.model_copy(update={"gates": gates, "verdicts": found, "verdict": overall})
        judged += 1
    if not judged:
        return [f"fidelity gates {fidelity_gates_text(gates) or 'off'} asked, but no variant has a stored fidelity result"]
    return [f"fidelity gates: {fidelity_gates_text(gates) or 'none'} (given for this report, judged again on "
            f"{judged} stored result(s)' intervals; nothing served)"]


def report_dir(model: str) -> Path:
    """The default report folder of a stored model, reports/<model>: a name that is a path (a store
    written before names were checked, `runs import --model ../..`) would put it elsewhere."""
    if not is_path_name(model):
        raise UsageError(f"the stored model name {model!r} is a path, not a name: its report would be written "
                         "outside reports/; give the report folder with -o")
    return Path("reports") / model


def gates_of_run(by_variant: dict[str, dict[str, Record]]) -> dict[str, Any]:
    """The gates the newest stored eval of a quantized variant was run with (the recipe's), or {}."""
    evals = sorted((stages["eval"] for name, stages in by_variant.items() if name != BASELINE and "eval" in stages),
                   key=lambda r: r.id)
    return next((gates for record in reversed(evals) if (gates := records.gates_of(record))), {})


def gates_text(gates: dict[str, Any]) -> str:
    parts = [f"{k}={v:g}" for k, v in gates.items() if isinstance(v, (int, float))]
    parts += [f"{task}>={v:g}" for task, v in (gates.get("tasks") or {}).items()]
    return ", ".join(parts)


def baseline_provenance(model: str | None, variants: list[Variant]) -> str | None:
    """What the baseline is, when quantkit made it (the built-in demo model: dequantized from a
    GGUF), from the conversions' source records, else the model's own name."""
    for v in variants:
        source = v.convert.source if v.convert is not None else None
        if source is not None and source.kind == "builtin" and source.ref in BUILTIN_PROVENANCE:
            return f"{source.ref}: {BUILTIN_PROVENANCE[source.ref]}"
    return f"{model}: {BUILTIN_PROVENANCE[model]}" if model in BUILTIN_PROVENANCE else None


# ----------------------------------------------------------------------------------------------
# One checkpoint's evidence (the card and push's verdict)


@dataclass
class Evidence:
    """What the store holds for one checkpoint folder, and (filled by hub) the verdict on it."""

    checkpoint: Path
    model: str | None = None
    variant: str | None = None
    stages: dict[str, Record] = field(default_factory=dict)  # newest convert/bench/eval record for DIR
    tune: Record | None = None  # newest finished tune of DIR
    baseline_eval: Record | None = None  # newest done baseline eval of the same model
    baseline_bench: Record | None = None
    convert: ConvertRecord | None = None  # the convert record's result, else DIR/quantkit.json (records.Convert)
    recovery: RecoveryReport | None = None  # against the baseline eval (records.Recovery)
    gates: dict[str, Any] = field(default_factory=dict)
    gates_source: str = "given on the command line"
    fidelity: Any = None  # the newest done fidelity record's result (records.Fidelity), read by hub._decide
    verdict: str | None = None  # over the recovery and the fidelity gates (pass / fail / inconclusive)
    validated: bool = False
    reason: str = ""  # why not validated (or the verdict when validated)

    @property
    def bench(self) -> Record | None:
        return self.stages.get("bench")

    def result(self, kind: str, model: type[M]) -> M | None:
        """The finished record of stage `kind` as `model` (tolerant: records.py); None otherwise."""
        r = self.stages.get(kind)
        return records.read(model, r.result) if r is not None and r.status == "done" and r.result else None


def _newest(records: list[Record]) -> Record | None:
    # the newest record of a stage decides (a later failed eval is not hidden by an older success),
    # except that a later 'running' row of a live or killed process does not replace a finished one
    finished = [r for r in records if r.status != "running"]
    return (finished or records)[-1] if records else None


def evidence_for(store: Store, checkpoint: Path) -> Evidence:
    """The store's records of CHECKPOINT (a folder; paths compared after resolving)."""
    checkpoint = resolved(checkpoint) or Path(checkpoint)
    ev = Evidence(checkpoint=checkpoint)
    mine = [r for r in store.records() if r.checkpoint_dir() == checkpoint]
    if mine:
        ev.model, ev.variant = mine[-1].model, mine[-1].variant
        mine = [r for r in mine if r.model == ev.model]
        for kind in REPORTED_KINDS:
            newest = _newest([r for r in mine if r.kind == kind])
            if newest is not None:
                ev.stages[kind] = newest
        ev.tune = next((r for r in reversed(mine) if r.kind == "tune" and r.status == "done"), None)
        base = [r for r in store.records(model=ev.model, status="done") if r.variant == BASELINE]
        ev.baseline_eval = next((r for r in reversed(base) if r.kind == "eval"), None)
        ev.baseline_bench = next((r for r in reversed(base) if r.kind == "bench"), None)
    convert = ev.stages.get("convert")
    if convert is not None and convert.status == "done" and convert.result:
        ev.convert = records.read(ConvertRecord, convert.result)
    else:
        ev.convert = _read_convert_file(checkpoint)
    return ev


def _read_convert_file(checkpoint: Path) -> ConvertRecord | None:
    path = checkpoint / RECORD_FILE
    if not path.is_file():
        return None
    try:
        data = read_json(path)
    except UsageError:  # a damaged record file: the store's record (if any) stands
        return None
    return records.read(ConvertRecord, data) if isinstance(data, dict) and data.get("kind") == result_kind("convert") else None

