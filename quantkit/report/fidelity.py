"""The fidelity table: each variant's next-token distributions against the baseline's, as stored.

A stored FidelityResult (fidelity/result.py, read tolerantly: records.Fidelity) becomes one
`FidelityCell` of its variant's report Row (build.py); the report's table (render.py) and the
card's section (card.py) are written from the cells by `fidelity_table`, in the same words. The
gates' verdicts are the stored ones (decided on the stored intervals when the record was written);
build.py folds them into the row's gate beside the accuracy gates, so the recommendation and
`push` read them as they read those.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..fidelity.gate import FidelityGates, FidelityVerdict, gates_text
from ..fidelity.result import Figure
from .text import fmt_ci, fmt_str

TITLE = "Fidelity to the baseline"
# The figures in the table's order: (stored name, column header)
COLUMNS = (("delta_nll", "ΔNLL (nats/token)"), ("top1_agreement", "top-1 agreement"),
           ("kl_lower", "KL lower bound"), ("kl_union", "KL on the top-k union"))
CAPTION = ("each figure a per-token mean over the scored positions of the windows (of wikitext2 test pages and c4 "
           "documents calibration never read unless the run named other sources, such as an evaluation task's "
           "prompts with their gold answers), the variant against the baseline on the same tokens, [95% interval] from a "
           "paired bootstrap over documents. ΔNLL = the variant's minus the baseline's negative log-likelihood of "
           "the actual tokens (exact: > 0 when the variant finds the text less likely); top-1 agreement = share of "
           "positions whose most likely next token is the same (exact). KL(baseline || variant) from the top-k "
           "log-probabilities vLLM returns: the lower bound merges every token not listed on both sides into one "
           "bucket, which can only lower KL, so the true KL is at least it; the top-k union figure is an estimate "
           "(at least the lower bound; the probabilities of tokens listed on one side only are filled in, which "
           "can move it either way). The gates read the exact figures: ΔNLL's upper bound at most the threshold "
           "passes, its lower bound above it fails; top-1's lower bound at least the threshold passes, its upper "
           "bound below it fails; an interval holding the threshold is inconclusive.")


class FidelityCell(BaseModel):
    """One variant's stored fidelity figures, as the report and the card show them."""

    baseline: str  # the baseline checkpoint's folder name (a standalone run may name another)
    windows: int | None = None
    documents: int | None = None
    tokens: int | None = None
    window_len: int | None = None
    k: int | None = None
    confidence: float | None = None
    figures: dict[str, Figure] = Field(default_factory=dict)
    gates: FidelityGates | None = None
    verdicts: list[FidelityVerdict] = Field(default_factory=list)
    verdict: str | None = None  # over its gates; None: measured without a gate


def fidelity_cell(result: Any) -> FidelityCell | None:
    """A stored FidelityResult (records.Fidelity) as a cell; None when there is none."""
    if result is None or not result.model_fields_set:
        return None
    settings = result.settings
    return FidelityCell(
        baseline=Path(result.baseline_dir).name if result.baseline_dir else "?", windows=result.windows,
        documents=result.documents, tokens=result.tokens, window_len=settings.window_len if settings else None,
        k=settings.k if settings else None, confidence=result.confidence,
        figures={k: Figure.model_validate(v.model_dump()) for k, v in (result.figures or {}).items()},
        gates=result.gates, verdicts=list(result.verdicts or []), verdict=result.verdict)


def _figure(cell: FidelityCell, name: str, missing: str) -> str:
    f = cell.figures.get(name)
    return fmt_ci(f.value, f.low, f.high, missing=missing) if f is not None else missing


def gate_text(cell: FidelityCell, missing: str) -> str:
    """`pass (ΔNLL <= 0.05, top-1 agreement >= 0.85)`, or `fail: ` and each gate that did not pass
    with its figure (`delta_nll 0.4040 [0.3954, 0.4133] > 0.05`)."""
    if not cell.verdicts:
        return "no gate" if cell.verdict is None else missing
    if cell.verdict == "pass":
        return f"pass ({gates_text(cell.gates)})"
    return f"{cell.verdict}: " + "; ".join(v.describe().removesuffix(f": {v.verdict}")
                                           for v in cell.verdicts if v.verdict != "pass")


def fidelity_table(rows: list[Any], missing: str) -> tuple[str, list[str], list[list[str]], str] | None:
    """(title, header, rows, caption) of the variants that have fidelity figures; None when none has."""
    out = []
    for r in rows:
        cell = r.fidelity
        if cell is None:
            continue
        out.append([r.name, cell.baseline, f"{fmt_str(cell.windows, missing)} ({fmt_str(cell.documents, missing)})",
                    f"{fmt_str(cell.tokens, missing)} (k={fmt_str(cell.k, missing)})",
                    *(_figure(cell, name, missing) for name, _ in COLUMNS), gate_text(cell, missing)])
    if not out:
        return None
    return (TITLE, ["variant", "against", "windows (documents)", "tokens scored (top-k)",
                    *(header for _, header in COLUMNS), "fidelity gate"], out, CAPTION)
