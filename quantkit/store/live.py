"""Whether the process that began a `running` record is still alive.

A record left `running` is either a live run's (another `quantkit run` of the same recipe on the
same home) or a killed run's. Only the second may be marked `interrupted` and redone: doing that
to a live run's record repeats its stages beside it, writing into the same folders. A pid alone
cannot tell them apart (a pid is reused, and a pid of another host means nothing here), so a
record carries its host and its process's start time (Linux: /proc/PID/stat field 22, in clock
ticks since boot; elsewhere none, and the pid is trusted alone).
"""

from __future__ import annotations

import os
import socket


def host() -> str:
    return socket.gethostname()


def start_time(pid: int) -> str | None:
    """The process's start time as the kernel reports it; None when unknown or not running."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields after its last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def identity() -> tuple[int, str, str | None]:
    """(pid, host, start time) of this process, as a record stores them."""
    pid = os.getpid()
    return pid, host(), start_time(pid)


def alive(pid: int | None, on_host: str | None, started: str | None) -> bool:
    """True when the record's process still runs on this host. A record of another host (or one
    written before records named their host) cannot be checked here: False, as before."""
    if not pid or on_host is None or on_host != host():
        return False
    if pid == os.getpid():
        return False  # this process beginning its own key again: its earlier attempt ended
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    if started is not None:
        now = start_time(pid)
        if now is not None and now != started:
            return False  # the pid was reused by a process started later
    return True
