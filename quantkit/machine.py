"""What this machine is: CPU, GPUs and package versions, recorded with every measurement.

`fingerprint()` is the part of it that goes into run keys: a result measured on other hardware
is another result.
"""

from __future__ import annotations

import os
import platform
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from . import __version__


def has_gpu() -> bool:
    """An NVIDIA GPU is present (vLLM's CUDA build, GPU-only knobs, NVML sampling)."""
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "cpu": cpu_name()}
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_count"] = torch.cuda.device_count()
    except ImportError:
        pass
    info["cpu_count"] = os.cpu_count()
    return info


class Hardware(BaseModel):
    """`hardware()` as a stored result's reader sees it (report/records.py). The results keep the
    dict it returned, so what is stored never changes; `gpu` and `gpu_count` are absent without one."""

    machine: str | None = None
    cpu: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    cpu_count: int | None = None
    driver: str | None = None  # a result made elsewhere may name the GPU driver; the report shows it

    @property
    def device(self) -> str | None:
        """The GPU where there is one, else the CPU."""
        return self.gpu or self.cpu


def fingerprint() -> dict[str, Any]:
    """The hardware facts that change a measurement: part of every stage's run key."""
    hw = hardware()
    return {"machine": hw.get("machine"), "cpu": hw.get("cpu"), "cpu_count": hw.get("cpu_count"),
            "gpu": hw.get("gpu"), "gpu_count": hw.get("gpu_count"), "system": platform.system()}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_versions(*names: str) -> dict[str, str]:
    """quantkit's and Python's versions plus those of the named distributions that are installed."""
    versions = {"quantkit": __version__, "python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def load_limits(concurrency: int) -> list[str]:
    """What on this machine caps a load test of `concurrency` streams, with the fix: the open-file
    limit (each stream holds a socket in the client and one in a local server) and the listen
    backlog a burst of new connections meets (net.core.somaxconn)."""
    import resource

    problems = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * concurrency + 256  # both ends on one host, plus files, pipes and the runtime's own
    if soft != resource.RLIM_INFINITY and soft < need:
        problems.append(f"the open-file limit is {soft} but {concurrency} concurrent streams need about {need}: "
                        f"raise it (`ulimit -n {max(need, 4096)}`" + (f", hard limit {hard})" if hard != resource.RLIM_INFINITY else ")"))
    try:
        somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text().strip())
    except (OSError, ValueError):
        somaxconn = None
    if somaxconn is not None and somaxconn < concurrency:
        problems.append(f"net.core.somaxconn is {somaxconn}, below {concurrency} concurrent connections: new "
                        f"connections may be refused or delayed; raise it (`sysctl -w net.core.somaxconn={max(concurrency, 4096)}`)")
    return problems
