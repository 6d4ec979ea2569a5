"""The baseline's and a variant's served log-probabilities of the same windows, as document sums."""

from __future__ import annotations

from typing import Sequence

from .client import WindowLogprobs
from .intervals import DocumentSums, document_sums


def window_sums(baseline: Sequence[WindowLogprobs], variant: Sequence[WindowLogprobs], k: int) -> list[DocumentSums]:
    """One DocumentSums per window (keyed by its document), from the two servers' answers for
    the same windows in the same order; windows that differ are an error, never a comparison."""
    if len(baseline) != len(variant):
        raise ValueError(f"{len(baseline)} baseline windows and {len(variant)} variant windows: score the same windows")
    out = []
    for b, v in zip(baseline, variant):
        if b.window != v.window:
            raise ValueError(f"window {b.window.document}@{b.window.start} is not "
                             f"{v.window.document}@{v.window.start}: both models must score the same tokens")
        out.append(document_sums(b.window.document, b.listed, v.listed, b.window.token_ids[1:], k))
    return out
