"""Files quantkit writes and reads: atomic writes (a reader never sees half a file), JSON Lines.

Every result file is written to a temporary sibling and renamed into place; a failure (disk
full, Ctrl-C) removes the temporary file, so nothing half-written survives beside the results.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import UsageError


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make results private to this user
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def unique_path(folder: Path, prefix: str, suffix: str, stamp: str | None = None) -> Path:
    """A new file `folder/<prefix><stamp><suffix>` that did not exist: created empty (O_EXCL), so
    two processes asking in the same second (two benches' exports) never get the same name; a
    taken name gets `-2`, `-3`, ... before the suffix. The caller then writes it (atomically)."""
    from datetime import datetime, timezone

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = stamp if stamp is not None else datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 10_000):
        path = folder / f"{prefix}{stamp}{'' if n == 1 else f'-{n}'}{suffix}"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free name for {prefix}{stamp}*{suffix} in {folder}")


def resolved(path: str | Path | None) -> Path | None:
    """`path` with `~` expanded and links resolved, or None for no path or one that cannot be resolved
    (a link loop): a stored folder is compared by what it points at, not by how it was spelled."""
    if not path:
        return None
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return None


def read_jsonl(path: Path) -> list[Any]:
    """Every non-blank line of `path` parsed; a bad line (not JSON, or nested deeper than
    safeload.MAX_JSON_DEPTH) is one line naming `file:line`."""
    from .safeload import loads_json

    rows = []
    with Path(path).open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                rows.append(loads_json(line, f"{path}:{number}", "a JSON line", "fix that line"))
    return rows


def prune(folder: Path, pattern: str, keep: int) -> list[Path]:
    """Delete all but the `keep` newest files matching `pattern` in `folder` (logs); the removed."""
    if keep < 0 or not Path(folder).is_dir():
        return []
    files = sorted(Path(folder).glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for path in files[keep:]:
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass  # another process's log still being written, or already gone
    return removed
