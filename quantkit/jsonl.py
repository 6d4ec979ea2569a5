"""JSON Lines files given by users (bench prompts, calibration samples): one reader, one error form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import UsageError


def read_jsonl(path: Path) -> list[Any]:
    """Every non-blank line of `path` parsed; a bad line is `file:line: not JSON (reason)`."""
    rows = []
    with Path(path).open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{number}: not JSON ({exc.msg})") from None
    return rows
