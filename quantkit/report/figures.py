"""Two small facts the report computes from its rows: a GPU's peak memory bandwidth (for the
batch-1 decode bound) and the Pareto front of throughput against accuracy recovery."""

from __future__ import annotations

import re

# Peak memory bandwidth in GB/s from the vendors' datasheets. Matched in order against the device
# name (torch.cuda.get_device_name: "NVIDIA H100 80GB HBM3" is the SXM part, "NVIDIA H100 PCIe").
BANDWIDTH_GBS: list[tuple[str, float]] = [
    (r"H200", 4800.0),
    (r"H100.*PCIe", 2000.0),
    (r"H100.*NVL", 3900.0),
    (r"H100", 3350.0),
    (r"A100.*80\s*GB.*PCIe|A100.*PCIe.*80\s*GB", 1935.0),
    (r"A100.*80\s*GB", 2039.0),
    (r"A100", 1555.0),
    (r"L40S", 864.0),
]


def lookup_bandwidth(device: str | None) -> float | None:
    """Peak memory bandwidth (GB/s) of a known GPU by name; None for CPUs and unknown devices."""
    if not device:
        return None
    for pattern, gbs in BANDWIDTH_GBS:
        if re.search(pattern, device, re.IGNORECASE):
            return gbs
    return None


def pareto_front(points: dict[str, tuple[float, float]]) -> set[str]:
    """Names not dominated when both coordinates are better higher (throughput, recovery): a point
    is dominated if another is >= in both and > in at least one."""
    front = set()
    for name, (x, y) in points.items():
        dominated = any(
            (ox >= x and oy >= y) and (ox > x or oy > y)
            for other, (ox, oy) in points.items() if other != name
        )
        if not dominated:
            front.add(name)
    return front
