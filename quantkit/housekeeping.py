"""What quantkit leaves on disk: converted checkpoints (`quantkit models ls|rm`) and their records.

A checkpoint is listed when it sits in the models folder (QUANTKIT_MODELS_DIR) or a stored record
names it; each row says its size, age, method and how many store records measured it. Removing a
checkpoint removes its folder and those records together, so the store never says `done` for
weights that are gone. (Log files are pruned to the newest QUANTKIT_KEEP_LOGS as they are made.)
"""

from __future__ import annotations

import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

from . import checkpoint, settings
from .errors import UsageError
from .files import ledger_entries, pid_running
from .store import Store


def _candidates(store: Store) -> dict[Path, list]:
    found: dict[Path, list] = {}
    root = settings.models_dir()
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if (folder / "config.json").is_file() or (folder / checkpoint.RECORD_FILE).is_file():
                found.setdefault(folder.resolve(), [])
    for record in store.records():
        folder = record.checkpoint_dir()
        if folder is not None and (record.kind == "convert" or folder.parent == root.resolve()):
            found.setdefault(folder, []).append(record)
    return found


def list_checkpoints(store: Store) -> list[dict[str, Any]]:
    rows = []
    for folder, records in _candidates(store).items():
        exists = folder.is_dir()
        described = checkpoint.describe(folder) if exists else {}
        rows.append({
            "path": str(folder), "exists": exists,
            "method": described.get("method") if exists else None,
            "size_bytes": checkpoint.dir_size(folder) if exists else None,
            "age_days": round((time.time() - folder.stat().st_mtime) / 86400, 1) if exists else None,
            "records": len(records),
            "models": sorted({r.model for r in records}),
        })
    return rows


# What a killed process leaves in the models folder: a convert's temporary folder, a replaced
# checkpoint that was not yet deleted, an atomic write's temporary file (files.py).
_LEFTOVER = re.compile(r"^\..+\.(tmp-[^/]+|old-(?P<pid>\d+)|[A-Za-z0-9_]{8}\.tmp)$")


def leftovers() -> list[Path]:
    """Temporary folders and files that a killed convert or write left behind; nothing reads them:
    those the ledger of temporary paths names (files.temp_folder: a convert's folder wherever -o
    put it, a GGUF conversion's in the home) whose process has ended, and those in the models
    folder (and in the checkpoints and their result folders there). A replaced checkpoint whose
    process still runs is being deleted right now: not listed."""
    found = {path: None for pid, path in ledger_entries() if not pid_running(pid)}
    root = settings.models_dir()
    if not root.is_dir():
        return list(found)
    folders = [root] + [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    folders += [f / sub for f in folders[1:] for sub in ("quantkit-bench", "quantkit-eval") if (f / sub).is_dir()]
    for folder in folders:
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for path in entries:
            m = _LEFTOVER.match(path.name)
            if m and not (m.group("pid") and pid_running(int(m.group("pid")))) and not _in_use(path):
                found.setdefault(path.absolute())
    return list(found)


def _in_use(path: Path) -> bool:
    """A temporary folder the ledger names for a process that still runs (a convert under way)."""
    return any(p == path.absolute() and pid_running(pid) for pid, p in ledger_entries())


def leftovers_line(paths: list[Path]) -> str:
    """One line: how many, which, and the command that removes them."""
    shown = " ".join(shlex.quote(str(p)) for p in paths)
    return (f"{len(paths)} left-over temporary file(s) or folder(s) from an interrupted convert or write "
            f"(nothing uses them): remove them with `rm -rf {shown}` once no quantkit convert is running")


def remove_checkpoint(store: Store, ref: str, *, keep_records: bool = False) -> dict[str, Any]:
    """Delete a converted checkpoint folder and the store records about it."""
    path = Path(ref).expanduser()
    if not path.is_absolute() and not path.exists():
        path = settings.models_dir() / ref
    folder = path.resolve()
    records = _candidates(store).get(folder)
    if records is None:
        raise UsageError(f"{ref} is not a checkpoint quantkit knows (not in {settings.models_dir()} and no stored "
                         "record names it); `quantkit models ls` lists them")
    if folder.is_dir() and not (folder / checkpoint.RECORD_FILE).is_file():
        raise UsageError(f"{folder} was not made by quantkit (no {checkpoint.RECORD_FILE}); remove it yourself if you mean to")
    removed_files = folder.is_dir()
    if removed_files:
        shutil.rmtree(folder)
    removed_records = 0
    if not keep_records:
        for record in records:
            removed_records += store.remove(record.run_key)
    return {"path": str(folder), "removed_folder": removed_files, "removed_records": removed_records}
