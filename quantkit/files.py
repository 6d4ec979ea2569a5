"""Files quantkit writes and reads: atomic writes (a reader never sees half a file), JSON Lines,
and the names a file or folder of quantkit's may take (plain names), temporary folders, and the
output paths a command is given.

Every result file is written to a temporary sibling and renamed into place; a failure (disk
full, Ctrl-C) removes the temporary file, so nothing half-written survives beside the results.
A temporary sibling's name (`.NAME.tmp-*`, `.NAME.XXXXXXXX.tmp`) keeps within the filesystem's
NAME_MAX bytes whatever NAME's length (a long name is cut). Only a SIGKILL (or a power cut) leaves
one behind: a big one (a convert's folder, `temp_folder`) is listed in the home's ledger of
temporary paths while it exists, so `quantkit doctor` and `models ls` find it wherever it was
written (housekeeping.leftovers).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import UsageError

NAME_MAX = 255  # bytes in one file name: ext4, xfs, btrfs, tmpfs, overlayfs
_TEMP_TAIL = 16  # the most a temporary name adds after `.NAME.`: `tmp-` and 12 random, or 8 random and `.tmp`
LEDGER = "temporary"  # the home's folder of temporary paths in use: one small file each


def hidden_prefix(name: str, reserve: int = _TEMP_TAIL) -> str:
    """`.NAME.`, NAME cut (at a character) so that `reserve` more bytes keep the name within NAME_MAX."""
    room = NAME_MAX - reserve - 2
    cut = name.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    return f".{cut}."


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=hidden_prefix(path.name), suffix=".tmp", dir=path.parent)
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


def _ledger() -> Path:
    from .settings import home

    return home() / LEDGER


@contextlib.contextmanager
def listed_while_here(path: Path) -> Iterator[Path]:
    """`path` (a temporary folder, or a checkpoint moved aside) named in the ledger from before it
    is made until the block ends: a process killed inside the block leaves the entry, and
    housekeeping.leftovers lists the path while it exists and no live process owns it."""
    ledger = _ledger()
    ledger.mkdir(parents=True, exist_ok=True)
    entry = ledger / f"{os.getpid()}-{secrets.token_hex(4)}"
    atomic_write_text(entry, str(Path(path).absolute()) + "\n")
    try:
        yield path
    finally:
        entry.unlink(missing_ok=True)


def ledger_entries() -> list[tuple[int, Path]]:
    """(pid, path) of every entry in the ledger; an entry whose process ended and whose path is
    gone is dropped (it names nothing left). A pid taken again by another process keeps its
    path listed as in use until that process ends: a rare, harmless miss."""
    found = []
    ledger = _ledger()
    for entry in sorted(ledger.iterdir()) if ledger.is_dir() else []:
        pid_text = entry.name.partition("-")[0]
        try:
            pid, path = int(pid_text), Path(entry.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            continue  # another process's entry being written, or not one of ours
        if path.exists() or path.is_symlink() or pid_running(pid):
            found.append((pid, path))
        else:
            entry.unlink(missing_ok=True)
    return found


def pid_running(pid: int) -> bool:
    """Whether a process `pid` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def temp_folder(beside: Path) -> Iterator[Path]:
    """A new hidden folder beside `beside` (`.NAME.tmp-RANDOM`, on its filesystem: renamed into
    place at the end), listed in the ledger while it exists; removed at the end unless it was
    renamed away."""
    import shutil

    beside = Path(beside).absolute()
    beside.parent.mkdir(parents=True, exist_ok=True)
    tmp = beside.with_name(f"{hidden_prefix(beside.name)}tmp-{secrets.token_hex(6)}")
    with listed_while_here(tmp):
        tmp.mkdir()
        try:
            yield tmp
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _room(path: Path, option: str, given: Path) -> None:
    """`path` is a folder or can be made one: the nearest part of it that exists is a writable folder."""
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise UsageError(f"{option} {given}: {existing} is a file, so no folder can be made under it; give another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {given}: {existing} is not writable; give a path you can write to")


def _short_names(path: Path, option: str) -> None:
    long = next((part for part in path.parts if len(part.encode("utf-8")) > NAME_MAX), None)
    if long is not None:
        raise UsageError(f"{option} {path}: the name '{long[:40]}...' is longer than {NAME_MAX} bytes; choose a shorter one")


def output_folder(path: str | Path, option: str) -> Path:
    """A folder a command will write into, checked before any work: not a file, no file above
    it, no name longer than NAME_MAX bytes, and writable where it exists or will be made."""
    path = Path(path).expanduser()
    _short_names(path, option)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file, not a folder: this command writes several files into "
                         "a folder; give a folder (new or existing)")
    _room(path, option, path)
    return path


def output_file(path: str | Path, option: str) -> Path:
    """A file a command will write, checked before any work: not a folder, in a folder that is or
    can be made, no name longer than NAME_MAX bytes."""
    path = Path(path).expanduser()
    _short_names(path, option)
    if path.is_dir():
        raise UsageError(f"{option} {path} is a folder, not a file: give the file to write, e.g. {path / 'README.md'}")
    _room(path.parent, option, path)
    return path


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


# A plain name: one folder or file name that stays where it is put (a variant's label names
# models/<model>-<label>-<hash8>; a model's name, reports/<model>) and one word in a report or a
# card (nothing Markdown, HTML or a shell reads as markup).
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
PLAIN_NAME_RULE = "use letters, digits and . _ + - (no '/' or '\\', not starting with '.'), at most 100 characters"


def is_plain_name(value: Any) -> bool:
    return isinstance(value, str) and PLAIN_NAME.fullmatch(value) is not None


def is_path_name(value: Any) -> bool:
    """Whether `value` names one entry of a folder (a name with a separator, '.' or '..' names
    another folder: `reports/../../..` is not inside reports/)."""
    return isinstance(value, str) and value not in ("", ".", "..") and not any(c in value for c in "/\\\0")


def fmt_bytes(n: int | None, missing: str = "—") -> str:
    """A size as the report, the card and `models ls` write it (`64.14 MiB`); `missing` (the
    report's dash, report/text.DASH) for none. Here, not in report/, so that a command printing a
    size does not import the report."""
    if n is None:
        return missing
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
