"""Evaluation results: the `EvalRun` schema (one run of lm-eval tasks on one served checkpoint).

Results file (schema_version 1), exported to `DIR/quantkit-eval/<UTC timestamp>.json` and stored
as an eval record:
  schema_version, kind="quantkit.eval", created_at (UTC ISO), wall_time_s
  model_dir, checkpoint (checkpoint.describe(DIR))
  server {url, served_model, started_by_quantkit, vllm_version, info}
  protocol {backend, model_args, num_concurrent, max_length, tokenized_requests, chat_template,
            fewshot_as_multiturn, add_bos_token, prefix_token_id, bootstrap_iters, seeds, gen_kwargs}
  data_dir (None: the Hub), versions {quantkit, lm_eval, transformers, datasets, python}
  task_configs_dir: the generated offline task YAMLs of this run (None online)
  tasks: list of TaskResult
    task, suite, version, n_shot, limit, n_samples (items scored), n_available (split size),
    output_type, chat_template, add_bos_token, data {source, template, files, note},
    primary_metric ("name,filter"), higher_is_better, metrics {"name,filter": {value, stderr}},
    subtasks (a group's leaf tasks), samples_file (lm-eval's per-item log, JSONL), wall_time_s
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import UsageError
from ..files import atomic_write_json

SCHEMA_VERSION = 1
RESULTS_SUBDIR = "quantkit-eval"

class Metric(BaseModel):
    value: float
    stderr: float | None = None


class DataInfo(BaseModel):
    source: str
    template: str
    files: dict[str, str] = Field(default_factory=dict)
    note: str | None = None


class TaskResult(BaseModel):
    task: str
    suite: str | None = None
    version: str | None = None
    n_shot: int
    limit: int | None = None
    n_samples: int
    n_available: int
    output_type: str
    chat_template: bool
    add_bos_token: bool
    data: DataInfo
    primary_metric: str
    higher_is_better: bool = True
    metrics: dict[str, Metric]
    subtasks: list[str] = Field(default_factory=list)
    samples_file: str | None = None
    wall_time_s: float

    @property
    def primary(self) -> Metric:
        return self.metrics[self.primary_metric]



class EvalRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.eval"
    created_at: str
    wall_time_s: float = 0.0
    model_dir: str
    checkpoint: dict[str, Any]
    server: dict[str, Any]
    protocol: dict[str, Any]
    data_dir: str | None
    versions: dict[str, str]
    task_configs_dir: str | None = None
    tasks: list[TaskResult] = Field(default_factory=list)
    results_file: str | None = None

    def task(self, name: str) -> TaskResult | None:
        return next((t for t in self.tasks if t.task == name), None)

    def write(self, path: Path) -> Path:
        self.results_file = str(path)
        atomic_write_json(path, self.model_dump(mode="json"))  # a crash mid-write keeps the last good file
        return path

    @classmethod
    def read(cls, path: Path) -> "EvalRun":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"cannot read eval results {path}: {exc}") from None
        if data.get("kind") != "quantkit.eval":
            raise UsageError(f"{path} is not a quantkit eval results file (kind={data.get('kind')!r})")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise UsageError(f"{path} has eval schema_version {data.get('schema_version')}, this quantkit reads {SCHEMA_VERSION}")
        return cls.model_validate(data)


def results_dir(model_dir: Path) -> Path:
    return Path(model_dir) / RESULTS_SUBDIR


def list_results(model_dir: Path) -> list[Path]:
    """Results files of a checkpoint, oldest first (timestamps sort as text)."""
    folder = results_dir(model_dir)
    return sorted(folder.glob("*.json")) if folder.is_dir() else []



def protocol_mismatch(q: TaskResult, b: TaskResult) -> str | None:
    """Why two results of one task are not comparable (None when they are)."""
    for field_name in ("version", "n_shot", "limit", "n_samples", "chat_template", "add_bos_token", "primary_metric"):
        qv, bv = getattr(q, field_name), getattr(b, field_name)
        if qv != bv:
            return f"{field_name} {qv!r} vs baseline {bv!r}"
    if (q.data.source, q.data.template) != (b.data.source, b.data.template):
        return f"data {q.data.source}/{q.data.template} vs baseline {b.data.source}/{b.data.template}"
    return None




def find_baseline(ref: str | Path, like: EvalRun | None = None) -> EvalRun:
    """The baseline to compare `like` with: an eval results .json (an export), or a checkpoint
    folder, whose newest stored eval (the store is the one truth) covers `like`'s tasks on the
    same protocol."""
    path = Path(ref).expanduser()
    if path.is_file():
        return EvalRun.read(path)
    if not path.is_dir():
        raise UsageError(f"baseline {ref} is neither an eval results .json nor a checkpoint folder")
    from ..store import Store

    folder = path.resolve()
    with Store() as store:
        stored = [r for r in store.records(kind="eval", status="done")
                  if r.params.get("checkpoint") and Path(r.params["checkpoint"]).expanduser().resolve() == folder]
    if not stored:
        raise UsageError(f"the store has no eval of {path}; run `quantkit eval {path} --tasks ...` first "
                         "(or `quantkit runs import` its results file)")
    for record in reversed(stored):
        try:
            run = EvalRun.model_validate(record.result)
        except ValueError:
            continue
        if like is None or all(
            (b := run.task(t.task)) is not None and protocol_mismatch(t, b) is None for t in like.tasks
        ):
            return run
    wanted = ", ".join(f"{t.task} ({t.n_shot}-shot, limit {t.limit})" for t in like.tasks) if like else ""
    raise UsageError(f"no stored eval of {path} matches this run's protocol [{wanted}]; evaluate the baseline the same way first")
