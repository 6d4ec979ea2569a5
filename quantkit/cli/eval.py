"""`quantkit eval` and `quantkit eval-tasks`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.table import Table

from ..console import emit, run_command, stdout
from ..errors import QuantkitError, UsageError, validation_as_usage_error
from ..files import output_folder
from . import app
from .. import numbers
from .options import Json, Quiet, ServingOptions, mode, number_option, serving_options

# Gates field -> the option that sets it (eval's and push's flags alike)
GATE_OPTION_OF_FIELD = {"min_recovery": "--min-recovery", "min_task_recovery": "--min-task-recovery", "tasks": "--gate"}


def parse_gates(min_recovery: float | None, min_task_recovery: float | None, gate: list[str]):
    from ..evals.gates import Gates

    per_task: dict[str, float] = {}
    for item in gate:
        name, sep, value = item.partition("=")
        try:
            per_task[name.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--gate expects TASK=MIN_RECOVERY (e.g. gsm8k=0.9), got '{item}'") from None
        if not sep or not name.strip():
            raise UsageError(f"--gate expects TASK=MIN_RECOVERY (e.g. gsm8k=0.9), got '{item}'")
    if min_recovery is None and min_task_recovery is None and not per_task:
        return None
    with validation_as_usage_error("gate", GATE_OPTION_OF_FIELD):
        return Gates(min_recovery=min_recovery, min_task_recovery=min_task_recovery, tasks=per_task)


@app.command("eval")
@serving_options
def eval_command(
    model_dir: Path = typer.Argument(..., help="Checkpoint folder or smollm2-135m (its tokenizer is used; results are stored in it)."),
    tasks: str = typer.Option(..., "--tasks", "-t", help="Comma-separated tasks and/or suites (quick, openllm); see `quantkit eval-tasks`."),
    limit: Optional[int] = number_option(numbers.Count, "--limit", default=None, help="Items per task (per subtask for mmlu); replaces a suite's limit."),
    num_fewshot: Optional[int] = number_option(numbers.CountOrZero, "--num-fewshot", default=None, help="Few-shot examples; replaces the task's / suite's default."),
    url: Optional[str] = typer.Option(None, "--url", help="Use this running OpenAI-compatible server instead of starting vLLM on DIR."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Results folder (default DIR/quantkit-eval)."),
    chat_template: bool = typer.Option(False, "--chat-template", help="Apply the tokenizer's chat template (few-shot as multi-turn)."),
    max_gen_toks: Optional[int] = number_option(numbers.Tokens, "--max-gen-toks", default=None, help="Cap on generated tokens for generate-until tasks (gsm8k); lm-eval's default is 256."),
    concurrency: int = number_option(numbers.Concurrency, "--concurrency", default=4, help="Concurrent requests lm-eval keeps in flight."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Baseline eval results .json, or a checkpoint folder with results, for recovery."),
    min_recovery: Optional[float] = typer.Option(None, "--min-recovery", help="Gate: minimum average recovery over accuracy tasks (exit 3 below it)."),
    min_task_recovery: Optional[float] = typer.Option(None, "--min-task-recovery", help="Gate: minimum recovery of every task."),
    gate: List[str] = typer.Option([], "--gate", help="Gate on one task, TASK=MIN_RECOVERY (repeatable)."),
    grow_to: Optional[int] = number_option(numbers.Count, "--grow-to", default=None, help="While a gate is inconclusive, score more items (a fixed seeded order, on the baseline folder too) up to this many per task."),
    grow_seed: int = number_option(numbers.Seed, "--grow-seed", default=1234, help="Seed of the order in which --grow-to adds items."),
    json: Json = False,
    quiet: Quiet = False,
    serve: ServingOptions = None,
) -> None:
    """Run lm-eval tasks against DIR served by vLLM (eager unless --no-enforce-eager); store the scores."""
    out_mode = mode(json, quiet)

    def body():
        from ..evals import gates as gates_mod, results, run as runner
        gates = parse_gates(min_recovery, min_task_recovery, gate)
        if output is not None:
            output_folder(output, "--output")
        if gates is not None and baseline is None:
            raise UsageError("recovery gates need --baseline (results .json or checkpoint folder)")
        if grow_to is not None and gates is None:
            raise UsageError("--grow-to adds items until a gate is decided: give a gate (--min-recovery, ...)")
        growth = gates_mod.GrowSettings(max_items=grow_to, seed=grow_seed) if grow_to is not None else None
        if baseline is not None:
            # Fail before an hour of evaluation, not after it.
            results.find_baseline(baseline)
        if growth is not None:
            from ..evals import grow

            baseline_dir = grow.check_can_grow(baseline)
        options = dict(limit=limit, num_fewshot=num_fewshot, output_dir=output, chat_template=chat_template,
                       max_gen_toks=max_gen_toks, num_concurrent=concurrency)
        config = serve.config(**runner.EVAL_SERVE_DEFAULTS)
        run = runner.evaluate(model_dir, tasks, url=url, serve=config, **options)
        result: dict[str, Any] = {"run": run, "recovery": None}
        if baseline is None:
            return result
        base = results.find_baseline(baseline, like=run)
        if growth is not None:
            run, base, report = grow.until_decided(run, base, baseline_dir, tasks, gates, growth, url=url, serve=config,
                                                   options=options)
            result["run"] = run
        else:
            report = gates_mod.compare_to_baseline(run, base, gates, raise_on_fail=False)
        result["recovery"] = report
        if not report.passed:  # the report, then the one line and exit 3 (failed) or 4 (inconclusive)
            try:
                gates_mod.raise_for_verdict(report)
            except QuantkitError as exc:  # --json: one object, the report under "result"
                if out_mode.json:
                    exc.result = _jsonable(result)
                else:
                    emit(_jsonable(result), out_mode, _print_result)
                raise
        return result

    run_command(lambda: _jsonable(body()), out_mode, _print_result)


def _jsonable(result: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.model_dump(mode="json") if hasattr(v, "model_dump") else v) for k, v in result.items()}


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{low:.4f}, {high:.4f}]"


def _print_result(result: dict[str, Any]) -> None:
    from functools import partial

    from ..report.render import fmt_pm

    pm = partial(fmt_pm, missing="-")  # the terminal's tables mark a missing value `-`, as every command does
    run = result["run"]
    table = Table("task", "n-shot", "items", "metric", "score", "time", title=run["model_dir"], title_justify="left")
    for t in run["tasks"]:
        m = t["metrics"][t["primary_metric"]]
        items = f"{t['n_samples']}/{t['n_available']}"
        table.add_row(t["task"] + (" *" if t["data"]["note"] else ""), str(t["n_shot"]), items,
                      t["primary_metric"].replace(",none", ""), pm(m["value"], m["stderr"]), f"{t['wall_time_s']:.0f} s")
    stdout.print(table)
    for t in run["tasks"]:
        if t["data"]["note"]:
            stdout.print(f"* {t['task']}: {t['data']['note']}")
    stdout.print(f"results: {run['results_file']}")
    report = result.get("recovery")
    if not report:
        return
    rec = Table("task", "metric", "items", "quantized", "baseline", "recovery", f"{report['confidence']:.0%} interval",
                "method", "independent ±", title=f"recovery vs {report['baseline_file']}", title_justify="left")
    for r in report["tasks"]:
        rec.add_row(r["task"], r["metric"].replace(",none", ""), str(r["n_items"] or "-"),
                    pm(r["quantized"], r["quantized_stderr"]), pm(r["baseline"], r["baseline_stderr"]),
                    pm(r["recovery"], r["recovery_stderr"]), _interval(r["recovery_low"], r["recovery_high"]),
                    r["method"], pm(r["independent_stderr"], None))
    rec.add_row("average", "", "", "", "", pm(report["mean_recovery"], report["mean_recovery_stderr"]),
                _interval(report["mean_recovery_low"], report["mean_recovery_high"]), report["mean_method"] or "-",
                pm(report["mean_independent_stderr"], None))
    stdout.print(rec)
    from ..evals.gates import GateVerdict

    colour = {"pass": "green", "fail": "red", "inconclusive": "yellow"}
    for g in report["gates"]:
        verdict = GateVerdict.model_validate(g)
        line = verdict.summary() if verdict.verdict == "pass" else verdict.describe()
        stdout.print(f"gate {g['gate']}: [{colour[g['verdict']]}]{g['verdict']}[/{colour[g['verdict']]}]: {line}",
                     soft_wrap=True)
    if report["gates"]:
        counts = {v: sum(g["verdict"] == v for g in report["gates"]) for v in ("pass", "fail", "inconclusive")}
        stdout.print(f"gates: {counts['pass']} pass, {counts['fail']} fail, {counts['inconclusive']} inconclusive")


@app.command("eval-tasks")
def eval_tasks(json: Json = False, quiet: Quiet = False) -> None:
    """List the evaluation tasks and suites quantkit knows."""

    def body():
        from ..evals.tasks import registry, suites

        return {
            "tasks": [{"name": t.name, "stock": t.stock, "metric": t.metric, "higher_is_better": t.higher_is_better,
                       "offline_note": t.offline_note} for t in registry().values()],
            "suites": [{"name": s.name, "description": s.description,
                        "tasks": [e.model_dump() for e in s.tasks]} for s in suites().values()],
        }

    def human(data):
        table = Table("task", "lm-eval template", "headline metric")
        for t in data["tasks"]:
            table.add_row(t["name"], t["stock"], t["metric"].replace(",none", ""))
        stdout.print(table)
        for s in data["suites"]:
            parts = ", ".join(
                f"{e['task']} {e['num_fewshot'] if e['num_fewshot'] is not None else 'default'}-shot"
                + (f" x{e['limit']}" if e["limit"] else "")
                for e in s["tasks"]
            )
            stdout.print(f"[bold]{s['name']}[/bold]: {parts}")

    run_command(body, mode(json, quiet), human)
