"""Does vLLM load a checkpoint and generate from it? (`quantkit convert --verify`, and the tests)

The check runs in the vLLM environment (a subprocess: vLLM and the quantizers cannot share one
environment) and loads every checkpoint in one process to pay vLLM's start-up once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from .. import settings
from ..errors import SetupError

PROBE = Path(__file__).parent / "workers" / "vllm_probe.py"
MARKER = "QUANTKIT_PROBE "
# The root cause of a failed load is logged by vLLM's worker ("ERROR ... ValueError: ..."); the
# exception the probe itself catches only says that the engine core failed.
ROOT_CAUSE = re.compile(r"ERROR .*?\] ((?:[A-Za-z_.]+Error|Exception): .*)")
DETAIL = re.compile(r"ERROR .*?\]\s+(\S.*cannot implement due to: .*)")


def verify_in_vllm(dirs: list[Path], timeout: float = 900.0) -> list[dict[str, Any]]:
    """One result per folder, in order: `ok`, or the `error` vLLM (or, for a format this machine's
    vLLM cannot run, quantkit before loading it: `refused`) gave."""
    from ..machine import has_gpu
    from ..serve.hardware_fit import gpu_capability, refusal, serving_dtype

    capability = gpu_capability()
    refused = {str(d): refusal(Path(d), capability) for d in dirs}
    loadable = [d for d in dirs if not refused[str(d)]]
    # as quantkit serves each on this machine (4-bit weights on a CPU without bf16 arithmetic: bf16),
    # one probe process per dtype
    gpu = has_gpu()
    by_dtype: dict[str | None, list[Path]] = {}
    for d in loadable:
        by_dtype.setdefault(serving_dtype(None, gpu=gpu, model_dir=Path(d)).dtype, []).append(d)
    results = {r["model"]: r for dtype, group in by_dtype.items() for r in _probe(group, timeout, dtype)}
    return [results.get(str(d)) or {"model": str(d), "ok": False, "refused": True, "error": refused[str(d)]}
            for d in dirs]


def _probe(dirs: list[Path], timeout: float, dtype: str | None) -> list[dict[str, Any]]:
    python = settings.backend_python("vllm")
    if python is None:
        raise SetupError("no vLLM environment: run scripts/setup.sh or set QUANTKIT_VLLM")
    from ..machine import has_gpu
    from ..serve.env import imitated_cpu_env

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if not has_gpu():
        env.update(imitated_cpu_env(env))  # QUANTKIT_CPU_ISA: load as on the imitated CPU
    proc = subprocess.run(
        [str(python), str(PROBE), *(["--dtype", dtype] if dtype else []), *map(str, dirs)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=timeout,
        start_new_session=True,
    )
    results, pending = [], []
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER):])
            if not result["ok"] and pending:
                result["error"] = "; ".join(pending[:3])[:600]
            results.append(result)
            pending = []
        else:
            match = ROOT_CAUSE.search(line) or DETAIL.search(line)
            if match and "Engine core initialization failed" not in match.group(1) and "WorkerProc initialization failed" not in match.group(1):
                pending.append(match.group(1).strip())
    done = {r["model"] for r in results}
    for d in dirs:
        if str(d) not in done:
            results.append({"model": str(d), "ok": False, "error": f"vLLM probe exited with code {proc.returncode} before this checkpoint"})
    return results
