"""What a stored record is: the stage kinds, each one `StageKind` in `KINDS`, named in this one place.

A record's `kind` (a stage of `quantkit run`, or a standalone command's result) is the name of one
entry of `KINDS`. SQLite does not check it (migration m002 dropped the CHECK constraint, so a new
kind needs no table rebuild): `Store.begin` does, against `STAGE_KINDS`. Each entry says what its
records hold and who reads them:

- `result`: its result model as `"module:attr"`, imported only when asked for (`result_model()`),
  so that the store depends on no measuring or evaluating code at import time;
- `reported`: the report reads the newest of it per variant (`REPORTED_KINDS`, in `KINDS` order;
  a tune's trials are read through its tune record, never on their own);
- `measured`: measured under a workload (prompt and output lengths, load profile, SLO): two records
  of different workloads are two results, never one mixed from whichever is newest
  (`MEASURED_KINDS`);
- `importable`: `quantkit runs import` stores its result files (`IMPORTABLE_KINDS`); a result file
  names its kind in its JSON `kind` field as `quantkit.<kind>` (`result_kind`), and
  `RESULT_SCHEMAS` validates each;
- `points`: its records store the bench points measured on the way (`Store.add_point`).

How `quantkit run` measures a kind on a lane's server is the pipeline's (pipeline/measures.py:
`runner(kind)`): the store names no runner and imports nothing of the pipeline.

A measurement's record params have one shape, `StageKind.params`, whoever measured it: a stage of
`quantkit run` (measures.py, the tune stage) or a standalone command (`imports.standalone`, the
standalone tune).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..registry import Registry, resolve

RESULT_KIND_PREFIX = "quantkit."


@dataclass(frozen=True)
class StageKind:
    name: str
    result: str  # "module:attr" of the result model
    reported: bool = False
    measured: bool = False
    importable: bool = False
    points: bool = False

    @property
    def result_kind(self) -> str:
        return result_kind(self.name)

    def result_model(self) -> Any:
        return resolve(self.result)

    def params(self, folder: Path, fingerprint: str, serve: BaseModel, settings: BaseModel | dict[str, Any],
               **own: Any) -> dict[str, Any]:
        """A measurement record's params: the checkpoint folder and its fingerprint (the exact
        weights), the serving configuration, this kind's settings under its name (the report
        reads a capacity or tune record's workload from them and `slo`), then what is the
        stage's own (`slo`, `gates`, `url`, `study`, `standalone`). No run key reads params."""
        mine = settings.model_dump(mode="json") if isinstance(settings, BaseModel) else dict(settings)
        return {"checkpoint": str(folder), "fingerprint": fingerprint, "serve": serve.model_dump(mode="json"),
                self.name: mine, **own}



# The order is the report's reading order; it is stored nowhere.
KINDS: dict[str, StageKind] = {k.name: k for k in (
    StageKind("convert", "quantkit.checkpoint:ConvertRecord", reported=True),
    StageKind("bench", "quantkit.measure.capacity.bench:BenchRun", reported=True, importable=True, points=True),
    StageKind("eval", "quantkit.evals.results:EvalRun", reported=True, importable=True),
    StageKind("capacity", "quantkit.measure.capacity.live:CapacityResult", reported=True, measured=True,
              importable=True, points=True),
    StageKind("tune", "quantkit.measure.tune.study:TuneResult", reported=True, measured=True),
    StageKind("trial", "quantkit.measure.tune.study:Trial"),
    # its points are its windows (fidelity/result.py); the report shows it beside the accuracy
    StageKind("fidelity", "quantkit.fidelity.result:FidelityResult", reported=True, points=True),
)}

# Every kind a record may have; only membership is checked.
STAGE_KINDS = tuple(KINDS)
# The stages a report reads per variant, in the order it reads them.
REPORTED_KINDS = tuple(k.name for k in KINDS.values() if k.reported)
# Measured under a workload: compared within one workload only.
MEASURED_KINDS = tuple(k.name for k in KINDS.values() if k.measured)
# The stage kinds whose result files `quantkit runs import` stores.
IMPORTABLE_KINDS = tuple(k.name for k in KINDS.values() if k.importable)
# The stage kinds whose records carry bench points.
POINT_KINDS = tuple(k.name for k in KINDS.values() if k.points)


def stage_kind(name: str) -> StageKind:
    """The entry of a stage kind; ValueError for a name that is none."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown record kind {name!r}") from None


def result_kind(kind: str) -> str:
    """The JSON `kind` a result of this stage kind carries (`bench` -> `quantkit.bench`)."""
    return RESULT_KIND_PREFIX + kind


# A result file's JSON `kind` -> the stage kind it is stored as, for the importable ones.
IMPORTABLE_RESULTS = {result_kind(kind): kind for kind in IMPORTABLE_KINDS}
# Result files `quantkit runs import` accepts: their `kind` -> the schema that validates them.
RESULT_SCHEMAS = Registry("result kind", {KINDS[kind].result_kind: KINDS[kind].result for kind in IMPORTABLE_KINDS})
