"""What a `fidelity` record holds: `FidelityResult` (store kind `fidelity`), and its settings.

The record's points are its windows, one `DocumentSums` each with the window's id
(`window_point`): a re-render or a larger run of the same run key reads them back
(`sums_of_point`) instead of serving the models again.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..evals.gates import Verdict
from ..numbers import Count, Tokens
from .client import MAX_K
from .documents import Window
from .gate import FidelityGates, FidelityVerdict
from .intervals import DocumentSums

SCHEMA_VERSION = 1


class FidelitySettings(BaseModel):
    """Which windows are read and how each is scored. Every field but `windows` is part of the
    run key: a larger run adds windows to the same record's set."""

    model_config = ConfigDict(extra="forbid")

    windows: Count = Field(64, description="windows in all, split evenly over the sources")
    window_len: Tokens = Field(256, description="text tokens per window (each scored)")
    k: int = Field(MAX_K, ge=1, le=MAX_K, description="log-probabilities per position from each server")
    per_document: Count = Field(2, description="windows at most from one document (more documents: narrower intervals)")
    sources: tuple[str, ...] = Field(("wikitext2", "c4"), description="fidelity/documents.py's SOURCES, in order")


class Figure(BaseModel):
    value: float
    stderr: float | None = None
    low: float | None = None
    high: float | None = None


class FidelityResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.fidelity"
    run_key: str
    baseline_dir: str
    variant_dir: str
    baseline_fingerprint: str
    variant_fingerprint: str
    settings: FidelitySettings
    vllm_version: str
    windows: int
    documents: int  # the bootstrap's units
    tokens: int  # scored positions
    reused_windows: int  # read back from the store, not served again
    scored_windows: int
    confidence: float
    method: str
    figures: dict[str, Figure]  # intervals.FIGURES -> per-token mean with its interval
    gates: FidelityGates | None = None
    verdicts: list[FidelityVerdict] = Field(default_factory=list)
    verdict: Verdict | None = None  # fail if any failed, else inconclusive if any is, else pass; None: no gate
    wall_time_s: float = 0.0
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))


def window_id(window: Window) -> str:
    return f"{window.document}@{window.start}"


def window_point(window_key: str, sums: DocumentSums) -> dict[str, Any]:
    return {"window": window_key, **asdict(sums)}


def sums_of_point(point: dict[str, Any]) -> DocumentSums:
    return DocumentSums(**{f.name: point[f.name] for f in fields(DocumentSums)})
