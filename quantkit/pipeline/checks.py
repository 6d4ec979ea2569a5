"""Everything a run recipe needs, checked in seconds before any work starts.

`recipe.load_run` has already validated the YAML itself (keys, types, serving knobs, method
recipes). This checks what the YAML points at: the model, its checkpoint files and architecture,
the evaluation tasks and their offline data, the calibration data of each method, and that the
gates name tasks the eval runs. Each problem is one UsageError (exit 2) naming the fix.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .. import checkpoint, settings
from ..errors import UsageError
from ..models import ResolvedModel
from .recipe import RunRecipe


def check_model(model: ResolvedModel, serves: bool = True) -> None:
    """The model's checkpoint is complete and (when the run serves it) its architecture is one
    the vLLM environment serves."""
    from ..serve.env import supported_architectures

    checkpoint.validate(model.path, supported_architectures() if serves else None)


def check_plan(plan: RunRecipe, source: str) -> None:
    """What the recipe points at besides the model: tasks and their data, gates, fidelity texts,
    calibration data."""
    task_names: set[str] = set()
    if plan.eval is not None:
        from ..evals.tasks import prepare_tasks, resolve

        try:
            specs = resolve(plan.eval.tasks, plan.eval.limit, plan.eval.num_fewshot)
            with tempfile.TemporaryDirectory() as scratch:  # the offline files exist, the YAMLs are stock
                prepare_tasks(specs, settings.data_dir(), Path(scratch))
        except UsageError as exc:
            raise UsageError(f"{source}: eval: {exc.message}") from None
        task_names = {s.name for s in specs}
    gated = set(plan.gates.tasks)
    if gated - task_names:
        raise UsageError(f"{source}: gates name task(s) the eval does not run: {', '.join(sorted(gated - task_names))}; "
                         f"the eval runs: {', '.join(sorted(task_names)) or 'nothing (no eval:)'}")
    if (plan.gates.min_recovery or plan.gates.min_task_recovery) and plan.eval is None:
        raise UsageError(f"{source}: gates need an eval: add eval: (tasks) or remove the gates")
    if plan.bench is not None:
        from ..console import warn
        from ..machine import load_limits

        for problem in load_limits(max(plan.bench.concurrency or [0])):
            warn(f"{source}: {problem}")
    if plan.fidelity is not None:  # its texts are read offline: missing ones refused now, not after the conversions
        from ..fidelity.documents import source_path

        try:
            for text in plan.fidelity.sources:
                source_path(text)
        except UsageError as exc:
            raise UsageError(f"{source}: fidelity: {exc.message}") from None
    for entry in plan.methods:
        if entry.checkpoint is not None:  # measured as it is: nothing to calibrate
            continue
        recipe = entry.quant_recipe()
        if recipe.needs_calibration and recipe.calibration is not None:
            _check_calibration(recipe.calibration.dataset, f"{source}: method {entry.label()}")


def _check_calibration(dataset: str, where: str) -> None:
    """A local calibration file (or the offline c4 shard) exists; Hub sets are checked when read."""
    from ..quantize.calibration import C4_OFFLINE

    if dataset == "c4":
        data = settings.data_dir()
        if data is not None and not (data / C4_OFFLINE).is_file():
            raise UsageError(f"{where}: calibration file {data / C4_OFFLINE} is missing from QUANTKIT_DATA_DIR={data}")
        return
    path = Path(dataset).expanduser()
    if path.suffix.lower() in (".jsonl", ".json", ".txt", ".parquet") and not path.is_file():
        raise UsageError(f"{where}: calibration file {path} does not exist")


def check_servable_methods(plan: RunRecipe, labels: list[str], source: str) -> None:
    """Every method the run will convert and serve on this CPU is one its vLLM-CPU can serve
    (serve/hardware_fit.scheme_refusal): refused now, not after a conversion of minutes. A
    machine with a GPU, and a method given as an existing `checkpoint:` (checked when its server
    starts), pass."""
    from ..machine import cpu_isa, has_gpu
    from ..serve.hardware_fit import scheme_refusal

    if has_gpu():
        return
    isa = cpu_isa()
    refused: dict[str, str] = {}  # every refused entry at once: the way out must not name another refused one
    by_machine = False  # a refusal this CPU makes whatever the dtype (else the recipe's float32 alone)
    for entry in plan.methods:
        if entry.checkpoint is not None or entry.label() not in labels:
            continue
        recipe = entry.quant_recipe()
        machine_reason = scheme_refusal(recipe.scheme, recipe.kv_cache, isa)
        reason = machine_reason or scheme_refusal(recipe.scheme, recipe.kv_cache, isa, plan.serve.dtype)
        if reason:
            refused[entry.label()] = reason
            by_machine = by_machine or machine_reason is not None
    if refused:
        named = f"method{'s' if len(refused) > 1 else ''} {', '.join(refused)}"
        reasons = set(refused.values())
        why = reasons.pop() if len(reasons) == 1 else "; ".join(f"{label}: {r}" for label, r in refused.items())
        others = [label for label in labels if label not in refused]
        raise UsageError(f"{source}: {named} cannot be served here: {why}; remove "
                         f"{'it' if len(refused) == 1 else 'them'} from methods, "
                         + (f"run the others (--only {' --only '.join(others)}), " if others else "")
                         + ("or run on an AVX-512 CPU or a GPU" if by_machine else "or drop dtype from serve:"))
