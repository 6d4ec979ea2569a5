"""`quantkit serve`, `quantkit bench`, `quantkit tune`: the commands that start a vLLM server."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.table import Table

from ..console import run_command, stderr, stdout
from . import app
from .options import Json, Port, Quiet, ServingOptions, StartupTimeout, mode, positive_list, serving_options

@app.command()
@serving_options
def serve(
    model_dir: Path = typer.Argument(..., help="Checkpoint folder."),
    port: Port = None,
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    startup_timeout: StartupTimeout = 600.0,
    json: Json = False, quiet: Quiet = False,
    serve: ServingOptions = None,
) -> None:
    """Serve MODEL_DIR with vLLM in the foreground until Ctrl-C (which stops it cleanly)."""
    from ..serve.server import VLLMServer, serve_forever

    def body():
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
    model_dir: Path = typer.Argument(..., help="Checkpoint folder (its tokenizer builds the prompts; results go beside it)."),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", "-c", help="Comma-separated concurrencies (default 1,4,16)."),
    rate: Optional[str] = typer.Option(None, "--rate", help="Comma-separated Poisson request rates (req/s)."),
    sweep: bool = typer.Option(False, "--sweep", help="Find the knee: the concurrency past which throughput stops paying."),
    sweep_max: int = typer.Option(128, "--sweep-max", min=1, help="Highest concurrency a --sweep may try."),
    input_len: int = typer.Option(128, "--input-len", min=1, help="Prompt tokens (exact)."),
    output_len: int = typer.Option(64, "--output-len", min=1, help="Generated tokens per request (exact: ignore_eos)."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", "-n", min=1, help="Requests per point (default 4 x concurrency, min 8)."),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="JSONL file of prompts (field prompt/text/messages) instead of random ones."),
    api: str = typer.Option("completions", "--api", help="completions or chat."),
    slo: Optional[str] = typer.Option(None, "--slo", help="e.g. ttft_p95=0.5,itl_p95=0.05 (seconds; ms suffix allowed)."),
    seed: int = typer.Option(0, "--seed", help="Seed for prompts and arrival times."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Warm-up requests before measuring (excluded)."),
    client_workers: Optional[int] = typer.Option(None, "--client-workers", min=1, help="Load-generator worker processes (default: automatic, one per 256 streams, more when a point saturates the client)."),
    url: Optional[str] = typer.Option(None, "--url", help="Measure this running OpenAI-compatible server instead of starting one."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help="Where the JSON goes (default MODEL_DIR/quantkit-bench)."),
    port: Port = None,
    startup_timeout: StartupTimeout = 600.0,
    json: Json = False, quiet: Quiet = False,
    serve: ServingOptions = None,
) -> None:
    """Serve MODEL_DIR in vLLM (or use --url), run load points, print latency/throughput, store the run."""
    from ..errors import UsageError
    from ..measure.bench import bench as run_bench
    from ..measure.slo import parse_slo

    def body():
        if api not in ("completions", "chat"):
            raise UsageError(f"--api must be completions or chat, not '{api}'")
        return run_bench(
            model_dir, concurrency=positive_list(concurrency, int, "--concurrency"), rate=positive_list(rate, float, "--rate"),
            sweep=sweep, sweep_max=sweep_max, input_len=input_len, output_len=output_len, num_prompts=num_prompts,
            url=url, config=serve.config(), port=port, slo=parse_slo(slo), seed=seed, warmup_requests=warmup,
            dataset=dataset, api=api, startup_timeout=startup_timeout, out_dir=results_dir,
            client_workers=client_workers, on_point=None if json or quiet else _progress,
        )

    run_command(body, mode(json, quiet), _print_run)


def _ms(stats, stat: str) -> str:
    return f"{stats.get(stat) * 1000:.0f}" if stats is not None else "-"


def _num(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _point_row(p) -> list[str]:
    load = f"c={p.concurrency}" if p.profile == "concurrency" else f"{p.rate:g}/s"
    slo = "-" if p.slo_met is None else ("ok" if p.slo_met else "FAIL")
    return [
        load + (" partial" if p.partial else "") + ("*" if p.client_limited else ""),
        str(p.num_requests), str(p.failures),
        _num(p.output_tok_s), _num(p.total_tok_s), f"{p.req_s:.2f}",
        _ms(p.ttft, "p50"), _ms(p.ttft, "p95"), _ms(p.itl, "p50"), _ms(p.itl, "p95"), _ms(p.tpot, "p50"),
        f"{p.e2e.p50:.2f}" if p.e2e else "-", slo,
    ]


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


def _print_run(run) -> None:
    s = run.server
    title = f"{run.model_name} ({run.checkpoint.get('method', '?')})"
    if s is not None:
        title += f" on vLLM {s.vllm_version or '?'}" + (f", started in {s.startup_s:.1f} s" if s.startup_s else "")
    table = _table(*_HEADER, title=title)
    for p in run.points:
        table.add_row(*_point_row(p))
    stdout.print(table)
    for p in run.points:
        if p.client_limited:
            c = p.client
            stdout.print(f"* {_point_row(p)[0].rstrip('*')}: client-limited: quantkit's own client limited this point: "
                         f"{p.client_limited_reason} ({c.workers} workers, {c.cores:.2f} cores, "
                         f"{c.cpu_us_per_token or 0:.0f} us CPU per token); its figures may read low")
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
    model_dir: Path = typer.Argument(..., help="Checkpoint folder."),
    slo: Optional[str] = typer.Option(None, "--slo", help="e.g. ttft_p95=0.5,itl_p95=0.05; the best config must meet it."),
    knob: Optional[list[str]] = typer.Option(None, "--knob", help="Grid of one knob, NAME=V1,V2 (e.g. max-num-seqs=8,32); repeatable; replaces the default grid."),
    full_grid: bool = typer.Option(False, "--full-grid", help="Every combination instead of one knob at a time."),
    max_configs: int = typer.Option(6, "--max-configs", help="Most configurations (servers) to try."),
    concurrency: int = typer.Option(16, "--concurrency", "-c", help="Load at which configurations are compared."),
    input_len: int = typer.Option(128, "--input-len", help="Prompt tokens (exact)."),
    output_len: int = typer.Option(64, "--output-len", help="Generated tokens per request (exact)."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", "-n", help="Requests per configuration."),
    seed: int = typer.Option(0, "--seed", help="Seed for prompts."),
    startup_timeout: StartupTimeout = 600.0,
    json: Json = False, quiet: Quiet = False,
    serve: ServingOptions = None,
) -> None:
    """Sweep serving knobs (one server per configuration) and print the best under the SLO."""
    from ..measure.slo import parse_slo
    from ..measure.tune import parse_grid, tune as do_tune

    def body():
        grid = parse_grid(knob) if knob else None
        return do_tune(model_dir, slo=parse_slo(slo), base=serve.config(), grid=grid, full_grid=full_grid,
                       max_configs=max_configs, concurrency=concurrency, input_len=input_len, output_len=output_len,
                       num_prompts=num_prompts, seed=seed, startup_timeout=startup_timeout)

    run_command(body, mode(json, quiet), _print_tune)


def _print_tune(result) -> None:
    table = _table("config", "start\ns", "out\ntok/s", "TTFT\np95", "ITL\np95", "TPOT\np50", "goodput\nreq/s", "SLO",
                   title=f"tune at concurrency {result.workload['concurrency']}" + (f", SLO {result.slo}" if result.slo else ""))
    failed = []
    for e in result.entries:
        best = " *" if result.best is not None and e.label == result.best.label else ""
        if e.point is None:
            failed.append(e)
            table.add_row(e.label, "-", f"failed [{len(failed)}]", "", "", "", "", "")
            continue
        p = e.point
        slo = "-" if p.slo_met is None else ("ok" if p.slo_met else "FAIL")
        good = f"{p.goodput_req_s:.2f}" if p.goodput_req_s is not None else "-"
        table.add_row(e.label + best, f"{e.startup_s:.0f}" if e.startup_s else "-", _num(p.output_tok_s),
                      _ms(p.ttft, "p95"), _ms(p.itl, "p95"), _ms(p.tpot, "p50"), good, slo)
    stdout.print(table)
    for number, e in enumerate(failed, 1):
        stdout.print(f"[{number}] {e.label}: {e.error}")
    if result.best is not None:
        stdout.print(f"best ({result.best_reason}): {result.best.label}")
        stdout.print(result.best.command)
    else:
        stdout.print(f"no best configuration: {result.best_reason}")
    stdout.print(f"results: {result.path}")
