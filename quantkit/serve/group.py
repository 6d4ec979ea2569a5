"""A server's process group: signal it, and tell whether anything in it still runs.

A zombie (dead, not yet reaped) is not running. It matters where PID 1 does not reap: in a
container whose init is not a real init, an EngineCore orphaned by its API server stays a zombie
for good, `killpg(pgid, 0)` keeps succeeding on it, and a teardown that trusted it waited its whole
grace period and SIGKILL loop for a process that had already ended.
"""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")


def killpg(pgid: int, sig: int) -> None:
    """Send `sig` to the group; a group that is gone, or not ours to signal, is no error."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not _PROC.is_dir():
        return True  # no /proc: the kernel's answer is all there is
    return any(state != "Z" for state in _member_states(pgid))


def _member_states(pgid: int):
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended while we looked
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so split at the last ")"
        fields = stat.rpartition(")")[2].split()
        if len(fields) >= 3 and fields[2] == str(pgid):
            yield fields[0]
