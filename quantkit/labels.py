"""The variant label every layer shares: the unconverted model's, in run recipes, the store, the
report, the card and the Hub push. A run recipe's own variant may not take it (pipeline/recipe.py).
Also the executors' names, which `quantkit run --executor`'s help lists without importing the
pipeline."""

from __future__ import annotations

from typing import Final

BASELINE: Final = "baseline"

# what each executor does (pipeline/recipe.py's ExecutorKind), for `quantkit run --executor`'s help
EXECUTORS: Final[dict[str, str]] = {"local": "one variant after another, the default",
                                    "ray": "one variant per lane, in parallel"}
