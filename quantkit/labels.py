"""The variant label every layer shares: the unconverted model's, in run recipes, the store, the
report, the card and the Hub push. A run recipe's own variant may not take it (pipeline/recipe.py)."""

from __future__ import annotations

from typing import Final

BASELINE: Final = "baseline"
