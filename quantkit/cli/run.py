"""`quantkit run`, `quantkit demo`, `quantkit compare`."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from ..console import emit, run_command, stdout
from ..errors import BackendError, GateFailed, GateInconclusive
from . import app
from .. import numbers
from ..files import output_folder
from ..measure.stats.tiers import TIERS
from ..labels import EXECUTORS
from .options import Json, Quiet, mode, number_option

def _print_summary(summary) -> None:
    table = Table("variant", "stage", "status", "seconds", "key", "error")
    for o in summary.outcomes:
        table.add_row(o.variant, o.kind, o.status, f"{o.seconds:.0f}", o.run_key[:10], o.error or "")
    stdout.print(table)
    if summary.report:
        stdout.print(f"report: {summary.report.get('md')}  {summary.report.get('html')}")
    counts = summary.gate_counts
    if summary.gate_verdict is None:
        gates = "none set"
    else:
        gates = (f"{counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, {counts.get('inconclusive', 0)} inconclusive"
                 f" ({', '.join(f'{v} {verdict}' for v, verdict in summary.verdicts.items())})")
    stdout.print(f"wall time {summary.wall_time_s:.0f} s; gates: {gates}")


def _run(recipe: str, force: bool, report_dir: Optional[Path], json: bool, quiet: bool,
         enforce_gates: bool = True, executor: Optional[str] = None, address: Optional[str] = None,
         only: Optional[List[str]] = None, note: Optional[str] = None) -> None:
    from ..pipeline import run as run_pipeline

    def body():
        if report_dir is not None:  # a file there would fail the report after the whole run
            output_folder(report_dir, "--report-dir")
        summary = run_pipeline(recipe, force=force, report_dir=report_dir, executor=executor, address=address,
                               output=mode(json, quiet), only=only or None, note=note)
        failed = [o for o in summary.outcomes if o.status == "failed"]
        gated = summary.gate_verdict in ("fail", "inconclusive") and enforce_gates
        if (failed or gated) and not json:
            # the summary (and the report) first: the error line is the last thing said
            emit(summary, mode(json, quiet), _print_summary)
        error = None
        if failed:  # a pipeline that gates on quantkit must not pass when a stage did not run
            what = "; ".join(f"{o.variant} {o.kind}: {o.error}" for o in failed)
            error = BackendError(f"{len(failed)} stage(s) failed ({what}); the other results are stored"
                                 + (f", report {summary.report.get('md')}" if summary.report else ""))
        elif gated:
            which = sorted(v for v, verdict in summary.verdicts.items() if verdict == summary.gate_verdict)
            if summary.gate_verdict == "fail":
                error = GateFailed(f"a gate failed ({', '.join(which)}); see {summary.report.get('md')} (every result is stored)")
            else:
                error = GateInconclusive(f"a gate is inconclusive ({', '.join(which)}): its interval holds the threshold; "
                                         f"`eval: grow:` in the recipe adds items until it is decided; see "
                                         f"{summary.report.get('md')} (every result is stored)")
        if error is not None:
            error.result = summary  # --json prints it inside the error object
            raise error
        return summary

    run_command(body, mode(json, quiet), _print_summary)


@app.command()
def run(
    recipe: str = typer.Argument(..., help="Run recipe YAML (model, baseline, methods, serve, bench, eval, gates)."),
    force: bool = typer.Option(False, "--force", help="Redo stages already in the store."),
    report_dir: Optional[Path] = typer.Option(None, "--report-dir", "-o", help="Where the report goes (default reports/<model>)."),
    executor: Optional[str] = typer.Option(None, "--executor", "-e", help=" or ".join(f"{name} ({what})" for name, what in EXECUTORS.items()) + "; overrides the recipe's executor:."),
    address: Optional[str] = typer.Option(None, "--address", help="A Ray cluster to join (HEAD:6379; default $RAY_ADDRESS, else a Ray instance on this machine); implies --executor ray."),
    only: Optional[List[str]] = typer.Option(None, "--only", help="Run only this variant (baseline or a method's name); repeatable. The report covers every variant in the store."),
    json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Convert, serve, bench and evaluate every variant of a recipe; resumable; then write the report.

    With --executor ray the variants run in parallel, one per lane, with a live table of each lane."""
    _run(recipe, force, report_dir, json, quiet, executor=executor, address=address, only=only)


@app.command()
def demo(
    force: bool = typer.Option(False, "--force", help="Redo stages already in the store."),
    report_dir: Optional[Path] = typer.Option(None, "--report-dir", "-o"),
    json: Json = False,
    quiet: Quiet = False,
) -> None:
    """The main job on the built-in demo model: SmolLM2-135M, bf16 vs INT8 (vs GPTQ), each served, measured, evaluated.

    The recipe fits the CPU: recipes/runs/demo.yaml where it computes bf16 natively (AVX-512 BF16,
    AMX, Arm bf16) or on a GPU; recipes/runs/demo-fp32.yaml elsewhere (AVX2: served in float32,
    GPTQ left out, fewer eval items; its header says why). `quantkit doctor` says which, and how
    long it takes here. The demo shows the gates' verdicts (pass, fail or inconclusive) in its
    report but exits 0 when one fails or is undecided (a 135M model loses much at 4 bits; that is
    the finding, not an error of the demo). `quantkit run recipes/runs/demo.yaml` enforces them
    (exit 3 failed, 4 inconclusive)."""
    from ..console import info
    from ..demo import profile_for
    from ..machine import cpu_isa
    from ..pipeline import lanes_of
    from ..pipeline.recipe import load_run

    isa = cpu_isa()
    profile = profile_for(isa)
    info(f"demo: recipes/runs/{profile.recipe}.yaml ({isa.describe()}: {profile.says})")
    lanes = profile.lanes([lane.label for lane in lanes_of(load_run(profile.recipe))])
    _run(profile.recipe, force, report_dir, json, quiet, enforce_gates=False, only=lanes,
         note=f"{', '.join(profile.leave_out)} left out on this CPU ({isa.describe()}): {profile.left_out_because}"
         if lanes else None)


@app.command()
def compare(
    keys: Optional[List[str]] = typer.Argument(None, help="Run keys (prefixes) to compare instead of a whole model."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name as stored (e.g. smollm2-135m)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Report folder (default reports/<model>)."),
    min_recovery: Optional[float] = typer.Option(None, "--min-recovery", help="Gate: average recovery at least this."),
    bandwidth: Optional[float] = number_option(numbers.Positive, "--bandwidth-gbs", default=None, help="Device memory bandwidth for the batch-1 bound."),
    workload: Optional[str] = typer.Option(None, "--workload", help="Capacity of this workload, IN/OUT tokens (e.g. 4096/512); default: the newest measured."),
    accuracy_from: Optional[str] = typer.Option(None, "--accuracy-from", help="Variants not evaluated take recovery and gates from this stored model's evals of the same methods (a proxy, said in the report)."),
    run_gates: bool = typer.Option(True, "--run-gates/--no-run-gates", help="Without --min-recovery, apply the gates the run itself used (stored with its evals)."),
    price: Optional[float] = number_option(numbers.Positive, "--price-per-hour", default=None, help="What the serving machine (e.g. one GPU) costs per hour: the SLO-tier table adds the cost per million output tokens (or QUANTKIT_PRICE_PER_HOUR)."),
    slo: Optional[str] = typer.Option(None, "--slo", help=f"Capacity under this SLO (or tier: {', '.join(TIERS)}), judged again from the stored ladders without measuring; says what to run where a ladder does not cover it."),
    max_delta_nll: Optional[float] = typer.Option(None, "--max-delta-nll", help="Fidelity gate: ΔNLL's upper bound at most this, judged again on the stored fidelity intervals (0: off; default 0.05 once either fidelity gate is given)."),
    min_top1: Optional[float] = typer.Option(None, "--min-top1", help="Fidelity gate: top-1 agreement's lower bound at least this, judged again on the stored fidelity intervals (0: off; default 0.85 once either is given)."),
    json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Write the precision-versus-throughput report (Markdown, HTML, JSON) from the store alone.

    With --accuracy-from P, a model with random weights (speed only) is gated on P's accuracy.
    With --slo S, every capacity is re-derived under S from the points already stored."""
    from ..measure.stats.tiers import resolve
    from ..report.gather import compare as do_compare, parse_workload
    from ..report.tiers import tier_lines
    from ..store import Store
    from .eval import parse_gates

    def body():
        lengths = parse_workload(workload) if workload else None
        wanted = resolve(slo)[1] if slo else None
        parse_gates(min_recovery or None, None, [])  # 0 turns the gate off, as it does on push
        fidelity_gates = None
        if max_delta_nll is not None or min_top1 is not None:  # the one not given keeps its default; 0: off
            from ..errors import validation_as_usage_error
            from ..fidelity.gate import FidelityGates
            from .fidelity import GATE_OPTION_OF_FIELD  # the same options as `quantkit fidelity`'s

            with validation_as_usage_error("fidelity gate", GATE_OPTION_OF_FIELD):
                given = {"max_delta_nll": max_delta_nll, "min_top1": min_top1}
                fidelity_gates = FidelityGates(**{k: v or None for k, v in given.items() if v is not None})
        if output is not None:
            output_folder(output, "--output")
        with Store() as store:
            result = do_compare(store, model=model, keys=keys or None, out_dir=output, workload=lengths,
                                gates={"min_recovery": min_recovery}, bandwidth_gbs=bandwidth,
                                accuracy_from=accuracy_from, slo=wanted, stored_gates=run_gates,
                                price_per_hour=price, fidelity_gates=fidelity_gates)
        decision = result["report"].decision
        return {"model": result["model"], "paths": {k: str(v) for k, v in result["paths"].items()},
                "gates_passed": result["gates_passed"], "gate_verdict": result["gate_verdict"],
                "gate_counts": result["gate_counts"], "verdicts": result["verdicts"], "variants": result["variants"],
                "decision": decision.model_dump(mode="json") if decision is not None else None,
                "tiers": tier_lines(result["report"].tiers)}

    def human(r):
        for v in r["variants"]:
            verdict = r["verdicts"].get(v["name"], "") + (f" (from {v['accuracy_from']})" if v["accuracy_from"] else "")
            stdout.print(f"{v['name']:<12} {v['status']:<8} {verdict:<12} {v['error'] or ''}")
        if r["gate_verdict"] is not None:
            c = r["gate_counts"]
            stdout.print(f"gates: {c['pass']} pass, {c['fail']} fail, {c['inconclusive']} inconclusive")
        if r["decision"]:
            stdout.print(("recommended: " if r["decision"]["status"] == "recommended" else "") + r["decision"]["summary"])
        for line in r["tiers"]:  # met, broken, or undecided with the requests it needs, per SLO tier
            stdout.print(line)
        stdout.print(f"report: {r['paths'].get('md')}  {r['paths'].get('html')}")

    run_command(body, mode(json, quiet), human)
