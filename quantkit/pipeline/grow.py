"""The growth phase of `quantkit run`: once every lane has run, while a gate is inconclusive and
the recipe's eval has `grow:`, score more items on the baseline and on the undecided variants.

Each round reads the newest eval of every variant from the store, compares it with the
baseline's, and for the inconclusive ones asks `evals.grow.targets` how many items per task
would likely decide them (capped by `grow.max_items`). The baseline grows first (its items are
what the variants pair with), then each undecided variant, one server at a time; each grown
result is a new eval record whose key chains the record it grew from and the goal, so a killed
run resumes where it stopped and the readers (compare, card, push) take the newest eval as always.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..console import info, warn
from ..errors import UsageError
from ..evals.gates import RecoveryReport, compare_to_baseline
from ..evals.results import EvalRun
from ..labels import BASELINE
from ..store import Record, Store, run_key
from .stages import Lane, RunContext, RunSummary, StageOutcome, checkpoint_dir, stage_failure


def _newest_evals(store: Store, model: str) -> dict[str, Record]:
    evals: dict[str, Record] = {}
    for r in store.records(model=model, kind="eval", status="done"):
        evals[r.variant] = r  # ordered by id: the newest wins
    return evals


def grow_stage(ctx: RunContext, lanes: list[Lane], store: Store, summary: RunSummary) -> None:
    plan = ctx.plan
    settings = plan.eval.grow if plan.eval is not None else None
    gates = plan.gates.model_dump()
    if settings is None or not plan.baseline or not any(gates.values()):
        return
    folders = {BASELINE: ctx.model.path} | {lane.label: checkpoint_dir(ctx, lane.entry) for lane in lanes if lane.entry}
    for round_no in range(1, settings.max_rounds + 1):
        evals = _newest_evals(store, ctx.model.name)
        base = evals.get(BASELINE)
        if base is None:
            return
        base_run = EvalRun.model_validate(base.result)
        undecided: dict[str, tuple[Record, RecoveryReport]] = {}
        for label, record in evals.items():
            if label == BASELINE or label not in folders:
                continue
            try:
                report = compare_to_baseline(EvalRun.model_validate(record.result), base_run, gates, raise_on_fail=False)
            except UsageError:
                continue  # the report says why it has no recovery
            if report.verdict == "inconclusive":
                undecided[label] = (record, report)
        if not undecided:
            return
        from ..evals.grow import order_of, targets

        runs = [base_run] + [EvalRun.model_validate(r.result) for r, _ in undecided.values()]
        goal = targets([rep for _, rep in undecided.values()], runs, settings)
        if not goal:
            info(f"grow: {', '.join(undecided)} still inconclusive, and no task can grow further "
                 f"(grow.max_items {settings.max_items}, or the whole split is scored)")
            return
        orders = {task: order_of([t for run in runs if (t := run.task(task)) is not None], settings) for task in goal}
        info(f"grow round {round_no}: {', '.join(undecided)} inconclusive; scoring up to "
             + ", ".join(f"{task} {n}" for task, n in goal.items()) + " items per (sub)task")
        for label, record in [(BASELINE, base)] + [(label, r) for label, (r, _) in undecided.items()]:
            if not _grow_one(ctx, label, Path(folders[label]), record, goal, orders, store, summary):
                return  # a failed growth: the verdicts stay as they are, every result is stored


def _grow_one(ctx: RunContext, label: str, folder: Path, record: Record, goal: dict[str, int],
              orders: dict[str, tuple[int, int]], store: Store, summary: RunSummary) -> bool:
    from ..evals.grow import grow_result, per_leaf_items
    from ..evals.run import prepare_eval
    from ..serve.server import VLLMServer

    previous = EvalRun.model_validate(record.result)
    todo = {task: n for task, n in goal.items() if (t := previous.task(task)) is not None and per_leaf_items(t) < n}
    if not todo:
        return True
    key = run_key("eval", grown_from=record.run_key, goal=todo, orders={t: list(orders[t]) for t in todo})
    if store.done(key) and not ctx.force:
        info(f"[{label}] eval grown to {todo}: done earlier ({key[:10]}), skipped")
        summary.outcomes.append(StageOutcome(variant=label, kind="eval+", status="skipped", run_key=key))
        return True
    params = {**record.params, "grown_from": record.run_key, "goal": todo}
    e = ctx.plan.eval
    t0 = time.monotonic()
    try:
        with store.stage(key, "eval", ctx.model.name, label, params) as rec:
            plan = prepare_eval(folder, e.tasks, limit=e.limit, num_fewshot=e.num_fewshot, num_concurrent=e.num_concurrent)
            with VLLMServer(folder, ctx.plan.serve) as server:
                result = grow_result(server, plan, previous, todo, orders)
            rec.finish(result.model_dump(mode="json"), result.results_file)
    except Exception as exc:  # recorded failed by store.stage; the report is still written
        error = stage_failure(exc)
        warn(f"[{label}] growing the eval failed: {error}")
        summary.outcomes.append(StageOutcome(variant=label, kind="eval+", status="failed", run_key=key,
                                             error=error, seconds=round(time.monotonic() - t0, 1)))
        return False
    summary.outcomes.append(StageOutcome(variant=label, kind="eval+", status="done", run_key=key,
                                         seconds=round(time.monotonic() - t0, 1)))
    return True
