"""Backends that run in an environment of their own, as a subprocess.

GPTQModel 7.x, AutoAWQ, AutoGPTQ and optimum pin torch/transformers releases that do not fit the
main environment (llm-compressor's pins), exactly as vLLM does not. quantkit therefore prepares
the calibration token ids itself, writes them to a JSONL file, and runs a small worker script
(quantize/workers/<name>.py, standard library + that backend only) with the backend's python:
QUANTKIT_<NAME>_PYTHON, or the `.venv-<name>` that `quantkit setup --backend NAME` creates.

Each environment is installed from a lock file (workers/requirements-<name>.txt, a `pip freeze`
of a build that quantized and served on this kind of machine) with --no-deps, so a fresh machine
gets exactly the tested set. A worker that knows why it failed prints one `QUANTKIT_ERROR ...` line
on stderr; quantkit reports that line instead of guessing from the traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import settings
from ..console import info, step
from ..errors import BackendError, SetupError, UsageError
from ..methods import METHODS
from ..models import ResolvedModel
from . import calibration
from .base import BackendResult, meta_model, resolve_group_size
from .recipe import Recipe

WORKERS = Path(__file__).parent / "workers"


ERROR_MARKER = "QUANTKIT_ERROR "
STAMP = ".quantkit-stamp"


@dataclass(frozen=True)
class BackendEnv:
    """What `quantkit setup --backend NAME` installs (stacks seen working on a 2-core CPU box)."""

    requirements: tuple[str, ...]  # the top-level pins; the lock file holds everything they pulled
    probe: str  # a module whose import proves the environment works
    cpu_ok: bool = True
    env: tuple[tuple[str, str], ...] = ()

    def lock_file(self, name: str) -> Path:
        return WORKERS / f"requirements-{name}.txt"


class ExternalBackend:
    name: str = ""
    methods: frozenset[str] = frozenset()  # a subclass's: METHODS.for_backend(name) (methods.py)
    setup: BackendEnv
    worker: str = ""
    gpu_only_reason: str = ""
    # methods this backend runs only with CUDA: method -> why, and what works on a CPU
    gpu_only_methods: dict[str, str] = {}

    def python(self) -> Path:
        found = settings.backend_python(self.name)
        if found is None:
            raise SetupError(
                f"backend '{self.name}' is not set up: run `quantkit setup --backend {self.name}` "
                f"or point QUANTKIT_{self.name.upper().replace('-', '_')}_PYTHON at a python that has it"
            )
        return found

    @classmethod
    def check_machine(cls, method: str | None = None) -> None:
        """Refuse up front where the backend cannot run (before any output or environment is made)."""
        if not cls.setup.cpu_ok and not _has_cuda():
            raise SetupError(f"backend '{cls.name}' needs a CUDA GPU: {cls.gpu_only_reason}")
        if method in cls.gpu_only_methods and not _has_cuda():
            raise SetupError(f"backend '{cls.name}' does {method} only on a CUDA GPU: {cls.gpu_only_methods[method]}")

    def quantize(self, model_ref: ResolvedModel, recipe: Recipe, out_dir: Path) -> BackendResult:
        self.check_machine(recipe.method)
        python = self.python()
        from transformers import AutoTokenizer

        group_size = resolve_group_size(meta_model(model_ref.path), recipe)
        calib_info = None
        work = out_dir / ".quantkit-work"
        work.mkdir()
        calib_file = work / "calibration.jsonl"
        if recipe.needs_calibration and recipe.calibration is not None:
            calib = recipe.calibration
            with step(f"preparing {calib.num_samples} calibration samples from {calib.dataset}"):
                tokenizer = AutoTokenizer.from_pretrained(model_ref.path)
                calib_set = calibration.load(calib)
                samples = calibration.tokenize(calib_set, tokenizer, calib.num_samples, calib.seq_len)
                texts = [tokenizer.decode(s["input_ids"], skip_special_tokens=True) for s in samples]
                with calib_file.open("w") as fh:
                    for sample, text in zip(samples, texts):
                        fh.write(json.dumps({**sample, "text": text}) + "\n")
            calib_info = {**calib_set.describe(), "num_samples": len(samples), "seq_len": calib.seq_len,
                          "tokens": sum(len(s["input_ids"]) for s in samples), "seed": calib.seed}
        spec = {
            "model": str(model_ref.path),
            "out": str(out_dir),
            "method": recipe.method,
            "bits": 8 if recipe.scheme.startswith("W8") else 4,
            "group_size": group_size,
            "symmetric": not recipe.scheme.endswith("_ASYM"),
            "calibration": str(calib_file) if calib_info else None,
            "options": recipe.options,
        }
        spec_file = work / "spec.json"
        spec_file.write_text(json.dumps(spec))
        env = {**os.environ, **dict(self.setup.env), "PYTHONUNBUFFERED": "1"}
        started = time.monotonic()
        with step(f"quantizing with {self.name} in its own environment ({python})"):
            proc = subprocess.run(
                [str(python), str(WORKERS / self.worker), str(spec_file)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                cwd=work,  # GPTQModel writes a logs/ folder into its working directory
            )
        elapsed = time.monotonic() - started
        for line in proc.stderr.splitlines():
            if line.startswith("quantkit: "):  # the worker's own notes (an option it could not carry over)
                info(f"{self.name}: {line[len('quantkit: '):]}")
        if proc.returncode != 0:
            known = worker_error(proc.stderr)
            if known:
                raise BackendError(f"{self.name}: {known}")
            reason = _last_error(proc.stderr) or f"exit code {proc.returncode}"
            raise BackendError(f"{self.name} failed: {reason} (log: {self._keep_log(proc.stderr)})")
        try:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            raise BackendError(f"{self.name} worker printed no result; its log: {self._keep_log(proc.stderr)}") from None
        shutil.rmtree(work, ignore_errors=True)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        info(f"{self.name} finished in {elapsed:.1f} s")
        return BackendResult(
            group_size=group_size,
            calibration=calib_info,
            quantize_time_s=round(result.get("quantize_time_s", elapsed), 2),
            versions={**result.get("versions", {}), "quantkit": sys.modules["quantkit"].__version__},
            peak_rss_mb=round(peak, 1),
            notes=[f"quantized in a separate environment: {python}"],
        )

    def _keep_log(self, text: str) -> Path:
        """The worker's log, outside the output's temporary folder (removed when a convert fails)."""
        logs = settings.home() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"{self.name}-worker-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        path.write_text(text)
        return path


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def worker_error(log: str) -> str | None:
    """The one-line reason a worker gave for failing (its last QUANTKIT_ERROR line), if any."""
    found = [line[len(ERROR_MARKER):].strip() for line in log.splitlines() if line.startswith(ERROR_MARKER)]
    return found[-1] if found else None


def _last_error(log: str) -> str:
    for line in reversed(log.strip().splitlines()):
        line = line.strip()
        if line and ("Error" in line or "error" in line or "Exception" in line):
            return line[:300]
    return log.strip().splitlines()[-1][:300] if log.strip() else ""


class GPTQModelBackend(ExternalBackend):
    name = "gptqmodel"
    methods = METHODS.for_backend(name)
    worker = "gptqmodel_worker.py"
    # seen here: 149 s of AWQ calibration on the 2-layer cut, then "ValueError: AWQ: CUDA is not available."
    gpu_only_methods = {"awq": "GPTQModel 7.6 packs AWQ weights only with CUDA kernels (it fails after the whole "
                               "calibration); on a CPU use --backend autoawq or the default llmcompressor"}
    # 7.6.0 is the newest GPTQModel whose requirements resolve with CPU torch 2.13.0 (docs/DESIGN.md, "What was seen");
    # on 2 cores its loader pool needs GPTQMODEL_CPU_WORKERS=2 ("requests 2 workers but parent 'cpu'
    # only has 1")
    setup = BackendEnv(
        requirements=("torch==2.13.0", "gptqmodel==7.6.0", "transformers==5.24.0"),
        probe="gptqmodel",
        env=(("GPTQMODEL_CPU_WORKERS", "2"),),
    )


class AutoAWQBackend(ExternalBackend):
    name = "autoawq"
    methods = METHODS.for_backend(name)
    worker = "autoawq_worker.py"
    setup = BackendEnv(
        requirements=("torch==2.13.0", "autoawq==0.2.9", "transformers==5.24.0", "datasets==5.2.0"),
        probe="awq",
    )


class AutoGPTQBackend(ExternalBackend):
    name = "auto-gptq"
    methods = METHODS.for_backend(name)
    worker = "autogptq_worker.py"
    gpu_only_reason = (
        "AutoGPTQ 0.7.1 refuses to quantize without CUDA, imports only with transformers 4.57.x and "
        "is archived upstream; on this machine use --backend gptqmodel (same GPTQ format) or the default llmcompressor"
    )
    setup = BackendEnv(
        requirements=("torch==2.13.0", "auto-gptq==0.7.1", "transformers==4.57.6", "datasets==4.4.2", "peft==0.10.0"),
        probe="auto_gptq",
        cpu_ok=False,
    )


class OptimumBackend(ExternalBackend):
    name = "optimum"
    methods = METHODS.for_backend(name)
    worker = "optimum_worker.py"
    # optimum 2.3's GPTQ path runs on GPTQModel
    setup = BackendEnv(
        requirements=("torch==2.13.0", "optimum==2.3.0", "gptqmodel==7.6.0", "transformers==5.24.0"),
        probe="optimum.gptq",
        env=(("GPTQMODEL_CPU_WORKERS", "2"),),
    )


def setup_backend(name: str) -> Path:
    """Create `.venv-<name>` under the venv root and install the backend's lock file into it.

    A second run with the same lock file (its digest is stamped into the venv) only re-checks the
    import. Returns the environment's python.
    """
    from ..registry import BACKENDS

    backend_cls = BACKENDS.load(BACKENDS.check(name))
    if not issubclass(backend_cls, ExternalBackend):
        raise UsageError(f"backend '{name}' runs in the main environment; scripts/setup.sh installs it")
    backend_cls.check_machine()  # an environment that cannot quantize on this machine is not worth minutes
    spec = backend_cls.setup
    lock = spec.lock_file(name)
    target = settings.venv_root() / f".venv-{name}"
    python = target / "bin" / "python"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    stamp = target / STAMP
    if python.exists() and stamp.is_file() and stamp.read_text().strip() == digest:
        info(f"{target} is up to date with {lock.name}")
    else:
        stamp.unlink(missing_ok=True)
        if not python.exists():
            with step(f"creating {target}"):
                subprocess.run([sys.executable, "-m", "venv", str(target)], check=True,
                               stdout=subprocess.DEVNULL)
        # --no-deps: the lock file is a complete `pip freeze` of a working build, so pip installs
        # exactly it instead of re-resolving against whatever PyPI offers today
        with step(f"installing {', '.join(spec.requirements)} (locked in {lock.name}) into {target} (minutes)"):
            proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-r", str(lock)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise BackendError(f"installing {name} from {lock.name} failed: {_last_error(proc.stdout)}")
    probe = subprocess.run([str(python), "-c", f"import {spec.probe}"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env={**os.environ, **dict(spec.env)}, cwd=target)
    if probe.returncode != 0:
        raise BackendError(f"{name} installed but `import {spec.probe}` fails: {_last_error(probe.stderr)}")
    stamp.write_text(digest + "\n")
    return python
