"""quantkit.evals: the evaluation API, plus the task registry and YAMLs that ship beside it.

This folder is installed as the `quantkit.evals` package (pyproject maps it), so it owns that
import name; a `quantkit/evals.py` module would collide with it (in a wheel the package wins and
the module disappears). The code therefore lives in quantkit/evals_core.py (running lm-eval,
results, recovery, gates) and quantkit/evals_tasks.py (registry, suites, offline task configs);
the names below are re-exported lazily so that reading this package's YAML files never imports them.

    from quantkit.evals import run_eval, compare_to_baseline, Gates, EvalRun
"""

from __future__ import annotations

_CORE = (
    "run_eval", "compare_to_baseline", "load_baseline", "Gates", "EvalRun", "TaskResult", "Metric",
    "RecoveryReport", "TaskRecovery", "GateVerdict", "ratio_stderr", "check_logprobs", "list_results",
    "results_dir", "gate_failure_message",
)
_TASKS = ("resolve", "registry", "suites", "prepare", "TaskSpec")

__all__ = list(_CORE + _TASKS)


def __getattr__(name: str):
    if name in _CORE:
        from quantkit import evals_core

        return getattr(evals_core, name)
    if name in _TASKS:
        from quantkit import evals_tasks

        return getattr(evals_tasks, name)
    raise AttributeError(f"module 'quantkit.evals' has no attribute {name!r}")
