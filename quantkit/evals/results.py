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
    subtasks (a group's leaf tasks), samples_file (lm-eval's per-item log, JSONL), wall_time_s,
    items (ItemScores: every item's id, prompt hash and metric values; what paired recovery reads,
    so the statistics never depend on the samples file still being there), growth (Growth: the
    blocks of a result grown by `evals.grow`; None for a plain run)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import UsageError
from ..safeload import read_json
from ..files import atomic_write_json
from ..secrets import mask_secrets

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


class ItemScores(BaseModel):
    """One task's per-item scores, compact: what paired statistics need, stored with the eval record.

    `ids[i]` is the item (lm-eval's doc_id; `subtask/doc_id` inside a group), `prompts[i]` the first
    8 hex digits of lm-eval's prompt_hash (two runs that disagree on it did not ask the same
    question), `values[metric][i]` the item's score for "name,filter". For metrics lm-eval
    aggregates as a weighted ratio (word/byte perplexity, bits per byte), `values` holds the
    item's log-likelihood and `weights` its word or byte count.
    """

    model_config = ConfigDict(extra="forbid")

    ids: list[str]
    prompts: list[str]
    values: dict[str, list[float]] = Field(default_factory=dict)
    weights: dict[str, list[float]] = Field(default_factory=dict)

    def merged(self, other: "ItemScores") -> "ItemScores":
        """These items and other's new ones (an id in both keeps this one's scores), sorted by id."""
        metrics = [m for m in self.values if m in other.values]
        out: dict[str, tuple[str, dict[str, float], dict[str, float]]] = {}
        for src in (other, self):
            for k, item in enumerate(src.ids):
                out[item] = (src.prompts[k], {m: src.values[m][k] for m in metrics},
                             {m: src.weights[m][k] for m in metrics if m in src.weights})
        ids = sorted(out, key=item_sort_key)
        return ItemScores(
            ids=ids, prompts=[out[i][0] for i in ids],
            values={m: [out[i][1][m] for i in ids] for m in metrics},
            weights={m: [out[i][2][m] for i in ids] for m in metrics if m in self.weights and m in other.weights},
        )


def item_sort_key(item: str) -> tuple[str, int]:
    """`subtask/12` sorts by subtask, then numerically by doc id."""
    head, _, tail = item.rpartition("/")
    return (head, int(tail)) if tail.isdigit() else (head, -1)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and value == value:
        return float(value)
    return None


def _compact(x: float) -> float | int:
    # 0/1 scores stored as ints: the JSON of a 1000-item task stays a few kilobytes
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else x


def item_scores(samples: dict[str, list[dict[str, Any]]]) -> ItemScores | None:
    """lm-eval's logged samples ({leaf task: rows}, one row per item and filter) as ItemScores.

    A metric some item lacks (or logs as something other than a number or a (value, weight)
    pair) is left out; None when nothing numeric was logged."""
    grouped = len(samples) > 1
    items: dict[str, dict[str, Any]] = {}
    for leaf, rows in samples.items():
        for row in rows:
            key = f"{leaf}/{row['doc_id']}" if grouped else str(row["doc_id"])
            item = items.setdefault(key, {"prompt": str(row.get("prompt_hash") or "")[:8], "values": {}, "weights": {}})
            for name in row.get("metrics") or []:
                metric = f"{name},{row.get('filter', 'none')}"
                value = row.get(name)
                if isinstance(value, (list, tuple)) and len(value) == 2 and all(_number(v) is not None for v in value):
                    item["values"][metric], item["weights"][metric] = _number(value[0]), _number(value[1])
                elif _number(value) is not None:
                    item["values"][metric] = _number(value)
    if not items:
        return None
    ids = sorted(items, key=item_sort_key)
    metrics = sorted(set.intersection(*(set(items[i]["values"]) for i in ids)))
    if not metrics:
        return None
    weighted = [m for m in metrics if all(m in items[i]["weights"] for i in ids)]
    return ItemScores(
        ids=ids, prompts=[items[i]["prompt"] for i in ids],
        values={m: [_compact(items[i]["values"][m]) for i in ids] for m in metrics},
        weights={m: [_compact(items[i]["weights"][m]) for i in ids] for m in weighted},
    )


class Growth(BaseModel):
    """How a grown result's items were chosen (evals.grow): the first `limit` items of each
    (sub)task, then blocks of `step` items from a permutation of the rest seeded by `seed`."""

    seed: int
    step: int
    blocks: int  # blocks scored beyond the first `limit` items (per subtask for a group)
    previous_results_file: str | None = None


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
    items: ItemScores | None = None
    growth: Growth | None = None

    @property
    def primary(self) -> Metric:
        return self.metrics[self.primary_metric]

    def paired_items(self) -> bool:
        """Whether per-item scores of the headline metric are stored (paired statistics need them)."""
        return self.items is not None and self.primary_metric in self.items.values



class EvalServer(BaseModel):
    """`EvalRun.server`, the server lm-eval ran against, as its readers see it (report/records.py):
    the record keeps the dict `run.new_run` wrote."""

    url: str | None = None
    served_model: str | None = None
    started_by_quantkit: bool | None = None
    vllm_version: str | None = None
    dtype: str | None = None  # what the server computed in (None: not known, e.g. --url)
    dtype_reason: str | None = None


class EvalProtocol(BaseModel):
    """What readers take of `EvalRun.protocol` (lm-eval's settings, stored whole as `run.new_run`
    wrote them): the seeds, lm-eval's name -> value."""

    seeds: dict[str, int] | None = None


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
        # a crash mid-write keeps the last good file; secrets masked, as the store holds them
        atomic_write_json(path, mask_secrets(self.model_dump(mode="json")))
        return path

    @classmethod
    def read(cls, path: Path) -> "EvalRun":
        path = Path(path)
        data = read_json(path, "a quantkit eval results file", "give the JSON `quantkit eval` wrote", expect=dict,
                         strict=True)
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
    """Why two results of one task are not comparable (None when they are).

    With per-item scores on both sides the items themselves are compared: every item of `q` must
    have been scored by the baseline with the same prompt (the baseline may hold more items, as a
    grown one does; pairing uses q's). Without them, the limit and the item count must be equal."""
    same_items = q.paired_items() and b.paired_items()
    fields = ("version", "n_shot", "chat_template", "add_bos_token", "primary_metric")
    for field_name in fields if same_items else fields[:2] + ("limit", "n_samples") + fields[2:]:
        qv, bv = getattr(q, field_name), getattr(b, field_name)
        if qv != bv:
            return f"{field_name} {qv!r} vs baseline {bv!r}"
    if (q.data.source, q.data.template) != (b.data.source, b.data.template):
        return f"data {q.data.source}/{q.data.template} vs baseline {b.data.source}/{b.data.template}"
    if same_items:
        prompts = dict(zip(b.items.ids, b.items.prompts))
        missing = [i for i in q.items.ids if i not in prompts]
        if missing:
            return (f"{len(missing)} of its {len(q.items.ids)} items (first: {missing[0]}) were not scored by the baseline "
                    f"({len(b.items.ids)} items); grow the baseline the same way")
        differ = [i for i, h in zip(q.items.ids, q.items.prompts) if prompts[i] != h]
        if differ:
            return f"{len(differ)} items were asked with other prompts than the baseline's (first: item {differ[0]})"
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
