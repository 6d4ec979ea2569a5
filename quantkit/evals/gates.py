"""Recovery against a baseline, and the gates that decide whether a variant passes.

`compare_to_baseline(results, baseline, gates)` gives recovery = quantized / baseline per task and
on average, with propagated standard errors, and raises GateFailed when a gate fails (unless told
not to). Recovery stderr uses the delta method for a ratio of independent estimates,
r * sqrt((se_q/q)^2 + (se_b/b)^2); the two runs score the same items, so the true error of the
ratio is smaller: the reported one is conservative.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field

from ..errors import GateFailed, UsageError
from .results import EvalRun, protocol_mismatch


class Gates(BaseModel):
    """Accuracy gates (the recipe's `gates:`). All are minimum recoveries (quantized / baseline)."""

    model_config = ConfigDict(extra="forbid")

    min_recovery: float | None = Field(None, gt=0, description="on the average over accuracy tasks")
    min_task_recovery: float | None = Field(None, gt=0, description="on every task")
    tasks: dict[str, float] = Field(default_factory=dict, description="per named task")


class TaskRecovery(BaseModel):
    task: str
    metric: str
    higher_is_better: bool
    quantized: float
    quantized_stderr: float | None
    baseline: float
    baseline_stderr: float | None
    recovery: float | None  # None when the baseline score is 0 (or a perplexity is 0)
    recovery_stderr: float | None


class GateVerdict(BaseModel):
    gate: str  # "min_recovery" | "min_task_recovery" | "tasks"
    task: str | None  # None for the average
    threshold: float
    value: float | None
    passed: bool

    def summary(self) -> str:
        """The verdict in one line, passed or not: `average recovery 0.9706 >= 0.9`."""
        what = self.task or "average"
        shown = f"{self.value:.4f}" if self.value is not None else "undefined"
        return f"{what} recovery {shown} {'>=' if self.passed else '<'} {self.threshold:g}" + ("" if self.passed else " (failed)")

    def describe(self) -> str:
        """Why a failed gate failed: `average recovery 0.8900 < 0.9 (short by 0.0100)`."""
        what = self.task or "average"
        if self.value is None:
            return f"{what}: recovery undefined (baseline score 0) against min {self.threshold:g}"
        return f"{what} recovery {self.value:.4f} < {self.threshold:g} (short by {self.threshold - self.value:.4f})"


class RecoveryReport(BaseModel):
    results_file: str | None
    baseline_file: str | None
    tasks: list[TaskRecovery]
    mean_recovery: float | None  # over the accuracy (higher-is-better) tasks
    mean_recovery_stderr: float | None
    gates: list[GateVerdict] = Field(default_factory=list)
    passed: bool = True

    def failures(self) -> list[GateVerdict]:
        return [g for g in self.gates if not g.passed]


def ratio_stderr(q: float, se_q: float | None, b: float, se_b: float | None) -> float | None:
    """Stderr of q / b for independent q, b (delta method); None if either stderr is unknown."""
    if se_q is None or se_b is None or b == 0 or q == 0:
        if se_q is not None and se_b is not None and q == 0 and b != 0:
            return se_q / abs(b)  # d(q/b)/dq = 1/b; the q-relative term is undefined at q = 0
        return None
    r = q / b
    return abs(r) * math.sqrt((se_q / q) ** 2 + (se_b / b) ** 2)



def compare_to_baseline(results: EvalRun, baseline_results: EvalRun, gates: Gates | dict | None = None,
                        *, raise_on_fail: bool = True) -> RecoveryReport:
    """Recovery of every task of `results` against the same task of `baseline_results`.

    Both runs must use the same protocol per task (version, n-shot, limit, items scored, chat
    template, BOS, data and template); otherwise the ratio means nothing and this raises UsageError.
    A failed gate raises GateFailed (exit 3) naming the task and the shortfall, unless
    raise_on_fail is False (the report then says passed=False).
    """
    if isinstance(gates, dict):
        gates = Gates.model_validate(gates)
    rows: list[TaskRecovery] = []
    for q in results.tasks:
        b = baseline_results.task(q.task)
        if b is None:
            raise UsageError(
                f"the baseline results ({baseline_results.results_file or 'given'}) have no '{q.task}'; "
                "evaluate the baseline on the same tasks first"
            )
        mismatch = protocol_mismatch(q, b)
        if mismatch:
            raise UsageError(f"task '{q.task}' ran on a different protocol than the baseline: {mismatch}")
        qm, bm = q.primary, b.primary
        if q.higher_is_better:
            rec = qm.value / bm.value if bm.value != 0 else None
            se = ratio_stderr(qm.value, qm.stderr, bm.value, bm.stderr)
        else:  # perplexity: lower is better, so recovery is baseline / quantized
            rec = bm.value / qm.value if qm.value != 0 else None
            se = ratio_stderr(bm.value, bm.stderr, qm.value, qm.stderr)
        rows.append(TaskRecovery(
            task=q.task, metric=q.primary_metric, higher_is_better=q.higher_is_better,
            quantized=qm.value, quantized_stderr=qm.stderr, baseline=bm.value, baseline_stderr=bm.stderr,
            recovery=rec, recovery_stderr=se,
        ))
    # The average covers accuracy tasks only (as published recovery tables do); perplexity
    # recovery is per task and can be gated per task.
    acc = [r for r in rows if r.higher_is_better and r.recovery is not None]
    mean = sum(r.recovery for r in acc) / len(acc) if acc else None
    mean_se = (
        math.sqrt(sum(r.recovery_stderr ** 2 for r in acc)) / len(acc)
        if acc and all(r.recovery_stderr is not None for r in acc) else None
    )
    report = RecoveryReport(
        results_file=results.results_file, baseline_file=baseline_results.results_file,
        tasks=rows, mean_recovery=mean, mean_recovery_stderr=mean_se,
    )
    if gates is not None:
        report.gates = list(_verdicts(report, gates))
        report.passed = all(g.passed for g in report.gates)
    if raise_on_fail and not report.passed:
        raise GateFailed(gate_failure_message(report))
    return report


def gate_failure_message(report: RecoveryReport) -> str:
    return "gate failed: " + "; ".join(g.describe() for g in report.failures())


def _verdicts(report: RecoveryReport, gates: Gates) -> Iterator[GateVerdict]:
    by_task = {r.task: r for r in report.tasks}
    unknown = sorted(set(gates.tasks) - set(by_task))
    if unknown:
        raise UsageError(f"gate names task(s) not in these results: {', '.join(unknown)}")

    def verdict(gate: str, task: str | None, threshold: float, value: float | None) -> GateVerdict:
        return GateVerdict(gate=gate, task=task, threshold=threshold, value=value,
                           passed=value is not None and value >= threshold)

    if gates.min_recovery is not None:
        if report.mean_recovery is None:
            raise UsageError("min_recovery gates the average over accuracy tasks, and these results have none")
        yield verdict("min_recovery", None, gates.min_recovery, report.mean_recovery)
    if gates.min_task_recovery is not None:
        for r in report.tasks:
            yield verdict("min_task_recovery", r.task, gates.min_task_recovery, r.recovery)
    for task, threshold in gates.tasks.items():
        yield verdict("tasks", task, threshold, by_task[task].recovery)



def gates_text(gates: dict[str, Any]) -> str:
    """Gates in words: `mean recovery >= 0.9, arc_easy recovery >= 0.95`."""
    parts = []
    if gates.get("min_recovery"):
        parts.append(f"mean recovery >= {gates['min_recovery']:g}")
    if gates.get("min_task_recovery"):
        parts.append(f"every task's recovery >= {gates['min_task_recovery']:g}")
    for task, value in (gates.get("tasks") or {}).items():
        parts.append(f"{task} recovery >= {value:g}")
    return ", ".join(parts) or "no gates"
