"""More items until a gate is decided: growing an eval result in a fixed, seeded order.

An inconclusive gate says how many more items per task would likely decide it. Growing adds
them to both the baseline and the variant, on the same items, without re-scoring what is stored:

- The order of a (sub)task's items is fixed: its first `limit` items (what lm-eval's `--limit`
  scores, the result being grown), then the rest of the split in a permutation seeded by
  (`seed`, subtask name). The permutation is cut into blocks of `step` items.
- A grown result holds the first `limit` items plus whole blocks. Each block is scored by its own
  lm-eval call on exactly its items (`samples=`), so its prompts (few-shot examples included)
  are the same whichever run scores it and however many blocks are added at once: baseline and
  variant grown to the same block count hold the same items with the same prompts.
- The items already scored come from the stored result (its per-item scores), never from the
  server again; the merged result's metrics are recomputed from the items with lm-eval's own
  aggregation and stderr functions.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..console import info, step
from ..errors import UsageError
from .gates import GrowSettings, RecoveryReport
from .results import EvalRun, Growth, ItemScores, Metric, TaskResult, item_scores
from .run import BOOTSTRAP_ITERS, EVAL_SERVE_DEFAULTS, EvalPlan, leaf_tasks, model_args_for, run_task, write_samples


def item_order(size: int, limit: int, seed: int, leaf: str) -> list[int]:
    """A (sub)task's doc indices in growing order: the first `limit`, then a seeded permutation."""
    rest = list(range(min(limit, size), size))
    random.Random(f"{seed}:{leaf}").shuffle(rest)  # str seeds hash with sha512: stable across runs
    return list(range(min(limit, size))) + rest


def blocks_for(items: int, limit: int, step: int) -> int:
    """Blocks beyond the first `limit` items needed to hold at least `items` items."""
    return max(0, math.ceil((items - limit) / step))


def order_of(results: list[TaskResult], settings: GrowSettings) -> tuple[int, int]:
    """(seed, step) of a task's growth: the one a stored result already grew with (the baseline's
    first: its items are what the others pair with), else the settings'."""
    for result in results:
        if result.growth:
            return result.growth.seed, result.growth.step
    return settings.seed, settings.step or results[0].limit or 1


def per_leaf_items(result: TaskResult) -> int:
    """Items per (sub)task in the growing order: `limit` plus its blocks (what a goal counts)."""
    if result.growth:
        return (result.limit or 0) + result.growth.blocks * result.growth.step
    return result.limit or result.n_samples


def targets(reports: list[RecoveryReport], runs: list[EvalRun], settings: GrowSettings) -> dict[str, int]:
    """Items per (sub)task to grow to: for every task an inconclusive gate of `reports` would
    likely decide with more items, the largest of their estimates in whole blocks, capped by
    `max_items` (in whole blocks too). `runs` are the results that will grow (baseline first);
    a task already at the cap, or scored whole, is left out."""
    wanted: dict[str, int] = {}
    for report in reports:
        for gate in report.undecided():
            for task, more in (gate.more_items or {}).items():
                row = next(r for r in report.tasks if r.task == task)
                wanted[task] = max(wanted.get(task, 0), (row.n_items or 0) + more)
    out: dict[str, int] = {}
    for task, total in wanted.items():
        results = [t for run in runs if (t := run.task(task)) is not None]
        if not results or results[0].limit is None or any(t.items is None for t in results):
            continue  # the whole split is scored already, or an old result without per-item scores
        limit = results[0].limit
        _, step_size = order_of(results, settings)
        per_leaf = math.ceil(total / max(1, len(results[0].subtasks)))
        most = limit + max(0, (settings.max_items - limit) // step_size) * step_size
        goal = min(limit + blocks_for(per_leaf, limit, step_size) * step_size, most)
        if goal > min(per_leaf_items(t) for t in results):
            out[task] = goal
    return out


def grow_result(server, plan: EvalPlan, previous: EvalRun, goal: dict[str, int],
                orders: dict[str, tuple[int, int]]) -> EvalRun:
    """`previous` with every task of `goal` grown to that many items per (sub)task, in the order
    `orders[task]` = (seed, step), scored on `server`; the other tasks are carried over as they are."""
    with plan.cleaned_on_failure():
        model_args = model_args_for(server, plan)
        run = previous.model_copy(deep=True)
        run.created_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        run.results_file = None
        for spec in plan.specs:
            result = run.task(spec.name)
            if result is None or spec.name not in goal or per_leaf_items(result) >= goal[spec.name]:
                continue
            if result.items is None or result.primary_metric not in result.items.values:
                raise UsageError(f"cannot grow task '{spec.name}': its stored result has no per-item scores "
                                 "(evaluated before quantkit stored them); evaluate it again")
            seed, step_size = orders[spec.name]
            if result.growth and (result.growth.seed, result.growth.step) != (seed, step_size):
                raise UsageError(f"task '{spec.name}' grew earlier with seed {result.growth.seed} and blocks of "
                                 f"{result.growth.step}, its baseline with seed {seed} and blocks of {step_size}: "
                                 "their items would not pair; evaluate it again")
            grown = _grow_task(server, plan, spec, model_args, result, goal[spec.name], seed, step_size,
                               previous.results_file)
            run.tasks[run.tasks.index(result)] = grown
            run.write(plan.results_path)  # after every task: a crash keeps what finished
        run.wall_time_s = round(previous.wall_time_s + time.monotonic() - plan.started, 2)
        run.write(plan.results_path)
        return run


def _grow_task(server, plan: EvalPlan, spec, model_args: dict[str, Any], result: TaskResult, goal: int,
               seed: int, step_size: int, previous_file: str | None) -> TaskResult:
    leaves = leaf_tasks(plan, spec.name)
    done = result.growth.blocks if result.growth else 0
    limit = result.limit or 0
    blocks = blocks_for(goal, limit, step_size)
    t0 = time.monotonic()
    items, new_rows = result.items, 0
    samples_path = plan.run_dir / f"samples_{spec.name}.jsonl"
    logged: dict[str, list[dict]] = {}
    for block in range(done + 1, blocks + 1):
        for leaf, task in leaves.items():
            order = item_order(len(task.eval_docs), limit, seed, leaf)
            ids = sorted(order[limit + (block - 1) * step_size: limit + block * step_size])
            if not ids:
                continue  # this subtask is used up
            with step(f"growing {spec.name}{'/' + leaf if len(leaves) > 1 else ''}: block {block} of {blocks} "
                      f"({len(ids)} items, seed {seed})"):
                results = run_task(server, plan, spec, model_args, obj=task, samples={leaf: ids})
            rows = (results.get("samples") or {}).get(leaf) or []
            logged.setdefault(leaf, []).extend(rows)
            scores = item_scores({leaf: rows})
            if scores is None:
                raise UsageError(f"lm-eval logged no per-item scores for {leaf} (block {block})")
            if len(leaves) > 1:  # a group's items are keyed subtask/doc_id
                scores = ItemScores(ids=[f"{leaf}/{i}" for i in scores.ids], prompts=scores.prompts,
                                    values=scores.values, weights=scores.weights)
            items = items.merged(scores)
            new_rows += len(scores.ids)
    write_samples(samples_path, logged)
    grown = result.model_copy(deep=True)
    grown.items = items
    grown.n_samples = len(items.ids)
    grown.metrics = _recomputed_metrics(result, items, leaves, plan, spec.name)
    grown.samples_file = str(samples_path)
    grown.wall_time_s = round(result.wall_time_s + time.monotonic() - t0, 2)
    grown.growth = Growth(seed=seed, step=step_size, blocks=max(done, blocks), previous_results_file=previous_file)
    primary = grown.primary
    info(f"{spec.name}: {new_rows} more items scored, {grown.n_samples} in all; {grown.primary_metric} = {primary.value:.4f}"
         + (f" ± {primary.stderr:.4f}" if primary.stderr is not None else ""))
    return grown


def _recomputed_metrics(result: TaskResult, items: ItemScores, leaves: dict[str, Any], plan: EvalPlan,
                        name: str) -> dict[str, Metric]:
    """The task's metrics recomputed from all its items, as lm-eval aggregates them."""
    from lm_eval.api.metrics import aggregate_subtask_metrics, pooled_sample_stderr, stderr_for_metric

    grouped = len(leaves) > 1
    out: dict[str, Metric] = {}
    for key in result.metrics:
        if key not in items.values:
            continue  # not logged per item: it cannot be recomputed, so it is not claimed
        metric = key.split(",", 1)[0]
        per_leaf: list[tuple[float, float | None, int]] = []
        for leaf, task in leaves.items():
            rows = [k for k, i in enumerate(items.ids) if not grouped or i.startswith(f"{leaf}/")]
            if not rows:
                continue
            values = items.values[key]
            data = ([(values[k], items.weights[key][k]) for k in rows] if key in items.weights
                    else [values[k] for k in rows])
            aggregate = task.aggregation()[metric]
            stderr_fn = stderr_for_metric(aggregate, BOOTSTRAP_ITERS)
            stderr = stderr_fn(data) if stderr_fn is not None and len(data) > 1 else None
            per_leaf.append((float(aggregate(data)), stderr, len(rows)))
        if not per_leaf:
            continue
        if not grouped:
            value, stderr, _ = per_leaf[0]
        else:
            weight_by_size = _weight_by_size(plan, name, metric)
            sizes = [n for _, _, n in per_leaf]
            value = float(aggregate_subtask_metrics([v for v, _, _ in per_leaf], sizes, weight_by_size))
            stderrs = [s for _, s, _ in per_leaf]
            stderr = float(pooled_sample_stderr(stderrs, sizes)) if all(s is not None for s in stderrs) else None
        out[key] = Metric(value=value, stderr=stderr if stderr is None or math.isfinite(stderr) else None)
    if result.primary_metric not in out:
        raise UsageError(f"task '{name}': its headline metric {result.primary_metric} cannot be recomputed from its items")
    return out


def _weight_by_size(plan: EvalPlan, name: str, metric: str) -> bool:
    group = (plan.loaded[name].get("groups") or {}).get(name)
    config = getattr(group, "config", None)
    for entry in (getattr(config, "aggregate_metric_list", None) or []):
        entry = entry if isinstance(entry, dict) else getattr(entry, "__dict__", {})
        if entry.get("metric") == metric:
            return bool(entry.get("weight_by_size", True))
    return True


def check_can_grow(baseline: str | Path) -> Path:
    """Growing scores the added items on the baseline too: it must be a checkpoint folder."""
    path = Path(baseline).expanduser()
    if not path.is_dir() or not (path / "config.json").is_file():
        raise UsageError(f"--grow-to needs --baseline to be a checkpoint folder (its added items are scored on the "
                         f"baseline too), not {baseline}")
    return path.resolve()


def until_decided(run: EvalRun, base: EvalRun, baseline_dir: Path, tasks: str, gates, settings: GrowSettings, *,
                  url: str | None, serve, options: dict[str, Any]) -> tuple[EvalRun, EvalRun, RecoveryReport]:
    """`quantkit eval --grow-to N`: grow the baseline and then the evaluated checkpoint (one server
    at a time, each grown result a store record) while a gate is inconclusive and items are left."""
    from .gates import compare_to_baseline

    report = compare_to_baseline(run, base, gates, raise_on_fail=False)
    for round_no in range(1, settings.max_rounds + 1):
        if report.verdict != "inconclusive":
            break
        goal = targets([report], [base, run], settings)
        if not goal:
            info(f"still inconclusive, and no task can grow further (--grow-to {settings.max_items}, "
                 "or the whole split is scored)")
            break
        orders = {task: order_of([t for r in (base, run) if (t := r.task(task)) is not None], settings) for task in goal}
        info(f"grow round {round_no}: scoring up to " + ", ".join(f"{t} {n}" for t, n in goal.items())
             + " items per (sub)task, the baseline first")
        base = _grow_recorded(baseline_dir, base, tasks, goal, orders, None, serve, {**options, "output_dir": None})
        run = _grow_recorded(Path(run.model_dir), run, tasks, goal, orders, url, serve, options)
        report = compare_to_baseline(run, base, gates, raise_on_fail=False)
    return run, base, report


def _grow_recorded(folder: Path, previous: EvalRun, tasks: str, goal: dict[str, int], orders: dict[str, tuple[int, int]],
                   url: str | None, serve, options: dict[str, Any]) -> EvalRun:
    from ..serve.server import open_server
    from ..store import Store, standalone
    from .run import prepare_eval

    todo = {t: n for t, n in goal.items() if (r := previous.task(t)) is not None and per_leaf_items(r) < n}
    if not todo:
        return previous
    plan = prepare_eval(folder, tasks, **options)
    with plan.cleaned_on_failure(), Store() as store, contextlib.ExitStack() as stack:
        opening = open_server(folder, url, serve, defaults=EVAL_SERVE_DEFAULTS)
        if url:
            server = stack.enter_context(opening)
        else:
            with step(f"starting vLLM on {folder.name}"):
                server = stack.enter_context(opening)
        with standalone(store, "eval", folder, serve, {"tasks": tasks, **options}, url=url,
                        grown_from=previous.results_file, goal=todo) as rec:
            grown = grow_result(server, plan, previous, todo, orders)
            rec.finish(grown.model_dump(mode="json"), grown.results_file)
    return grown
