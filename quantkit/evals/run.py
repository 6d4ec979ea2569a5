"""Running lm-eval against a served checkpoint (vLLM's OpenAI API), task by task.

`prepare_eval(model_dir, tasks, ...)` resolves and loads every task (offline JSONL when
QUANTKIT_DATA_DIR is set) and the tokenizer, so a typo or a missing data file fails in seconds,
before any server starts. `run_eval(server, plan)` runs lm-eval 0.4.x in-process with its
`local-completions` model against that server's /v1/completions (loglikelihood through `echo` +
`logprobs`, generate-until through plain completions) and writes the `EvalRun` after every task.
`evaluate(model_dir, tasks, ...)` is the standalone command: prepare, open the store, start (or
attach to) the server, run, record. Standard errors are lm-eval's (closed form for means; None
where lm-eval reports N/A, e.g. perplexities).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from .. import checkpoint, settings
from ..console import info, library_output, partial_result, step, warn
from ..errors import BackendError, UsageError
from ..machine import package_versions
from ..models import local_folder
from ..serve.config import ServeConfig
from ..serve.env import auth_headers
from ..serve.server import Server, open_server
from .results import DataInfo, EvalRun, Metric, TaskResult, item_scores, results_dir
from .tasks import TaskSetup, TaskSpec, prepare_tasks, registry, resolve, task_manager

# lm-eval's default seeds, recorded so a run can be repeated exactly.
SEEDS = {"random_seed": 0, "numpy_random_seed": 1234, "torch_random_seed": 1234, "fewshot_random_seed": 1234}
# Means have a closed-form stderr in lm-eval; bootstrap only serves other aggregations.
BOOTSTRAP_ITERS = 1000
LOGLIKELIHOOD_TYPES = {"loglikelihood", "loglikelihood_rolling", "multiple_choice"}
# A server quantkit starts only to evaluate needs no compiled graphs: eager starts ~3x faster.
EVAL_SERVE_DEFAULTS = {"enforce_eager": True}

def check_logprobs(api_url: str, model: str, token_ids: list[int], api_key: str | None = None) -> None:
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
        response = httpx.post(url, json=payload, timeout=300, headers=auth_headers(api_key))
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



def _top_object(loaded: dict[str, Any], name: str):
    groups = loaded.get("groups") or {}
    return groups[name] if name in groups else loaded["tasks"][name]


def _leaf_tasks(loaded: dict[str, Any]) -> dict[str, Any]:
    return loaded["tasks"]


def leaf_tasks(plan: "EvalPlan", name: str) -> dict[str, Any]:
    """The loaded lm-eval task objects of one task of the plan (a group's leaves, or the task)."""
    return _leaf_tasks(plan.loaded[name])


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


def write_samples(path: Path, samples: dict[str, list[dict]]) -> None:
    with path.open("w") as fh:
        for leaf, rows in samples.items():
            for row in rows:
                fh.write(json.dumps({"task": leaf, **row}, default=_jsonable, ensure_ascii=False) + "\n")


def _reported_metrics(block: dict[str, Any]) -> dict[str, Metric]:
    """A task's metrics as lm-eval reported them (its results block: `name,filter` and
    `name_stderr,filter` keys); evals.grow recomputes them from the items instead."""
    out: dict[str, Metric] = {}
    for key, value in block.items():
        if "," not in key or "_stderr," in key or not isinstance(value, (int, float)):
            continue
        name, filt = key.split(",", 1)
        stderr = block.get(f"{name}_stderr,{filt}")
        stderr = float(stderr) if isinstance(stderr, (int, float)) and math.isfinite(stderr) else None
        out[key] = Metric(value=float(value), stderr=stderr)
    return out


@contextlib.contextmanager
def _lm_eval_env(key: str | None) -> Iterator[None]:
    """The environment of one lm-eval call, put back after it.

    - lm-eval's local-completions sends `Authorization: Bearer $OPENAI_API_KEY`: the server's key
      goes there (not into model_args, which the record keeps).
    - DISABLE_MULTIPROC: lm-eval's bootstrap of a non-mean metric (lambada's perplexity) forks a
      process pool. Forked from a process whose torch/OpenMP threads ran a conversion, a worker can
      block forever on a lock one of those threads held (the demo's int8 eval hung 575 s in
      Pool.terminate). 1,000 resamples of 100 items take well under a second in this process."""
    values = {"DISABLE_MULTIPROC": "1", **({"OPENAI_API_KEY": key} if key else {})}
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _evaluate_one(spec: TaskSpec, obj: Any, model_args: dict[str, Any], tm: Any, chat_template: bool,
                  samples: dict[str, list[int]] | None = None, api_key: str | None = None) -> dict[str, Any]:
    import lm_eval

    try:
        # lm-eval's progress bars, prints ("bootstrapping for stddev: ...") and log lines go to
        # the run's log: stdout carries quantkit's data (--json), the terminal quantkit's progress.
        with library_output(f"lm-eval: {spec.name}"), _lm_eval_env(api_key):
            results = lm_eval.simple_evaluate(
                model="local-completions",
                model_args=model_args,
                tasks=[obj],
                num_fewshot=None,  # set per task on the task objects (suites mix n-shots)
                # `samples` scores exactly those items of each leaf (sorted: lm-eval maps the
                # logged doc_id back through their order); otherwise the first `limit`
                limit=None if samples else spec.limit,
                samples=samples,
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
    metrics = _reported_metrics(block)
    if task_def.metric not in metrics:
        raise BackendError(
            f"task '{spec.name}' produced no '{task_def.metric}' (got: {', '.join(sorted(metrics)) or 'nothing'})"
        )
    samples_path = run_dir / f"samples_{spec.name}.jsonl"
    samples = {leaf: rows for leaf, rows in (results.get("samples") or {}).items() if leaf in leaves}
    write_samples(samples_path, samples)
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
        # the per-item scores travel with the record: paired recovery reads them from the store
        items=item_scores(samples),
    )



@dataclass
class EvalPlan:
    """Everything an eval needs that can be checked before a server starts."""

    model_dir: Path
    specs: list[TaskSpec]
    setup: TaskSetup
    tm: Any
    loaded: dict[str, dict[str, Any]]
    sizes: dict[str, int]
    tokenizer: Any
    needs_logprobs: bool
    run_dir: Path
    results_path: Path
    data_dir: Path | None
    chat_template: bool = False
    max_gen_toks: int | None = None
    num_concurrent: int = 4
    max_length: int = 2048
    started: float = field(default_factory=time.monotonic)

    @contextlib.contextmanager
    def cleaned_on_failure(self) -> Iterator[None]:
        """Nothing finished: leave no empty run folder behind."""
        try:
            yield
        except BaseException:
            if not self.results_path.exists():
                shutil.rmtree(self.run_dir, ignore_errors=True)
            raise


def prepare_eval(model_dir: str | Path, tasks: str | list[str], *, limit: int | None = None,
                 num_fewshot: int | None = None, output_dir: str | Path | None = None,
                 chat_template: bool = False, max_gen_toks: int | None = None, num_concurrent: int = 4,
                 max_length: int = 2048) -> EvalPlan:
    model_dir = Path(model_dir).expanduser().resolve()
    if not (model_dir / "config.json").is_file():
        raise UsageError(f"{model_dir} is not a model checkpoint folder (no config.json)")
    specs = resolve(tasks, limit, num_fewshot)
    if max_gen_toks is not None and max_gen_toks < 1:
        raise UsageError(f"--max-gen-toks must be >= 1, got {max_gen_toks}")
    if num_concurrent < 1:
        raise UsageError(f"--concurrency must be >= 1, got {num_concurrent}")
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
            setup = prepare_tasks(specs, data_dir, run_dir / "task-configs")
            with library_output("lm-eval: indexing tasks"):
                tm = task_manager(setup)
            loaded: dict[str, dict[str, Any]] = {}
            sizes: dict[str, int] = {}
            for spec in specs:
                loaded[spec.name] = _load_task(tm, spec)
                sizes[spec.name] = _check_limit(spec, _leaf_tasks(loaded[spec.name]))
        with library_output("transformers: tokenizer"):
            tokenizer = _tokenizer(model_dir)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    needs_logprobs = any(
        leaf.get_config("output_type") in LOGLIKELIHOOD_TYPES
        for result in loaded.values() for leaf in _leaf_tasks(result).values()
    )
    return EvalPlan(model_dir, specs, setup, tm, loaded, sizes, tokenizer, needs_logprobs, run_dir, results_path,
                    data_dir, chat_template, max_gen_toks, num_concurrent, max_length)


def _load_task(tm: Any, spec: TaskSpec) -> dict[str, Any]:
    try:
        with library_output(f"lm-eval: loading {spec.name}"):
            loaded = tm.load([spec.name])
    except Exception as exc:
        raise BackendError(
            f"could not load task '{spec.name}': {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        ) from exc
    for leaf in _leaf_tasks(loaded).values():
        if spec.num_fewshot is not None:
            if leaf.get_config("num_fewshot") == 0 and spec.num_fewshot != 0:
                # lm-eval would silently keep 0 for tasks pinned at 0-shot (truthfulqa)
                raise UsageError(f"task '{spec.name}' is defined zero-shot; --num-fewshot {spec.num_fewshot} does not apply")
            leaf.set_config(key="num_fewshot", value=spec.num_fewshot)
    return loaded


def model_args_for(server: Server, plan: EvalPlan) -> dict[str, Any]:
    """lm-eval's `local-completions` arguments for `server` (checked: loglikelihood tasks need
    prompt logprobs)."""
    if plan.needs_logprobs:
        check_logprobs(server.api_url, server.model_name, plan.tokenizer.encode("The capital of France is Paris")[:8],
                       getattr(server, "api_key", None))
    return _model_args(server.model_name, server.api_url + "/completions", plan.model_dir, plan.num_concurrent,
                       plan.max_length, plan.max_gen_toks)


def new_run(server: Server, plan: EvalPlan, model_args: dict[str, Any]) -> EvalRun:
    """An EvalRun with no task yet: the server, the protocol, the versions."""
    started_by_quantkit = not getattr(server.info, "remote", True)
    server_record = {"url": server.url, "served_model": server.model_name, "started_by_quantkit": started_by_quantkit,
                     "vllm_version": getattr(server.info, "vllm_version", None),
                     # what the scores were computed in (float32 on a CPU without native bf16): a recovery
                     # compares a variant with a baseline served in the same dtype
                     "dtype": getattr(server.info, "dtype", None), "dtype_reason": getattr(server.info, "dtype_reason", None),
                     "info": server.info.model_dump(mode="json") if server.info is not None else None}
    return EvalRun(
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model_dir=str(plan.model_dir),
        checkpoint=checkpoint.describe(plan.model_dir),
        server=server_record,
        protocol={
            "backend": "lm-eval local-completions",
            "model_args": model_args,
            "num_concurrent": plan.num_concurrent,
            "max_length": plan.max_length,
            "tokenized_requests": True,
            "chat_template": plan.chat_template,
            "fewshot_as_multiturn": plan.chat_template,
            "add_bos_token": False,
            "prefix_token_id": _prefix_token_id(plan.tokenizer),
            "bootstrap_iters": BOOTSTRAP_ITERS,
            "seeds": SEEDS,
            "gen_kwargs": {"max_gen_toks": plan.max_gen_toks} if plan.max_gen_toks is not None else None,
        },
        data_dir=str(plan.data_dir) if plan.data_dir else None,
        versions=package_versions("lm_eval", "transformers", "datasets", "torch"),
        task_configs_dir=str(plan.run_dir / "task-configs") if plan.data_dir else None,
    )


def run_task(server: Server, plan: EvalPlan, spec: TaskSpec, model_args: dict[str, Any],
             obj: Any = None, samples: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """lm-eval's results for one task of the plan (or `obj`, one of its leaves, on `samples`)."""
    try:
        return _evaluate_one(spec, obj if obj is not None else _top_object(plan.loaded[spec.name], spec.name),
                             model_args, plan.tm, plan.chat_template, samples, getattr(server, "api_key", None))
    except BackendError as exc:
        # lm-eval only sees refused connections; the server knows why it died
        # (vLLM-CPU's engine times out on too-slow steps, e.g. FP8 without AMX).
        if not server.alive():
            raise BackendError(f"the server died during task '{spec.name}' "
                               f"({server.exit_reason()}); {exc.message}") from exc
        raise


def run_eval(server: Server, plan: EvalPlan) -> EvalRun:
    """Evaluate plan's tasks against `server` (started or attached by the caller)."""
    with plan.cleaned_on_failure():
        model_args = model_args_for(server, plan)
        run = new_run(server, plan, model_args)
        defs = registry()
        for spec in plan.specs:
            leaves = _leaf_tasks(plan.loaded[spec.name])
            t0 = time.monotonic()
            with step(f"evaluating {_describe(spec, leaves, plan.sizes[spec.name])}"):
                results = run_task(server, plan, spec, model_args)
            run.tasks.append(_task_result(spec, results, leaves, defs[spec.name], plan.setup.sources[spec.name],
                                          plan.sizes[spec.name], plan.chat_template, plan.run_dir,
                                          time.monotonic() - t0))
            run.wall_time_s = round(time.monotonic() - plan.started, 2)
            run.write(plan.results_path)  # after every task: a crash keeps what finished
            partial_result(plan.results_path)
            primary = run.tasks[-1].primary
            info(f"{spec.name}: {run.tasks[-1].primary_metric} = {primary.value:.4f}"
                 + (f" ± {primary.stderr:.4f}" if primary.stderr is not None else ""))
        run.wall_time_s = round(time.monotonic() - plan.started, 2)
        run.write(plan.results_path)
        return run


def _describe(spec: TaskSpec, leaves: dict[str, Any], size: int) -> str:
    shots = sorted({int(leaf.get_config("num_fewshot") or 0) for leaf in leaves.values()})
    what = f"{spec.name} ({shots[0] if len(shots) == 1 else shots}-shot, "
    if len(leaves) > 1:
        return what + (f"{spec.limit} items from each of {len(leaves)} subtasks" if spec.limit is not None
                       else f"all {size} items of {len(leaves)} subtasks") + ")"
    return what + f"{spec.limit if spec.limit is not None else 'all'} of {size} items)"


def evaluate(model_dir: str | Path, tasks: str | list[str], *, url: str | None = None,
             serve: ServeConfig | None = None, **options: Any) -> EvalRun:
    """The standalone command: check and load everything, then serve, evaluate, record in the store."""
    from ..store import Store, standalone

    config = serve or ServeConfig(**EVAL_SERVE_DEFAULTS)
    resolve(tasks, options.get("limit"), options.get("num_fewshot"))  # a task typo first: the cheapest check
    model_dir = local_folder(model_dir)  # the demo model's alias: converted on first use, after that check
    folder = model_dir.expanduser().resolve()
    opening = open_server(folder, url, config, defaults=EVAL_SERVE_DEFAULTS)  # --url answers, before the tasks load
    if url is None and folder.is_dir():
        from ..serve.env import supported_architectures
        from ..serve.hardware_fit import check_servable, gpu_capability

        checkpoint.validate(folder, supported_architectures(), weights=config.load_format != "dummy")
        # a format this machine's vLLM cannot run is refused before the tasks load, not after
        check_servable(folder, gpu_capability(), config)
    plan = prepare_eval(model_dir, tasks, **options)
    with plan.cleaned_on_failure(), Store() as store, contextlib.ExitStack() as stack:
        if url:
            server = stack.enter_context(opening)
        else:
            with step(f"starting vLLM on {plan.model_dir.name}"):
                server = stack.enter_context(opening)
        with standalone(store, "eval", plan.model_dir, config, {"tasks": tasks, **options}, url=url) as rec:
            run = run_eval(server, plan)
            rec.finish(run.model_dump(mode="json"), run.results_file)
    return run
