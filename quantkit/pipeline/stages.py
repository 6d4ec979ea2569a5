"""The stages of one lane (a variant's chain: convert, then capacity, bench and eval on one server,
then tune on servers of its own), `STAGES`, their table in run order, and their run keys.

A variant with `checkpoint:` (an existing quantized checkpoint) has no convert stage. The capacity
stage measures capacity under the recipe's SLO on the `serve:` configuration (vLLM's defaults plus
those flags); the tune stage continues the variant's Optuna study (its trials are store records of
their own) with the capacity stage's result as its base trial, so the defaults are not served twice.

A run key is a hash of everything that defines a stage's result: the model's fingerprint and the
recipe entry for a conversion; the checkpoint's fingerprint, the stage's settings, the serving
knobs, the vLLM version and the hardware for a measurement. A key already `done` in the store is
skipped (resume); `--force` redoes it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

from .. import checkpoint, settings
from ..console import info, stderr, warn
from ..errors import BackendError, UsageError
from ..models import ResolvedModel
from ..store import RecordStore, failure_line, run_key
from ..store.kinds import stage_kind
from . import measures
from .measures import capacity_key
from .recipe import MethodEntry, RunRecipe


class StageOutcome(BaseModel):
    variant: str
    kind: str
    status: Literal["done", "skipped", "failed"]
    run_key: str
    seconds: float = 0.0
    error: str | None = None


class RunSummary(BaseModel):
    recipe: str
    model: str
    outcomes: list[StageOutcome] = Field(default_factory=list)
    report: dict[str, str] | None = None
    gates_passed: bool | None = None  # every gated variant passed (None: no gate set)
    gate_verdict: str | None = None  # pass / fail / inconclusive over all gated variants
    gate_counts: dict[str, int] = Field(default_factory=dict)  # gate verdicts: pass / fail / inconclusive
    verdicts: dict[str, str] = Field(default_factory=dict)  # variant -> its overall verdict
    wall_time_s: float = 0.0


@dataclass
class RunContext:
    """What every lane of one run shares."""

    plan: RunRecipe
    model: ResolvedModel
    force: bool
    vllm: str  # the vLLM version of the serving environment (part of measurement keys)
    common: dict[str, Any] = field(default_factory=dict)  # hardware and quantkit version (every key)


@dataclass(frozen=True)
class Lane:
    """One variant: the baseline (entry None) or a method entry of the recipe."""

    label: str
    entry: MethodEntry | None


def checkpoint_dir(ctx: RunContext, entry: MethodEntry) -> Path:
    root = settings.models_dir()
    folder = root / f"{ctx.model.name}-{entry.label()}-{entry.quant_recipe().hash()[:8]}"
    # recipe.py refuses such a label; a RunRecipe built in code must not escape either: a run
    # writes, and with --force replaces, this folder
    inside = Path(os.path.normpath(folder)).parent == Path(os.path.normpath(root)) and folder.name not in ("", ".", "..")
    if not inside or folder.parent.resolve() != root.resolve():
        raise UsageError(f"variant '{entry.label()}': its checkpoint folder {folder} is outside the models folder "
                         f"{root}; name the variant without '/' or '..' (name:)")
    return folder


def convert_key(ctx: RunContext, entry: MethodEntry) -> str:
    return run_key("convert", source=ctx.model.fingerprint(), recipe=entry.quant_recipe().canonical(), **ctx.common)


def measure_keys(ctx: RunContext, lane: Lane, fingerprint: str) -> list[tuple[str, str]]:
    """(kind, key) of the measurement stages the recipe asks for, in the order they run."""
    return [(s.kind, measures.runner(s.kind).key(ctx, fingerprint)) for s in lane_stages(ctx.plan, lane, "server")]


def run_lane(ctx: RunContext, lane: Lane, store: RecordStore, summary: RunSummary) -> None:
    """The lane's stages in `STAGES` order: the one before the server (a method's convert, or its
    existing checkpoint), then the measurements on one server, then tune. A stage that fails,
    however it fails (a QuantkitError, or any other exception: a bug, a server's reply the client
    did not survive), is recorded failed with its reason and the lane and the matrix go on; only
    Ctrl-C and SIGTERM (KeyboardInterrupt) end the run."""
    folder = ctx.model.path  # the baseline is measured as it is
    for stage in lane_stages(ctx.plan, lane, "before"):
        folder = stage.run(ctx, lane.entry, store, summary)
        if folder is None:  # no checkpoint to measure: its failure is recorded
            return
    not_started = measure_stages(ctx, lane, folder, store, summary)
    for stage in lane_stages(ctx.plan, lane, "own"):
        stage.run(ctx, lane.label, folder, store, summary, not_started=not_started)


def stage_failure(exc: Exception) -> str:
    """A failed stage's reason in one line, the one its record holds (store.failure_line); the
    traceback too with QUANTKIT_DEBUG=1, as a command's own failure shows it."""
    if settings.debug():
        stderr.print_exception()
    return failure_line(exc)


def checkpoint_stage(ctx: RunContext, entry: MethodEntry, store: RecordStore, summary: RunSummary) -> Path | None:
    """An existing checkpoint (local folder or Hub id), measured as it is."""
    from ..models import resolve

    try:
        return resolve(entry.checkpoint).path
    except Exception as exc:
        error = stage_failure(exc)
        warn(f"[{entry.label()}] checkpoint {entry.checkpoint}: {error}; the other variants go on")
        summary.outcomes.append(StageOutcome(variant=entry.label(), kind="checkpoint", status="failed",
                                             run_key="-", error=error))
        return None


def convert_stage(ctx: RunContext, entry: MethodEntry, store: RecordStore, summary: RunSummary) -> Path | None:
    from ..quantize import convert

    quant = entry.quant_recipe()
    key = convert_key(ctx, entry)
    out = owned_dir(checkpoint_dir(ctx, entry), key, store)
    existing = checkpoint.ConvertRecord.read(out) if (out / checkpoint.RECORD_FILE).is_file() else None
    if existing is not None and not ctx.force:
        if not store.done(key):  # made by this key for another store: the same weights, adopted
            info(f"[{entry.label()}] convert: {out} was made by the same recipe for another store; reused")
            store.finish(store.begin(key, "convert", ctx.model.name, entry.label(),
                                     {"recipe": quant.canonical(), **ctx.common, "adopted": True},
                                     recipe_hash=quant.hash()),
                         existing.model_dump(mode="json"), str(out / checkpoint.RECORD_FILE))
        else:
            info(f"[{entry.label()}] convert: done earlier ({key[:10]}), skipped")
        summary.outcomes.append(StageOutcome(variant=entry.label(), kind="convert", status="skipped", run_key=key))
        return out
    t0 = time.monotonic()
    try:
        with store.stage(key, "convert", ctx.model.name, entry.label(), {"recipe": quant.canonical(), **ctx.common},
                         recipe_hash=quant.hash()) as rec:
            # `out` is this key's own folder (owned_dir): replacing it (a leftover of a killed run,
            # or --force) never touches a checkpoint that another run or store relies on
            record = convert(ctx.model, entry.method, out, recipe=entry.recipe, force=True, overrides=entry.overrides(),
                             owner={"run_key": key, "store": str(store.path)})
            if record.recipe_hash != quant.hash():  # the key's recipe is not the one converted: never store it
                raise BackendError(f"converted with recipe {record.recipe_hash}, not the run key's {quant.hash()}")
            rec.finish(record.model_dump(mode="json"), str(out / checkpoint.RECORD_FILE))
    except Exception as exc:
        error = stage_failure(exc)
        warn(f"[{entry.label()}] convert failed: {error}; the other methods go on")
        summary.outcomes.append(StageOutcome(variant=entry.label(), kind="convert", status="failed", run_key=key,
                                             error=error, seconds=round(time.monotonic() - t0, 1)))
        return None
    summary.outcomes.append(StageOutcome(variant=entry.label(), kind="convert", status="done", run_key=key,
                                         seconds=round(time.monotonic() - t0, 1)))
    return out


def owned_dir(folder: Path, key: str, store: RecordStore) -> Path:
    """`folder` if it is free or this key's own; else the sibling named after the key. A folder
    another run key made (or one quantkit did not make) is never replaced or deleted."""
    if not folder.exists():
        return folder
    try:
        record = checkpoint.ConvertRecord.read(folder)
    except (ValueError, OSError):
        record = None
    if record is not None and (record.owner or {}).get("run_key") == key:
        return folder
    done = store.done(key)
    if record is not None and record.owner is None and done is not None and (done.result or {}).get("output_dir") == str(folder):
        return folder  # made by this store before folders named their owner
    if record is None and not any(folder.iterdir()):
        return folder  # an empty folder holds nothing to lose
    beside = folder.with_name(f"{folder.name}-{key[:8]}")
    warn(f"{folder} belongs to another run (or was not made by quantkit); writing {beside.name} beside it")
    return beside


def measure_stages(ctx: RunContext, lane: Lane, folder: Path, store: RecordStore, summary: RunSummary) -> str | None:
    """The stages on the lane's one server (capacity, bench, eval); the reason its server did not
    start, if it did not (every pending stage then failed with it)."""
    from ..serve.server import VLLMServer

    label = lane.label
    todo = []
    for kind, key in measure_keys(ctx, lane, checkpoint.fingerprint(folder)):
        if store.done(key) and not ctx.force:
            info(f"[{label}] {kind}: done earlier ({key[:10]}), skipped")
            summary.outcomes.append(StageOutcome(variant=label, kind=kind, status="skipped", run_key=key))
        else:
            todo.append((kind, key))
    if not todo:
        return None
    try:
        with VLLMServer(folder, ctx.plan.serve) as server:
            for kind, key in todo:
                _measure(ctx, kind, key, label, folder, server, store, summary)
    except Exception as exc:  # the server did not start (or stop): every pending stage of it failed
        error = stage_failure(exc)
        pending = [(kind, key) for kind, key in todo if not any(o.run_key == key for o in summary.outcomes)]
        for kind, key in pending:
            _fail_unstarted(ctx, kind, key, label, folder, store, summary, error)
        warn(f"[{label}] {error}; the other checkpoints go on")
        return error if pending else None
    return None


def _fail_unstarted(ctx: RunContext, kind: str, key: str, label: str, folder: Path, store: RecordStore,
                    summary: RunSummary, error: str) -> None:
    store.fail(store.begin(key, kind, ctx.model.name, label, {"checkpoint": str(folder)}), error)
    summary.outcomes.append(StageOutcome(variant=label, kind=kind, status="failed", run_key=key, error=error))


def _measure(ctx: RunContext, kind: str, key: str, label: str, folder: Path, server, store: RecordStore,
             summary: RunSummary) -> None:
    measure = measures.runner(kind)
    params = measure.params(ctx.plan, folder, checkpoint.fingerprint(folder))
    t0 = time.monotonic()
    try:
        with store.stage(key, kind, ctx.model.name, label, params) as rec:
            measure.run(ctx.plan, server, folder, label, rec)
        status, error = "done", None
    except Exception as exc:  # recorded failed by store.stage; the next measurement goes on
        status, error = "failed", stage_failure(exc)
        warn(f"[{label}] {kind} failed: {error}")
    summary.outcomes.append(StageOutcome(variant=label, kind=kind, status=status, run_key=key, error=error,
                                         seconds=round(time.monotonic() - t0, 1)))


def tune_stage(ctx: RunContext, label: str, folder: Path, store: RecordStore, summary: RunSummary,
               not_started: str | None = None) -> None:
    """The variant's study: `tune.budget` servers in all, the capacity stage's result as its base trial.
    Where the variant's server did not start on the recipe's serve settings (`not_started`), no
    trial is started either: each would start from the same settings, and fail the same way, at
    the cost of a server start each."""
    from ..measure.tune import study as tune

    plan = ctx.plan
    slo = plan.slo
    space = tune.resolve_space(plan.tune, model_dir=folder, vllm=ctx.vllm, base=plan.serve)
    study = tune.study_key(folder, slo, plan.capacity, plan.tune, space, plan.serve, ctx.vllm, ctx.common)
    key = run_key("tune", study=study, budget=plan.tune.budget)
    if _settled(ctx, "tune", key, label, folder, store, summary, bool(store.done(key)), not_started, "not tuned"):
        return
    base = store.done(capacity_key(ctx, checkpoint.fingerprint(folder)))
    seed = _base_trial(base, space, folder, plan) if base is not None else None
    # the workload (capacity, slo) in the params: the report compares tunes within one
    params = stage_kind("tune").params(folder, checkpoint.fingerprint(folder), plan.serve, plan.tune, study=study,
                                       slo=str(plan.slo), capacity=plan.capacity.model_dump(mode="json"))
    def study_run() -> None:
        with store.stage(key, "tune", ctx.model.name, label, params) as rec:
            result = tune.tune_study(store, model=ctx.model.name, variant=label, model_dir=folder, slo=slo,
                                     capacity=plan.capacity, settings=plan.tune, base=plan.serve, study=study,
                                     space=space, seed_trial=seed)
            rec.finish(result.model_dump(mode="json"))

    _own_stage("tune", label, key, summary, study_run)


def _settled(ctx: RunContext, kind: str, key: str, label: str, folder: Path, store: RecordStore, summary: RunSummary,
             done: bool, not_started: str | None, undone: str) -> bool:
    """Whether a stage of its own servers needs no run: `done` earlier (skipped, unless --force), or
    its lane's server did not start (`not_started`: recorded failed, `undone` saying what was not)."""
    if done and not ctx.force:
        info(f"[{label}] {kind}: done earlier ({key[:10]}), skipped")
        summary.outcomes.append(StageOutcome(variant=label, kind=kind, status="skipped", run_key=key))
        return True
    if not_started is not None:
        _fail_unstarted(ctx, kind, key, label, folder, store, summary, f"{undone}: {not_started}")
        return True
    return False


def _own_stage(kind: str, label: str, key: str, summary: RunSummary, body: Callable[[], None]) -> None:
    """A stage on servers of its own, its outcome in the summary: done, or failed with its reason
    (the body's record says so too: store.stage) while the lane and the matrix go on."""
    t0 = time.monotonic()
    try:
        body()
        status, error = "done", None
    except Exception as exc:
        status, error = "failed", stage_failure(exc)
        warn(f"[{label}] {kind} failed: {error}")
    summary.outcomes.append(StageOutcome(variant=label, kind=kind, status=status, run_key=key, error=error,
                                         seconds=round(time.monotonic() - t0, 1)))


def _base_trial(record, space: dict[str, list[Any]], folder: Path, plan: RunRecipe):
    """The capacity stage's result as the study's base trial (vLLM's defaults for every knob)."""
    from ..measure.tune.study import Trial
    from ..serve.config import serve_command

    result = record.result or {}
    cap = result.get("capacity") or {}
    value = cap.get("goodput_req_s") if cap.get("goodput_req_s") is not None else cap.get("req_s")
    return Trial(number=0, run_key=record.run_key, params={k: None for k in space}, config=plan.serve.changed(),
                 label="defaults", command=serve_command(folder, plan.serve), state="complete",
                 value=float(value or 0.0), probe=float(value or 0.0), capacity=cap or None,
                 capacity_load=cap.get("load"), bound=result.get("bound"), points=int(result.get("points_spent") or 0),
                 startup_s=(result.get("server") or {}).get("startup_s") or 0.0, reused=True)


def fidelity_key(ctx: RunContext, folder: Path) -> tuple[str, Any]:
    """The fidelity stage's run key for the variant in `folder`, and the serving configuration it
    names: the recipe's `serve:` as a server started only to be scored (fidelity/run.py)."""
    from ..fidelity import run as fidelity

    serve = ctx.plan.serve.model_copy(update=fidelity.FIDELITY_SERVE_DEFAULTS)
    return fidelity.fidelity_key(checkpoint.fingerprint(ctx.model.path), checkpoint.fingerprint(folder),
                                 ctx.plan.fidelity.settings(), serve, ctx.vllm), serve


def fidelity_stage(ctx: RunContext, label: str, folder: Path, store: RecordStore, summary: RunSummary,
                   not_started: str | None = None) -> None:
    """The variant scored against the baseline (the run's model) on the recipe's windows, on
    servers of its own, one at a time: fidelity/run.measure, which reads back the windows any
    record of its key stored (a killed run serves only the missing ones) and stores each window
    as soon as both sides scored it. Its key is `quantkit fidelity`'s: a standalone run's windows
    count here too. Skipped when this lane's record of the key holds as many windows as asked."""
    from ..fidelity import run as fidelity

    wanted = ctx.plan.fidelity
    key, serve = fidelity_key(ctx, folder)
    done = store.done(key)
    mine = done is not None and (done.model, done.variant) == (ctx.model.name, label) \
        and int((done.result or {}).get("windows") or 0) >= wanted.windows
    if _settled(ctx, "fidelity", key, label, folder, store, summary, mine, not_started, "not scored"):
        return
    # a failed run's record keeps the windows it stored: the next run serves only the others
    _own_stage("fidelity", label, key, summary, lambda: fidelity.measure(
        folder, ctx.model.path, settings=wanted.settings(), gates=wanted.gates, serve=serve, store=store,
        names=(ctx.model.name, label)))


Place = Literal["before", "server", "own"]


@dataclass(frozen=True)
class Stage:
    """One stage kind of a lane and where it runs (`place`):

    - "before" the lane's server: `run(ctx, entry, store, summary)` gives the checkpoint folder the
      other stages measure, or None (it failed, and said so): the lane ends there;
    - on the lane's one "server": its runner is `measures.runner(kind)` (`run` is None), and every
      such stage of the lane shares that server (`measure_stages`);
    - on servers of its "own", once the lane's server has stopped: `run(ctx, label, folder, store,
      summary, not_started=...)`, told why the lane's server did not start, if it did not.

    `wanted(plan, lane)`: whether this lane runs it, for this recipe."""

    kind: str
    place: Place
    wanted: Callable[[RunRecipe, Lane], bool]
    run: Callable[..., Any] | None = None


def _converts(lane: Lane) -> bool:
    return lane.entry is not None and lane.entry.checkpoint is None


def _brings_checkpoint(lane: Lane) -> bool:
    return lane.entry is not None and lane.entry.checkpoint is not None


# Every stage kind of a lane, in the order the lane runs them (and its summary lists them); a stored
# one's record kind is store/kinds.py's (an existing checkpoint is resolved, never stored)
STAGES = (
    Stage("checkpoint", "before", lambda plan, lane: _brings_checkpoint(lane), checkpoint_stage),
    Stage("convert", "before", lambda plan, lane: _converts(lane), convert_stage),
    Stage("capacity", "server", lambda plan, lane: plan.slo is not None),
    Stage("bench", "server", lambda plan, lane: plan.bench is not None),
    Stage("eval", "server", lambda plan, lane: plan.eval is not None),
    Stage("tune", "own", lambda plan, lane: plan.tune is not None, tune_stage),
    # a quantized lane against the baseline: the run's model, whether or not its own lane runs
    Stage("fidelity", "own", lambda plan, lane: plan.fidelity is not None and lane.entry is not None, fidelity_stage),
)


def lane_stages(plan: RunRecipe, lane: Lane, place: Place) -> list[Stage]:
    """The stages of `place` that this lane runs for this recipe, in run order."""
    return [s for s in STAGES if s.place == place and s.wanted(plan, lane)]
