"""The method recipe (`Recipe`): one method on one backend with its scheme and calibration settings,
YAML with file:line errors.

The built-in ones live in the repository's `recipes/` folder (shipped as the data package
`quantkit.recipes`); `quantkit recipes` lists them and `--recipe NAME_OR_PATH` runs one.
The methods themselves (their names, whether they calibrate, which backends do them) are
methods.py's registry; each has a built-in recipe named after it.

`Strict` and `parse_model` are every recipe's schema base and reader: the run recipe
(pipeline/recipe.py), whose variants are method recipes, derives from them too. An unknown key is
an error with a did-you-mean.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .. import safeload
from ..errors import UsageError, did_you_mean
from ..methods import METHODS
from ..numbers import MAX_TOKENS, Count

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
