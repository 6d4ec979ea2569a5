"""Which lm-eval tasks quantkit runs, and where their data comes from (offline JSONL or the Hub).

The registry is `evals/tasks.yaml` (shipped as the data package `quantkit.eval_tasks`): each quantkit task name maps to a
stock lm-eval 0.4.x task whose prompt template, metrics and version are reused unchanged, plus the
offline files that replace the Hub dataset when QUANTKIT_DATA_DIR is set. Named suites (`quick`,
`openllm`) fix n-shot and limit per task.

Offline, a small task YAML is generated per task at run time (kept with the results, so the exact
config that produced a score can be re-read): it `include:`s the stock YAML by absolute path, so
its `!function` hooks resolve next to the stock file, and overrides only `dataset_path: json`,
`dataset_name`, `dataset_kwargs.data_files` and the splits the offline copy lacks. HellaSwag's offline
copy is preprocessed text and gets quantkit's own template (evals/tasks/hellaswag_preprocessed.yaml).
Online, the stock task directories are indexed as they are. Either way quantkit builds its own
TaskManager over just those directories (indexing all of lm-eval's 14k tasks takes ~8 s).
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ..errors import SetupError, UsageError, did_you_mean

REGISTRY_FILE = "tasks.yaml"


class TaskDef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    stock: str  # the stock task (or group) YAML, relative to lm_eval/tasks/
    metric: str  # headline "metric,filter" for recovery and gates
    higher_is_better: bool = True
    data: dict[str, str] = Field(default_factory=dict)
    subtask_data: dict[str, str] = Field(default_factory=dict)
    offline_template: str | None = None
    offline_overrides: dict[str, Any] = Field(default_factory=dict)
    offline_note: str | None = None

    @property
    def is_group(self) -> bool:
        return bool(self.subtask_data)


class SuiteEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str
    num_fewshot: int | None = None
    limit: int | None = None


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    tasks: list[SuiteEntry]


@dataclass(frozen=True)
class TaskSpec:
    """One task to run: None means the task's own default (n-shot) or every item (limit)."""

    name: str
    num_fewshot: int | None = None
    limit: int | None = None
    suite: str | None = None


@dataclass
class DataSource:
    """Where a task's items came from; stored with every score."""

    source: str  # "offline" or "hub"
    template: str  # "stock:<relative yaml>" or "quantkit:<evals/tasks yaml>"
    files: dict[str, str] = field(default_factory=dict)
    note: str | None = None


@dataclass
class TaskSetup:
    include_paths: list[Path]
    sources: dict[str, DataSource]


def _evals_root():
    return resources.files("quantkit.eval_tasks")


@lru_cache(maxsize=1)
def _load_registry() -> tuple[dict[str, TaskDef], dict[str, Suite]]:
    raw = yaml.safe_load((_evals_root() / REGISTRY_FILE).read_text())
    tasks = {name: TaskDef(name=name, **body) for name, body in raw["tasks"].items()}
    suites = {name: Suite(name=name, **body) for name, body in raw.get("suites", {}).items()}
    for suite in suites.values():
        for entry in suite.tasks:
            if entry.task not in tasks:  # a broken shipped file, not user input
                raise SetupError(f"suite '{suite.name}' in evals/{REGISTRY_FILE} names unknown task '{entry.task}'")
    return tasks, suites


def registry() -> dict[str, TaskDef]:
    return _load_registry()[0]


def suites() -> dict[str, Suite]:
    return _load_registry()[1]


def resolve(tasks: str | list[str], limit: int | None = None, num_fewshot: int | None = None) -> list[TaskSpec]:
    """`arc_easy,quick,...` -> task specs; an explicit limit / n-shot replaces the suite's."""
    items = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    names = [x.strip() for x in items if x.strip()]
    if not names:
        raise UsageError("no tasks given; " + did_you_mean("", list(registry()) + list(suites())))
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be a positive number of items, got {limit}")
    if num_fewshot is not None and num_fewshot < 0:
        raise UsageError(f"--num-fewshot must be >= 0, got {num_fewshot}")
    specs: list[TaskSpec] = []
    for name in names:
        key = name.lower()
        if key in suites():
            for entry in suites()[key].tasks:
                specs.append(TaskSpec(
                    entry.task,
                    num_fewshot if num_fewshot is not None else entry.num_fewshot,
                    limit if limit is not None else entry.limit,
                    key,
                ))
        elif key in registry():
            specs.append(TaskSpec(key, num_fewshot, limit))
        else:
            raise UsageError(
                f"unknown task '{name}'; " + did_you_mean(key, list(registry()) + list(suites()))
            )
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:  # two rows for one task would overwrite each other's samples/results
            raise UsageError(f"task '{spec.name}' is requested twice (directly and/or through a suite)")
        seen.add(spec.name)
    return specs


def lm_eval_tasks_dir() -> Path:
    """lm_eval/tasks without importing lm_eval (its import is slow and pulls torch)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError("lm-eval is not installed in this environment; pip install lm-eval==0.4.13")
    return Path(list(spec.submodule_search_locations)[0]) / "tasks"


def _stock_yaml(task: TaskDef) -> Path:
    path = lm_eval_tasks_dir() / task.stock
    if not path.is_file():
        raise SetupError(f"lm-eval has no {task.stock} (quantkit's task '{task.name}'); quantkit pins lm-eval 0.4.13")
    return path


def _data_file(data_dir: Path, rel: str, task: str) -> Path:
    path = data_dir / rel
    if not path.is_file():
        raise SetupError(
            f"offline data file {path} for task '{task}' is missing (QUANTKIT_DATA_DIR={data_dir}); "
            "restore it or unset QUANTKIT_DATA_DIR to read the Hub"
        )
    return path


def _write_yaml(path: Path, body: dict[str, Any]) -> None:
    path.write_text(
        "# generated by quantkit (quantkit/evals/tasks.py): the stock task with offline data files\n"
        + yaml.safe_dump(body, sort_keys=False)
    )


def _subtask_yamls(group_yaml: Path) -> list[Path]:
    """The leaf task YAMLs beside a group YAML (mmlu/default/mmlu_*.yaml)."""
    out = []
    for path in sorted(group_yaml.parent.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if isinstance(raw, dict) and "task" in raw and isinstance(raw["task"], str):
            out.append(path)
    return out


def prepare_tasks(specs: list[TaskSpec], data_dir: Path | None, config_dir: Path) -> TaskSetup:
    """Task directories for a TaskManager; offline, the generated YAMLs go into config_dir."""
    defs = registry()
    include: list[Path] = []
    sources: dict[str, DataSource] = {}
    if data_dir is None:
        for spec in specs:
            task = defs[spec.name]
            stock = _stock_yaml(task)
            if stock.parent not in include:
                include.append(stock.parent)
            sources[task.name] = DataSource("hub", f"stock:{task.stock}")
        return TaskSetup(include, sources)

    config_dir.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        task = defs[spec.name]
        stock = _stock_yaml(task)
        if task.is_group:
            # The stock group YAMLs are indexed as they are; each leaf task is replaced by a
            # generated one with the same name (a later include path overrides an earlier one).
            if stock.parent not in include:
                include.insert(0, stock.parent)
            files: dict[str, str] = {}
            for leaf in _subtask_yamls(stock):
                leaf_raw = yaml.safe_load(leaf.read_text())
                subject = leaf_raw.get("dataset_name")
                data_files = {
                    split: str(_data_file(data_dir, pattern.format(dataset_name=subject), leaf_raw["task"]))
                    for split, pattern in task.subtask_data.items()
                }
                _write_yaml(config_dir / leaf.name, {
                    "include": str(leaf), "task": leaf_raw["task"], "dataset_path": "json",
                    "dataset_name": None, "dataset_kwargs": {"data_files": data_files},
                    **task.offline_overrides,
                })
                for split, pattern in task.subtask_data.items():
                    files[split] = str(data_dir / pattern)
            sources[task.name] = DataSource("offline", f"stock:{task.stock}", files, task.offline_note)
            continue
        data_files = {split: str(_data_file(data_dir, rel, task.name)) for split, rel in task.data.items()}
        if task.offline_template:
            base = Path(str(_evals_root() / "tasks" / task.offline_template))
            template = f"quantkit:evals/tasks/{task.offline_template}"
        else:
            base, template = stock, f"stock:{task.stock}"
        _write_yaml(config_dir / f"{task.name}.yaml", {
            "include": str(base), "task": task.name, "dataset_path": "json", "dataset_name": None,
            "dataset_kwargs": {"data_files": data_files}, **task.offline_overrides,
        })
        sources[task.name] = DataSource("offline", template, data_files, task.offline_note)
    include.append(config_dir)
    return TaskSetup(include, sources)


def task_manager(setup: TaskSetup):
    """An lm-eval TaskManager over just the directories this run needs."""
    from lm_eval.tasks import TaskManager

    # Overriding a stock leaf task with the offline one is the point; lm-eval warns once per
    # task (57 lines for mmlu), which would bury quantkit's own progress lines.
    index_log = logging.getLogger("lm_eval.tasks._index")
    level = index_log.level
    index_log.setLevel(logging.ERROR)
    try:
        return TaskManager(include_path=[str(p) for p in setup.include_paths], include_defaults=False)
    finally:
        index_log.setLevel(level)
