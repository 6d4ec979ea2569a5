"""`quantkit compare`: gather a model's results from the store (never recomputing) into a report.

Per variant (baseline first, then methods in the order first stored) the newest `done` record of
each stage is used; a stage that only failed or was interrupted makes the variant `failed` /
`partial` with its reason, and a bench that stopped early still contributes the points it
stored. Recovery and gates are derived here from the stored eval scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import UsageError
from .store import Record, Store

STAGES = ("convert", "bench", "eval")


def checkpoint_method(checkpoint: dict[str, Any] | None) -> str | None:
    """The quantization a stored bench/eval saw in its checkpoint: quantkit's method; for one
    quantkit did not write, its own quant_method (else "unknown"); None when unquantized."""
    checkpoint = checkpoint or {}
    method = checkpoint.get("method")
    if method in (None, "none", "baseline"):  # bench and eval name an unquantized folder differently
        return None
    if method == "unknown":
        return checkpoint.get("quant_method") or "unknown"
    return method


def _latest(records: list[Record]) -> Record | None:
    done = [r for r in records if r.status == "done"]
    if done:
        return done[-1]
    return records[-1] if records else None


def gather(store: Store, model: str | None = None, keys: list[str] | None = None) -> tuple[str, dict[str, dict[str, Record]]]:
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
    grouped: dict[str, dict[str, list[Record]]] = {}
    for r in records:
        grouped.setdefault(r.variant, {}).setdefault(r.kind, []).append(r)
    order = sorted(grouped, key=lambda v: (v != "baseline", min(r.id for rs in grouped[v].values() for r in rs)))
    return model, {v: {k: _latest(grouped[v].get(k, [])) for k in STAGES if grouped[v].get(k)} for v in order}


def _variant(store: Store, name: str, stages: dict[str, Record], baseline_eval: dict | None, gates: dict | None):
    from .report import Variant

    convert = stages.get("convert")
    bench = stages.get("bench")
    eval_ = stages.get("eval")
    problems = [f"{r.kind} {r.status}: {r.error}" for r in stages.values() if r.status != "done"]
    bench_result = bench.result if bench else None
    if bench is not None and bench.status != "done":
        # keep what finished: the points stored before the stage stopped
        points = store.points(bench.id)
        bench_result = {**(bench.result or {}), "points": points, "complete": False} if points else None
    model_dir = (convert.result or {}).get("output_dir") if convert and convert.result else None
    model_dir = model_dir or (bench.params.get("checkpoint") if bench else None) or (
        eval_.params.get("checkpoint") if eval_ else "")
    recovery = None
    if eval_ is not None and eval_.status == "done" and baseline_eval is not None and name != "baseline":
        from .evals_core import EvalRun, compare_to_baseline

        try:
            recovery = compare_to_baseline(EvalRun.model_validate(eval_.result), EvalRun.model_validate(baseline_eval),
                                           gates or None, raise_on_fail=False).model_dump(mode="json")
        except UsageError as exc:
            problems.append(f"recovery: {exc.message}")
    if convert:
        method = (convert.result or {}).get("method", name)
    else:  # a checkpoint quantkit did not convert here: its own quantization, or the source dtype
        method = checkpoint_method(((bench.result if bench else None) or {}).get("checkpoint")) or "bf16"
    status = "done" if not problems else ("partial" if bench_result or (eval_ and eval_.status == "done") else "failed")
    size = None
    if convert is None and model_dir and Path(model_dir).is_dir():  # the baseline: its weight files
        from .models import weight_bytes

        size = weight_bytes(Path(model_dir))
    return Variant(name=name, method=method, model_dir=str(model_dir), size_bytes=size,
                   convert=convert.result if convert and convert.status == "done" else None,
                   bench=bench_result, eval=eval_.result if eval_ and eval_.status == "done" else None,
                   recovery=recovery, status=status, error="; ".join(problems) or None)


def environment(variants: list[Any]) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for v in variants:
        if v.bench:
            hw = v.bench.get("hardware") or {}
            env.setdefault("device", hw.get("gpu") or hw.get("cpu"))
            env.setdefault("cpu_count", hw.get("cpu_count"))
            if hw.get("driver"):
                env.setdefault("driver", hw.get("driver"))
            server = v.bench.get("server") or {}
            env.setdefault("vllm", server.get("vllm_version"))
        if v.convert:
            for name, version in (v.convert.get("versions") or {}).items():
                env.setdefault(name, version)
        if v.eval:
            for name, version in (v.eval.get("versions") or {}).items():
                env.setdefault(name, version)
    return {k: val for k, val in env.items() if val is not None}


def compare(store: Store, *, model: str | None = None, keys: list[str] | None = None, out_dir: Path | None = None,
            gates: dict | None = None, bandwidth_gbs: float | None = None, title: str | None = None) -> dict[str, Any]:
    from .report import build_report, write_report

    model, by_variant = gather(store, model, keys)
    base = by_variant.get("baseline", {}).get("eval")
    baseline_eval = base.result if base is not None and base.status == "done" else None
    gates = {k: v for k, v in (gates or {}).items() if v}
    variants = [_variant(store, name, stages, baseline_eval, gates) for name, stages in by_variant.items()]
    recipe_hashes = sorted({s.recipe_hash for st in by_variant.values() for s in st.values() if s.recipe_hash})
    report = build_report(variants, title=title or f"quantkit report: {model}", environment=environment(variants),
                          recipe_hash=",".join(recipe_hashes) or None, bandwidth_gbs=bandwidth_gbs)
    out = Path(out_dir) if out_dir else Path("reports") / model
    paths = write_report(report, out)
    verdicts = [v.recovery.get("passed") for v in variants if v.recovery and v.recovery.get("gates")]
    return {"model": model, "paths": paths, "report": report,
            "gates_passed": all(verdicts) if verdicts else None,
            "variants": [{"name": v.name, "status": v.status, "error": v.error} for v in variants]}
