"""One lane as a Ray task: what runs on the worker node that Ray picked for a variant.

`run_variant` is the same `stages.run_lane` the local executor calls, given a `RemoteStore` that
writes to the driver's store, and the run context the driver built (so the run keys are the
driver's, whichever node computes them). Before it starts, the base model is made to resolve on
this node: a local folder must be on storage every node sees; a Hub id (or the built-in demo
model) is fetched (converted) by each node itself.

`planned_stages` lists what a lane will run, with its keys, as far as they can be known from where
it is asked: the driver uses it to skip finished lanes before submitting anything (resume) and to
tell the store actor what to mark failed if the lane is lost; the worker refines it once the
checkpoint exists on its node.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import __version__, checkpoint, machine, models
from ..errors import QuantkitError, SetupError
from ..store import RecordStore
from .ray_store import RemoteStore, this_node
from .stages import (Lane, RunContext, RunSummary, StageOutcome, checkpoint_dir, convert_key, fidelity_key, lane_stages,
                     measure_keys, owned_dir, run_lane)


def method_folder(ctx: RunContext, lane: Lane, store: RecordStore) -> Path:
    """Where run_lane keeps (or will make) a method's checkpoint: its key's own folder."""
    return owned_dir(checkpoint_dir(ctx, lane.entry), convert_key(ctx, lane.entry), store)


def converted(folder: Path) -> bool:
    """A finished checkpoint is here: run_lane skips (or adopts) its conversion."""
    return (folder / checkpoint.RECORD_FILE).is_file() and checkpoint.ConvertRecord.read(folder) is not None


def planned_stages(ctx: RunContext, lane: Lane, store: RecordStore) -> tuple[list[dict[str, Any]], bool]:
    """(stages, complete): each stage's kind, key and the record fields it would have; complete is
    False when a method's checkpoint is not visible from here (its measurement keys hang on it)."""
    stages: list[dict[str, Any]] = []
    folder = ctx.model.path
    if lane.entry is not None:
        quant = lane.entry.quant_recipe()
        stages.append({"kind": "convert", "key": convert_key(ctx, lane.entry),
                       "params": {"recipe": quant.canonical(), **ctx.common}})
        folder = method_folder(ctx, lane, store)
        if not converted(folder):
            return [dict(s, model=ctx.model.name, variant=lane.label) for s in stages], False
    for kind, key in measure_keys(ctx, lane, checkpoint.fingerprint(folder)):
        stages.append({"kind": kind, "key": key, "params": {"checkpoint": str(folder)}})
    if any(s.kind == "fidelity" for s in lane_stages(ctx.plan, lane, "own")):  # a resumed lane still owes it
        stages.append({"kind": "fidelity", "key": fidelity_key(ctx, folder)[0], "params": {"checkpoint": str(folder)}})
    return [dict(s, model=ctx.model.name, variant=lane.label) for s in stages], True


def finished(ctx: RunContext, lane: Lane, store: RecordStore) -> bool:
    """Every stage of the lane is done and its checkpoint is here: run_lane would only skip."""
    if ctx.force:
        return False
    stages, complete = planned_stages(ctx, lane, store)
    return complete and all(store.done(s["key"]) for s in stages)


def localize(model: models.ResolvedModel, node: str) -> models.ResolvedModel:
    """The base model as this node sees it (the driver resolved it on its own node)."""
    if model.path.is_dir():
        return model
    try:
        return models.resolve(model.ref)  # a Hub id or the demo alias: this node fetches its own copy
    except QuantkitError as exc:
        raise SetupError(f"the base model {model.path} is not on node {node} ({exc.one_line()}); put it on "
                         "storage every node mounts at the same path, or name it by a Hub id") from None


def run_variant(ctx: RunContext, lane: Lane, actor, store_path: str, driver_version: str) -> dict[str, Any]:
    """The Ray task of one lane: its outcomes (and when its body started and ended, on this node's
    clock) come back to the driver; its records went to the driver's store as they happened."""
    import ray

    started = time.time()
    interruptible()
    store = RemoteStore(actor, lane.label, store_path)
    ray.get(actor.lane_started.remote(lane.label, store.node))
    if __version__ != driver_version:
        raise SetupError(f"node {store.node['name']} runs quantkit {__version__}, the driver {driver_version}: "
                         "every node needs the same quantkit environment")
    ctx = replace(ctx, model=localize(ctx.model, store.node["name"]))
    if ctx.plan.serve.distributed_executor_backend == "ray":
        # vLLM places its own tensor/pipeline-parallel workers on this cluster
        os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    store.plan(planned_stages(ctx, lane, store)[0])
    # once the checkpoint exists on this node, the measurement keys are known
    store.after_finish = lambda kind: kind == "convert" and store.plan(planned_stages(ctx, lane, store)[0])
    summary = RunSummary(recipe="", model=ctx.model.name)
    run_lane(ctx, lane, store, summary)
    return {"outcomes": summary.outcomes, "started": started, "ended": time.time()}


def interruptible() -> None:
    """Ray cancels a running task with `_thread.interrupt_main()`, which does nothing where SIGINT
    is ignored. A worker of a cluster started from a background shell (`ray start ... &`, CI)
    inherits SIGINT ignored and would run its lane on through Ctrl-C; the lane takes Python's
    default back, so the cancel reaches it as KeyboardInterrupt (its server stops, its records
    say interrupted)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def node_facts() -> dict[str, Any]:
    """What a node would put in run keys: quantkit and vLLM versions, hardware (the whole node's,
    not the GPUs Ray lent this probe)."""
    from ..serve.env import installed_vllm_version

    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    return {"node": this_node(), "quantkit": __version__, "vllm": installed_vllm_version(),
            "hardware": machine.fingerprint()}
