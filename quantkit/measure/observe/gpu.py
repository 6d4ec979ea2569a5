"""Each GPU's utilization, SM clock (and what held it down), memory and power during a load point,
through NVML (nvidia-ml-py).

`open_gpus()` returns a reader of the GPUs this process may use (CUDA_VISIBLE_DEVICES by index or
UUID, else all), or None where there is no NVML (no driver, no GPU, the CPU machines): the point
is measured all the same, without GPU figures. `PointMonitor` (metrics.py) calls `sample()` at its
interval; `summarize_gpus` reduces the samples to one GpuSummary per GPU, stored with the point.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel


class GpuSummary(BaseModel):
    index: int
    name: str | None = None
    samples: int
    util_mean: float  # percent of time a kernel ran (NVML's utilization.gpu)
    util_max: float
    # the SM clock beside the utilization: a GPU busy at a low clock is held by power or heat, not work
    sm_clock_mean_mhz: float | None = None
    sm_clock_min_mhz: float | None = None
    sm_clock_limit_mhz: float | None = None  # the board's highest SM clock
    memory_used_max_gib: float
    memory_total_gib: float | None = None
    power_mean_w: float | None = None
    power_max_w: float | None = None
    power_limit_w: float | None = None  # the enforced board limit
    # shares of the samples whose clock NVML said was held down, and why (its clock event reasons):
    # by the power limit (software cap or hardware power brake), or by heat
    power_capped: float | None = None
    thermal_capped: float | None = None


# NVML's clock event ("throttle") reason bits, as nvidia-ml-py names them
POWER_CAP_BITS = 0x4 | 0x80  # nvmlClocksEventReasonSwPowerCap, ...HwPowerBrakeSlowdown
THERMAL_BITS = 0x8 | 0x20 | 0x40  # ...HwSlowdown, ...SwThermalSlowdown, ...HwThermalSlowdown


class GpuReader:
    """NVML handles of the visible GPUs; `sample()` reads them all once."""

    def __init__(self, nvml: Any, handles: list[tuple[int, Any]]):
        self.nvml = nvml
        self.handles = handles
        self.names: dict[int, str | None] = {}
        self.totals: dict[int, float | None] = {}
        self.clock_limits: dict[int, float | None] = {}
        self.power_limits: dict[int, float | None] = {}
        # nvidia-ml-py 12.535 renamed "throttle reasons" to "clock event reasons"; either reads the same bits
        self.reasons = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                        or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        for index, handle in handles:
            try:
                name = nvml.nvmlDeviceGetName(handle)
                self.names[index] = name.decode() if isinstance(name, bytes) else str(name)
            except nvml.NVMLError:
                self.names[index] = None
            try:
                self.totals[index] = nvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            except nvml.NVMLError:
                self.totals[index] = None
            try:
                self.clock_limits[index] = float(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
            except nvml.NVMLError:
                self.clock_limits[index] = None
            try:
                self.power_limits[index] = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0  # milliwatts
            except (nvml.NVMLError, AttributeError):
                self.power_limits[index] = None

    def sample(self) -> list[dict[str, float]]:
        out = []
        for index, handle in self.handles:
            try:
                util = self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                used = self.nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30
            except self.nvml.NVMLError:
                continue  # a GPU that stops answering leaves a gap, not a failed point
            row = {"index": index, "util": float(util), "memory_gib": used}
            try:
                row["power_w"] = self.nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
            except self.nvml.NVMLError:
                pass  # some boards do not report power
            try:
                row["sm_clock_mhz"] = float(self.nvml.nvmlDeviceGetClockInfo(handle, self.nvml.NVML_CLOCK_SM))
            except self.nvml.NVMLError:
                pass
            if self.reasons is not None:
                try:
                    row["clock_reasons"] = int(self.reasons(handle))
                except self.nvml.NVMLError:
                    pass
            out.append(row)
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def _visible(nvml: Any, count: int) -> list[int]:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES names (NVML itself ignores the variable)."""
    text = os.environ.get("CUDA_VISIBLE_DEVICES")
    if text is None or not text.strip():
        return list(range(count)) if text is None else []
    indices: list[int] = []
    for item in (x.strip() for x in text.split(",")):
        if item.isdigit():
            if int(item) < count:
                indices.append(int(item))
            continue
        for i in range(count):  # a UUID (GPU-...) or MIG id: match by UUID
            uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            if uuid.startswith(item) or item.startswith(uuid):
                indices.append(i)
    return indices


def gpus_of(server: Any) -> GpuReader | None:
    """A reader of the GPUs `server` runs on, where it runs on this machine (observe/host.py's
    rule: a `--url` on loopback or this host's address too, so a server started by hand beside
    the load generator is measured like one quantkit started); None elsewhere."""
    from .host import on_this_machine

    return open_gpus() if on_this_machine(server) else None


def open_gpus() -> GpuReader | None:
    """A reader of the visible GPUs, or None where NVML is missing or finds none."""
    try:
        import pynvml as nvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded...: a machine without GPUs
        return None
    try:
        count = nvml.nvmlDeviceGetCount()
        handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in _visible(nvml, count)]
    except nvml.NVMLError:
        handles = []
    if not handles:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
        return None
    return GpuReader(nvml, handles)


def summarize_gpus(samples: list[list[dict[str, float]]], reader: GpuReader | None = None) -> list[GpuSummary]:
    """Per GPU: mean and max utilization, mean and lowest SM clock, peak memory, mean and max power
    against the board's limit, and the share of samples whose clock was held by power or heat."""
    by_gpu: dict[int, list[dict[str, float]]] = {}
    for tick in samples:
        for row in tick:
            by_gpu.setdefault(int(row["index"]), []).append(row)
    out = []
    for index, rows in sorted(by_gpu.items()):
        power = [r["power_w"] for r in rows if "power_w" in r]
        clock = [r["sm_clock_mhz"] for r in rows if "sm_clock_mhz" in r]
        reasons = [int(r["clock_reasons"]) for r in rows if "clock_reasons" in r]
        out.append(GpuSummary(
            index=index, samples=len(rows),
            name=reader.names.get(index) if reader else None,
            memory_total_gib=reader.totals.get(index) if reader else None,
            util_mean=sum(r["util"] for r in rows) / len(rows), util_max=max(r["util"] for r in rows),
            sm_clock_mean_mhz=sum(clock) / len(clock) if clock else None, sm_clock_min_mhz=min(clock) if clock else None,
            sm_clock_limit_mhz=reader.clock_limits.get(index) if reader else None,
            memory_used_max_gib=max(r["memory_gib"] for r in rows),
            power_mean_w=sum(power) / len(power) if power else None, power_max_w=max(power) if power else None,
            power_limit_w=reader.power_limits.get(index) if reader else None,
            power_capped=_share(reasons, POWER_CAP_BITS), thermal_capped=_share(reasons, THERMAL_BITS),
        ))
    return out


def _share(reasons: list[int], bits: int) -> float | None:
    return sum(1 for r in reasons if r & bits) / len(reasons) if reasons else None


def gpu_count() -> int:
    """How many GPUs this process may use (0 without NVML)."""
    reader = open_gpus()
    if reader is None:
        return 0
    try:
        return len(reader.handles)
    finally:
        reader.close()
