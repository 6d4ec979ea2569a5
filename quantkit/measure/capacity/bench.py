"""`quantkit bench`: run load points against a server, find the knee, keep every point.

`run_bench(server, model_dir, ...)` measures a server it is given (a `VLLMServer` that quantkit
started, or a `RemoteServer` for `--url`): `quantkit run` hands it the server it holds, and the
record then says what that server is (KV cache, kernels, start time) without asking twice.
`bench(model_dir, ...)` is the standalone command: it checks the workload, opens the store, starts
(or attaches to) the server, records the run in the store and exports it as JSON.

Export file: `DIR/quantkit-bench/bench-<UTC timestamp>.json` (or, when DIR is not writable,
`$QUANTKIT_HOME/bench/<dir name>/...`), rewritten atomically after every point, so an interrupted
or failed run keeps every point that finished. The store holds the same record (and the points as
they finish); readers (compare, card, push) read the store. Schema version 1:

    schema_version  1
    kind            "quantkit.bench"
    created_at      ISO-8601 UTC
    model_dir       absolute path of the checkpoint
    model_name      name served (`--served-model-name`, the folder name)
    checkpoint      checkpoint.describe(DIR), plus weights_bytes
    server          serve.ServerInfo: url, vllm_version, args (full argv), serve_config,
                    startup_s, kv_cache_tokens, max_concurrency, quant_lines, log_path, remote
    workload        {"input_len", "output_len", "dataset", "api", "seed", "warmup", "num_prompts"}
    slo             "ttft_p95=0.5,itl_p95=0.05" or null
    hardware        machine.hardware()
    points          [measure.stats.point.BenchPoint, ...] in the order measured; each has schema_version,
                    profile ("concurrency"|"rate"), concurrency, rate, num_requests, duration_s,
                    successes, failures, failure_reasons, prompt_tokens, completion_tokens,
                    output_tok_s, total_tok_s, req_s, ttft/itl/tpot/e2e (seconds: n, mean, p50,
                    p90, p95, p99, min, max), max_in_flight, slo, slo_met, slo_violations,
                    goodput_req_s, tokens_from_usage, partial, partial_reason, client (the load
                    generator's own workers, CPU, CPU per token, event-loop and send lag, attempts),
                    client_limited, client_limited_reason, usage_mismatch, usage_mismatch_reason
                    (the server's usage disagreed with the text received: tokens.py),
                    started_busy, started_busy_reason (the server was not idle at the start: drain.py),
                    server_metrics (vLLM's /metrics), gpus (NVML), host (the CPU of the server's
                    processes and quantkit's: observe/host.py)
    knee            KneeResult (only for --sweep) or null
    complete        false until every planned point finished
    error           why the run stopped early, or null
"""

from __future__ import annotations

import itertools
import math
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field

from ... import checkpoint, settings
from ...console import info, partial_result, warn
from ...errors import BackendError, UsageError
from ...files import atomic_write_json, unique_path
from ...machine import hardware, load_limits
from ...numbers import Concurrency, Rate, Tokens, check
from ...secrets import mask_secrets
from ...serve.config import ServeConfig
from ...serve.server import Server, ServerInfo, open_server
from ..loadgen.client import headers
from ..loadgen.drain import before_point
from ..loadgen.generator import Target, run_point, warmup
from ..loadgen.workload import PromptSource
from ..observe.gpu import gpus_of
from ..observe.host import open_host
from ..observe.metrics import PointMonitor
from ..stats.point import BenchPoint
from ..stats.slo import Slo
from .search import KneeResult, find_knee

SCHEMA_VERSION = 1


class BenchWorkload(BaseModel):
    """`BenchRun.workload`, the prompts asked for, as its readers see it (report/records.py): the
    record keeps the dict `run_bench` wrote."""

    input_len: int | None = None  # None: the dataset's prompts
    output_len: int | None = None
    dataset: str | None = None
    api: str | None = None
    seed: int | None = None
    warmup: int | None = None
    num_prompts: int | None = None  # None: each load's default


class BenchRun(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.bench"
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    model_dir: str
    model_name: str | None = None
    checkpoint: dict[str, Any] = Field(default_factory=dict)
    server: ServerInfo | None = None
    workload: dict[str, Any] = Field(default_factory=dict)
    slo: Slo | None = None
    hardware: dict[str, Any] = Field(default_factory=dict)
    points: list[BenchPoint] = Field(default_factory=list)
    knee: KneeResult | None = None
    complete: bool = False
    error: str | None = None
    path: str | None = None  # where this record is exported (not part of the file's contract)

    def write(self) -> None:
        if self.path:
            atomic_write_json(Path(self.path), mask_secrets(self.model_dump(mode="json", exclude={"path"})))


def results_dir(model_dir: Path) -> Path:
    """Where a checkpoint's bench/tune exports go: beside it, or under the home if it is read-only."""
    folder = model_dir / "quantkit-bench"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return folder
    except OSError:
        pass
    return settings.home() / "bench" / model_dir.name


def writable_dir(folder: Path) -> Path:
    """`folder`, created; a one-line usage error naming it when it cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK)
    except OSError as exc:
        raise UsageError(f"cannot write results to {folder} ({exc.strerror}); choose a writable --results-dir") from None
    if not writable:
        raise UsageError(f"cannot write results to {folder} (permission denied); choose a writable --results-dir")
    return folder


def stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def checkpoint_info(model_dir: Path) -> dict[str, Any]:
    info_ = checkpoint.describe(model_dir)
    # the weights a decode step reads: the report's batch-1 bound, even where the folder is gone later
    info_["weights_bytes"] = checkpoint.weight_bytes(model_dir)
    return info_


def default_num_prompts(concurrency: int | None, rate: float | None) -> int:
    """Enough requests for about four full waves at a concurrency, or ~15 s of arrivals at a rate."""
    if rate is not None:
        return max(8, math.ceil(15 * rate))
    return max(8, 4 * (concurrency or 1))


def check_loads(concurrency: list[int] | None, rate: list[float] | None, sweep: bool,
                output_len: int) -> list[int] | None:
    """The load points asked for, checked before anything starts (default concurrency 1,4,16)."""
    if sum(bool(x) for x in (concurrency, rate, sweep)) > 1:
        raise UsageError("give one of --concurrency, --rate, --sweep")
    check(Tokens, output_len, "--output-len")
    for c in concurrency or []:
        check(Concurrency, c, "--concurrency value")
    for r in rate or []:  # at least MIN_RATE: a point at 1e-300 req/s never ends
        check(Rate, r, "--rate value")
    if not concurrency and not rate and not sweep:
        return [1, 4, 16]
    return concurrency


def measure_point(server: Server, target: Target, prompts: list, output_len: int, *, slo: Slo | None = None,
                  concurrency: int | None = None, rate: float | None = None, seed: int = 0,
                  input_len: int | None = None, interval_s: float = 1.0, gpus: Any = None, host: Any = None,
                  stop_factory: Callable[[PointMonitor], Callable] | None = None,
                  workers: int | None = None, window: Any = None, ramp_s: float = 0.0) -> BenchPoint:
    """One load point with the server's /metrics (and the GPUs, `gpus`; the CPU of the server's
    processes and quantkit's, `host`) sampled through it and stored with the point;
    `stop_factory(monitor)` may give the point a `stop_when`. The point starts once the server has
    finished earlier points' requests (drain.py), or is flagged."""
    drained = before_point(server.url, headers=headers(target.api_key))
    monitor = PointMonitor(server.url, interval_s, gpus=gpus, host=host)

    def stop_rule():
        return stop_factory(monitor) if stop_factory else None

    def measured_again():  # a retried point: its samples and stop rule start over with the attempt kept
        monitor.restart()
        return stop_rule()

    with monitor:
        point = run_point(target, prompts, output_len, concurrency=concurrency, rate=rate, seed=seed, slo=slo,
                          alive=server.alive, input_len=input_len, workers=workers, stop_when=stop_rule(),
                          window=window, ramp_s=ramp_s, drained=drained, restart=measured_again)
    point.gpus = monitor.gpu_summary()
    point.host = monitor.host_summary()
    summary = monitor.summary(api_servers(server, point.host))
    point.server_metrics = summary.model_dump(mode="json") if summary else None
    return point


def api_servers(server: Server, host: dict[str, Any] | None) -> int | None:
    """The server's API server processes, whose step counts /metrics sums (observe/metrics.py): the
    processes seen in the point where the host was measured, else the count it was started with
    (a server quantkit started), else None (a server elsewhere: taken as vLLM's default, one)."""
    seen = ((host or {}).get("roles") or {}).get("api_server") or {}
    if not (host or {}).get("unmeasured") and seen.get("processes"):
        return int(seen["processes"])
    info = getattr(server, "info", None)
    asked = (getattr(info, "serve_config", None) or {}).get("api_server_count")
    return int(asked) if asked else None


def run_bench(
    server: Server,
    model_dir: Path,
    *,
    prompts: PromptSource | None = None,
    concurrency: list[int] | None = None,
    rate: list[float] | None = None,
    sweep: bool = False,
    sweep_max: int = 128,
    input_len: int = 128,
    output_len: int = 64,
    num_prompts: int | None = None,
    slo: Slo | None = None,
    seed: int = 0,
    warmup_requests: int = 2,
    dataset: Path | None = None,
    api: str = "completions",
    out_dir: Path | None = None,
    on_point: Callable[[BenchPoint], None] | None = None,
    client_workers: int | None = None,
) -> BenchRun:
    """Measure `server` (already started) at each load; the export is rewritten after every point."""
    model_dir = Path(model_dir).expanduser().absolute()
    concurrency = check_loads(concurrency, rate, sweep, output_len)
    prompts = prompts or PromptSource(model_dir, input_len, seed=seed, dataset=dataset, api=api)
    run = BenchRun(
        model_dir=str(model_dir), checkpoint=checkpoint_info(model_dir), slo=slo,
        hardware=hardware(),
        workload={"input_len": None if dataset else input_len, "output_len": output_len,
                  "dataset": str(dataset) if dataset else None, "api": api, "seed": seed,
                  "warmup": warmup_requests, "num_prompts": num_prompts},
        path=str(unique_path(Path(out_dir) if out_dir else results_dir(model_dir), "bench-", ".json", stamp())),
        server=server.info, model_name=server.model_name,
    )
    run.write()
    target = Target(api_url=server.api_url, model=server.model_name, api=api, api_key=getattr(server, "api_key", None))
    if warmup_requests > 0:
        failed = [r for r in warmup(target, prompts.prompts(warmup_requests, -1), min(output_len, 16)) if not r.ok]
        if failed:
            run.error = f"warm-up request failed: {failed[0].error}"
            run.write()
            raise BackendError(f"{run.error} (server {server.url})")
    index = itertools.count()
    gpus = gpus_of(server)
    host = open_host(server)

    def measure(c: int | None = None, r: float | None = None) -> BenchPoint:
        n = num_prompts or default_num_prompts(c, r)
        point_no = next(index)
        label = f"concurrency {c}" if c is not None else f"rate {r:g}/s"
        info(f"point {label}: {n} requests of {input_len if not dataset else 'dataset'} in / {output_len} out")
        point = measure_point(server, target, prompts.prompts(n, point_no), output_len, concurrency=c, rate=r,
                              seed=seed + point_no, slo=slo, input_len=None if dataset else input_len, gpus=gpus,
                              host=host, workers=client_workers)
        run.points.append(point)
        run.write()
        if on_point:
            on_point(point)
        if point.partial or (point.failures and not server.alive()):
            run.error = f"the server died during the point at {label}: {server.exit_reason()}"
            run.write()
            raise BackendError(f"{run.error}; {len(run.points)} points kept (the last one partial) in {run.path}")
        if point.num_requests and not point.successes:  # never a 0 tok/s figure: no request was served
            reasons = "; ".join(f"{n} x {why}" for why, n in list(point.failure_reasons.items())[:2])
            run.error = f"every request of the point at {label} failed ({reasons})"
            run.write()
            raise BackendError(f"{run.error}; {len(run.points)} points kept in {run.path}")
        return point

    try:
        if sweep:
            def knee_measure(c):
                p = measure(c=int(c))
                return p.output_tok_s, (p.slo_met is not False) and p.failures == 0

            run.knee = find_knee(knee_measure, lo=1, hi=sweep_max)
        elif rate:
            for r in rate:
                measure(r=r)
        else:
            for c in concurrency:
                measure(c=c)
    except KeyboardInterrupt:
        run.error = "interrupted"  # the points before the one in flight are kept, and say so
        run.write()
        partial_result(run.path)
        raise
    finally:
        if gpus is not None:
            gpus.close()
    run.complete = True
    run.write()
    info(f"results: {run.path}")
    return run


def bench(model_dir: Path, *, url: str | None = None, config: ServeConfig | None = None, port: int | None = None,
          startup_timeout: float = 600.0, input_len: int = 128, seed: int = 0, dataset: Path | None = None,
          api: str = "completions", on_point: Callable[[BenchPoint], None] | None = None,
          **options: Any) -> BenchRun:
    """The standalone command: check everything, then serve, measure, and record in the store."""
    from ...store import Store, standalone

    model_dir = Path(model_dir).expanduser().absolute()
    if not model_dir.is_dir():
        raise UsageError(f"model folder {model_dir} does not exist")
    loads = check_loads(options.get("concurrency"), options.get("rate"), options.get("sweep", False),
                        options.get("output_len", 64))
    # the checkpoint and the export folder, before the tokenizer and long before a server
    if url is None:
        checkpoint.validate(model_dir, weights=(config or ServeConfig()).load_format != "dummy")
    else:
        checkpoint.check_causal_lm(model_dir, weights=False)
    options["out_dir"] = writable_dir(Path(options["out_dir"]) if options.get("out_dir") else results_dir(model_dir))
    for problem in load_limits(max(loads or [options.get("sweep_max", 128) if options.get("sweep") else 0])):
        warn(problem)
    # Build prompts before starting the server: a bad dataset or tokenizer fails in a second.
    prompts = PromptSource(model_dir, input_len, seed=seed, dataset=dataset, api=api)
    with Store() as store, open_server(model_dir, url, config, port=port, startup_timeout=startup_timeout) as server:
        settings = {"input_len": input_len, "seed": seed, "dataset": dataset, "api": api, **options}
        with standalone(store, "bench", model_dir, config or ServeConfig(), settings, url=url) as rec:
            def point_done(point: BenchPoint) -> None:
                rec.add_point(point.model_dump(mode="json"))
                if on_point:
                    on_point(point)

            run = run_bench(server, model_dir, prompts=prompts, input_len=input_len, seed=seed, dataset=dataset,
                            api=api, on_point=point_done, **options)
            rec.finish(run.model_dump(mode="json", exclude={"path"}), run.path)
    return run
