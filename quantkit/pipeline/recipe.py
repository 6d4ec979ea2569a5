"""The run recipe (`RunRecipe`, `recipes/runs/*.yaml`, `quantkit run`): the matrix.

A model, its baseline and methods (each a method recipe with its overrides, quantize/recipe.py, or
an existing checkpoint), serving knobs, bench and eval settings, gates, capacity and tuning under an
SLO, and the executor that runs it. `load_run` validates all of it up front, on the method recipe's
strict base model: an unknown key is an error with file:line and a did-you-mean.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from .. import safeload
from ..errors import UsageError
from ..evals.gates import Gates, GrowSettings
from ..fidelity.gate import FidelityGates
from ..fidelity.result import FidelitySettings
from ..files import PLAIN_NAME_RULE, is_plain_name
from ..labels import BASELINE, EXECUTORS
from ..measure.capacity.live import CapacitySettings
from ..measure.stats.slo import Slo
from ..measure.tune.study import TuneSettings
from ..numbers import Concurrency, Count, CountOrZero, Positive, Seed, Tokens
from ..quantize.recipe import Recipe, Strict, for_method, load, override, parse_model, refuse_calibration, variant_label
from ..serve.config import ServeConfig

class MethodEntry(Strict):
    """One variant: a method quantkit converts, or (`checkpoint:`) an existing quantized checkpoint
    (a local folder or a Hub id such as an AWQ release) that is measured as it is, with no
    convert stage."""

    method: str | None = None
    checkpoint: str | None = None  # an existing checkpoint instead of a conversion
    name: str | None = None  # label in the report (default: the method)
    recipe: str | None = None  # a built-in recipe name or YAML path (default: the method's)
    num_samples: int | None = None
    seq_len: int | None = None
    calib: str | None = None
    group_size: int | None = None
    backend: str | None = None
    kv_cache: Literal["fp8"] | None = None  # a calibrated FP8 KV cache on top of the method

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        # the label names the variant's folder (models/<model>-<label>-<hash8>): a separator or a
        # leading '.' ('..') would put a checkpoint, and a --force replace, outside the models folder
        if value is not None and not is_plain_name(value):
            raise ValueError(f"{value!r} is not a plain name: {PLAIN_NAME_RULE}")
        return value

    @model_validator(mode="after")
    def _checkpoint_label(self) -> "MethodEntry":
        # without name:, a checkpoint: variant is labelled by its folder's name, which reaches the
        # store, the report and the card as name: does: the same rule holds for it
        if self.checkpoint is not None and self.name is None and not is_plain_name(label := Path(self.checkpoint).name):
            raise ValueError(f"the checkpoint's folder name {label!r} is the variant's label, and it is not a plain "
                             f"name: give this variant a name: ({PLAIN_NAME_RULE})")
        return self

    def label(self) -> str:
        return self.name or (variant_label(self.method, self.kv_cache) if self.method else Path(str(self.checkpoint)).name)

    def check(self) -> None:
        if (self.method is None) == (self.checkpoint is None):
            raise UsageError("give either method: (quantkit converts) or checkpoint: (an existing checkpoint), not "
                             + ("both" if self.method else "neither"))
        if self.checkpoint is not None and any(v is not None for v in (
                self.recipe, self.num_samples, self.seq_len, self.calib, self.group_size, self.backend, self.kv_cache)):
            raise UsageError("a checkpoint: variant is not converted: leave out recipe, num_samples, seq_len, calib, "
                             "group_size, backend and kv_cache")
        if self.method is not None:  # as `convert --method fp8 --num-samples 8` is refused
            refuse_calibration(self.quant_recipe(), [k for k in ("num_samples", "seq_len", "calib")
                                                     if getattr(self, k) is not None], "kv_cache: fp8")

    def same_as(self) -> str:
        """What defines this variant's weights: its conversion recipe in the canonical form its run
        key hashes, or the checkpoint it names. Two entries alike here are one variant under two
        names: one run key would name both (load_run refuses them)."""
        if self.method is not None:
            recipe = self.quant_recipe()
            return f"the same conversion (method {recipe.method}, recipe {recipe.hash()})"
        return f"the same checkpoint ({os.path.normpath(os.path.expanduser(str(self.checkpoint)))})"

    def overrides(self) -> dict[str, Any]:
        """What this entry changes in its method's recipe: the one list that both the run key
        (`quant_recipe`) and the conversion read (a second copy once left kv_cache out of the
        conversion while the key had it: an int8 checkpoint stored as int8+kv-fp8)."""
        return {"num_samples": self.num_samples, "seq_len": self.seq_len, "calib": self.calib,
                "group_size": self.group_size, "backend": self.backend, "kv_cache": self.kv_cache}

    def quant_recipe(self) -> Recipe:
        base = load(self.recipe) if self.recipe else for_method(self.method)
        return override(base, **self.overrides())


class BenchSettings(Strict):
    # the bench's numbers follow the command line's (`quantkit bench`): numbers.py's kinds
    concurrency: list[Concurrency] = Field(default_factory=lambda: [1, 4, 16])
    input_len: Tokens = 128
    output_len: Tokens = 64
    num_prompts: Count | None = None
    warmup: CountOrZero = 2
    seed: Seed = 0

    @field_validator("concurrency")
    @classmethod
    def _some_concurrency(cls, value: list[int]) -> list[int]:
        if not value:  # an empty list once skipped the bench without a word
            raise ValueError("an empty list measures nothing: list at least one concurrency, or set bench: null "
                             "to run no bench")
        return value


class EvalSettings(Strict):
    tasks: str | list[str] = "quick"
    limit: Count | None = None
    num_fewshot: CountOrZero | None = None
    num_concurrent: Concurrency = 4
    # grow: {max_items: N}: while a gate is inconclusive, score more items (seeded order) on the
    # baseline and the undecided variants, up to N per task. Not part of the eval's run key.
    grow: GrowSettings | None = None


class FidelityStage(FidelitySettings):
    """The recipe's `fidelity:`: each quantized variant's next-token distributions against the
    baseline's on the same windows (fidelity/run.py), with the window settings of `quantkit
    fidelity` and its gates (`gates: {max_delta_nll: .., min_top1: ..}`, defaults fidelity/gate.py's;
    null turns one off). The gates decide with the accuracy gates (report/build.py)."""

    gates: FidelityGates = Field(default_factory=FidelityGates)

    def settings(self) -> FidelitySettings:
        return FidelitySettings(**self.model_dump(exclude={"gates"}))


ExecutorKind = Literal["local", "ray"]
# labels.EXECUTORS says what each does, for `quantkit run --executor`'s help
assert set(EXECUTORS) == set(get_args(ExecutorKind)), "every executor kind needs its one-line description"


class ExecutorSettings(Strict):
    """Who runs the lanes (`quantkit run --executor`). Not part of any run key: the same stages give
    the same records whichever executor ran them, so a run can be finished by another one."""

    kind: ExecutorKind = "local"
    # a Ray cluster (`HEAD:6379`); None = $RAY_ADDRESS, else a Ray instance started on this machine
    address: str | None = None
    # what one lane (one variant's chain) asks of Ray: None = 1 CPU, or on a GPU cluster
    # tensor x pipeline parallel size GPUs (none when vLLM places its own workers through Ray)
    num_cpus: float | None = Field(None, ge=0)
    num_gpus: float | None = Field(None, ge=0)
    memory_gb: float | None = Field(None, gt=0)
    resources: dict[str, float] = Field(default_factory=dict)  # custom Ray resources, e.g. {lane: 1}
    # a lane whose node (or worker process) was lost is run again this many times, then failed
    max_retries: int = Field(1, ge=0)


def _recipe_slo(value: Any) -> Any:
    """A recipe's `slo:`, a string (`ttft_p95=1,tpot_p95=0.1`) or a mapping ({ttft_p95: 1, ...}), as
    the Slo it names (parsed by Slo itself; its errors said as the recipe's)."""
    if value is None or isinstance(value, Slo):
        return value
    if isinstance(value, dict):
        value = ",".join(f"{k}={v}" for k, v in value.items())
    if not isinstance(value, str):
        raise ValueError("slo is a string like ttft_p95=1,tpot_p95=100ms or a mapping of the same terms")
    try:
        return Slo.model_validate(value)
    except UsageError as exc:
        raise ValueError(exc.message.replace("--slo", "slo")) from None


class RunRecipe(Strict):
    kind: Literal["run"] = "run"
    name: str
    description: str = ""
    model: str
    baseline: bool = True
    methods: list[MethodEntry] = Field(default_factory=list)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    bench: BenchSettings | None = Field(default_factory=BenchSettings)
    eval: EvalSettings | None = Field(default_factory=EvalSettings)
    gates: Gates = Field(default_factory=Gates)
    fidelity: FidelityStage | None = None  # off unless set (`fidelity: {}` takes every default)
    bandwidth_gbs: Positive | None = None
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    # capacity under an SLO on the `serve:` configuration (vLLM's defaults plus those flags), and
    # optionally the tuner's search for a better configuration; both need `slo:`
    slo: Slo | None = None  # written as a string or a mapping of terms (_recipe_slo)
    capacity: CapacitySettings = Field(default_factory=CapacitySettings)
    tune: TuneSettings | None = None

    @field_validator("slo", mode="before")
    @classmethod
    def _valid_slo(cls, value: Any) -> Any:
        return _recipe_slo(value)


def load_run(path: str | Path) -> RunRecipe:
    """A run recipe by path, or a built-in one by name (`demo`), validated whole."""
    p = Path(path)
    if not p.is_file():
        builtin = resources.files("quantkit.recipes") / "runs" / f"{path}.yaml"
        if builtin.is_file():
            text, source = builtin.read_text(), f"recipes/runs/{path}.yaml"
        else:
            names = sorted(f.name.removesuffix(".yaml") for f in (resources.files("quantkit.recipes") / "runs").iterdir()
                           if f.name.endswith(".yaml"))
            raise UsageError(f"run recipe {path} does not exist (built-in: {', '.join(names)})")
    else:
        text, source = p.read_text(), str(p)
    data, _ = safeload.load_yaml(text, source)  # bad YAML, an alias bomb: one line with file:line
    if isinstance(data, dict) and "kind" not in data and ("method" in data or "scheme" in data):
        raise UsageError(f"{source} is a method recipe (one quantization method); `quantkit run` wants a run recipe "
                         f"(kind: run, model:, methods:); convert with it: quantkit convert MODEL --recipe {source}, "
                         "or see recipes/runs/demo.yaml")
    run = parse_model(text, source, RunRecipe, "a run recipe")
    for entry in run.methods:
        try:
            entry.check()
            if entry.method is not None:
                entry.quant_recipe()
        except UsageError as exc:
            raise UsageError(f"{source}: method {entry.label()}: {exc.message}") from None
    if run.tune is not None and run.slo is None:
        raise UsageError(f"{source}: tune: maximizes the capacity under an SLO: set slo: too")
    if run.tune is not None:
        from ..measure.tune.study import resolve_space

        try:
            resolve_space(run.tune, gpus=0)
        except UsageError as exc:
            raise UsageError(f"{source}: tune: {exc.message}") from None
    labels = [e.label() for e in run.methods]
    if len(set(labels)) != len(labels) or BASELINE in labels:
        raise UsageError(f"{source}: method labels must be unique and not 'baseline' (got {labels}); set name:")
    seen: dict[str, str] = {}
    for entry in run.methods:
        same = entry.same_as()
        if same in seen:
            # a second name is not a second variant: its conversion would replace the first's record
            # under their one run key, leaving a checkpoint no record names
            raise UsageError(f"{source}: methods {seen[same]} and {entry.label()} are {same}: one variant under two "
                             "names; remove one, or make them differ (recipe:, group_size:, backend:, kv_cache:, "
                             "or calibration on a calibrated method)")
        seen[same] = entry.label()
    return run
