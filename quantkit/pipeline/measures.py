"""The measurements `quantkit run` makes on a lane's one server, one `Measure` per stage kind.

Each is the runner of one stage kind (`runner(kind)`; the kinds themselves are store/kinds.py's,
which knows nothing of the pipeline) and says, for a recipe: its run key (`key`), what its
record's params hold beyond the shape every measurement's has (`extra`; the shape is
`StageKind.params`: checkpoint, fingerprint, serving configuration, its own settings), and how it
runs on a started server and finishes its record (`run`). Whether a recipe asks for it, and in
which order they run, is the lane's stage table (stages.STAGES, place "server").

A run key is a hash of everything that defines the result: the checkpoint's fingerprint, the
stage's settings, the serving knobs, the vLLM version and the hardware. Changing what goes into
one changes every stored key of that kind (and resume then redoes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..store import keyed, run_key
from ..store.kinds import stage_kind

if TYPE_CHECKING:
    from .recipe import RunRecipe
    from ..store import StageHandle


class KeyContext(Protocol):
    """What a run key reads of the run (stages.RunContext; a protocol here, so that this module
    does not import the one that runs it)."""

    plan: "RunRecipe"
    vllm: str
    common: dict[str, Any]


@dataclass(frozen=True)
class Measure:
    kind: str
    key: Callable[["KeyContext", str], str]
    extra: Callable[["RunRecipe"], dict[str, Any]]
    run: Callable[["RunRecipe", Any, Path, str, "StageHandle"], None]

    def settings(self, plan: "RunRecipe"):
        """The recipe's settings of this stage (its key in the recipe is the kind's name)."""
        return getattr(plan, self.kind)

    def params(self, plan: "RunRecipe", folder: Path, fingerprint: str) -> dict[str, Any]:
        """The record's params, in the shape a standalone command's record has too."""
        return stage_kind(self.kind).params(folder, fingerprint, plan.serve, self.settings(plan), **self.extra(plan))


def capacity_key(ctx: "KeyContext", fingerprint: str) -> str:
    return run_key("capacity", checkpoint=fingerprint, slo=str(ctx.plan.slo), capacity=keyed(ctx.plan.capacity),
                   serve=keyed(ctx.plan.serve), vllm=ctx.vllm, **ctx.common)


def _bench_key(ctx: "KeyContext", fingerprint: str) -> str:
    return run_key("bench", checkpoint=fingerprint, bench=ctx.plan.bench.model_dump(),
                   serve=keyed(ctx.plan.serve), vllm=ctx.vllm, **ctx.common)


def _eval_key(ctx: "KeyContext", fingerprint: str) -> str:
    # `grow` changes what happens after the eval, not its result: not part of its key
    return run_key("eval", checkpoint=fingerprint, eval=ctx.plan.eval.model_dump(exclude={"grow"}),
                   serve=keyed(ctx.plan.serve), vllm=ctx.vllm, **ctx.common)


def _run_capacity(plan: "RunRecipe", server, folder: Path, label: str, rec: "StageHandle") -> None:
    from ..measure.capacity.live import run_capacity

    result = run_capacity(server, folder, plan.slo, plan.capacity, label=label,
                          on_point=lambda p: rec.add_point(p.model_dump(mode="json")))
    rec.finish(result.model_dump(mode="json", exclude={"path"}), result.path)


def _run_bench(plan: "RunRecipe", server, folder: Path, label: str, rec: "StageHandle") -> None:
    from ..measure.capacity.bench import run_bench

    b = plan.bench
    result = run_bench(server, folder, concurrency=b.concurrency, input_len=b.input_len, output_len=b.output_len,
                       num_prompts=b.num_prompts, seed=b.seed, warmup_requests=b.warmup,
                       on_point=lambda p: rec.add_point(p.model_dump(mode="json")))
    rec.finish(result.model_dump(mode="json", exclude={"path"}), result.path)


def _run_eval(plan: "RunRecipe", server, folder: Path, label: str, rec: "StageHandle") -> None:
    from ..evals.run import prepare_eval, run_eval

    e = plan.eval
    result = run_eval(server, prepare_eval(folder, e.tasks, limit=e.limit, num_fewshot=e.num_fewshot,
                                           num_concurrent=e.num_concurrent))
    rec.finish(result.model_dump(mode="json"), result.results_file)


CAPACITY = Measure("capacity", key=capacity_key, extra=lambda plan: {"slo": str(plan.slo)}, run=_run_capacity)
BENCH = Measure("bench", key=_bench_key, extra=lambda plan: {}, run=_run_bench)
# the gates travel with the eval so that `quantkit push` can apply the recipe's own gates later
EVAL = Measure("eval", key=_eval_key, extra=lambda plan: {"gates": plan.gates.model_dump()}, run=_run_eval)


def runner(kind: str) -> Measure:
    """The runner of a measurement kind; ValueError for a kind not measured on a lane's server.
    Looked up when called, so that a test can replace one (`measures.BENCH = ...`)."""
    table = {"capacity": CAPACITY, "bench": BENCH, "eval": EVAL}
    try:
        return table[kind]
    except KeyError:
        raise ValueError(f"stage kind {kind!r} is not measured on a lane's server") from None
