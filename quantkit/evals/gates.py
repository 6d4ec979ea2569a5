"""Recovery against a baseline, and the gates that decide whether a variant passes.

`compare_to_baseline(results, baseline, gates)` gives recovery = quantized / baseline per task
(baseline / quantized for perplexities) and on average, each with a 95% confidence interval from
the per-item scores both runs stored for the same items (`evals/paired.py` says which estimator
and why). A task whose results carry no per-item scores (records written before they were
stored) falls back to the independent delta-method interval, which is wider, and says so.

A gate compares the interval with its threshold: `pass` when the lower bound is at or above it,
`fail` when the upper bound is below it, `inconclusive` otherwise (then it says how many more
items per task would likely decide it). An inconclusive gate never validates anything: with
raise_on_fail, a failed gate raises GateFailed (exit 3), an inconclusive one GateInconclusive
(exit 4). `RecoveryReport.verdict` is the one answer to "did the gates pass": "pass", "fail",
"inconclusive", or None when no gate was set.
"""

from __future__ import annotations

from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from ..errors import GateFailed, GateInconclusive, UsageError
from ..numbers import Count, Positive, Seed
from . import paired
from .paired import CONFIDENCE, Estimate, ratio_stderr
from .results import EvalRun, TaskResult, protocol_mismatch

__all__ = ["Gates", "GrowSettings", "TaskRecovery", "GateVerdict", "RecoveryReport", "compare_to_baseline", "ratio_stderr",
           "gate_failure_message", "gates_text", "VERDICTS"]

Verdict = Literal["pass", "fail", "inconclusive"]
VERDICTS: tuple[str, ...] = ("pass", "fail", "inconclusive")


class Gates(BaseModel):
    """Accuracy gates (the recipe's `gates:`). All are minimum recoveries (quantized / baseline)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    min_recovery: Positive | None = Field(None, description="on the average over accuracy tasks")
    min_task_recovery: Positive | None = Field(None, description="on every task")
    tasks: dict[str, Positive] = Field(default_factory=dict, description="per named task")


class GrowSettings(BaseModel):
    """The run recipe's `eval: grow:` (and `quantkit eval --grow-to`): while a gate is
    inconclusive, add the items it says would likely decide it (evals/grow.py)."""

    model_config = ConfigDict(extra="forbid")

    max_items: Count = Field(..., description="cap on items per task (per subtask for a group)")
    step: Count | None = Field(None, description="items per block (default: the task's limit)")
    seed: Seed = Field(1234, description="seeds the order of the items beyond the first `limit`")
    max_rounds: Count = Field(3, description="grow-and-recompare rounds at most")


class TaskRecovery(BaseModel):
    task: str
    metric: str
    higher_is_better: bool
    quantized: float  # on the paired items (all of the run's items when unpaired)
    quantized_stderr: float | None
    baseline: float  # on the same items
    baseline_stderr: float | None
    recovery: float | None  # None when the baseline score is 0 (or a perplexity is 0)
    recovery_stderr: float | None  # of the interval's method
    recovery_low: float | None = None
    recovery_high: float | None = None
    method: str = "independent delta"  # paired delta | paired bootstrap | independent delta (no per-item scores)
    n_items: int | None = None  # items both runs scored (the pairs); None when unpaired
    n_available: int | None = None  # the split's size: how far the items could grow
    independent_stderr: float | None = None  # the same ratio as if the runs were unrelated (for comparison)
    independent_low: float | None = None
    independent_high: float | None = None

    @property
    def paired(self) -> bool:
        return self.method.startswith("paired")


class GateVerdict(BaseModel):
    gate: str  # "min_recovery" | "min_task_recovery" | "tasks"
    task: str | None  # None for the average
    threshold: float
    value: float | None
    low: float | None = None
    high: float | None = None
    verdict: Verdict = "fail"
    more_items: dict[str, int] | None = None  # inconclusive: task -> items to add that would likely decide it
    note: str | None = None  # why it cannot be decided by more items, when it cannot

    @model_validator(mode="before")
    @classmethod
    def _two_way(cls, data: Any) -> Any:
        # verdicts written before gates had three outcomes said only passed: true/false
        if isinstance(data, dict) and "verdict" not in data and "passed" in data:
            data = {**data, "verdict": "pass" if data["passed"] else "fail"}
        return data

    @computed_field
    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def _what(self) -> str:
        return f"{self.task or 'average'} recovery"

    def _interval(self) -> str:
        if self.low is None or self.high is None:
            return " (no interval)"
        return f" [{self.low:.4f}, {self.high:.4f}]"

    def summary(self) -> str:
        """The verdict in one line: `average recovery 0.9706 [0.9512, 0.9900] >= 0.9: pass`."""
        if self.value is None:
            return f"{self._what()} undefined (baseline score 0) vs {self.threshold:g}: fail"
        sign = {"pass": ">=", "fail": "<", "inconclusive": "straddles"}[self.verdict]
        return f"{self._what()} {self.value:.4f}{self._interval()} {sign} {self.threshold:g}: {self.verdict}"

    def describe(self) -> str:
        """Why a gate did not pass, with what would decide an inconclusive one."""
        if self.value is None:
            return f"{self._what()} undefined (baseline score 0) against min {self.threshold:g}"
        if self.verdict == "fail":
            return (f"{self._what()} {self.value:.4f}{self._interval()} < {self.threshold:g} "
                    f"(short by {self.threshold - self.value:.4f})")
        text = f"{self._what()} {self.value:.4f}{self._interval()} straddles {self.threshold:g}"
        if self.verdict == "pass":
            return text.replace(" straddles ", " >= ")
        if self.more_items and not self.note:
            return text + "; " + _more_text(self.more_items) + " would likely decide it"
        return text + f"; {self.note or 'more items would not be expected to decide it'}"


def _more_text(more: dict[str, int]) -> str:
    values = set(more.values())
    if len(values) == 1:
        return f"~{values.pop()} more items per task"
    return "more items: " + ", ".join(f"{task} ~{n}" for task, n in more.items())


class RecoveryReport(BaseModel):
    results_file: str | None
    baseline_file: str | None
    confidence: float = CONFIDENCE
    tasks: list[TaskRecovery]
    mean_recovery: float | None  # over the accuracy (higher-is-better) tasks
    mean_recovery_stderr: float | None
    mean_recovery_low: float | None = None
    mean_recovery_high: float | None = None
    mean_method: str | None = None
    mean_independent_stderr: float | None = None
    gates: list[GateVerdict] = Field(default_factory=list)
    verdict: Verdict | None = None  # None: no gate was set

    @computed_field
    @property
    def passed(self) -> bool:
        """True unless a gate failed or is inconclusive (also when no gate was set: see verdict)."""
        return self.verdict in (None, "pass")

    def failures(self) -> list[GateVerdict]:
        return [g for g in self.gates if g.verdict == "fail"]

    def undecided(self) -> list[GateVerdict]:
        return [g for g in self.gates if g.verdict == "inconclusive"]

    def counts(self) -> dict[str, int]:
        return {v: sum(g.verdict == v for g in self.gates) for v in VERDICTS}


def overall_verdict(verdicts: list[str]) -> str | None:
    """One verdict for several gates: any fail fails, else any inconclusive, else pass."""
    if not verdicts:
        return None
    return "fail" if "fail" in verdicts else "inconclusive" if "inconclusive" in verdicts else "pass"


def _task_recovery(q: TaskResult, b: TaskResult) -> TaskRecovery:
    metric = q.primary_metric
    qm, bm = q.primary, b.primary
    common = dict(task=q.task, metric=metric, higher_is_better=q.higher_is_better,
                  n_available=q.n_available)
    if q.paired_items() and b.paired_items():
        at = {item: k for k, item in enumerate(b.items.ids)}
        idx = [at[item] for item in q.items.ids]
        qv = q.items.values[metric]
        bv = [b.items.values[metric][k] for k in idx]
        n = len(qv)
        if metric in q.items.weights and metric in b.items.weights:  # a perplexity: (log-likelihood, words)
            words = q.items.weights[metric]
            if [b.items.weights[metric][k] for k in idx] != words:
                raise UsageError(f"task '{q.task}': the baseline counted other words per document than this run")
            est = paired.perplexity_ratio_paired(qv, bv, words)
            ind = paired.perplexity_ratio_independent(qv, bv, words)
            q_value = _ratio_metric(metric, qv, words)
            b_value = _ratio_metric(metric, bv, words)
            q_se = b_se = None
        else:
            if not q.higher_is_better:
                raise UsageError(f"task '{q.task}': a lower-is-better mean metric ({metric}) has no recovery rule")
            est, ind = paired.mean_ratio_paired(qv, bv), paired.mean_ratio_independent(qv, bv)
            q_value, b_value = sum(qv) / n, sum(bv) / n
            q_se, b_se = paired.mean_stderr(qv), paired.mean_stderr(bv)
        return TaskRecovery(**common, quantized=q_value, quantized_stderr=q_se, baseline=b_value,
                            baseline_stderr=b_se, recovery=est.value, recovery_stderr=est.stderr,
                            recovery_low=est.low, recovery_high=est.high, method=est.method, n_items=n,
                            independent_stderr=ind.stderr, independent_low=ind.low, independent_high=ind.high)
    # no per-item scores on one side: the two runs' own figures, as if independent
    if q.higher_is_better:
        rec = qm.value / bm.value if bm.value != 0 else None
        se = ratio_stderr(qm.value, qm.stderr, bm.value, bm.stderr)
    else:
        rec = bm.value / qm.value if qm.value != 0 else None
        se = ratio_stderr(bm.value, bm.stderr, qm.value, qm.stderr)
    est = paired.interval(rec, se, q.n_samples, "independent delta")
    return TaskRecovery(**common, quantized=qm.value, quantized_stderr=qm.stderr, baseline=bm.value,
                        baseline_stderr=bm.stderr, recovery=est.value, recovery_stderr=est.stderr,
                        recovery_low=est.low, recovery_high=est.high, method=est.method,
                        independent_stderr=est.stderr, independent_low=est.low, independent_high=est.high)


def _ratio_metric(metric: str, ll: list[float], words: list[float]) -> float:
    """A weighted-ratio metric from its items, as lm-eval aggregates it."""
    import math

    mean_ll = sum(ll) / sum(words)
    return -mean_ll / math.log(2) if metric.startswith("bits_per_byte") else math.exp(-mean_ll)


def compare_to_baseline(results: EvalRun, baseline_results: EvalRun, gates: Gates | dict | None = None,
                        *, raise_on_fail: bool = True) -> RecoveryReport:
    """Recovery of every task of `results` against the same task of `baseline_results`.

    Both runs must use the same protocol per task (version, n-shot, chat template, BOS, data and
    template, and the same items: per-item ids and prompt hashes when stored, else limit and item
    count); otherwise the ratio means nothing and this raises UsageError. With raise_on_fail, a
    failed gate raises GateFailed (exit 3) and an inconclusive one GateInconclusive (exit 4),
    naming the task, the interval and what would decide it.
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
        rows.append(_task_recovery(q, b))
    # The average covers accuracy tasks only (as published recovery tables do); perplexity
    # recovery is per task and can be gated per task.
    acc = [r for r in rows if r.higher_is_better and r.recovery is not None]
    method = ("paired delta" if all(r.paired for r in acc) else
              "independent delta" if not any(r.paired for r in acc) else "paired delta, some tasks independent")
    mean = paired.mean_of([_estimate(r) for r in acc], method) if acc else None
    independent = paired.mean_of([Estimate(r.recovery, r.independent_stderr, None, None, 0, "") for r in acc], "") if acc else None
    report = RecoveryReport(
        results_file=results.results_file, baseline_file=baseline_results.results_file, tasks=rows,
        mean_recovery=mean.value if mean else None, mean_recovery_stderr=mean.stderr if mean else None,
        mean_recovery_low=mean.low if mean else None, mean_recovery_high=mean.high if mean else None,
        mean_method=method if acc else None, mean_independent_stderr=independent.stderr if independent else None,
    )
    if gates is not None:
        report.gates = list(_verdicts(report, gates))
        report.verdict = overall_verdict([g.verdict for g in report.gates])
    if raise_on_fail:
        raise_for_verdict(report)
    return report


def recovery_of(eval_result: dict, baseline_eval: dict, gates: dict | None) -> dict:
    """A RecoveryReport (JSON) of one stored eval against a stored baseline eval, gates judged but
    not raised; UsageError when the two were not run on the same protocol."""
    return compare_to_baseline(EvalRun.model_validate(eval_result), EvalRun.model_validate(baseline_eval),
                               gates or None, raise_on_fail=False).model_dump(mode="json")


def _estimate(r: TaskRecovery) -> Estimate:
    return Estimate(r.recovery, r.recovery_stderr, r.recovery_low, r.recovery_high, r.n_items or 0, r.method)


def raise_for_verdict(report: RecoveryReport) -> None:
    if report.failures():
        raise GateFailed(gate_failure_message(report))
    if report.undecided():
        raise GateInconclusive(gate_failure_message(report))


def gate_failure_message(report: RecoveryReport) -> str:
    """One line: the failed gates (`gate failed: ...`), else the undecided ones (`gate inconclusive: ...`)."""
    failed, undecided = report.failures(), report.undecided()
    if failed:
        return "gate failed: " + "; ".join(g.describe() for g in failed)
    if undecided:
        return ("gate inconclusive: " + "; ".join(g.describe() for g in undecided)
                + " (eval `grow:` in a run recipe, or `quantkit eval --grow-to N`, adds them)")
    return "gates passed"


def _verdict(gate: str, task: str | None, threshold: float, value: float | None, low: float | None,
             high: float | None, rows: list[TaskRecovery], stderr: float | None) -> GateVerdict:
    v = GateVerdict(gate=gate, task=task, threshold=threshold, value=value, low=low, high=high)
    if value is None:
        v.verdict = "fail"
    elif low is None or high is None:
        v.verdict, v.note = "inconclusive", "no interval: the runs stored no uncertainty for it"
    elif low >= threshold:
        v.verdict = "pass"
    elif high < threshold:
        v.verdict = "fail"
    else:
        v.verdict = "inconclusive"
        factor = paired.growth_factor(value, stderr, threshold)
        if factor is None:
            v.note = "the estimate sits on the threshold: no number of items is expected to decide it"
        else:
            more = {r.task: paired.more_items(r.n_items or 0, factor) for r in rows if r.n_items}
            # the split's size is unknown for records stored before it was kept: no cap then
            room = {r.task: r.n_available - (r.n_items or 0) for r in rows if r.n_available}
            if not more:
                v.note = "no per-item scores are stored, so the items needed cannot be estimated"
            elif any(n > room[t] for t, n in more.items() if t in room):
                short = [t for t, n in more.items() if t in room and n > room[t]]
                v.more_items = more
                short.sort(key=lambda t: room[t])
                left = f"{short[0]} has {room[short[0]]} left" + "".join(f", {t} {room[t]}" for t in short[1:])
                v.note = (f"{_more_text(more)} would be needed, more than the tasks hold ({left}): growing "
                          "to whole tasks narrows the interval but is not expected to decide it")
            else:
                v.more_items = more
    return v


def _verdicts(report: RecoveryReport, gates: Gates) -> Iterator[GateVerdict]:
    by_task = {r.task: r for r in report.tasks}
    unknown = sorted(set(gates.tasks) - set(by_task))
    if unknown:
        raise UsageError(f"gate names task(s) not in these results: {', '.join(unknown)}")

    def task_gate(gate: str, r: TaskRecovery, threshold: float) -> GateVerdict:
        return _verdict(gate, r.task, threshold, r.recovery, r.recovery_low, r.recovery_high, [r], r.recovery_stderr)

    if gates.min_recovery is not None:
        if report.mean_recovery is None and not any(r.higher_is_better for r in report.tasks):
            raise UsageError("min_recovery gates the average over accuracy tasks, and these results have none")
        acc = [r for r in report.tasks if r.higher_is_better]
        yield _verdict("min_recovery", None, gates.min_recovery, report.mean_recovery, report.mean_recovery_low,
                       report.mean_recovery_high, acc, report.mean_recovery_stderr)
    if gates.min_task_recovery is not None:
        for r in report.tasks:
            yield task_gate("min_task_recovery", r, gates.min_task_recovery)
    for task, threshold in gates.tasks.items():
        yield task_gate("tasks", by_task[task], threshold)


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
