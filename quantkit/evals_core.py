"""Accuracy of a served checkpoint: lm-eval against vLLM's OpenAI API, recovery and gates.

`run_eval(model_dir, tasks)` starts a VLLMServer on the checkpoint (or uses `url=` of a server that
already runs), runs lm-eval 0.4.x in-process with its `local-completions` model against that
server's /v1/completions (loglikelihood through `echo` + `logprobs`, generate-until through plain
completions), and stores one JSON file beside the checkpoint. Task configs come from
`evals_tasks` (stock lm-eval templates; offline JSONL when QUANTKIT_DATA_DIR is set).
`compare_to_baseline(results, baseline, gates)` gives recovery = quantized / baseline per task and
on average, with propagated standard errors, and raises GateFailed when a gate fails.

Results file (schema_version 1), `DIR/quantkit-eval/<UTC timestamp>.json`, an `EvalRun`:
  schema_version, kind="quantkit.eval", created_at (UTC ISO), wall_time_s
  model_dir, checkpoint {method, scheme, ...} from DIR/quantkit.json ("baseline" when absent)
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
A later issue moves these records into the SQLite store; the pydantic models are the contract.

Standard errors are lm-eval's (closed form for means; None where lm-eval reports N/A, e.g.
perplexities). Recovery stderr uses the delta method for a ratio of independent estimates,
r * sqrt((se_q/q)^2 + (se_b/b)^2); the two runs score the same items, so the true error of the
ratio is smaller: the reported one is conservative.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field

from . import __version__, settings
from .console import info, step, warn
from .errors import BackendError, GateFailed, SetupError, UsageError
from .evals_tasks import TaskSpec, prepare, registry, resolve, task_manager

SCHEMA_VERSION = 1
RESULTS_SUBDIR = "quantkit-eval"
# lm-eval's default seeds, recorded so a run can be repeated exactly.
SEEDS = {"random_seed": 0, "numpy_random_seed": 1234, "torch_random_seed": 1234, "fewshot_random_seed": 1234}
# Means have a closed-form stderr in lm-eval; bootstrap only serves other aggregations.
BOOTSTRAP_ITERS = 1000
LOGLIKELIHOOD_TYPES = {"loglikelihood", "loglikelihood_rolling", "multiple_choice"}


# ----------------------------------------------------------------------------------------------
# Results schema


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
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n")
        os.replace(tmp, path)  # a reader never sees half a file, even if a run dies mid-write
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


# ----------------------------------------------------------------------------------------------
# The server side


def check_logprobs(api_url: str, model: str, token_ids: list[int]) -> None:
    """Loglikelihood tasks need prompt logprobs through `echo`; fail in one line if missing.

    lm-eval itself would die deep inside its response parser with a KeyError or TypeError.
    """
    import httpx

    url = api_url.rstrip("/") + "/completions"
    payload = {"model": model, "prompt": token_ids, "max_tokens": 1, "temperature": 0,
               "logprobs": 1, "echo": True}
    try:
        # lm-eval's own per-request timeout (300 s): a server that is slow on its first requests
        # (FP8 on CPU warms up for minutes) must not fail here when lm-eval would have waited.
        response = httpx.post(url, json=payload, timeout=300)
    except httpx.HTTPError as exc:
        raise BackendError(f"the server at {url} did not answer a completion request ({type(exc).__name__}: {exc})") from None
    if response.status_code != 200:
        raise BackendError(
            f"the server at {url} refused an echo+logprobs completion (HTTP {response.status_code}: "
            f"{response.text[:200]}); loglikelihood tasks need it"
        )
    try:
        choice = response.json()["choices"][0]
        token_logprobs = choice["logprobs"]["token_logprobs"]
        ok = isinstance(token_logprobs, list) and len(token_logprobs) >= len(token_ids) and any(
            isinstance(x, (int, float)) for x in token_logprobs
        )
    except (KeyError, IndexError, TypeError, ValueError):
        ok = False
    if not ok:
        raise BackendError(
            f"the server at {url} returned no prompt logprobs for an echo=true, logprobs=1 request; "
            "loglikelihood tasks (arc, hellaswag, mmlu, wikitext, ...) need a server that does (vLLM does)"
        )


def _server(model_dir: Path, url: str | None, serve: dict[str, Any] | None):
    """The server to evaluate: an already-running one (`url`), or vLLM started on model_dir."""
    from .engine import RemoteServer, ServeConfig, VLLMServer

    if url:
        return RemoteServer(url)
    try:
        config = ServeConfig(**({"enforce_eager": True} | (serve or {})))
    except ValueError as exc:
        raise UsageError(f"bad --serve setting: {' '.join(str(exc).split())[:300]}") from None
    return VLLMServer(model_dir, config)


# ----------------------------------------------------------------------------------------------
# Running lm-eval


def _model_args(model: str, completions_url: str, tokenizer: Path, num_concurrent: int, max_length: int,
                max_gen_toks: int | None) -> dict[str, Any]:
    args = {
        "model": model,
        "base_url": completions_url,
        "tokenizer": str(tokenizer),
        "tokenizer_backend": "huggingface",
        # Token ids go to the server, so the checkpoint's tokenizer (not the server's text
        # handling) decides context/continuation boundaries, as lm-eval's hf backend does.
        "tokenized_requests": True,
        "num_concurrent": num_concurrent,
        "max_retries": 2,
        "max_length": max_length,
        # Explicit, so the record says it; lm-eval's API models default to no BOS.
        "add_bos_token": False,
    }
    if max_gen_toks is not None:
        args["max_gen_toks"] = max_gen_toks
    return args


def _versions() -> dict[str, str]:
    import platform

    out = {"quantkit": __version__, "python": platform.python_version()}
    for name in ("lm_eval", "transformers", "datasets", "torch"):
        try:
            out[name] = metadata.version(name.replace("_", "-"))
        except metadata.PackageNotFoundError:
            pass
    return out


def _checkpoint_info(model_dir: Path) -> dict[str, Any]:
    from .quantize.record import ConvertRecord

    try:
        record = ConvertRecord.read(model_dir)
    except Exception as exc:  # a damaged quantkit.json must not cost an hour of eval
        warn(f"{model_dir}/quantkit.json is unreadable ({type(exc).__name__}); recording the checkpoint as unknown")
        return {"method": "unknown"}
    if record is None:
        return {"method": "baseline"}
    return {"method": record.method, "scheme": record.scheme, "group_size": record.group_size,
            "backend": record.backend, "recipe_hash": record.recipe_hash, "source": record.source.ref}


def _top_object(loaded: dict[str, Any], name: str):
    groups = loaded.get("groups") or {}
    return groups[name] if name in groups else loaded["tasks"][name]


def _leaf_tasks(loaded: dict[str, Any]) -> dict[str, Any]:
    return loaded["tasks"]


def _check_limit(spec: TaskSpec, leaves: dict[str, Any]) -> int:
    """The split size (summed over a group's leaves). A limit above a leaf's size scores the whole
    split, as lm-eval does, with a warning: `--limit 500 --tasks quick,wikitext` means "at most 500"."""
    total = 0
    for name, task in leaves.items():
        size = len(task.eval_docs)
        total += size
        if spec.limit is not None and spec.limit > size:
            split = task.config.test_split or task.config.validation_split
            warn(f"--limit {spec.limit} is more than {name}'s {split} split ({size} items); all {size} are scored")
    return total


def _jsonable(value: Any) -> Any:
    from lm_eval.utils import handle_non_serializable

    return handle_non_serializable(value)


def _write_samples(path: Path, samples: dict[str, list[dict]]) -> None:
    with path.open("w") as fh:
        for leaf, rows in samples.items():
            for row in rows:
                fh.write(json.dumps({"task": leaf, **row}, default=_jsonable, ensure_ascii=False) + "\n")


def _metrics(block: dict[str, Any]) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for key, value in block.items():
        if "," not in key or "_stderr," in key or not isinstance(value, (int, float)):
            continue
        name, filt = key.split(",", 1)
        stderr = block.get(f"{name}_stderr,{filt}")
        stderr = float(stderr) if isinstance(stderr, (int, float)) and math.isfinite(stderr) else None
        out[key] = Metric(value=float(value), stderr=stderr)
    return out


def _evaluate_one(spec: TaskSpec, obj: Any, model_args: dict[str, Any], tm: Any, chat_template: bool) -> dict[str, Any]:
    import lm_eval

    try:
        # lm-eval prints some progress with print() ("bootstrapping for stddev: ..."); stdout
        # carries quantkit's data (--json), so everything lm-eval says goes to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            results = lm_eval.simple_evaluate(
                model="local-completions",
                model_args=model_args,
                tasks=[obj],
                num_fewshot=None,  # set per task on the task objects (suites mix n-shots)
                limit=spec.limit,
                log_samples=True,
                bootstrap_iters=BOOTSTRAP_ITERS,
                apply_chat_template=chat_template,
                fewshot_as_multiturn=chat_template,
                task_manager=tm,
                **SEEDS,
            )
    except Exception as exc:  # lm-eval/HTTP errors: one line naming the task
        text = " ".join(str(exc).split())[:300]
        raise BackendError(f"lm-eval failed on task '{spec.name}': {type(exc).__name__}: {text}") from exc
    if results is None:
        raise BackendError(f"lm-eval returned no results for task '{spec.name}'")
    return results


def run_eval(
    model_dir: str | Path,
    tasks: str | list[str],
    *,
    limit: int | None = None,
    num_fewshot: int | None = None,
    url: str | None = None,
    output_dir: str | Path | None = None,
    chat_template: bool = False,
    max_gen_toks: int | None = None,
    num_concurrent: int = 4,
    max_length: int = 2048,
    serve: dict[str, Any] | None = None,
) -> EvalRun:
    """Evaluate the checkpoint in model_dir as served by vLLM; write and return the EvalRun."""
    model_dir = Path(model_dir).expanduser().resolve()
    if not (model_dir / "config.json").is_file():
        raise UsageError(f"{model_dir} is not a model checkpoint folder (no config.json)")
    specs = resolve(tasks, limit, num_fewshot)
    if max_gen_toks is not None and max_gen_toks < 1:
        raise UsageError(f"--max-gen-toks must be >= 1, got {max_gen_toks}")
    start = time.monotonic()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    out = Path(output_dir).expanduser().resolve() if output_dir else results_dir(model_dir)
    run_dir = out / stamp
    run_dir.mkdir(parents=True, exist_ok=True)
    results_path = out / f"{stamp}.json"
    try:
        data_dir = settings.data_dir()
        if data_dir is not None:
            # lm-eval's loaders must not try the Hub for anything when the data is local.
            os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

        with step(f"loading {len(specs)} task(s) ({'offline data' if data_dir else 'Hub datasets'})"):
            setup = prepare(specs, data_dir, run_dir / "task-configs")
            with contextlib.redirect_stdout(sys.stderr):  # see _evaluate_one
                tm = task_manager(setup)
            loaded: dict[str, dict[str, Any]] = {}
            sizes: dict[str, int] = {}
            for spec in specs:
                try:
                    with contextlib.redirect_stdout(sys.stderr):
                        loaded[spec.name] = tm.load([spec.name])
                except Exception as exc:
                    raise BackendError(
                        f"could not load task '{spec.name}': {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                    ) from exc
                sizes[spec.name] = _check_limit(spec, _leaf_tasks(loaded[spec.name]))
                for leaf in _leaf_tasks(loaded[spec.name]).values():
                    if spec.num_fewshot is not None:
                        if leaf.get_config("num_fewshot") == 0 and spec.num_fewshot != 0:
                            # lm-eval would silently keep 0 for tasks pinned at 0-shot (truthfulqa)
                            raise UsageError(f"task '{spec.name}' is defined zero-shot; --num-fewshot {spec.num_fewshot} does not apply")
                        leaf.set_config(key="num_fewshot", value=spec.num_fewshot)

        tokenizer = _tokenizer(model_dir)
        needs_logprobs = any(
            leaf.get_config("output_type") in LOGLIKELIHOOD_TYPES
            for result in loaded.values() for leaf in _leaf_tasks(result).values()
        )

        with ExitStack() as stack:
            if url:
                srv = stack.enter_context(_server(model_dir, url, serve))
            else:
                with step(f"starting vLLM on {model_dir.name}"):
                    srv = stack.enter_context(_server(model_dir, None, serve))
            api_url, served = srv.api_url, srv.model_name
            server = {"url": srv.url, "served_model": served, "started_by_quantkit": not url,
                      "vllm_version": getattr(srv.info, "vllm_version", None), "info": _jsonable_info(srv.info)}
            if needs_logprobs:
                check_logprobs(api_url, served, tokenizer.encode("The capital of France is Paris")[:8])

            model_args = _model_args(served, api_url + "/completions", model_dir, num_concurrent, max_length, max_gen_toks)
            run = EvalRun(
                created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                model_dir=str(model_dir),
                checkpoint=_checkpoint_info(model_dir),
                server=server,
                protocol={
                    "backend": "lm-eval local-completions",
                    "model_args": model_args,
                    "num_concurrent": num_concurrent,
                    "max_length": max_length,
                    "tokenized_requests": True,
                    "chat_template": chat_template,
                    "fewshot_as_multiturn": chat_template,
                    "add_bos_token": False,
                    "prefix_token_id": _prefix_token_id(tokenizer),
                    "bootstrap_iters": BOOTSTRAP_ITERS,
                    "seeds": SEEDS,
                    "gen_kwargs": {"max_gen_toks": max_gen_toks} if max_gen_toks is not None else None,
                },
                data_dir=str(data_dir) if data_dir else None,
                versions=_versions(),
                task_configs_dir=str(run_dir / "task-configs") if data_dir else None,
            )
            defs = registry()
            for spec in specs:
                leaves = _leaf_tasks(loaded[spec.name])
                obj = _top_object(loaded[spec.name], spec.name)
                shots = sorted({int(leaf.get_config("num_fewshot") or 0) for leaf in leaves.values()})
                what = f"{spec.name} ({shots[0] if len(shots) == 1 else shots}-shot, "
                if len(leaves) > 1:
                    what += (f"{spec.limit} items from each of {len(leaves)} subtasks" if spec.limit is not None
                             else f"all {sizes[spec.name]} items of {len(leaves)} subtasks") + ")"
                else:
                    what += f"{spec.limit if spec.limit is not None else 'all'} of {sizes[spec.name]} items)"
                t0 = time.monotonic()
                with step(f"evaluating {what}"):
                    try:
                        results = _evaluate_one(spec, obj, model_args, tm, chat_template)
                    except BackendError as exc:
                        # lm-eval only sees refused connections; the server knows why it died
                        # (vLLM-CPU's engine times out on too-slow steps, e.g. FP8 without AMX).
                        if hasattr(srv, "alive") and not srv.alive():
                            raise BackendError(f"the server died during task '{spec.name}' "
                                               f"({srv.exit_reason()}); {exc.message}") from exc
                        raise
                run.tasks.append(_task_result(spec, results, leaves, defs[spec.name], setup.sources[spec.name],
                                              sizes[spec.name], chat_template, run_dir, time.monotonic() - t0))
                run.wall_time_s = round(time.monotonic() - start, 2)
                run.write(results_path)  # after every task: a crash keeps what finished
                primary = run.tasks[-1].primary
                info(f"{spec.name}: {run.tasks[-1].primary_metric} = {primary.value:.4f}"
                     + (f" ± {primary.stderr:.4f}" if primary.stderr is not None else ""))
        run.wall_time_s = round(time.monotonic() - start, 2)
        run.write(results_path)
        return run
    except BaseException:
        if not results_path.exists():  # nothing finished: leave no empty run folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _jsonable_info(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


def _tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as exc:
        raise UsageError(f"cannot load the tokenizer of {model_dir}: {type(exc).__name__}: {exc}") from None


def _prefix_token_id(tokenizer) -> int | None:
    # What lm-eval's API models put before an empty context (rolling loglikelihood): BOS if the
    # tokenizer has one, else EOS. Recorded because it changes perplexities.
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def _task_result(spec: TaskSpec, results: dict[str, Any], leaves: dict[str, Any], task_def, source,
                 n_available: int, chat_template: bool, run_dir: Path, wall: float) -> TaskResult:
    block = results["results"].get(spec.name)
    if block is None:
        raise BackendError(f"lm-eval's results have no entry for task '{spec.name}'")
    metrics = _metrics(block)
    if task_def.metric not in metrics:
        raise BackendError(
            f"task '{spec.name}' produced no '{task_def.metric}' (got: {', '.join(sorted(metrics)) or 'nothing'})"
        )
    samples_path = run_dir / f"samples_{spec.name}.jsonl"
    _write_samples(samples_path, results.get("samples") or {})
    n_samples = sum(int(v.get("effective", 0)) for k, v in (results.get("n-samples") or {}).items() if k in leaves)
    shots = {int(v) for k, v in (results.get("n-shot") or {}).items() if k in leaves}
    version = (results.get("versions") or {}).get(spec.name)
    first = next(iter(leaves.values()))
    return TaskResult(
        task=spec.name,
        suite=spec.suite,
        version=None if version is None else str(version),
        n_shot=shots.pop() if len(shots) == 1 else int(first.get_config("num_fewshot") or 0),
        limit=spec.limit,
        n_samples=n_samples,
        n_available=n_available,
        output_type=str(first.get_config("output_type")),
        chat_template=chat_template,
        add_bos_token=False,
        data=DataInfo(source=source.source, template=source.template, files=source.files, note=source.note),
        primary_metric=task_def.metric,
        higher_is_better=task_def.higher_is_better,
        metrics=metrics,
        subtasks=sorted(leaves) if len(leaves) > 1 else [],
        samples_file=str(samples_path),
        wall_time_s=round(wall, 2),
    )


# ----------------------------------------------------------------------------------------------
# Recovery and gates


class Gates(BaseModel):
    """Accuracy gates (the recipe's `gates:`). All are minimum recoveries (quantized / baseline)."""

    model_config = ConfigDict(extra="forbid")

    min_recovery: float | None = Field(None, gt=0, description="on the average over accuracy tasks")
    min_task_recovery: float | None = Field(None, gt=0, description="on every task")
    tasks: dict[str, float] = Field(default_factory=dict, description="per named task")


class TaskRecovery(BaseModel):
    task: str
    metric: str
    higher_is_better: bool
    quantized: float
    quantized_stderr: float | None
    baseline: float
    baseline_stderr: float | None
    recovery: float | None  # None when the baseline score is 0 (or a perplexity is 0)
    recovery_stderr: float | None


class GateVerdict(BaseModel):
    gate: str  # "min_recovery" | "min_task_recovery" | "tasks"
    task: str | None  # None for the average
    threshold: float
    value: float | None
    passed: bool

    def describe(self) -> str:
        what = self.task or "average"
        if self.value is None:
            return f"{what}: recovery undefined (baseline score 0) against min {self.threshold:g}"
        return f"{what} recovery {self.value:.4f} < {self.threshold:g} (short by {self.threshold - self.value:.4f})"


class RecoveryReport(BaseModel):
    results_file: str | None
    baseline_file: str | None
    tasks: list[TaskRecovery]
    mean_recovery: float | None  # over the accuracy (higher-is-better) tasks
    mean_recovery_stderr: float | None
    gates: list[GateVerdict] = Field(default_factory=list)
    passed: bool = True

    def failures(self) -> list[GateVerdict]:
        return [g for g in self.gates if not g.passed]


def ratio_stderr(q: float, se_q: float | None, b: float, se_b: float | None) -> float | None:
    """Stderr of q / b for independent q, b (delta method); None if either stderr is unknown."""
    if se_q is None or se_b is None or b == 0 or q == 0:
        if se_q is not None and se_b is not None and q == 0 and b != 0:
            return se_q / abs(b)  # d(q/b)/dq = 1/b; the q-relative term is undefined at q = 0
        return None
    r = q / b
    return abs(r) * math.sqrt((se_q / q) ** 2 + (se_b / b) ** 2)


def _protocol_mismatch(q: TaskResult, b: TaskResult) -> str | None:
    for field_name in ("version", "n_shot", "limit", "n_samples", "chat_template", "add_bos_token", "primary_metric"):
        qv, bv = getattr(q, field_name), getattr(b, field_name)
        if qv != bv:
            return f"{field_name} {qv!r} vs baseline {bv!r}"
    if (q.data.source, q.data.template) != (b.data.source, b.data.template):
        return f"data {q.data.source}/{q.data.template} vs baseline {b.data.source}/{b.data.template}"
    return None


def compare_to_baseline(results: EvalRun, baseline_results: EvalRun, gates: Gates | dict | None = None,
                        *, raise_on_fail: bool = True) -> RecoveryReport:
    """Recovery of every task of `results` against the same task of `baseline_results`.

    Both runs must use the same protocol per task (version, n-shot, limit, items scored, chat
    template, BOS, data and template); otherwise the ratio means nothing and this raises UsageError.
    A failed gate raises GateFailed (exit 3) naming the task and the shortfall, unless
    raise_on_fail is False (the report then says passed=False).
    """
    if isinstance(gates, dict):
        gates = Gates.model_validate(gates)
    rows: list[TaskRecovery] = []
    for q in results.tasks:
        b = baseline_results.task(q.task)
        if b is None:
            raise UsageError(
                f"the baseline results ({baseline_results.results_file or 'given'}) have no '{q.task}'; "
                "evaluate the baseline on the same tasks first"
            )
        mismatch = _protocol_mismatch(q, b)
        if mismatch:
            raise UsageError(f"task '{q.task}' ran on a different protocol than the baseline: {mismatch}")
        qm, bm = q.primary, b.primary
        if q.higher_is_better:
            rec = qm.value / bm.value if bm.value != 0 else None
            se = ratio_stderr(qm.value, qm.stderr, bm.value, bm.stderr)
        else:  # perplexity: lower is better, so recovery is baseline / quantized
            rec = bm.value / qm.value if qm.value != 0 else None
            se = ratio_stderr(bm.value, bm.stderr, qm.value, qm.stderr)
        rows.append(TaskRecovery(
            task=q.task, metric=q.primary_metric, higher_is_better=q.higher_is_better,
            quantized=qm.value, quantized_stderr=qm.stderr, baseline=bm.value, baseline_stderr=bm.stderr,
            recovery=rec, recovery_stderr=se,
        ))
    # The average covers accuracy tasks only (as published recovery tables do); perplexity
    # recovery is per task and can be gated per task.
    acc = [r for r in rows if r.higher_is_better and r.recovery is not None]
    mean = sum(r.recovery for r in acc) / len(acc) if acc else None
    mean_se = (
        math.sqrt(sum(r.recovery_stderr ** 2 for r in acc)) / len(acc)
        if acc and all(r.recovery_stderr is not None for r in acc) else None
    )
    report = RecoveryReport(
        results_file=results.results_file, baseline_file=baseline_results.results_file,
        tasks=rows, mean_recovery=mean, mean_recovery_stderr=mean_se,
    )
    if gates is not None:
        report.gates = list(_verdicts(report, gates))
        report.passed = all(g.passed for g in report.gates)
    if raise_on_fail and not report.passed:
        raise GateFailed(gate_failure_message(report))
    return report


def gate_failure_message(report: RecoveryReport) -> str:
    return "gate failed: " + "; ".join(g.describe() for g in report.failures())


def _verdicts(report: RecoveryReport, gates: Gates) -> Iterator[GateVerdict]:
    by_task = {r.task: r for r in report.tasks}
    unknown = sorted(set(gates.tasks) - set(by_task))
    if unknown:
        raise UsageError(f"gate names task(s) not in these results: {', '.join(unknown)}")

    def verdict(gate: str, task: str | None, threshold: float, value: float | None) -> GateVerdict:
        return GateVerdict(gate=gate, task=task, threshold=threshold, value=value,
                           passed=value is not None and value >= threshold)

    if gates.min_recovery is not None:
        if report.mean_recovery is None:
            raise UsageError("min_recovery gates the average over accuracy tasks, and these results have none")
        yield verdict("min_recovery", None, gates.min_recovery, report.mean_recovery)
    if gates.min_task_recovery is not None:
        for r in report.tasks:
            yield verdict("min_task_recovery", r.task, gates.min_task_recovery, r.recovery)
    for task, threshold in gates.tasks.items():
        yield verdict("tasks", task, threshold, by_task[task].recovery)


def load_baseline(ref: str | Path, like: EvalRun | None = None) -> EvalRun:
    """A results JSON, or a checkpoint dir: its newest results that cover `like`'s tasks."""
    path = Path(ref).expanduser()
    if path.is_file():
        return EvalRun.read(path)
    if not path.is_dir():
        raise UsageError(f"baseline {ref} is neither an eval results .json nor a checkpoint folder")
    candidates = list_results(path)
    if not candidates:
        raise UsageError(f"{path} has no eval results ({RESULTS_SUBDIR}/*.json); run `quantkit eval {path} --tasks ...` first")
    for candidate in reversed(candidates):
        try:
            run = EvalRun.read(candidate)
        except UsageError:
            continue
        if like is None or all(
            (b := run.task(t.task)) is not None and _protocol_mismatch(t, b) is None for t in like.tasks
        ):
            return run
    wanted = ", ".join(f"{t.task} ({t.n_shot}-shot, limit {t.limit})" for t in like.tasks) if like else ""
    raise UsageError(f"no eval results in {path / RESULTS_SUBDIR} match this run's protocol [{wanted}]; evaluate the baseline the same way first")
