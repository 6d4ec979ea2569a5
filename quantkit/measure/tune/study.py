"""`quantkit tune`: vLLM's serving knobs searched for the highest capacity under an SLO.

The objective is goodput at capacity (capacity/live.py: the requests/s meeting the SLO at the highest load that
meets it), not tok/s at one fixed concurrency (where most knobs show no effect). The search is Optuna's: a TPE sampler (or random, or a grid) proposes configurations
from the space, one vLLM server per trial, `budget` servers in all. Each trial first runs a cheap
capacity probe (coarse tolerance, short points); Optuna's median pruner stops a trial whose probe
is below the median of the trials so far, and only the others get the full search (started from the
probe's capacity, so it spends few points). A configuration vLLM rejects is recorded and skipped.

The store is the one truth: every trial is a record (kind `trial`, key = hash(study, config)) with its `vllm serve`
line, capacity, bound and ladder (every point, with its requests). A study is identified by what defines its results (the
checkpoint, SLO, capacity settings, space, base configuration, vLLM version, hardware); a second
`quantkit tune` of the same study (after a kill, or with a larger budget) rebuilds the Optuna study
from the stored trials (`study.add_trial(create_trial(...))`) and spends only what is left.
The first trial is the base configuration (vLLM's defaults plus the user's flags): the gain is measured against
it. A trial without a capacity records why (`verdict`: undecided, saturated, untrusted, not met).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from pydantic import BaseModel, Field

from ...console import info, warn
from ...errors import BackendError, QuantkitError, UsageError
from ...numbers import Count, Seed
from ...serve.config import ServeConfig, serve_command
from ..capacity.live import CapacityResult, CapacitySettings, run_capacity
from ..capacity.search import outcome
from ..loadgen.workload import PromptSource
from ..observe.bounds import CapacityBound
from ..stats.slo import Slo
from .space import (BOOL_KNOBS, DEFAULT_SPACE, GPU_SPACE, TUNABLE, _gpu_count, check_knob, config_for,  # noqa: F401
                         invalid, label, parse_space, resolve_space)  # (callers read the space as tune.X)

if TYPE_CHECKING:
    from ...store import RecordStore

SCHEMA_VERSION = 2


class TuneSettings(BaseModel):
    """A run recipe's `tune:` (and `quantkit tune`'s options)."""

    model_config = {"extra": "forbid", "allow_inf_nan": False}

    budget: Count = 6  # server starts (trials) in all, the base configuration included
    space: dict[str, list[Any]] = Field(default_factory=dict)  # knob -> choices, merged over the default space
    knobs: list[str] | None = None  # only these knobs (None: every knob of the space)
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    seed: Seed = 0
    prune: bool = True
    probe_tolerance: float = Field(0.5, gt=0)


class Trial(BaseModel):
    number: int
    run_key: str
    params: dict[str, Any]  # knob -> choice (None = vLLM's default)
    config: dict[str, Any]  # ServeConfig.changed(): what differs from quantkit's defaults
    label: str
    command: str
    state: Literal["complete", "pruned", "rejected"]
    value: float | None = None  # goodput req/s at capacity (the objective)
    verdict: str | None = None  # search.outcome: capacity, or undecided / saturated / untrusted / not met (value 0)
    probe: float | None = None
    capacity: dict[str, Any] | None = None  # CapacityFigures
    capacity_load: float | None = None
    bound: CapacityBound | None = None
    points: int = 0
    startup_s: float | None = None
    seconds: float | None = None
    error: str | None = None
    reused: bool = False  # taken from the store, not measured in this call


class TuneResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.tune"
    model_dir: str
    study: str
    slo: Slo
    settings: TuneSettings
    capacity: CapacitySettings
    space: dict[str, list[Any]]
    base: dict[str, Any]
    trials: list[Trial] = Field(default_factory=list)
    best: Trial | None = None
    best_reason: str | None = None
    defaults: Trial | None = None  # the base configuration's trial
    gain: float | None = None  # best / defaults goodput at capacity
    server_starts: int = 0
    wall_time_s: float = 0.0
    complete: bool = False


# --------------------------------------------------------------------------------------------
# The study


def _distributions(space: dict[str, list[Any]]):
    from optuna.distributions import CategoricalDistribution

    return {k: CategoricalDistribution(v) for k, v in space.items()}


def _study(settings: TuneSettings, space: dict[str, list[Any]], trials: list[Trial]):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if settings.sampler == "grid":
        sampler = optuna.samplers.GridSampler(space, seed=settings.seed)
    elif settings.sampler == "random":
        sampler = optuna.samplers.RandomSampler(seed=settings.seed)
    else:
        # a third of the budget explores at random before TPE models the rest
        sampler = optuna.samplers.TPESampler(seed=settings.seed, n_startup_trials=max(2, settings.budget // 3))
    pruner = optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0) if settings.prune \
        else optuna.pruners.NopPruner()
    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)
    dists = _distributions(space)
    for t in trials:
        intermediate = {0: t.probe} if t.probe is not None else {}
        if t.state == "complete" and t.value is not None:
            intermediate[1] = t.value
        state, value = _optuna_state(t)
        study.add_trial(optuna.trial.create_trial(
            params=t.params, distributions=dists, state=state, value=value, intermediate_values=intermediate,
            user_attrs={"run_key": t.run_key}))
    return study


def run_trial(model_dir: Path, config: ServeConfig, slo: Slo, settings: TuneSettings, capacity: CapacitySettings,
              prompts: PromptSource, should_prune: Callable[[float], bool], *, startup_timeout: float = 600.0,
              label_: str = "", on_point: Callable | None = None) -> dict[str, Any]:
    """One configuration on its own server: probe, then (unless pruned) the full search; `on_point`: its ladder.
    Without pruning the probe decides nothing: the full search starts where `capacity` says (on an
    8B model's GPU trial, 12-07, the probe's two points cost ~130 s of ~7 minutes)."""
    from ...serve.server import VLLMServer

    probe_settings = capacity.model_copy(update={
        "tolerance": max(settings.probe_tolerance, capacity.tolerance), "waves": max(1.0, capacity.waves / 2),
        "min_requests": max(8, capacity.min_requests // 2), "warmup": capacity.warmup, "span": []})
    started = time.monotonic()
    out: dict[str, Any] = {"state": "complete", "points": 0}
    try:
        with VLLMServer(model_dir, config, startup_timeout=startup_timeout) as server:
            out["startup_s"] = server.info.startup_s

            def full_search(start: float | None, update: dict[str, Any]) -> None:
                full = run_capacity(server, model_dir, slo, capacity.model_copy(update=update), prompts=prompts,
                                    start=start, label=label_, on_point=on_point)
                out["points"] += full.points_spent
                # a search that starts at the probe's capacity: its first point can still be client-limited
                out.update(value=_goodput(full), bound=full.bound, capacity=full.capacity, error=_untrusted_error(full),
                           verdict=outcome(full.search))

            if not settings.prune:
                full_search(None, {"span": []})
            else:
                probe = run_capacity(server, model_dir, slo, probe_settings, prompts=prompts, on_point=on_point,
                                     label=f"{label_} probe")
                out["points"] += probe.points_spent
                out["probe"] = _goodput(probe)
                if probe.capacity is None:  # the SLO fails at the lowest load (a full search starts there
                    # too), or quantkit's client was limited there: no trusted figure, bound "client"
                    out.update(value=0.0, bound=probe.bound, capacity=None, error=_untrusted_error(probe),
                               verdict=outcome(probe.search))
                elif should_prune(out["probe"]):
                    out.update(state="pruned", bound=probe.bound, capacity=probe.capacity, value=None)
                else:
                    full_search(probe.capacity.load, {"warmup": 0, "span": []})
    except QuantkitError as exc:
        if isinstance(exc, UsageError) and "port" in exc.message:
            raise
        out.update(state="rejected", error=exc.one_line())
    out["seconds"] = round(time.monotonic() - started, 1)
    if isinstance(out.get("capacity"), BaseModel):
        out["capacity_load"] = out["capacity"].load
        out["capacity"] = out["capacity"].model_dump(mode="json")
    return out


def _untrusted_error(result: CapacityResult) -> str | None:
    """Why a search without a capacity decides nothing (quantkit's client was limited), else None."""
    if result.capacity is None and result.search is not None and result.search.reason == "untrusted":
        return "no trusted capacity: " + result.summary().removeprefix("no capacity: ")
    return None


def _goodput(result: CapacityResult) -> float:
    """The objective: goodput (req/s meeting the SLO) at capacity; 0 when even the lowest load fails."""
    c = result.capacity
    if c is None:
        return 0.0
    return float(c.goodput_req_s if c.goodput_req_s is not None else c.req_s)


# --------------------------------------------------------------------------------------------
# Running a study (from `quantkit tune` or a run recipe's tune stage)


def study_key(model_dir: Path, slo: Slo, capacity: CapacitySettings, settings: TuneSettings,
              space: dict[str, list[Any]], base: ServeConfig, vllm: str, common: dict[str, Any]) -> str:
    """Everything that defines a study's trials; the budget is not part of it (a larger budget
    continues the same study)."""
    from ... import checkpoint
    from ...store import keyed, run_key

    return run_key("study", checkpoint=checkpoint.fingerprint(model_dir), slo=str(slo),
                   capacity=keyed(capacity, mode="json", exclude={"span"}), space=space, base=keyed(base, mode="json"),
                   sampler=settings.sampler, seed=settings.seed, prune=settings.prune,
                   probe_tolerance=settings.probe_tolerance, vllm=vllm, **common)


def stored_trials(store: RecordStore, study: str) -> list[Trial]:
    """The study's finished trials, oldest first (a trial killed mid-way is redone)."""
    out = []
    for r in store.records(kind="trial", status="done"):
        if r.params.get("study") == study and r.result:
            out.append(Trial.model_validate({**r.result, "reused": True}))
    return out


def tune_study(store: RecordStore, *, model: str, variant: str, model_dir: Path, slo: Slo, capacity: CapacitySettings,
               settings: TuneSettings, base: ServeConfig, study: str, space: dict[str, list[Any]],
               seed_trial: Trial | None = None, startup_timeout: float = 600.0,
               on_trial: Callable[[Trial], None] | None = None) -> TuneResult:
    """Spend what is left of `settings.budget` server starts on the study `study`."""
    import optuna

    from ...store import keyed, run_key

    started = time.monotonic()
    model_dir = Path(model_dir).expanduser().absolute()
    gpus = _gpu_count()
    trials = stored_trials(store, study)
    if seed_trial is not None and not any(t.params == seed_trial.params for t in trials):
        trials.insert(0, seed_trial)
    opt = _study(settings, space, trials)
    dists = _distributions(space)
    defaults = {k: None for k in space}
    if not any(t.params == defaults for t in trials):
        opt.enqueue_trial(defaults)  # the base configuration first: the gain is measured against it
    prompts = PromptSource(model_dir, capacity.input_len, seed=capacity.seed)
    starts = sum(1 for t in trials if t.startup_s is not None or (t.state == "rejected" and not _not_started(t)))
    grid_size = 1
    for values in space.values():
        grid_size *= len(values)
    asks = 0
    while starts < settings.budget and asks < settings.budget * 10 and len({str(t.params) for t in trials}) < grid_size:
        asks += 1
        trial = opt.ask(dists)
        params = {k: trial.params[k] for k in space}
        config = config_for(base, params)
        key = run_key("trial", study=study, config=keyed(config, mode="json"))
        known = next((t for t in trials if t.run_key == key or t.params == params), None)
        if known is not None:  # a repeated suggestion costs no server: the stored answer again
            _tell(opt, trial, known)
            continue
        number = len(trials)
        name = label(base, params)
        record = {"study": study, "checkpoint": str(model_dir), "params": params, "serve": config.model_dump(mode="json"),
                  "slo": str(slo), "number": number}
        t = Trial(number=number, run_key=key, params=params, config=config.changed(), label=name,
                  command=serve_command(model_dir, config), state="rejected")
        reason = invalid(config, gpus)
        with store.stage(key, "trial", model, variant, record) as rec:
            if reason:
                t.error = f"not started: {reason}"
            else:
                info(f"{variant}: trial {number + 1} ({starts + 1}/{settings.budget} servers): {name}")

                def should_prune(value: float) -> bool:
                    trial.report(value, 0)
                    return trial.should_prune()

                out = run_trial(model_dir, config, slo, settings, capacity, prompts, should_prune,  # its ladder: stored
                                startup_timeout=startup_timeout, label_=f"{variant} {name}",
                                on_point=lambda p: rec.add_point(p.model_dump(mode="json")))
                t = t.model_copy(update=out)
                starts += 1
                if t.state == "rejected":
                    warn(f"{variant}: {name}: {t.error}")
                else:
                    what = f"no capacity ({t.verdict})" if t.verdict not in (None, "capacity") else \
                        f"goodput {t.value if t.value is not None else t.probe:.2f} req/s"
                    info(f"{variant}: {name}: {t.state}, {what}" + (f", bound {t.bound.kind}" if t.bound else ""))
            rec.finish(t.model_dump(mode="json"))
        trials.append(t)
        _tell(opt, trial, t)
        if on_trial:
            on_trial(t)
    return summarize_study(model_dir, study, slo, settings, capacity, space, base, trials, starts,
                           time.monotonic() - started)


def _not_started(t: Trial) -> bool:
    return bool(t.error and t.error.startswith("not started"))


def _optuna_state(t: Trial):
    """How Optuna sees a trial: a configuration vLLM rejects serves nothing, so it is a complete
    trial of value 0 (TPE ignores failed trials and would propose the same values again)."""
    import optuna

    if t.state == "pruned":
        return optuna.trial.TrialState.PRUNED, None
    return optuna.trial.TrialState.COMPLETE, float(t.value or 0.0)


def _tell(opt, trial, t: Trial) -> None:
    state, value = _optuna_state(t)
    try:
        if value is not None:
            opt.tell(trial, value)
        else:
            opt.tell(trial, state=state)
    except RuntimeError as exc:
        # GridSampler stops the study once the grid is done, which Optuna allows only inside
        # study.optimize(); the trial is told by then, and the loop ends on the grid's size
        if "Study.stop" not in str(exc):
            raise


def summarize_study(model_dir: Path, study: str, slo: Slo, settings: TuneSettings, capacity: CapacitySettings,
                    space: dict[str, list[Any]], base: ServeConfig, trials: list[Trial], starts: int,
                    seconds: float) -> TuneResult:
    result = TuneResult(model_dir=str(model_dir), study=study, slo=slo, settings=settings, capacity=capacity,
                        space=space, base=base.changed(), trials=trials, server_starts=starts,
                        wall_time_s=round(seconds, 1))
    result.defaults = next((t for t in trials if all(v is None for v in t.params.values())), None)
    complete = [t for t in trials if t.state == "complete" and t.value]  # a value of 0: the SLO failed at the lowest load
    if complete:
        top = max(t.value for t in complete)
        # ties (the same goodput) go to the configuration that changes fewer flags
        result.best = min((t for t in complete if t.value == top), key=lambda t: (len(t.config), t.number))
        result.best_reason = (f"highest goodput at capacity under {slo} among {len(complete)} configurations "
                              f"searched in full ({starts} servers)")
        if result.defaults is not None and result.defaults.value:
            result.gain = result.best.value / result.defaults.value
        elif result.defaults is not None and _untrusted(result.defaults):
            result.best_reason += "; no gain: the base configuration has no trusted capacity (quantkit's client was limited)"
    elif any(t.state == "complete" and _untrusted(t) for t in trials):
        result.best_reason = (f"no configuration has a trusted capacity under {slo}: quantkit's client was limited "
                              f"at the lowest load ({len(trials)} trials)")
    elif any(t.state == "complete" for t in trials):
        result.best_reason = f"no configuration meets {slo} even at the lowest load ({len(trials)} trials)"
    else:
        result.best_reason = f"no configuration was searched in full ({len(trials)} trials)"
    result.complete = starts >= settings.budget or len({str(t.params) for t in trials}) >= _grid(space)
    return result


def _untrusted(t: Trial) -> bool:
    """A trial of value 0 because its first point could not be trusted, not because the SLO failed."""
    return not t.value and bool(t.error) and t.error.startswith("no trusted capacity")


def _grid(space: dict[str, list[Any]]) -> int:
    n = 1
    for values in space.values():
        n *= len(values)
    return n


def tune(model_dir: Path, *, slo: Slo | None, base: ServeConfig | None = None, settings: TuneSettings | None = None,
         capacity: CapacitySettings | None = None, startup_timeout: float = 600.0, out_dir: Path | None = None,
         on_trial: Callable[[Trial], None] | None = None) -> TuneResult:
    """The standalone command: the study of this checkpoint, continued from the store."""
    from ... import __version__, checkpoint, machine
    from ...files import atomic_write_json
    from ...secrets import mask_secrets
    from ...serve.env import installed_vllm_version
    from ...store import Store, run_key
    from ...store.imports import default_names
    from ...store.kinds import stage_kind
    from ..capacity.bench import results_dir, stamp

    model_dir = Path(model_dir).expanduser().absolute()
    if not model_dir.is_dir():
        raise UsageError(f"model folder {model_dir} does not exist")
    if slo is None:
        raise UsageError("tune needs an --slo: it maximizes the capacity under it (e.g. --slo ttft_p95=1,tpot_p95=0.1)")
    settings, capacity, base = settings or TuneSettings(), capacity or CapacitySettings(), base or ServeConfig()
    vllm = installed_vllm_version()
    space = resolve_space(settings, model_dir=model_dir, vllm=vllm, base=base)
    common = {"hardware": machine.fingerprint(), "quantkit": __version__}
    key = study_key(model_dir, slo, capacity, settings, space, base, vllm, common)
    model, variant = default_names({"model_dir": str(model_dir), "checkpoint": checkpoint.describe(model_dir)})
    with Store() as store:
        # the workload (capacity, slo) in the params: the report compares tunes within one
        params = stage_kind("tune").params(model_dir, checkpoint.fingerprint(model_dir), base, settings, study=key,
                                           slo=str(slo), capacity=capacity.model_dump(mode="json"), standalone=True)
        with store.stage(run_key("tune", study=key, budget=settings.budget), "tune", model, variant, params) as rec:
            result = tune_study(store, model=model, variant=variant, model_dir=model_dir, slo=slo, capacity=capacity,
                                settings=settings, base=base, study=key, space=space,
                                startup_timeout=startup_timeout, on_trial=on_trial)
            if not any(t.state != "rejected" for t in result.trials):
                raise BackendError(f"no configuration could be served: {result.trials[-1].error if result.trials else ''}")
            path = (Path(out_dir) if out_dir else results_dir(model_dir)) / f"tune-{stamp()}.json"
            atomic_write_json(path, mask_secrets(result.model_dump(mode="json")))
            rec.finish(result.model_dump(mode="json"), str(path))
    info(f"results: {path}")
    return result
