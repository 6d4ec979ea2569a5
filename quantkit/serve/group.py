"""A server's process group: signal it, tell whether anything in it still runs, and make sure it
ends when quantkit does, however quantkit ends (`Reaper`).

A zombie (dead, not yet reaped) is not running. It matters where PID 1 does not reap: in a
container whose init is not a real init, an EngineCore orphaned by its API server stays a zombie
for good, `killpg(pgid, 0)` keeps succeeding on it, and a teardown that trusted it waited its whole
grace period and SIGKILL loop for a process that had already ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
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


# The watchdog's whole program: it blocks on its stdin, the read end of a pipe whose only write end
# quantkit holds. EOF means quantkit closed it (its server is stopped) or died, SIGKILL included;
# then whatever is left of the group gets SIGTERM, the grace period, and SIGKILL. Self-contained
# (`python -I -c`): it imports nothing of quantkit's and starts in milliseconds.
_WATCHDOG = """
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
sys.stdin.buffer.read()
def alive():
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
if alive():
    os.killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and alive():
        time.sleep(0.2)
    for _ in range(25):  # zombies answer killpg(0) until someone reaps them: do not loop for ever
        if not alive():
            break
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.2)
"""


class Reaper:
    """A watchdog process that ends process group `pgid` once quantkit is gone.

    PR_SET_PDEATHSIG alone is not enough: it sends the group's leader (vLLM's API server) SIGTERM,
    and a vLLM still starting its engine catches that and carries on (12-06: a `quantkit bench`
    SIGKILLed while its engine started left the server and engine running, a further SIGTERM
    ignored too). The watchdog runs in its own session, so a signal to quantkit's terminal group
    does not reach it, and it escalates to SIGKILL for the whole group. `release()` after a normal
    stop lets it exit with nothing to do."""

    def __init__(self, pgid: int, grace: float = 15.0):
        read, self._write = os.pipe()  # non-inheritable: no later child of quantkit holds the write end
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-c", _WATCHDOG, str(pgid), str(grace)], stdin=read,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            os.close(self._write)
            raise
        finally:
            os.close(read)

    def release(self, wait: float = 5.0) -> None:
        """The group has been stopped (or is being stopped by the caller): let the watchdog finish. Idempotent."""
        if self._write is not None:
            os.close(self._write)
            self._write = None
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass  # it is still ending the group: it exits by itself
