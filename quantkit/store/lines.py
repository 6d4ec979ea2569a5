"""What the store says and what it keeps out: run-key checks, one-line explanations of SQLite's
failures, and record JSON with secrets masked (db.py uses these)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from ..errors import UsageError

# What a run key is: the hex digest run_key() makes (a prefix of it names a run).
KEY_PREFIX = re.compile(r"[0-9a-f]+")


def check_key(key_prefix: str, min_len: int = 1) -> str:
    """A run key or a prefix of one, as `quantkit runs ls` shows it: hexadecimal digits."""
    prefix = (key_prefix or "").strip().lower()
    if prefix and not KEY_PREFIX.fullmatch(prefix):
        raise UsageError(f"'{key_prefix}' is not a run key: a run key is hexadecimal (0-9, a-f); "
                         "`quantkit runs ls` lists them")
    if len(prefix) < max(min_len, 1):
        raise UsageError(f"give at least {max(min_len, 1)} characters of a run key (`quantkit runs ls` lists them)")
    return prefix


def _mask(text: str | None) -> str | None:
    from ..secrets import mask_text  # the one place that knows what a secret is

    return mask_text(text) if text else text


def _dump(value: Any) -> str:
    """A record's JSON, with the values of secret-bearing serving flags masked: what the store
    holds is shown by reports and cards and pushed to the Hub."""
    from ..secrets import mask_secrets

    return json.dumps(mask_secrets(json.loads(json.dumps(value, default=str))))


def _exception_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:500]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _unwritable(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "readonly" in text or "read-only" in text or "unable to open database" in text


def _explain(exc: sqlite3.DatabaseError, path: Path) -> str:
    text = str(exc)
    if _unwritable(exc):
        return (f"the result store {path} cannot be written ({text}): its folder or file is read-only; make "
                f"{path.parent} writable, or point QUANTKIT_HOME at a folder you can write")
    if "locked" in text or "busy" in text:
        return f"the result store {path} is locked by another quantkit process; wait for it or stop it"
    if "not a database" in text or "malformed" in text or "file is encrypted" in text:
        return f"the result store {path} is corrupted ({text}); move it aside and run again (results start afresh)"
    return f"the result store {path} cannot be used: {text}"
