"""`quantkit.json`: what was done to make a checkpoint, written beside it.

Schema version 1. Later stages (bench, eval, report, push) read it to know the method, scheme,
source and calibration of a checkpoint without re-deriving anything.
"""

from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .. import __version__

RECORD_FILE = "quantkit.json"
SCHEMA_VERSION = 1


class SourceModel(BaseModel):
    ref: str
    kind: str
    path: str
    fingerprint: str


class ConvertRecord(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.convert"
    method: str
    backend: str
    scheme: str
    group_size: int | None = None
    recipe_name: str
    recipe_hash: str
    recipe: dict[str, Any]
    source: SourceModel
    calibration: dict[str, Any] | None = None
    quantization_config: dict[str, Any] | None = None  # what vLLM will read from config.json
    versions: dict[str, str] = Field(default_factory=dict)
    hardware: dict[str, Any] = Field(default_factory=dict)
    wall_time_s: float  # the whole convert: load, calibrate, quantize, save
    quantize_time_s: float | None = None  # the quantizer call alone
    peak_rss_mb: float | None = None
    size_bytes: int
    output_dir: str
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    notes: list[str] = Field(default_factory=list)
    # `--verify`: did vLLM (which build) load the checkpoint and generate? None = not checked.
    vllm_check: dict[str, Any] | None = None

    def write(self, folder: Path) -> Path:
        path = folder / RECORD_FILE
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, folder: Path) -> "ConvertRecord | None":
        path = Path(folder) / RECORD_FILE
        if not path.is_file():
            return None
        return cls.model_validate_json(path.read_text())


def package_versions(*names: str) -> dict[str, str]:
    versions = {"quantkit": __version__, "python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "cpu": _cpu_name()}
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_count"] = torch.cuda.device_count()
    except ImportError:
        pass
    import os

    info["cpu_count"] = os.cpu_count()
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def dir_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
