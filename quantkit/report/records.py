"""The report's typed seam: stored result JSON validated once, into the result models themselves.

The store keeps each stage's result as the JSON its model wrote (ConvertRecord, BenchRun, EvalRun,
RecoveryReport, CapacityResult, TuneResult, FidelityResult). The report, the decision and the card read them as
these models' attributes, never as dict keys: a field renamed in a result model is an
AttributeError in the report (and a failing test), not a silent "—".

Records written by older quantkits lack fields added since (and a test's record may hold only what
it checks), so each model is read through its *tolerant* form (`tolerant(Model)`): a subclass of the
model in which a required field may be missing (None) and unknown keys are ignored; every default,
type check and validator of the model still applies, and nested models are tolerant too. A stored
value of the wrong type still fails, loudly, here at the boundary.

Some fields hold a plain dict that another module wrote (`machine.hardware()`, `checkpoint.describe()`,
config.json's quantization_config, the recipe): the store keeps them exactly as written, and `SHAPES`
names the model each is read as. Where a field is a mapping by nature (lm-eval's metric name ->
score, a package -> its version, a seed's name -> the seed), it stays a typed `dict[str, X]`, read by
key. A record's params are read here too (`params`).

`as_model` gives the strict model back where a computation needs one whole (measure/capacity/ladder.py).
"""

from __future__ import annotations

import copy
import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, create_model

from ..checkpoint import CalibrationUsed, CheckpointInfo, ConvertRecord, QuantizationConfig, VllmCheck
from ..evals.gates import Gates, RecoveryReport
from ..evals.results import EvalProtocol, EvalRun, EvalServer
from ..fidelity.result import FidelityResult
from ..machine import Hardware
from ..measure.capacity.bench import BenchRun, BenchWorkload
from ..measure.capacity.live import CapacityFigures, CapacityResult
from ..measure.stats.point import BenchPoint
from ..measure.stats.slo import Slo
from ..measure.tune.study import Trial, TuneResult
from ..quantize.recipe import StoredRecipe
from ..store import Record

M = TypeVar("M", bound=BaseModel)
_TOLERANT: dict[type, type] = {}

# (result model, field) -> the model its stored dict is read as
SHAPES: dict[tuple[type[BaseModel], str], type[BaseModel]] = {
    (ConvertRecord, "recipe"): StoredRecipe,
    (ConvertRecord, "calibration"): CalibrationUsed,
    (ConvertRecord, "quantization_config"): QuantizationConfig,
    (ConvertRecord, "hardware"): Hardware,
    (ConvertRecord, "vllm_check"): VllmCheck,
    (BenchRun, "checkpoint"): CheckpointInfo,
    (BenchRun, "workload"): BenchWorkload,
    (BenchRun, "hardware"): Hardware,
    (EvalRun, "checkpoint"): CheckpointInfo,
    (EvalRun, "server"): EvalServer,
    (EvalRun, "protocol"): EvalProtocol,
    (CapacityResult, "checkpoint"): CheckpointInfo,
    (CapacityResult, "hardware"): Hardware,
    (Trial, "capacity"): CapacityFigures,
}


def _swap(annotation: Any) -> Any:
    """The annotation with every BaseModel in it replaced by its tolerant form (but a value type such
    as Slo, stored as its text: it is whole or invalid)."""
    if annotation is Slo:
        return annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return tolerant(annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is None or not args or origin is typing.Literal:
        return annotation
    swapped = tuple(_swap(a) for a in args)
    if swapped == args:
        return annotation
    if origin in (Union, types.UnionType):
        return Union[swapped]
    if origin is typing.Annotated:
        return typing.Annotated[swapped]
    return origin[swapped if len(swapped) > 1 else swapped[0]]


def tolerant(model: type[M]) -> type[M]:
    """`model` with its required fields optional (None when missing), unknown keys ignored and
    nested models tolerant; a subclass, so its methods, defaults and validators all apply (a model
    that is tolerant already, as the shapes are, is itself)."""
    if model in _TOLERANT:
        return _TOLERANT[model]
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        shape = SHAPES.get((model, name))
        annotation = _swap(info.annotation) if shape is None else tolerant(shape)
        if info.is_required() or (shape is not None and info.default_factory is None):
            annotation = annotation | None
            info = copy.copy(info)
            info.default = None
        elif shape is not None:  # an empty dict by default: the shape with nothing set
            info = copy.copy(info)
            info.default_factory = annotation
        elif annotation is info.annotation:
            continue
        fields[name] = (annotation, info)
    if not fields and model.model_config.get("extra") in (None, "ignore"):
        _TOLERANT[model] = model  # tolerant already (a shape: every field optional)
        return model
    made = create_model(model.__name__, __base__=model, __module__=__name__, **fields)
    made.model_config = ConfigDict(**{**model.model_config, "extra": "ignore"})
    made.model_rebuild(force=True)
    _TOLERANT[model] = made
    return made


def read(model: type[M], data: dict[str, Any] | BaseModel | None) -> M | None:
    """A stored result (JSON, or a model of it) as the tolerant `model`; None for None."""
    if data is None:
        return None
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json", exclude_unset=True)
    return tolerant(model).model_validate(data)


def as_model(model: type[M], value: BaseModel) -> M:
    """The strict `model` of a tolerantly read `value` (ValidationError when it lacks a field)."""
    return model.model_validate(value.model_dump(mode="json", exclude_unset=True))


# The stored results the report reads, by stage
Convert = tolerant(ConvertRecord)
Bench = tolerant(BenchRun)
Eval = tolerant(EvalRun)
Recovery = tolerant(RecoveryReport)
Capacity = tolerant(CapacityResult)
Tune = tolerant(TuneResult)
Fidelity = tolerant(FidelityResult)
Point = tolerant(BenchPoint)


class StoredWorkload(BaseModel):
    """A capacity or tune record's settings (`params.capacity`, CapacitySettings as stored), as far
    as workloads are compared (gather.workload_of)."""

    profile: str = "burst"  # stored before profiles had names: a burst
    input_len: int | None = None  # None: a tune stored before tune records named their workload
    output_len: int | None = None


class Params(BaseModel):
    """A record's params (store/kinds.StageKind.params) as the report and push read them."""

    checkpoint: str | None = None  # the folder measured
    slo: Slo | None = None
    capacity: StoredWorkload | None = None
    gates: Gates | None = None  # an eval's: the recipe's gates it ran with


def params(record: Record) -> Params:
    return tolerant(Params).model_validate(record.params or {})


def gates_of(record: Record) -> dict[str, Any]:
    """The gates an eval record ran with, those set only, as compare and push take gates; {} for none."""
    gates = params(record).gates
    return {k: v for k, v in gates.model_dump().items() if v} if gates is not None else {}
