"""The words a missing figure, a figure with its interval and a stored value are written in: shared
by the report (render.py), the card (card.py) and the fidelity table (fidelity.py), below all three."""

from __future__ import annotations

from typing import Any

DASH = "—"


def fmt_ci(value: float | None, low: float | None, high: float | None, digits: int = 4,
           missing: str = DASH) -> str:
    """`0.8900 [0.8612, 0.9188]`: a value and its 95% interval (value alone when there is none)."""
    if value is None:
        return missing
    text = f"{value:.{digits}f}"
    return text + (f" [{low:.{digits}f}, {high:.{digits}f}]" if low is not None and high is not None else "")


def fmt_str(value: Any, missing: str = DASH) -> str:
    """A count, name or version as it is stored; `missing` for None."""
    return missing if value is None else str(value)
