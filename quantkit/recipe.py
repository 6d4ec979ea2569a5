"""Recipes: the method recipe (`Recipe`) and the run recipe (`RunRecipe`), YAML with file:line errors.

A method recipe is one method on one backend with its scheme and calibration settings. The
built-in ones live in the repository's `recipes/` folder (shipped as the data package
`quantkit.recipes`); `quantkit recipes` lists them and `--recipe NAME_OR_PATH` runs one.
The methods themselves (their names, whether they calibrate, which backends do them) are
methods.py's registry; each has a built-in recipe named after it.

A run recipe (`recipes/runs/*.yaml`, `quantkit run`) is the matrix: a model, its baseline and
methods, serving knobs, bench and eval settings, gates, and the executor that runs it. `load_run`
validates all of it up front. Both derive from one strict base model: an unknown key is an error
with a did-you-mean.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import safeload
from .errors import UsageError, did_you_mean
from .files import PLAIN_NAME_RULE, is_plain_name
from .evals.gates import Gates, GrowSettings
from .labels import BASELINE
from .measure.capacity.live import CapacitySettings
from .measure.stats.slo import Slo
from .measure.tune.study import TuneSettings
from .methods import METHODS
from .numbers import MAX_TOKENS, Concurrency, Count, CountOrZero, Positive, Seed, Tokens
from .serve.config import ServeConfig

SCHEMA_VERSION = 1

def variant_label(method: str, kv_cache: str | None) -> str:
    """A conversion's name: its method, with its calibrated KV cache if any (`fp8+kv-fp8`)."""
    return method + (f"+kv-{kv_cache}" if kv_cache else "")


def check_method(name: str) -> str:
    """A method's name (case-folded), or a UsageError naming the removed or nearest one (methods.py)."""
    return METHODS.check(name)


class Strict(BaseModel):
    """The base of every recipe schema: unknown keys are errors, assignments are validated, a
    number is finite (`.nan`, `.inf` are refused; numbers.py bounds the rest)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class Calibration(Strict):
    # "c4" means allenai/c4 online, or $QUANTKIT_DATA_DIR/c4/en_train_first1000.jsonl offline.
    dataset: str = "c4"
    num_samples: Count = 64
    seq_len: int = Field(512, ge=8, le=MAX_TOKENS)
    text_field: str | None = None
    split: str = "train"
    seed: int = 0


class Recipe(Strict):
    schema_version: int = SCHEMA_VERSION
    name: str
    description: str = ""
    method: str
    backend: str = "llmcompressor"
    # compressed-tensors preset scheme name (W4A16, W4A16_ASYM, W8A8, W8A16, FP8_DYNAMIC).
    scheme: str
    # Preferred group size for grouped schemes; with auto_group the largest size <= this that
    # divides every quantized Linear's input size is used (and recorded).
    group_size: int | None = None
    auto_group: bool = True
    ignore: list[str] = Field(default_factory=lambda: ["lm_head"])
    calibration: Calibration | None = None
    # SmoothQuant strength for int8; None disables SmoothQuant.
    smoothing_strength: float | None = None
    # Dtype of the saved, unquantized parts (norms, embeddings, lm_head).
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    # Dtype the model is calibrated in: fp32 is about 2x faster than bf16 on CPUs (docs/DESIGN.md, "What was seen").
    compute_dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    # Backend-specific keyword arguments (e.g. AWQ's duo_scaling), passed through unchanged.
    options: dict[str, Any] = Field(default_factory=dict)
    # A calibrated KV cache on top of the method: per-layer K/V scales (FP8, per tensor) stored in
    # the checkpoint, used by vLLM with --kv-cache-dtype fp8. Any method may add it; it needs
    # calibration data even where the method itself is data-free (fp8, rtn).
    kv_cache: Literal["fp8"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _kv_cache_calibrates(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kv_cache") and not data.get("calibration"):
            return {**data, "calibration": {}}  # the default calibration set (C4, 64 x 512)
        return data

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        try:
            return check_method(value)
        except UsageError as exc:
            raise ValueError(exc.message) from None

    @field_validator("group_size")
    @classmethod
    def _positive_group(cls, value: int | None) -> int | None:
        if value is not None and (value < 1 or value & (value - 1)):
            raise ValueError(f"group_size must be a power of two, got {value}")
        return value

    @property
    def needs_calibration(self) -> bool:
        return self.method in METHODS.calibrated() or self.kv_cache is not None

    def canonical(self) -> dict[str, Any]:
        """Everything that changes the output, in a stable form (name and description do not; an
        unset kv_cache is left out, so recipes written before it existed keep their hashes)."""
        data = self.model_dump(mode="json", exclude={"name", "description"})
        if not self.needs_calibration:
            data["calibration"] = None
        if data.get("kv_cache") is None:
            data.pop("kv_cache", None)
        return data

    def hash(self) -> str:
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class StoredRecipe(Recipe):
    """A conversion's recipe as its record stored it, read back by the report and the card: a
    method this quantkit no longer registers is shown as written, never a failure to read the store."""

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:  # overrides Recipe's check of the method registry
        return value


# ----------------------------------------------------------------------------------------------
# Loading


def _line_index(text: str, source: str = "<recipe>") -> dict[tuple, int]:
    """Map each key path in a YAML mapping to the 1-based line it starts on (aliases walked once;
    a bomb, a cycle or deep nesting is a UsageError with file:line: safeload.py)."""
    return safeload.line_index(safeload.compose_yaml(text, source))


def _explain(exc: ValidationError, source: str, lines: dict[tuple, int], root: type[BaseModel] | None = None) -> str:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    line = lines.get(loc) or lines.get(loc[:-1]) or 1
    where = ".".join(str(p) for p in loc) or "recipe"
    if err["type"] == "extra_forbidden":
        model: type[BaseModel] = root or Recipe
        for part in loc[:-1]:
            field = model.model_fields.get(str(part))
            inner = getattr(field, "annotation", None) if field else None
            model = next((a for a in getattr(inner, "__args__", (inner,)) if isinstance(a, type) and issubclass(a, BaseModel)), model)
        hint = did_you_mean(str(loc[-1]), list(model.model_fields))
        message = f"unknown key '{loc[-1]}'" + (f" in {'.'.join(map(str, loc[:-1]))}" if len(loc) > 1 else "") + f"; {hint}"
    elif err["type"] == "missing":
        message = f"missing required key '{where}'"
    else:
        message = f"{where}: {err['msg']}"
    more = len(exc.errors()) - 1
    return f"{source}:{line}: {message}" + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")


def parse_model(text: str, source: str, model: type[BaseModel], what: str = "a recipe") -> BaseModel:
    """YAML text -> a validated pydantic model, every error one line with file:line."""
    data, lines = safeload.load_yaml(text, source)  # bad YAML, an alias bomb: one line with file:line
    if not isinstance(data, dict):
        raise UsageError(f"{source}: {what} is a YAML mapping (key: value lines)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UsageError(_explain(exc, source, lines, model)) from None


def parse(text: str, source: str = "<recipe>") -> Recipe:
    return parse_model(text, source, Recipe)  # type: ignore[return-value]


def builtin_names() -> list[str]:
    folder = resources.files("quantkit.recipes")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load(name_or_path: str) -> Recipe:
    """A built-in recipe by name (`awq`) or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise UsageError(f"recipe file {path} does not exist; `quantkit recipes` lists the built-in ones")
        return parse(path.read_text(), str(path))
    names = builtin_names()
    if name_or_path not in names:
        raise UsageError(f"unknown recipe '{name_or_path}'; {did_you_mean(name_or_path, names)}")
    resource = resources.files("quantkit.recipes") / f"{name_or_path}.yaml"
    return parse(resource.read_text(), f"recipes/{name_or_path}.yaml")


def for_method(method: str) -> Recipe:
    """The built-in recipe of a method (each method has one named after it)."""
    return load(check_method(method))


def refuse_calibration(method_recipe: Recipe, given: list[str], add_kv_cache: str) -> None:
    """Calibration settings on a data-free method (fp8, w4a16-rtn, w8a16) are refused, not ignored:
    the user expects the data to shape the weights, and the checkpoint (whose record says no
    calibration) would not be what they asked for; a warning scrolls away in a long convert and is
    not seen with --json or --quiet, and leaving them out costs nothing. `given`: the settings as
    the user spelled them (`--num-samples`, a run recipe's `num_samples`); `add_kv_cache`: how a
    calibrated KV cache, which calibrates any method, is asked for there."""
    if not given or method_recipe.needs_calibration:
        return
    calibrated = ", ".join(METHODS.calibrated())
    many = len(given) > 1
    raise UsageError(f"{' and '.join(given)} {'do' if many else 'does'} not apply to {method_recipe.method}: it is "
                     f"data-free (no calibration); leave {'them' if many else 'it'} out, or use a calibrated method "
                     f"({calibrated}), or add a calibrated KV cache ({add_kv_cache})")


def override(recipe: Recipe, **fields: Any) -> Recipe:
    """Apply CLI overrides: `num_samples`, `seq_len`, `calib` go into calibration; None is skipped."""
    data = recipe.model_dump()
    calib_keys = {"num_samples": "num_samples", "seq_len": "seq_len", "calib": "dataset"}
    for key, value in fields.items():
        if value is None:
            continue
        if key in calib_keys:
            data["calibration"] = {**(data.get("calibration") or {}), calib_keys[key]: value}
        else:
            data[key] = value
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UsageError(f"override {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


# ----------------------------------------------------------------------------------------------
# Run recipes


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


ExecutorKind = Literal["local", "ray"]
# what each executor does, for `quantkit run --executor`'s help (generated from this table)
EXECUTORS: dict[str, str] = {"local": "one variant after another, the default",
                             "ray": "one variant per lane, in parallel"}
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
        from .measure.tune.study import resolve_space

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
