"""`quantkit bench` and `quantkit tune`: serve a checkpoint, run load points, find the knee, and
write the results beside the checkpoint.

Result files (until the SQLite store lands with the report issue)
-----------------------------------------------------------------
`quantkit bench DIR` writes `DIR/quantkit-bench/bench-<UTC timestamp>.json` (or, when DIR is not
writable, `$QUANTKIT_HOME/bench/<dir name>/...`). The file is rewritten atomically after every
point, so an interrupted or failed run keeps every point that finished. Schema version 1:

    schema_version  1
    kind            "quantkit.bench"
    created_at      ISO-8601 UTC
    model_dir       absolute path of the checkpoint
    model_name      name served (`--served-model-name`, the folder name)
    checkpoint      {"method", "scheme", "group_size", "quantization_config"} from DIR/quantkit.json,
                    or {"method": "unknown"} for a checkpoint quantkit did not make
    server          engine.ServerInfo: url, vllm_version, args (full argv), serve_config,
                    startup_s, kv_cache_tokens, max_concurrency, quant_lines, log_path, remote
    workload        {"input_len", "output_len", "dataset", "api", "seed", "warmup", "num_prompts"}
    slo             "ttft_p95=0.5,itl_p95=0.05" or null
    hardware        quantize.record.hardware()
    points          [loadgen.BenchPoint, ...] in the order measured; each has schema_version,
                    profile ("concurrency"|"rate"), concurrency, rate, num_requests, duration_s,
                    successes, failures, failure_reasons, prompt_tokens, completion_tokens,
                    output_tok_s, total_tok_s, req_s, ttft/itl/tpot/e2e (seconds: n, mean, p50,
                    p90, p95, p99, min, max), max_in_flight, slo, slo_met, slo_violations,
                    goodput_req_s, tokens_from_usage, partial, partial_reason
    knee            KneeResult (only for --sweep) or null
    complete        false until every planned point finished
    error           why the run stopped early, or null

`quantkit tune` writes `tune-<timestamp>.json` in the same folder: {"kind": "quantkit.tune",
"slo", "workload", "configs": [{"config", "label", "point" | null, "error" | null}], "best"}.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shlex
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

from . import settings
from .console import info, warn
from .engine import RemoteServer, ServeConfig, ServerInfo, VLLMServer, has_gpu
from .errors import BackendError, UsageError
from .loadgen import BenchPoint, PromptSource, Slo, Target, run_point, warmup
from .models import weight_bytes

SCHEMA_VERSION = 1

# --------------------------------------------------------------------------------------------
# Knee search


class KneeProbe(BaseModel):
    x: float
    throughput: float
    slo_ok: bool


class KneeResult(BaseModel):
    """The load (concurrency or rate) past which more load stops paying.

    `saturated`: doubling the load from `knee` raises output throughput by less than `min_gain`;
    `slo`: the next grid point up breaks the SLO; `slo_at_min`: even the lowest load breaks it
    (knee is None); `not_reached`: neither happened up to the top of the range (knee = top).
    """

    knee: float | None
    reason: Literal["saturated", "slo", "slo_at_min", "not_reached"]
    min_gain: float
    measured: list[KneeProbe]


def knee_grid(lo: float, hi: float, integer: bool = True) -> list[float]:
    """Candidate loads: lo * 2^k and lo * 1.5 * 2^k within [lo, hi]. With lo=1, hi=1024: 20 points
    (1, 2, 3, 4, 6, 8, 12, ... 768, 1024); every point's double is on the grid too."""
    if lo <= 0 or hi < lo:
        raise UsageError(f"bad sweep range {lo:g}..{hi:g}")
    points = set()
    k = 0
    while lo * 2**k <= hi:
        points.add(lo * 2**k)
        if lo * 1.5 * 2**k <= hi and (not integer or float(lo * 1.5 * 2**k).is_integer()):
            points.add(lo * 1.5 * 2**k)
        k += 1
    return sorted(points)


def knee_from_grid(values: dict[float, tuple[float, bool]], grid: list[float], min_gain: float = 0.10) -> KneeResult:
    """The knee by brute force over a fully measured grid (the reference the search must match).

    Saturation knee: the smallest c with T(2c) < (1 + min_gain) * T(c). SLO knee: the grid point
    before the first one whose SLO fails. The knee is the smaller of the two."""
    measured = [KneeProbe(x=x, throughput=values[x][0], slo_ok=values[x][1]) for x in grid]
    first_bad = next((x for x in grid if not values[x][1]), None)
    if first_bad == grid[0]:
        return KneeResult(knee=None, reason="slo_at_min", min_gain=min_gain, measured=measured)
    sat = next((x for x in grid if 2 * x in values and values[2 * x][0] < (1 + min_gain) * values[x][0]), None)
    slo_knee = grid[grid.index(first_bad) - 1] if first_bad is not None else None
    return _combine(sat, slo_knee, grid[-1], min_gain, measured)


def _combine(sat, slo_knee, top, min_gain, measured) -> KneeResult:
    if sat is None and slo_knee is None:
        return KneeResult(knee=top, reason="not_reached", min_gain=min_gain, measured=measured)
    if slo_knee is not None and (sat is None or slo_knee <= sat):
        return KneeResult(knee=slo_knee, reason="slo", min_gain=min_gain, measured=measured)
    return KneeResult(knee=sat, reason="saturated", min_gain=min_gain, measured=measured)


def find_knee(measure: Callable[[float], tuple[float, bool]], lo: float = 1, hi: float = 1024,
              min_gain: float = 0.10, integer: bool = True) -> KneeResult:
    """The same answer as `knee_from_grid` over `knee_grid(lo, hi)`, measuring few points.

    Assumes what saturating serving curves do: the gain per doubling shrinks as load grows, and
    once the SLO breaks it stays broken. A doubling ladder (lo, 2lo, 4lo, ...) stops at the first
    doubling that gains < min_gain or breaks the SLO; then only the 1.5x grid points inside that
    last bracket are left to decide, and they need at most two more points (3c/8 and 3c/4, the
    latter shared by both questions). A knee at 16 takes 8 points; at 2^k, k + 4.
    """
    cache: dict[float, tuple[float, bool]] = {}
    # the ladder must end on the grid's top point, or points above its last rung go unchecked
    hi = lo * 2 ** math.floor(math.log2(hi / lo) + 1e-9)
    grid = knee_grid(lo, hi, integer)

    def get(x: float) -> tuple[float, bool]:
        if x not in cache:
            throughput, ok = measure(int(x) if integer else x)
            cache[x] = (float(throughput), bool(ok))
        return cache[x]

    def probes() -> list[KneeProbe]:
        return [KneeProbe(x=x, throughput=t, slo_ok=ok) for x, (t, ok) in cache.items()]

    if not get(lo)[1]:
        return KneeResult(knee=None, reason="slo_at_min", min_gain=min_gain, measured=probes())
    c = lo
    sat = slo_knee = None
    while 2 * c <= hi:
        c2 = 2 * c
        t2, ok2 = get(c2)
        if not ok2:
            mid = 1.5 * c  # the only grid point between c and 2c
            slo_knee = mid if mid in grid and get(mid)[1] else c
        if t2 < (1 + min_gain) * get(c)[0]:
            # c saturates; c/2 did not (the ladder went on), so only 3c/4 remains to check
            sat = c
            q = 0.75 * c
            if q in grid and q > c / 2:
                if get(1.5 * c)[0] < (1 + min_gain) * get(q)[0]:
                    sat = q
        if sat is not None or slo_knee is not None:
            break
        c = c2
    return _combine(sat, slo_knee, grid[-1], min_gain, probes())


# --------------------------------------------------------------------------------------------
# Records


class BenchRun(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.bench"
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    model_dir: str
    model_name: str | None = None
    checkpoint: dict[str, Any] = Field(default_factory=dict)
    server: ServerInfo | None = None
    workload: dict[str, Any] = Field(default_factory=dict)
    slo: str | None = None
    hardware: dict[str, Any] = Field(default_factory=dict)
    points: list[BenchPoint] = Field(default_factory=list)
    knee: KneeResult | None = None
    complete: bool = False
    error: str | None = None
    path: str | None = None  # where this record is written (not part of the file's contract)

    def write(self) -> None:
        if not self.path:
            return
        _atomic_write(Path(self.path), self.model_dump(mode="json", exclude={"path"}))


def _atomic_write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make results private to this user
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def results_dir(model_dir: Path) -> Path:
    folder = model_dir / "quantkit-bench"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return folder
    except OSError:
        pass
    return settings.home() / "bench" / model_dir.name


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def checkpoint_info(model_dir: Path) -> dict[str, Any]:
    info = _checkpoint_method(model_dir)
    # the weights a decode step reads: the report's batch-1 bound, even where the folder is gone later
    info["weights_bytes"] = weight_bytes(model_dir)
    return info


def _checkpoint_method(model_dir: Path) -> dict[str, Any]:
    try:
        from .quantize.record import ConvertRecord

        record = ConvertRecord.read(model_dir)
    except Exception:  # a malformed quantkit.json must not stop a benchmark
        record = None
    if record is None:
        config = model_dir / "config.json"
        qc = None
        if config.is_file():
            try:
                qc = json.loads(config.read_text()).get("quantization_config")
            except ValueError:
                pass
        return {"method": "unknown" if qc else "none", "quant_method": (qc or {}).get("quant_method")}
    return {"method": record.method, "scheme": record.scheme, "group_size": record.group_size,
            "quantization_config": record.quantization_config}


def _hardware() -> dict[str, Any]:
    try:
        from .quantize.record import hardware

        return hardware()
    except Exception:
        return {}


# --------------------------------------------------------------------------------------------
# bench


def default_num_prompts(concurrency: int | None, rate: float | None) -> int:
    """Enough requests for about four full waves at a concurrency, or ~15 s of arrivals at a rate."""
    if rate is not None:
        return max(8, math.ceil(15 * rate))
    return max(8, 4 * (concurrency or 1))


def _server(model_dir: Path, url: str | None, config: ServeConfig, port: int | None, startup_timeout: float):
    if url:
        return RemoteServer(url)
    return VLLMServer(model_dir, config, port=port, startup_timeout=startup_timeout)


def run_bench(
    model_dir: Path,
    *,
    concurrency: list[int] | None = None,
    rate: list[float] | None = None,
    sweep: bool = False,
    sweep_max: int = 128,
    input_len: int = 128,
    output_len: int = 64,
    num_prompts: int | None = None,
    url: str | None = None,
    config: ServeConfig | None = None,
    port: int | None = None,
    slo: Slo | None = None,
    seed: int = 0,
    warmup_requests: int = 2,
    dataset: Path | None = None,
    api: str = "completions",
    startup_timeout: float = 600.0,
    out_dir: Path | None = None,
    on_point: Callable[[BenchPoint], None] | None = None,
) -> BenchRun:
    model_dir = Path(model_dir).expanduser().absolute()
    if not model_dir.is_dir():
        raise UsageError(f"model folder {model_dir} does not exist")
    if sum(bool(x) for x in (concurrency, rate, sweep)) > 1:
        raise UsageError("give one of --concurrency, --rate, --sweep")
    if not concurrency and not rate and not sweep:
        concurrency = [1, 4, 16]
    if output_len < 1:
        raise UsageError("--output-len must be at least 1")
    if any(c < 1 for c in concurrency or []):
        raise UsageError("--concurrency values must be at least 1")
    if any(r <= 0 for r in rate or []):
        raise UsageError("--rate values must be positive")
    config = config or ServeConfig()
    if url and (config != ServeConfig() or port is not None):
        warn("serving options (--port, knobs, --serve-arg) do not apply to a server given by --url; ignored")
    # Build prompts before starting the server: a bad dataset or tokenizer fails in a second.
    prompts = PromptSource(model_dir, input_len, seed=seed, dataset=dataset, api=api)
    run = BenchRun(
        model_dir=str(model_dir), checkpoint=checkpoint_info(model_dir), slo=str(slo) if slo else None,
        hardware=_hardware(),
        workload={"input_len": None if dataset else input_len, "output_len": output_len,
                  "dataset": str(dataset) if dataset else None, "api": api, "seed": seed,
                  "warmup": warmup_requests, "num_prompts": num_prompts},
        path=str((Path(out_dir) if out_dir else results_dir(model_dir)) / f"bench-{_stamp()}.json"),
    )
    with _server(model_dir, url, config, port, startup_timeout) as server:
        run.server = server.info
        run.model_name = server.model_name
        run.write()
        target = Target(api_url=server.api_url, model=server.model_name, api=api)
        if warmup_requests > 0:
            results = warmup(target, prompts.prompts(warmup_requests, -1), min(output_len, 16))
            failed = [r for r in results if not r.ok]
            if failed:
                run.error = f"warm-up request failed: {failed[0].error}"
                run.write()
                raise BackendError(f"{run.error} (server {server.url})")
        index = itertools.count()

        def measure(c: int | None = None, r: float | None = None) -> BenchPoint:
            n = num_prompts or default_num_prompts(c, r)
            point_no = next(index)
            label = f"concurrency {c}" if c is not None else f"rate {r:g}/s"
            info(f"point {label}: {n} requests of {input_len if not dataset else 'dataset'} in / {output_len} out")
            point = run_point(
                target, prompts.prompts(n, point_no), output_len, concurrency=c, rate=r, seed=seed + point_no,
                slo=slo, alive=server.alive, input_len=None if dataset else input_len,
            )
            run.points.append(point)
            run.write()
            if on_point:
                on_point(point)
            if point.partial or (point.failures and not server.alive()):
                run.error = f"the server died during the point at {label}: {server.exit_reason()}"
                run.write()
                raise BackendError(f"{run.error}; {len(run.points)} points kept (the last one partial) in {run.path}")
            return point

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
    run.complete = True
    run.write()
    info(f"results: {run.path}")
    return run


# --------------------------------------------------------------------------------------------
# tune

# Each knob is varied alone from vLLM's defaults (one factor at a time): 6 servers on the CPU.
DEFAULT_GRID: dict[str, list[Any]] = {
    "max_num_seqs": [8, 64],
    "max_num_batched_tokens": [512],
    "block_size": [64],  # CPU default 128; the CPU backend wants multiples of 32
    "enable_chunked_prefill": [False],
}
GPU_GRID: dict[str, list[Any]] = {"gpu_memory_utilization": [0.8, 0.95]}


class TuneEntry(BaseModel):
    label: str
    config: dict[str, Any]
    command: str
    point: BenchPoint | None = None
    startup_s: float | None = None
    error: str | None = None


class TuneResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.tune"
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    model_dir: str
    slo: str | None = None
    workload: dict[str, Any] = Field(default_factory=dict)
    hardware: dict[str, Any] = Field(default_factory=dict)
    entries: list[TuneEntry] = Field(default_factory=list)
    best: TuneEntry | None = None
    best_reason: str | None = None
    path: str | None = None

    def write(self) -> None:
        if self.path:
            _atomic_write(Path(self.path), self.model_dump(mode="json", exclude={"path"}))


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """`--knob max-num-seqs=8,32` -> {"max_num_seqs": ["8", "32"]} (validated by ServeConfig)."""
    grid: dict[str, list[Any]] = {}
    allowed = set(DEFAULT_GRID) | set(GPU_GRID) | {"kv_cache_dtype", "max_model_len", "enforce_eager"}
    for item in items:
        key, sep, values = item.partition("=")
        name = key.strip().lstrip("-").replace("-", "_")
        if not sep or not values.strip():
            raise UsageError(f"bad --knob '{item}': expected NAME=V1,V2 such as max-num-seqs=8,32")
        if name not in allowed:
            from .errors import did_you_mean

            raise UsageError(f"bad --knob '{item}': {did_you_mean(name, sorted(allowed))}")
        grid[name] = [v.strip() for v in values.split(",") if v.strip()]
    return grid


def tune_configs(base: ServeConfig, grid: dict[str, list[Any]], full: bool = False) -> list[ServeConfig]:
    """The base config, then one knob changed at a time (or every combination with full=True)."""
    configs = [base]
    if full:
        names = list(grid)
        for combo in itertools.product(*(grid[n] for n in names)):
            configs.append(_with(base, dict(zip(names, combo))))
    else:
        for name, values in grid.items():
            for value in values:
                configs.append(_with(base, {name: value}))
    unique: list[ServeConfig] = []
    for c in configs:
        if c not in unique:
            unique.append(c)
    return unique


def _with(base: ServeConfig, changes: dict[str, Any]) -> ServeConfig:
    data = base.model_dump()
    for k, v in changes.items():
        if isinstance(v, str) and k in ("enable_chunked_prefill", "enforce_eager"):
            v = v.lower() in ("1", "true", "on", "yes")
        data[k] = v
    try:
        return ServeConfig(**data)
    except Exception as exc:
        raise UsageError(f"bad tune value in {changes}: {' '.join(str(exc).split())[:200]}") from None


def _tune_label(base: ServeConfig, config: ServeConfig) -> str:
    """What this configuration changes from the base one (the user's options), e.g. `max-num-seqs=8`."""
    before, after = base.changed(), config.changed()
    diff = {k: v for k, v in after.items() if before.get(k, object()) != v}
    diff.update({k: None for k in before if k not in after})
    if not diff:
        return "base"
    return " ".join(f"{k.replace('_', '-')}={'default' if v is None else v}" for k, v in diff.items())


def vllm_serve_command(model_dir: Path, config: ServeConfig) -> str:
    return shlex.join(["vllm", "serve", str(model_dir), *config.to_args()])


def tune(
    model_dir: Path,
    *,
    slo: Slo | None,
    base: ServeConfig | None = None,
    grid: dict[str, list[Any]] | None = None,
    full_grid: bool = False,
    max_configs: int = 6,
    concurrency: int = 16,
    input_len: int = 128,
    output_len: int = 64,
    num_prompts: int | None = None,
    seed: int = 0,
    startup_timeout: float = 600.0,
    out_dir: Path | None = None,
) -> TuneResult:
    model_dir = Path(model_dir).expanduser().absolute()
    if not model_dir.is_dir():
        raise UsageError(f"model folder {model_dir} does not exist")
    if max_configs < 1:
        raise UsageError("--max-configs must be at least 1")
    if grid is None:
        grid = dict(DEFAULT_GRID)
        if has_gpu():
            grid.update(GPU_GRID)
    base = base or ServeConfig()
    configs = tune_configs(base, grid, full_grid)
    if len(configs) > max_configs:
        warn(f"{len(configs)} configurations in the grid; trying the first {max_configs} (--max-configs)")
        configs = configs[:max_configs]
    prompts = PromptSource(model_dir, input_len, seed=seed)
    n = num_prompts or default_num_prompts(concurrency, None)
    result = TuneResult(
        model_dir=str(model_dir), slo=str(slo) if slo else None, hardware=_hardware(),
        workload={"concurrency": concurrency, "input_len": input_len, "output_len": output_len,
                  "num_prompts": n, "seed": seed},
        path=str((Path(out_dir) if out_dir else results_dir(model_dir)) / f"tune-{_stamp()}.json"),
    )
    for number, config in enumerate(configs, 1):
        entry = TuneEntry(label=_tune_label(base, config), config=config.changed(),
                          command=vllm_serve_command(model_dir, config))
        info(f"config {number}/{len(configs)}: {entry.label}")
        try:
            with VLLMServer(model_dir, config, startup_timeout=startup_timeout) as server:
                entry.startup_s = server.info.startup_s
                target = Target(api_url=server.api_url, model=server.model_name)
                warmup(target, prompts.prompts(2, -1), min(output_len, 16))
                # same prompts for every config: the comparison is between configs, not prompts
                entry.point = run_point(target, prompts.prompts(n, 0), output_len, concurrency=concurrency,
                                        slo=slo, alive=server.alive, input_len=input_len)
                if entry.point.partial:
                    entry.error = f"server died: {server.exit_reason()}"
        except (BackendError, UsageError) as exc:
            if isinstance(exc, UsageError) and "port" in exc.message:
                raise
            # one configuration vLLM rejects (e.g. an unsupported block size) does not end the sweep
            entry.error = exc.one_line()
            warn(f"{entry.label}: {entry.error}")
        result.entries.append(entry)
        result.write()
    usable = [e for e in result.entries if e.point is not None and not e.error and e.point.failures == 0]
    if not usable:
        raise BackendError(f"no configuration could be measured; see {result.path}")
    meeting = [e for e in usable if e.point.slo_met is not False]
    if meeting:
        result.best = max(meeting, key=lambda e: e.point.output_tok_s)
        result.best_reason = "highest output tok/s" + (" among configurations meeting the SLO" if slo else "")
    else:
        result.best = None
        result.best_reason = f"no configuration meets the SLO {slo} at concurrency {concurrency}"
    result.write()
    info(f"results: {result.path}")
    return result


__all__ = [
    "BenchRun", "KneeResult", "TuneResult", "find_knee", "knee_from_grid", "knee_grid", "run_bench", "tune",
]
