"""`quantkit serve`, `quantkit bench`, `quantkit tune`: the commands that start a vLLM server."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.table import Table

from ..console import run_command, stderr, stdout
from . import app
from .capacity_options import (CAPACITY_DEFAULTS, OPTION_OF_FIELD, CapacityMax, CapacityProfile, CapacityStart,
                               Confidence, InputLen, OutputLen, Span, Tolerance, Waves, WindowMax, WindowMin, WindowWarmup,
                               num_prompts_option)
from .. import numbers
from .options import Json, Port, Quiet, ServingOptions, StartupTimeout, mode, number_option, serving_options

BenchNumPrompts = num_prompts_option("Requests per point (default 4 x concurrency, min 8); caps a --capacity point.")
TuneNumPrompts = num_prompts_option("At most this many requests per point.")

@app.command()
@serving_options
def serve(
    model_dir: Path = typer.Argument(..., help="Checkpoint folder (or the built-in smollm2-135m)."),
    port: Port = None,
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    startup_timeout: StartupTimeout = 600.0,
    json: Json = False, quiet: Quiet = False,
    serve: ServingOptions = None,
) -> None:
    """Serve MODEL_DIR with vLLM in the foreground until Ctrl-C (which stops it cleanly)."""
    from ..models import local_folder
    from ..serve.server import VLLMServer, serve_forever

    def body():
        nonlocal model_dir
        model_dir = local_folder(model_dir)
        server = VLLMServer(model_dir, serve.config(), port=port, host=host, startup_timeout=startup_timeout)
        return serve_forever(server, on_ready=lambda s: _print_ready(s, json))

    run_command(body, mode(json, quiet))


def _print_ready(server, as_json: bool) -> None:
    import json as _json

    i = server.info
    if as_json:
        print(_json.dumps(i.model_dump(mode="json")), flush=True)
        return
    stdout.print(f"serving [bold]{i.model_name}[/bold] at {server.api_url} (vLLM {i.vllm_version}, ready in {i.startup_s:.1f} s)")
    if i.kv_cache_tokens:
        stdout.print(f"KV cache {i.kv_cache_tokens:,} tokens, max concurrency {i.max_concurrency}x at max-model-len")
    for line in i.quant_lines:
        stdout.print(f"  {line}")
    stdout.print(f"log: {i.log_path}\nCtrl-C to stop")


@app.command()
@serving_options
def bench(
    model_dir: Path = typer.Argument(..., help="Checkpoint folder or smollm2-135m (its tokenizer builds the prompts; results go beside it)."),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", "-c", help="Comma-separated concurrencies (default 1,4,16)."),
    rate: Optional[str] = typer.Option(None, "--rate", help="Comma-separated Poisson request rates (req/s)."),
    sweep: bool = typer.Option(False, "--sweep", help="Find the knee: the concurrency past which throughput stops paying."),
    sweep_max: int = number_option(numbers.Concurrency, "--sweep-max", help="Highest concurrency a --sweep may try.", default=128),
    input_len: InputLen = CAPACITY_DEFAULTS.input_len,
    output_len: OutputLen = CAPACITY_DEFAULTS.output_len,
    num_prompts: BenchNumPrompts = None,
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="JSONL file of prompts (field prompt/text/messages) instead of random ones."),
    api: str = typer.Option("completions", "--api", help="completions or chat."),
    slo: Optional[str] = typer.Option(None, "--slo", help="e.g. ttft_p95=0.5,itl_p95=0.05 (seconds; ms suffix allowed)."),
    seed: int = number_option(numbers.Seed, "--seed", help="Seed for prompts and arrival times.", default=0),
    warmup: int = number_option(numbers.CountOrZero, "--warmup", help="Warm-up requests before measuring (excluded).", default=2),
    client_workers: Optional[int] = number_option(numbers.Concurrency, "--client-workers", default=None, help="Load-generator worker processes (default: automatic, one per 256 streams, more when a point saturates the client)."),
    capacity: bool = typer.Option(False, "--capacity", help="Search the highest load that meets --slo (capacity under the SLO) instead of fixed points."),
    capacity_profile: CapacityProfile = CAPACITY_DEFAULTS.profile,
    window_min: WindowMin = None,
    window_max: WindowMax = None,
    window_warmup: WindowWarmup = None,
    confidence: Confidence = None,
    tolerance: Tolerance = CAPACITY_DEFAULTS.tolerance,
    capacity_start: CapacityStart = CAPACITY_DEFAULTS.start,
    capacity_max: CapacityMax = CAPACITY_DEFAULTS.max,
    waves: Waves = CAPACITY_DEFAULTS.waves,
    span: Span = None,
    url: Optional[str] = typer.Option(None, "--url", help="Measure this running OpenAI-compatible server instead of starting one."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help="Where the JSON goes (default MODEL_DIR/quantkit-bench)."),
    port: Port = None,
    startup_timeout: StartupTimeout = 600.0,
    json: Json = False, quiet: Quiet = False,
    serve: ServingOptions = None,
) -> None:
    """Serve MODEL_DIR in vLLM (or use --url), run load points, print latency/throughput, store the run."""
    from ..errors import UsageError
    from ..measure.capacity.bench import bench as run_bench
    from ..measure.stats.slo import parse_slo
    from ..models import local_folder

    def body():
        nonlocal model_dir
        model_dir = local_folder(model_dir)
        if api not in ("completions", "chat"):
            raise UsageError(f"--api must be completions or chat, not '{api}'")
        if capacity:
            return _capacity(model_dir, parse_slo(slo), url=url, config=serve.config(), port=port,
                             startup_timeout=startup_timeout, out_dir=results_dir, profile=capacity_profile,
                             tolerance=tolerance, start=capacity_start, maximum=capacity_max, waves=waves,
                             span=span or [], window=dict(min_s=window_min, max_s=window_max, warmup_s=window_warmup,
                                         confidence=confidence),
                             input_len=input_len, output_len=output_len, max_requests=num_prompts, seed=seed,
                             warmup=warmup, progress=not (json or quiet), extra=(concurrency, rate, sweep, dataset))
        return run_bench(
            model_dir, concurrency=numbers.parse_list(concurrency, numbers.Concurrency, "--concurrency"),
            rate=numbers.parse_list(rate, numbers.Rate, "--rate", "0.5,1,2"),
            sweep=sweep, sweep_max=sweep_max, input_len=input_len, output_len=output_len, num_prompts=num_prompts,
            url=url, config=serve.config(), port=port, slo=parse_slo(slo), seed=seed, warmup_requests=warmup,
            dataset=dataset, api=api, startup_timeout=startup_timeout, out_dir=results_dir,
            client_workers=client_workers, on_point=None if json or quiet else _progress,
        )

    run_command(body, mode(json, quiet), _print_any)


def _capacity(model_dir, slo, *, profile, tolerance, start, maximum, waves, span, window, input_len, output_len,
              max_requests, seed, warmup, progress, extra, **server):
    from ..errors import UsageError, validation_as_usage_error
    from ..measure.capacity.live import CapacitySettings, capacity

    if any(extra):
        raise UsageError("--capacity chooses its own loads: leave out --concurrency, --rate, --sweep and --dataset")
    with validation_as_usage_error("capacity option", OPTION_OF_FIELD):
        chosen = chosen_window(window, local=not server.get("url"))
        settings = CapacitySettings(profile=profile, tolerance=tolerance, start=start, max=maximum, waves=waves,
                                    input_len=input_len, output_len=output_len, max_requests=max_requests, seed=seed,
                                    warmup=warmup, window=chosen, span=span)
    return capacity(model_dir, slo, settings, on_point=_progress if progress else None, **server)


def chosen_window(window: dict, *, local: bool):
    """The window options given (min_s, max_s, warmup_s, confidence; None = not given) over the
    machine's defaults, or None when none was given (the search then picks by the machine). `local`:
    the server runs here, so this machine's GPUs pick the defaults (a --url server: the CPU's)."""
    from ..measure.capacity import profiles
    from ..measure.observe.gpu import open_gpus

    given = {k: v for k, v in window.items() if v is not None}
    if not given:
        return None
    gpus = open_gpus() if local else None
    if gpus is not None:
        gpus.close()
    chosen = profiles.default_window(gpu=gpus is not None).model_copy(update=given)
    return type(chosen).model_validate(chosen.model_dump())  # model_copy does not validate


def _print_any(result) -> None:
    if getattr(result, "kind", "") == "quantkit.capacity":
        _print_capacity(result)
    else:
        _print_run(result)


def _print_capacity(result) -> None:
    title = f"{result.model_name}: capacity under {result.slo}"
    table = _table(*_HEADER, title=title)
    stopped = []
    for p in result.points:
        row = _point_row(p)
        notes = _notes(p) + ([f"stopped early: {p.stopped_early}"] if p.stopped_early else [])
        if notes:
            row[0] = row[0].rstrip("*") + "*"
            stopped += [f"* {row[0][:-1]}: {note}" for note in notes]
        table.add_row(*row)
    stdout.print(table)
    for line in stopped:
        stdout.print(line)
    stdout.print(result.summary())
    if result.bound is not None:
        from ..measure.observe.bounds import figures_text

        stdout.print(f"bound: {result.bound.kind}: {result.bound.evidence}\n  knob: {result.bound.knob}")
        if figures := figures_text(result.bound.figures):
            stdout.print(f"  figures: {figures}")
    stdout.print(f"results: {result.path}")


def _point_row(p) -> list[str]:
    from ..measure.stats.load_kinds import kind
    from ..report.render import fmt, fmt_ms

    def ms(stats, stat: str) -> str:  # the report's latency figure, `-` for a point without it
        return fmt_ms((stats.get(stat) if stats is not None else None,), missing="-")

    load = kind(p.profile).text(p, "short")
    slo = "-" if p.slo_met is None else ("ok" if p.slo_met else "FAIL")
    return [
        load + (" partial" if p.partial else "") + ("*" if _notes(p) else ""),
        str(p.num_requests), str(p.failures),
        fmt(p.output_tok_s), fmt(p.total_tok_s), f"{p.req_s:.2f}",
        ms(p.ttft, "p50"), ms(p.ttft, "p95"), ms(p.itl, "p50"), ms(p.itl, "p95"), ms(p.tpot, "p50"),
        f"{p.e2e.p50:.2f}" if p.e2e else "-", slo,
    ]


def _notes(p) -> list[str]:
    """Why a point's figures are not the plain measurement they look like: its row in the table
    carries a star, and each note is printed below it."""
    notes = []
    if p.client_limited:
        c = p.client
        notes.append(f"client-limited: quantkit's own client limited this point: {p.client_limited_reason}"
                     + (f" ({c.workers} workers, {c.cores:.2f} cores, {c.cpu_us_per_token or 0:.0f} us CPU per token)"
                        if c is not None else "") + "; its figures may read low")
    if p.usage_mismatch:
        notes.append(f"usage mismatch: the server's token counts disagreed with the text it sent: {p.usage_mismatch_reason}")
    if p.started_busy:
        notes.append(f"started busy: {p.started_busy_reason}; its figures may carry that load")
    return notes


_HEADER = ["load", "reqs", "fail", "out\ntok/s", "total\ntok/s", "req/s", "TTFT\np50", "TTFT\np95",
           "ITL\np50", "ITL\np95", "TPOT\np50", "E2E\np50", "SLO"]


def _table(*columns, title=None) -> Table:
    # 13 columns must fit 80-column terminals and pipes: no box, one space between columns
    return Table(*columns, title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False,
                 caption="latencies in ms, E2E in s", caption_justify="left")


def _progress(point) -> None:
    row = _point_row(point)
    stderr.print(
        f"  {row[0]}: {row[3]} out tok/s, TTFT p50 {row[6]} ms, TPOT p50 {row[10]} ms, "
        f"{point.successes} ok, {point.failures} failed"
    )
    if point.client_limited:
        stderr.print(f"  [yellow]client-limited[/yellow]: {point.client_limited_reason} (these figures may read low)")
    if point.usage_mismatch:
        stderr.print(f"  [yellow]usage mismatch[/yellow]: {point.usage_mismatch_reason}")
    if point.started_busy:
        stderr.print(f"  [yellow]started busy[/yellow]: {point.started_busy_reason}")


def _print_run(run) -> None:
    from ..checkpoint import CheckpointInfo

    s = run.server
    title = f"{run.model_name} ({CheckpointInfo.model_validate(run.checkpoint).method or '?'})"
    if s is not None:
        title += f" on vLLM {s.vllm_version or '?'}" + (f", started in {s.startup_s:.1f} s" if s.startup_s else "")
    table = _table(*_HEADER, title=title)
    for p in run.points:
        table.add_row(*_point_row(p))
    stdout.print(table)
    for p in run.points:
        for note in _notes(p):
            stdout.print(f"* {_point_row(p)[0].rstrip('*')}: {note}")
    if s is not None and s.quant_lines:
        stdout.print("kernels: " + "; ".join(s.quant_lines))
    if run.knee is not None:
        k = run.knee
        where = {"saturated": f"throughput gains < {k.min_gain:.0%} per doubling past it",
                 "slo": f"the SLO ({run.slo}) breaks above it",
                 "slo_at_min": f"the SLO ({run.slo}) fails even at concurrency 1",
                 "not_reached": "throughput still grew at the top of the sweep"}[k.reason]
        knee = "none" if k.knee is None else f"concurrency {k.knee:g}"
        stdout.print(f"knee: {knee} ({where}; {len(k.measured)} points measured)")
    stdout.print(f"results: {run.path}")


@app.command()
@serving_options
def tune(
    model_dir: Path = typer.Argument(..., help="Checkpoint folder (or the built-in smollm2-135m)."),
    slo: Optional[str] = typer.Option(None, "--slo", help="The SLO whose capacity is maximized, e.g. ttft_p95=1,tpot_p95=0.1[,attainment=0.9]."),
    budget: int = number_option(numbers.Count, "--budget", default=6, help="vLLM servers to start in all (trials), the base configuration included; a second call continues the study."),
    space: Optional[list[str]] = typer.Option(None, "--space", help="Choices of one knob, NAME=V1,V2 (default = vLLM's default), e.g. max-num-seqs=16,64,default; NAME= drops it; repeatable."),
    knobs: Optional[str] = typer.Option(None, "--knobs", help="Only these knobs, comma-separated (e.g. max-num-seqs,max-num-batched-tokens)."),
    sampler: str = typer.Option("tpe", "--sampler", help="Optuna sampler: tpe, random or grid."),
    prune: bool = typer.Option(True, "--prune/--no-prune", help="Stop trials whose cheap probe is below the median (Optuna's MedianPruner); --no-prune: no probe, each trial's full search from --capacity-start."),
    capacity_profile: CapacityProfile = CAPACITY_DEFAULTS.profile,
    window_min: WindowMin = None,
    window_max: WindowMax = None,
    window_warmup: WindowWarmup = None,
    confidence: Confidence = None,
    tolerance: Tolerance = CAPACITY_DEFAULTS.tolerance,
    capacity_start: CapacityStart = CAPACITY_DEFAULTS.start,
    capacity_max: CapacityMax = CAPACITY_DEFAULTS.max,
    waves: Waves = CAPACITY_DEFAULTS.waves,
    input_len: InputLen = CAPACITY_DEFAULTS.input_len,
    output_len: OutputLen = CAPACITY_DEFAULTS.output_len,
    num_prompts: TuneNumPrompts = None,
    seed: int = number_option(numbers.Seed, "--seed", help="Seed for prompts and the sampler.", default=0),
    startup_timeout: StartupTimeout = 600.0,
    json: Json = False, quiet: Quiet = False,
    serve: ServingOptions = None,
) -> None:
    """Search vLLM's serving knobs (Optuna, one server per trial) for the highest capacity under the SLO."""
    from ..errors import UsageError, validation_as_usage_error
    from ..measure.capacity.live import CapacitySettings
    from ..measure.stats.slo import parse_slo
    from ..measure.tune.study import TuneSettings, parse_space, tune as do_tune
    from ..models import local_folder

    def body():
        nonlocal model_dir
        model_dir = local_folder(model_dir)
        if sampler not in ("tpe", "random", "grid"):
            raise UsageError(f"--sampler must be tpe, random or grid, not '{sampler}'")
        with validation_as_usage_error("tune option", OPTION_OF_FIELD):
            settings = TuneSettings(budget=budget, space=parse_space(space or []), sampler=sampler, prune=prune,
                                    seed=seed, knobs=[k for k in knobs.split(",") if k.strip()] if knobs else None)
            window = chosen_window(dict(min_s=window_min, max_s=window_max, warmup_s=window_warmup,
                                        confidence=confidence), local=True)
            capacity = CapacitySettings(profile=capacity_profile, tolerance=tolerance, start=capacity_start,
                                        max=capacity_max, waves=waves, input_len=input_len, output_len=output_len,
                                        max_requests=num_prompts, seed=seed, window=window)
        return do_tune(model_dir, slo=parse_slo(slo), base=serve.config(), settings=settings, capacity=capacity,
                       startup_timeout=startup_timeout, on_trial=None if json or quiet else _trial_progress)

    run_command(body, mode(json, quiet), _print_tune)


def _trial_progress(t) -> None:
    value = t.value if t.value is not None else t.probe
    stderr.print(f"  trial {t.number + 1} {t.label}: {t.state}"
                 + (f", {value:.2f} req/s at capacity" if value is not None else "") + (f" ({t.error})" if t.error else ""))


def _print_tune(result) -> None:
    table = Table("#", "configuration", "state", "capacity", "goodput\nreq/s", "probe\nreq/s", "bound", "points",
                  title=f"tune under {result.slo}: {result.server_starts} servers of {result.settings.budget}",
                  box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for t in result.trials:
        best = " *" if result.best is not None and t.run_key == result.best.run_key else ""
        cap = f"{t.capacity_load:g}" if t.capacity_load is not None else "-"
        table.add_row(str(t.number + 1), t.label + best, t.state, cap,
                      f"{t.value:.2f}" if t.value is not None else "-", f"{t.probe:.2f}" if t.probe is not None else "-",
                      t.bound.kind if t.bound else "-", str(t.points))
    stdout.print(table)
    for t in result.trials:
        if t.error:
            stdout.print(f"  {t.label}: {t.error}")
    if result.best is not None:
        gain = f"{result.gain:.2f} x the base configuration" if result.gain else "no base configuration to compare"
        stdout.print(f"best ({result.best_reason}): {result.best.label}, {gain}")
        if result.best.bound:
            stdout.print(f"bound: {result.best.bound.kind}: {result.best.bound.evidence}")
        stdout.print(result.best.command)
    else:
        stdout.print(f"no best configuration: {result.best_reason}")
