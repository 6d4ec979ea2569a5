"""`quantkit run RECIPE.yaml`: the matrix (baseline + each method), resumable from the store.

For each method: convert (llm-compressor by default) into `<models dir>/<model>-<method>-<hash>`.
For each checkpoint, baseline included: one vLLM server, then bench, then eval against it. Every
stage is a store record keyed by what defines its result, so a killed run started again skips the
keys already done and redoes only the rest; `--force` redoes everything. A method that fails is
recorded as failed and the others go on. The report is written from the store alone.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from . import __version__, models, recipe as recipes, settings
from .console import info, warn
from .errors import QuantkitError, UsageError
from .evals_core import Gates
from .store import Store, run_key


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MethodEntry(Strict):
    method: str
    name: str | None = None  # label in the report (default: the method)
    recipe: str | None = None  # a built-in recipe name or YAML path (default: the method's)
    num_samples: int | None = None
    seq_len: int | None = None
    calib: str | None = None
    group_size: int | None = None
    backend: str | None = None

    def label(self) -> str:
        return self.name or self.method

    def quant_recipe(self) -> recipes.Recipe:
        base = recipes.load(self.recipe) if self.recipe else recipes.for_method(self.method)
        return recipes.override(base, num_samples=self.num_samples, seq_len=self.seq_len, calib=self.calib,
                                group_size=self.group_size, backend=self.backend)


class BenchSettings(Strict):
    concurrency: list[int] = Field(default_factory=lambda: [1, 4, 16])
    input_len: int = 128
    output_len: int = 64
    num_prompts: int | None = None
    warmup: int = 2
    seed: int = 0


class EvalSettings(Strict):
    tasks: str | list[str] = "quick"
    limit: int | None = None
    num_fewshot: int | None = None
    num_concurrent: int = 4


class RunRecipe(Strict):
    kind: Literal["run"] = "run"
    name: str
    description: str = ""
    model: str
    baseline: bool = True
    methods: list[MethodEntry] = Field(default_factory=list)
    serve: dict[str, Any] = Field(default_factory=dict)
    bench: BenchSettings | None = Field(default_factory=BenchSettings)
    eval: EvalSettings | None = Field(default_factory=EvalSettings)
    gates: Gates = Field(default_factory=Gates)
    bandwidth_gbs: float | None = None


def load(path: str | Path) -> RunRecipe:
    from importlib import resources

    p = Path(path)
    if not p.is_file():
        builtin = resources.files("quantkit.recipes") / "runs" / f"{path}.yaml"
        if builtin.is_file():
            text, source = builtin.read_text(), f"recipes/runs/{path}.yaml"
        else:
            raise UsageError(f"run recipe {path} does not exist (built-in: demo)")
    else:
        text, source = p.read_text(), str(p)
    run = recipes.parse_model(text, source, RunRecipe, "a run recipe")
    for entry in run.methods:
        try:
            entry.quant_recipe()
        except UsageError as exc:
            raise UsageError(f"{source}: method {entry.label()}: {exc.message}") from None
    labels = [e.label() for e in run.methods]
    if len(set(labels)) != len(labels) or "baseline" in labels:
        raise UsageError(f"{source}: method labels must be unique and not 'baseline' (got {labels}); set name:")
    return run


def hardware_fingerprint() -> dict[str, Any]:
    from .quantize.record import hardware

    hw = hardware()
    return {"machine": hw.get("machine"), "cpu": hw.get("cpu"), "cpu_count": hw.get("cpu_count"),
            "gpu": hw.get("gpu"), "gpu_count": hw.get("gpu_count"), "system": platform.system()}


class StageOutcome(BaseModel):
    variant: str
    kind: str
    status: str  # done | skipped | failed
    run_key: str
    seconds: float = 0.0
    error: str | None = None


class RunSummary(BaseModel):
    recipe: str
    model: str
    outcomes: list[StageOutcome] = Field(default_factory=list)
    report: dict[str, str] | None = None
    gates_passed: bool | None = None
    wall_time_s: float = 0.0


def run(recipe_path: str | Path, *, force: bool = False, report_dir: Path | None = None,
        store: Store | None = None) -> RunSummary:
    started = time.monotonic()
    plan = load(recipe_path)
    model = models.resolve(plan.model)
    own_store = store is None
    store = store or Store()
    summary = RunSummary(recipe=str(recipe_path), model=model.name)
    common = {"hardware": hardware_fingerprint(), "quantkit": __version__}
    from .engine import installed_vllm_version

    vllm = installed_vllm_version()
    try:
        checkpoints: list[tuple[str, str, Path]] = []  # (variant label, method, dir)
        if plan.baseline:
            checkpoints.append(("baseline", "baseline", model.path))
        for entry in plan.methods:
            out = _convert_stage(store, plan, model, entry, common, force, summary)
            if out is not None:
                checkpoints.append((entry.label(), entry.method, out))
        for label, method, folder in checkpoints:
            _measure_stages(store, plan, model.name, label, folder, common, vllm, force, summary)
        from .compare import compare

        result = compare(store, model=model.name, out_dir=report_dir, gates=plan.gates.model_dump(),
                         bandwidth_gbs=plan.bandwidth_gbs, title=f"{plan.name}: {model.name}")
        summary.report = {k: str(v) for k, v in result["paths"].items()}
        summary.gates_passed = result["gates_passed"]
    finally:
        if own_store:
            store.close()
    summary.wall_time_s = round(time.monotonic() - started, 1)
    return summary


def _convert_stage(store: Store, plan: RunRecipe, model: models.ResolvedModel, entry: MethodEntry,
                   common: dict, force: bool, summary: RunSummary) -> Path | None:
    from .quantize import convert
    from .quantize.record import ConvertRecord

    quant = entry.quant_recipe()
    key = run_key("convert", source=model.fingerprint(), recipe=quant.canonical(), **common)
    out = settings.models_dir() / f"{model.name}-{entry.label()}-{quant.hash()[:8]}"
    done = store.done(key)
    if done and not force and ConvertRecord.read(out) is not None:
        info(f"[{entry.label()}] convert: done earlier ({key[:10]}), skipped")
        summary.outcomes.append(StageOutcome(variant=entry.label(), kind="convert", status="skipped", run_key=key))
        return out
    record_id = store.begin(key, "convert", model.name, entry.label(), {"recipe": quant.canonical(), **common},
                            recipe_hash=quant.hash())
    t0 = time.monotonic()
    try:
        # the output folder is the pipeline's own: a leftover from a killed run is replaced
        record = convert(str(model.path), entry.method, out, recipe=entry.recipe, force=True,
                         overrides={"num_samples": entry.num_samples, "seq_len": entry.seq_len, "calib": entry.calib,
                                    "group_size": entry.group_size, "backend": entry.backend})
    except BaseException as exc:
        if not isinstance(exc, QuantkitError):
            store.fail(record_id, "interrupted", status="interrupted")
            raise
        store.fail(record_id, exc.one_line())
        warn(f"[{entry.label()}] convert failed: {exc.one_line()}; the other methods go on")
        summary.outcomes.append(StageOutcome(variant=entry.label(), kind="convert", status="failed", run_key=key,
                                             error=exc.one_line(), seconds=round(time.monotonic() - t0, 1)))
        return None
    store.finish(record_id, record.model_dump(mode="json"), str(out / "quantkit.json"))
    summary.outcomes.append(StageOutcome(variant=entry.label(), kind="convert", status="done", run_key=key,
                                         seconds=round(time.monotonic() - t0, 1)))
    return out


def _measure_stages(store: Store, plan: RunRecipe, model_name: str, label: str, folder: Path, common: dict,
                    vllm: str, force: bool, summary: RunSummary) -> None:
    from .engine import ServeConfig, VLLMServer

    fingerprint = models.fingerprint(folder)
    serve = ServeConfig.model_validate(plan.serve)
    stages = []
    if plan.bench is not None:
        stages.append(("bench", run_key("bench", checkpoint=fingerprint, bench=plan.bench.model_dump(),
                                         serve=serve.model_dump(), vllm=vllm, **common)))
    if plan.eval is not None:
        stages.append(("eval", run_key("eval", checkpoint=fingerprint, eval=plan.eval.model_dump(),
                                       serve=serve.model_dump(), vllm=vllm, **common)))
    todo = []
    for kind, key in stages:
        if store.done(key) and not force:
            info(f"[{label}] {kind}: done earlier ({key[:10]}), skipped")
            summary.outcomes.append(StageOutcome(variant=label, kind=kind, status="skipped", run_key=key))
        else:
            todo.append((kind, key))
    if not todo:
        return
    try:
        with VLLMServer(folder, serve) as server:
            for kind, key in todo:
                _stage(store, kind, key, label, model_name, folder, fingerprint, plan, server, serve, summary)
    except QuantkitError as exc:  # the server did not start: every pending stage of it failed
        for kind, key in todo:
            if not any(o.run_key == key for o in summary.outcomes):
                record_id = store.begin(key, kind, model_name, label, {"checkpoint": str(folder)})
                store.fail(record_id, exc.one_line())
                summary.outcomes.append(StageOutcome(variant=label, kind=kind, status="failed", run_key=key,
                                                     error=exc.one_line()))
        warn(f"[{label}] {exc.one_line()}; the other checkpoints go on")


def _stage(store: Store, kind: str, key: str, label: str, model_name: str, folder: Path, fingerprint: str,
           plan: RunRecipe, server, serve, summary: RunSummary) -> None:
    # the fingerprint ties a measurement to the exact weights; the gates travel with the eval so
    # that `quantkit push` can apply the recipe's own gates later
    params = {"checkpoint": str(folder), "fingerprint": fingerprint, "serve": serve.model_dump(),
              kind: (plan.bench if kind == "bench" else plan.eval).model_dump()}
    if kind == "eval":
        params["gates"] = plan.gates.model_dump()
    record_id = store.begin(key, kind, model_name, label, params)
    t0 = time.monotonic()
    try:
        if kind == "bench":
            from .bench import run_bench

            b = plan.bench
            result = run_bench(folder, concurrency=b.concurrency, input_len=b.input_len, output_len=b.output_len,
                               num_prompts=b.num_prompts, url=server.url, seed=b.seed, warmup_requests=b.warmup,
                               on_point=lambda p: store.add_point(record_id, p.model_dump(mode="json")))
            result.server = server.info  # the server quantkit started: KV cache, kernels, start time
            result.write()
            path = result.path
        else:
            from .evals_core import run_eval

            e = plan.eval
            result = run_eval(folder, e.tasks, limit=e.limit, num_fewshot=e.num_fewshot, url=server.url,
                              num_concurrent=e.num_concurrent)
            path = result.results_file
        store.finish(record_id, result.model_dump(mode="json", exclude={"path"}), path)
        status, error = "done", None
    except QuantkitError as exc:
        store.fail(record_id, exc.one_line())
        status, error = "failed", exc.one_line()
        warn(f"[{label}] {kind} failed: {error}")
    except BaseException:
        store.fail(record_id, "interrupted", status="interrupted")
        raise
    summary.outcomes.append(StageOutcome(variant=label, kind=kind, status=status, run_key=key, error=error,
                                         seconds=round(time.monotonic() - t0, 1)))
