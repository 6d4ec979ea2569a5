"""`quantkit run RECIPE.yaml`: the matrix (baseline + each method), resumable from the store.

Each variant is one lane: convert it (a method; the baseline needs none), then one vLLM server for
its measurements (bench, then eval) against that same server. Every stage is a store record keyed
by what defines its result (`stages.py`), so a killed run started again skips the keys already done
and redoes only the rest; `--force` redoes everything. A variant whose stage fails is recorded as
failed and the others go on. An executor runs the lanes (`executors.py`: local, one after another,
or Ray, one variant per lane in parallel, the store on the driver); then, with `eval: grow:`,
inconclusive gates get more items (`grow.py`); the report is written from the store alone once
every lane has ended.
"""

from __future__ import annotations

import time
from pathlib import Path

from .. import __version__, machine, models
from ..console import OutputMode
from ..labels import BASELINE
from ..store import Store
from .checks import check_model, check_plan, check_servable_methods
from .executors import Executor, choose
from .grow import grow_stage
from .recipe import load_run
from .stages import Lane, RunContext, RunSummary, StageOutcome

__all__ = ["Lane", "RunContext", "RunSummary", "StageOutcome", "lanes_of", "run"]


def lanes_of(plan) -> list[Lane]:
    """A run recipe's lanes, in order: the baseline (if it has one), then each method entry."""
    return ([Lane(BASELINE, None)] if plan.baseline else []) + [Lane(e.label(), e) for e in plan.methods]


def run(recipe_path: str | Path, *, force: bool = False, report_dir: Path | None = None,
        store: Store | None = None, executor: Executor | str | None = None, address: str | None = None,
        output: OutputMode | None = None, only: list[str] | None = None, note: str | None = None) -> RunSummary:
    """`executor`: an Executor, or "local" / "ray" over the recipe's `executor:` (so is `address`,
    a Ray cluster's); `output` is the command's output mode (the Ray executor's progress view);
    `only`: the lanes to run (a matrix split across calls or machines; the store holds what each
    call measured and the report covers them all); `note`: said after the recipe in the report's
    first note (the demo: which lanes this CPU leaves out, and why)."""
    started = time.monotonic()
    plan = load_run(recipe_path)
    check_plan(plan, str(recipe_path))  # everything the recipe points at, before any work
    lanes = lanes_of(plan)
    labels = [lane.label for lane in lanes]
    if only:  # a typo in --only fails now, not after the model is resolved
        from ..errors import UsageError, did_you_mean

        if unknown := [n for n in only if n not in labels]:
            raise UsageError(f"--only {unknown[0]}: not a variant of {recipe_path}; {did_you_mean(unknown[0], labels)}")
    chosen = choose(plan.executor, executor, address, output) if executor is None or isinstance(executor, str) else executor
    # a recipe that only converts needs no vLLM environment (a GPU session converts while vLLM is
    # still being carried there); measurement keys name the vLLM release that served them
    serves = plan.bench is not None or plan.eval is not None or plan.slo is not None or plan.fidelity is not None
    if serves:  # a method this CPU cannot serve: refused before the model is resolved or converted
        check_servable_methods(plan, [x for x in labels if not only or x in only], str(recipe_path))
    model = models.resolve(plan.model)
    check_model(model, serves)
    from ..serve.env import installed_vllm_version

    ctx = RunContext(plan=plan, model=model, force=force, vllm=installed_vllm_version() if serves else "none",
                     common={"hardware": machine.fingerprint(), "quantkit": __version__})
    if only:
        lanes = [lane for lane in lanes if lane.label in only]
    own_store = store is None
    store = store or Store()
    summary = RunSummary(recipe=str(recipe_path), model=model.name)
    try:
        chosen.run(ctx, lanes, store, summary)
        grow_stage(ctx, lanes, store, summary)  # eval `grow:`: more items while a gate is inconclusive
        # every stage failed before it had a record (an existing checkpoint that does not resolve,
        # a record removed under the run): no report to write; the summary says what failed
        failed_unrecorded = any(o.status == "failed" for o in summary.outcomes) and not store.records(model=model.name)
        if not failed_unrecorded:
            from ..report.gather import compare

            result = compare(store, model=model.name, out_dir=report_dir, gates=plan.gates.model_dump(),
                             bandwidth_gbs=plan.bandwidth_gbs, title=f"{plan.name}: {model.name}",
                             workload=_workload(plan),
                             about=(f"{plan.name}: {plan.description}" if plan.description else plan.name)
                             + (f"; {note}" if note else ""))
            summary.report = {k: str(v) for k, v in result["paths"].items()}
            summary.gates_passed = result["gates_passed"]
            summary.gate_verdict, summary.gate_counts = result["gate_verdict"], result["gate_counts"]
            summary.verdicts = result["verdicts"]
    finally:
        if own_store:
            store.close()
    summary.wall_time_s = round(time.monotonic() - started, 1)
    return summary


def _workload(plan) -> tuple | None:
    """The recipe's capacity workload, so that its report compares capacities of this workload only."""
    from ..report.gather import workload_from

    return workload_from(plan.capacity, plan.slo) if plan.slo else None
