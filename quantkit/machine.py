"""What this machine is: CPU, its instruction set, GPUs and package versions, recorded with every
measurement.

`fingerprint()` is the part of it that goes into run keys: a result measured on other hardware
is another result.

`cpu_isa()` names the CPU's vector instruction set as serving cares about it: whether it computes
bf16 natively (AVX-512 BF16, AMX, Arm's bf16 extension) or emulates it (AVX2, plain AVX-512, Arm
without bf16), and whether it has AVX-512 or AMX (vLLM-CPU's FP8 KV cache needs one). It is read
from /proc/cpuinfo's flags, without importing torch (doctor answers in a second).
`QUANTKIT_CPU_ISA=avx2` (or another class below the CPU's own) makes quantkit choose and start
vLLM as it would on such a CPU (serve/env.py imitates it for vLLM): how a developer on an AVX-512
machine runs what users on AVX2 run.
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
from .errors import UsageError


def has_gpu() -> bool:
    """An NVIDIA GPU is present (vLLM's CUDA build, GPU-only knobs, NVML sampling)."""
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None


def gpus() -> list[dict[str, str]]:
    """The NVIDIA GPUs nvidia-smi lists: name and compute capability ("9.0" on Hopper); empty where
    there is none or nvidia-smi cannot answer."""
    import subprocess

    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    rows = [line.rsplit(",", 1) for line in proc.stdout.splitlines() if "," in line]
    return [{"name": name.strip(), "compute_cap": cap.strip()} for name, cap in rows]


def environment_kind(folder: Path) -> str | None:
    """Which kind of environment `folder` is, from the stamp scripts/setup.sh or a bundle's
    install.sh wrote there (`DIGEST setup|bundle cuda|cpu`): "cuda, scripts/setup.sh",
    "cpu, bundle"; None without a stamp. A stamp of one word predates GPU builds: cpu."""
    try:
        words = (folder / ".quantkit-stamp").read_text().split()
    except OSError:
        return None
    if len(words) == 1:
        return "cpu, scripts/setup.sh"
    if len(words) == 3:
        return f"{words[2]}, " + ("scripts/setup.sh" if words[1] == "setup" else words[1])
    return None


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
    """The hardware facts that change a measurement: part of every stage's run key. A CPU machine
    whose ISA lacks native bf16 (or imitates such a CPU) adds its ISA: it serves float32, not bf16,
    and two CPUs of one model name ("AMD EPYC") may differ in it. A native-bf16 CPU adds nothing,
    so the keys stored before the ISA was read stay valid there (store.keyed's rule for late fields)."""
    hw = hardware()
    found = {"machine": hw.get("machine"), "cpu": hw.get("cpu"), "cpu_count": hw.get("cpu_count"),
             "gpu": hw.get("gpu"), "gpu_count": hw.get("gpu_count"), "system": platform.system()}
    if not hw.get("gpu"):
        isa = cpu_isa()
        if not isa.native_bf16 or isa.imitated:
            found["cpu_isa"] = isa.name
    return found


# --------------------------------------------------------------------------------------------
# The CPU's instruction set, as serving cares about it

# best first: the first class whose flags a CPU has is its class
ISA_CLASSES: dict[str, tuple[str, frozenset[str]]] = {
    "amx": ("AMX", frozenset({"amx_bf16", "amx_tile"})),
    "avx512_bf16": ("AVX-512 BF16", frozenset({"avx512f", "avx512_bf16"})),
    "avx512": ("AVX-512", frozenset({"avx512f"})),
    "avx2": ("AVX2", frozenset({"avx2"})),
    "arm_bf16": ("Arm bf16", frozenset({"bf16"})),  # aarch64's Features line (FEAT_BF16)
    "arm": ("Arm", frozenset()),
    "other": ("other", frozenset()),
}
NATIVE_BF16 = frozenset({"amx", "avx512_bf16", "arm_bf16"})
HAS_AVX512 = frozenset({"amx", "avx512_bf16", "avx512"})  # AVX-512 or AMX: vLLM-CPU's FP8 KV cache
_X86_ORDER = ["amx", "avx512_bf16", "avx512", "avx2", "other"]
_ARM_ORDER = ["arm_bf16", "arm"]


class CpuIsa(BaseModel):
    """The CPU's vector instruction set class (`name`, one of ISA_CLASSES) and what it implies."""

    name: str
    imitated: str | None = None  # the CPU's own class when QUANTKIT_CPU_ISA imitates a lesser one

    @property
    def label(self) -> str:
        return ISA_CLASSES[self.name][0]

    @property
    def native_bf16(self) -> bool:
        """bf16 arithmetic in hardware; elsewhere every bf16 operation is emulated (AVX2: a matmul
        ~40-80x slower than float32, docs/DESIGN.md)."""
        return self.name in NATIVE_BF16

    @property
    def avx512(self) -> bool:
        return self.name in HAS_AVX512

    def describe(self) -> str:
        """The label, and where it is imitated, on what: 'AVX2 (imitated on an AVX-512 BF16 CPU)'."""
        return f"{self.label}{self.imitation_note}"

    @property
    def imitation_note(self) -> str:
        return f" (imitated on an {ISA_CLASSES[self.imitated][0]} CPU: QUANTKIT_CPU_ISA)" if self.imitated else ""


# what holds ATen and oneDNN to a lesser ISA than the CPU's (their own settings; vLLM's feature probes
# are held by serve/imitate/sitecustomize.py)
_ATEN_CAPABILITY = {"avx2": "avx2", "avx512": "avx512", "avx512_bf16": "avx512"}
_ONEDNN_ISA = {"avx2": "AVX2", "avx512": "AVX512_CORE", "avx512_bf16": "AVX512_CORE_BF16"}


def imitation_env(isa: "CpuIsa") -> dict[str, str]:
    """The environment that makes torch (ATen, oneDNN) compute as on the imitated CPU; empty when
    the CPU is not imitating a lesser one."""
    if not isa.imitated:
        return {}
    env = {"QUANTKIT_IMITATED_ISA": isa.name}
    if isa.name in _ATEN_CAPABILITY:
        env["ATEN_CPU_CAPABILITY"] = _ATEN_CAPABILITY[isa.name]
        env["ONEDNN_MAX_CPU_ISA"] = _ONEDNN_ISA[isa.name]
    return env


def imitate_in_process() -> None:
    """Hold this process's torch to QUANTKIT_CPU_ISA (conversion, calibration): before torch is
    imported, as ATen and oneDNN read their settings once. A user's own settings win."""
    if not os.environ.get("QUANTKIT_CPU_ISA"):
        return
    for key, value in imitation_env(cpu_isa()).items():
        os.environ.setdefault(key, value)


def cpu_flags() -> tuple[str, frozenset[str]]:
    """(architecture, the CPU's flags): x86's `flags` or aarch64's `Features` of /proc/cpuinfo."""
    arch = platform.machine().lower()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return arch, frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return arch, frozenset(value.split())
    return arch, frozenset()


def isa_of(arch: str, flags: frozenset[str]) -> str:
    """The best ISA class whose flags `flags` hold, for the architecture `arch`."""
    if arch in ("aarch64", "arm64"):
        return "arm_bf16" if "bf16" in flags else "arm"
    if arch not in ("x86_64", "amd64", "i686", "i386"):
        return "other"
    return next((name for name in _X86_ORDER if name != "other" and ISA_CLASSES[name][1] <= flags), "other")


def cpu_isa() -> CpuIsa:
    """This CPU's ISA class, or the lesser class QUANTKIT_CPU_ISA imitates (a UsageError for a class
    the CPU does not reach: an AVX2 CPU cannot run AVX-512 code)."""
    arch, flags = cpu_flags()
    own = isa_of(arch, flags)
    wanted = os.environ.get("QUANTKIT_CPU_ISA", "").strip().lower().replace("-", "_")
    if not wanted or wanted == own:
        return CpuIsa(name=own)
    order = _ARM_ORDER if own in _ARM_ORDER else _X86_ORDER
    if wanted not in order or own not in order:
        names = ", ".join(n for n in order if n != "other")
        raise UsageError(f"QUANTKIT_CPU_ISA={wanted} is not an ISA class of this {arch} CPU: use one of {names}, "
                         "or unset it")
    if order.index(wanted) < order.index(own):
        raise UsageError(f"QUANTKIT_CPU_ISA={wanted} asks for more than this CPU has ({ISA_CLASSES[own][0]}): "
                         "quantkit can imitate a lesser ISA only; unset it or name a lesser one")
    return CpuIsa(name=wanted, imitated=own)


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
