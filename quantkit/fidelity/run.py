"""`quantkit fidelity`: a variant's served next-token distributions against its baseline's, stored.

`measure(variant, baseline, ...)` picks the windows (documents.py: wikitext2's test pages and
the c4 documents the variant's calibration did not read, split evenly), looks up its run key's
windows already in the store, serves the baseline and then the variant (one server at a time, or
the running ones given by URL) for the windows still missing, and records one point per window as
soon as both sides scored it: an interrupted run keeps the windows it finished, and the next one
with the same key serves only the rest. When every window is stored already and the key's done
record holds them, nothing is served and nothing is written: the figures and gates are computed
again from the stored windows (a re-render, with other gates or fewer windows).

The run key: both checkpoints' fingerprints, the window settings but their number (a larger run
extends the same set), k, the serving configuration and the vLLM release of the vLLM
environment (a server given by URL is taken to run that release).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Iterator, Sequence

from ..settings import data_dir
from ..checkpoint import ConvertRecord, describe, fingerprint
from ..console import info, step
from ..errors import UsageError
from ..evals.paired import CONFIDENCE
from ..models import local_folder
from ..serve.config import ServeConfig
from ..serve.server import open_server
from . import documents
from .client import DEFAULT_CONCURRENCY, WindowLogprobs, check_k, prompt_logprobs
from .compare import window_sums
from .documents import Window
from .gate import FidelityGates, decide
from .intervals import DocumentSums, by_document, summarize
from .result import FidelityResult, FidelitySettings, Figure, sums_of_point, window_id, window_point

KIND = "fidelity"
CHUNK = 8  # windows the variant scores between two stored points' commits
# A server started only to be scored needs no compiled graphs (as evals/run.EVAL_SERVE_DEFAULTS).
FIDELITY_SERVE_DEFAULTS = {"enforce_eager": True}


def calibration_texts(variant_dir: Path) -> set[str]:
    """The c4 documents the variant's calibration read (its recorded recipe's, else the default
    calibration's: a checkpoint made elsewhere may have read those), kept out of the c4 windows."""
    from ..quantize import calibration
    from ..quantize.recipe import Calibration

    if data_dir() is None:  # the texts are read offline only; documents.load_texts says so
        return set()
    try:
        record = ConvertRecord.read(variant_dir)
    except (ValueError, OSError):
        record = None
    recorded = (record.recipe.get("calibration") if record is not None else None) or {}
    calib = Calibration(**recorded)
    if calib.dataset != "c4":
        return set()
    return {r for r in calibration.load(calib).records[:calib.num_samples] if isinstance(r, str)}


def plan_windows(settings: FidelitySettings, tokenizer, exclude: set[str]) -> list[Window]:
    """The first windows of each source, `settings.windows` split evenly (the first sources take
    the remainder): a larger count keeps every window a smaller one picked."""
    n, sources = settings.windows, settings.sources
    out: list[Window] = []
    for i, source in enumerate(sources):
        share = n // len(sources) + (1 if i < n % len(sources) else 0)
        if share:
            # a task's prompts are one window each: its first `share` documents are all it needs
            texts = documents.load_texts(source, limit=share if documents.is_task(source) else None)
            out += documents.windows(texts, tokenizer, source, settings.window_len,
                                     limit=share, per_document=settings.per_document,
                                     exclude=exclude if source == "c4" else frozenset())
    return out


def fidelity_key(baseline_fp: str, variant_fp: str, settings: FidelitySettings, serve: ServeConfig,
                 vllm_version: str) -> str:
    from ..store.db import keyed, run_key

    return run_key(KIND, baseline=baseline_fp, variant=variant_fp, windows=settings.model_dump(mode="json",
                   exclude={"windows"}), serve=keyed(serve, mode="json"), vllm=vllm_version)


def stored_windows(store, key: str) -> dict[str, DocumentSums]:
    """Every window any record of `key` stored (done, interrupted or failed), by window id."""
    out: dict[str, DocumentSums] = {}
    for record in store.records(kind=KIND, keys=[key]):
        for point in store.points(record.id):
            out[point["window"]] = sums_of_point(point)
    return out


def summary(plan: Sequence[Window], sums: dict[str, DocumentSums], gates: FidelityGates | None, **fields) -> FidelityResult:
    """The figures of the plan's windows with their intervals, and the gates' verdicts."""
    chosen = [sums[window_id(w)] for w in plan]
    figures = summarize(chosen)
    checked, overall = decide(gates, figures)
    return FidelityResult(
        windows=len(chosen), documents=len(by_document(chosen)), tokens=sum(s.positions for s in chosen),
        confidence=CONFIDENCE, method=next(iter(figures.values())).method,
        figures={name: Figure(value=e.value, stderr=e.stderr, low=e.low, high=e.high) for name, e in figures.items()},
        gates=gates, verdicts=checked, verdict=overall, **fields)


@contextlib.contextmanager
def _served(folder: Path, url: str | None, config: ServeConfig, role: str) -> Iterator[object]:
    with contextlib.ExitStack() as stack:
        if url:
            server = stack.enter_context(open_server(folder, url, config, defaults=FIDELITY_SERVE_DEFAULTS))
        else:
            with step(f"starting vLLM on the {role} {folder.name}"):
                server = stack.enter_context(open_server(folder, url, config))
        yield server


def _score_missing(missing: list[Window], baseline_dir: Path, variant_dir: Path, urls: tuple[str | None, str | None],
                   config: ServeConfig, k: int, concurrency: int, record, sums: dict[str, DocumentSums]) -> None:
    """The baseline's log-probabilities of every missing window, then the variant's chunk by
    chunk, each chunk's windows stored as points before the next chunk is sent."""
    baseline_url, url = urls
    with _served(baseline_dir, baseline_url, config, "baseline") as server:
        with step(f"baseline: {len(missing)} windows"):
            base: list[WindowLogprobs] = prompt_logprobs(server, missing, k=k, concurrency=concurrency)
    with _served(variant_dir, url, config, "variant") as server:
        with step(f"variant: {len(missing)} windows"):
            for start in range(0, len(missing), CHUNK):
                chunk = missing[start:start + CHUNK]
                scored = prompt_logprobs(server, chunk, k=k, concurrency=concurrency)
                for window, window_sum in zip(chunk, window_sums(base[start:start + CHUNK], scored, k)):
                    sums[window_id(window)] = window_sum
                    record.add_point(window_point(window_id(window), window_sum))


def measure(variant: str | Path, baseline: str | Path, *, settings: FidelitySettings | None = None,
            gates: FidelityGates | None = None, url: str | None = None, baseline_url: str | None = None,
            serve: ServeConfig | None = None, concurrency: int = DEFAULT_CONCURRENCY, store=None,
            names: tuple[str, str] | None = None) -> FidelityResult:
    """Windows, stored ones reused, the rest served and stored, figures: the standalone command,
    and `quantkit run`'s fidelity stage (pipeline/stages.py), which gives its own `store` and the
    record's (model, variant) `names` (the run's model and lane; default: the folder's names)."""
    from ..evals.run import _tokenizer
    from ..serve.env import installed_vllm_version
    from ..store import Store
    from ..store.imports import default_names
    from ..store.kinds import stage_kind

    started = time.monotonic()
    settings = settings or FidelitySettings()
    check_k(settings.k)
    config = serve or ServeConfig(**FIDELITY_SERVE_DEFAULTS)
    variant_dir, baseline_dir = (local_folder(m).expanduser().resolve() for m in (variant, baseline))
    for option, folder in (("VARIANT", variant_dir), ("--baseline", baseline_dir)):
        if not folder.is_dir():
            raise UsageError(f"{option} {folder} is not a checkpoint folder; give a folder with config.json and weights")
    if variant_dir == baseline_dir:
        raise UsageError(f"the variant and the baseline are the same folder ({variant_dir}): give the quantized one as VARIANT")
    plan = plan_windows(settings, _tokenizer(baseline_dir), calibration_texts(variant_dir))
    if not plan:
        raise UsageError(f"no document holds {settings.window_len} tokens: give a smaller --window-len")
    fingerprints = fingerprint(baseline_dir), fingerprint(variant_dir)
    vllm_version = installed_vllm_version()
    key = fidelity_key(*fingerprints, settings, config, vllm_version)
    fields = dict(run_key=key, baseline_dir=str(baseline_dir), variant_dir=str(variant_dir),
                  baseline_fingerprint=fingerprints[0], variant_fingerprint=fingerprints[1], settings=settings,
                  vllm_version=vllm_version)
    with contextlib.nullcontext(store) if store is not None else Store() as store:
        model, variant_name = names or default_names({"model_dir": str(variant_dir), "checkpoint": describe(variant_dir)})
        sums = stored_windows(store, key)
        missing = [w for w in plan if window_id(w) not in sums]
        done = store.done(key)
        # a done record of other names (a standalone run, then a run recipe's lane) is not this
        # one's: a record of these names is written, every window read back, nothing served
        if not missing and done is not None and (done.model, done.variant) == (model, variant_name) \
                and {window_id(w) for w in plan} <= {p["window"] for p in store.points(done.id)}:
            info(f"all {len(plan)} windows are stored (record {key[:10]}): nothing to serve")
            return summary(plan, sums, gates, reused_windows=len(plan), scored_windows=0,
                           wall_time_s=round(time.monotonic() - started, 2), **fields)
        if len(plan) > len(missing):
            info(f"{len(plan) - len(missing)} of {len(plan)} windows are stored already; serving the other {len(missing)}")
        params = stage_kind(KIND).params(variant_dir, fingerprints[1], config, settings, baseline=str(baseline_dir),
                                         baseline_fingerprint=fingerprints[0], url=url, baseline_url=baseline_url,
                                         standalone=names is None)
        with store.stage(key, KIND, model, variant_name, params) as record:
            for window_key, window_sum in sums.items():  # the new record holds every stored window
                record.add_point(window_point(window_key, window_sum))
            if missing:
                _score_missing(missing, baseline_dir, variant_dir, (baseline_url, url), config, settings.k,
                               concurrency, record, sums)
            result = summary(plan, sums, gates, reused_windows=len(plan) - len(missing), scored_windows=len(missing),
                             wall_time_s=round(time.monotonic() - started, 2), **fields)
            record.finish(result.model_dump(mode="json"))
    return result
