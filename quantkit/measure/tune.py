"""`quantkit tune`: serving knobs compared by measurement, one vLLM server per configuration.

Each configuration is served, warmed up and measured at one load; the best is the one with the
highest output tok/s among those meeting the SLO. The result is a store record (kind `tune`, one
point per configuration) and a JSON export `DIR/quantkit-bench/tune-<timestamp>.json`:
{"kind": "quantkit.tune", "slo", "workload", "entries": [{"config", "label", "command", "point" |
null, "error" | null}], "best", "best_reason"}.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..console import info, warn
from ..errors import BackendError, UsageError, did_you_mean
from ..files import atomic_write_json
from ..machine import has_gpu, hardware
from ..serve.config import ServeConfig, serve_command
from ..serve.server import VLLMServer
from .bench import default_num_prompts, results_dir, stamp
from .loadgen import Target, run_point, warmup
from .point import BenchPoint
from .slo import Slo
from .workload import PromptSource

SCHEMA_VERSION = 1

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
            atomic_write_json(Path(self.path), self.model_dump(mode="json", exclude={"path"}))


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
    from ..store import Store, standalone

    prompts = PromptSource(model_dir, input_len, seed=seed)
    n = num_prompts or default_num_prompts(concurrency, None)
    with Store() as store, standalone(store, "tune", model_dir, {"base": base.model_dump(mode="json"),
                                                                 "grid": grid, "slo": str(slo) if slo else None}) as rec:
        result = _sweep(model_dir, configs, base, prompts, n, slo=slo, concurrency=concurrency, input_len=input_len,
                        output_len=output_len, seed=seed, startup_timeout=startup_timeout, out_dir=out_dir,
                        on_entry=lambda e: rec.add_point(e.model_dump(mode="json")))
        rec.finish(result.model_dump(mode="json", exclude={"path"}), result.path)
    return result


def _sweep(model_dir: Path, configs: list[ServeConfig], base: ServeConfig, prompts: PromptSource, n: int, *,
           slo: Slo | None, concurrency: int, input_len: int, output_len: int, seed: int, startup_timeout: float,
           out_dir: Path | None, on_entry) -> TuneResult:
    result = TuneResult(
        model_dir=str(model_dir), slo=str(slo) if slo else None, hardware=hardware(),
        workload={"concurrency": concurrency, "input_len": input_len, "output_len": output_len,
                  "num_prompts": n, "seed": seed},
        path=str((Path(out_dir) if out_dir else results_dir(model_dir)) / f"tune-{stamp()}.json"),
    )
    for number, config in enumerate(configs, 1):
        entry = TuneEntry(label=_tune_label(base, config), config=config.changed(),
                          command=serve_command(model_dir, config))
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
        on_entry(entry)
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
