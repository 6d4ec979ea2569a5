"""serve/group.group_alive: a group whose only member is a zombie has ended.

Where PID 1 does not reap (CI's container), vLLM's orphaned EngineCore stays a zombie, and a
teardown that trusted `killpg(pgid, 0)` spent its grace period and SIGKILL loop on it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quantkit.serve.group import group_alive, killpg

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_a_running_group_is_alive_and_a_zombie_group_is_not():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert group_alive(proc.pid)
        killpg(proc.pid, 9)
        deadline = time.monotonic() + 10
        while _state(proc.pid) != "Z" and time.monotonic() < deadline:  # ended, not reaped: we do not wait()
            time.sleep(0.02)
        assert _state(proc.pid) == "Z"
        os.killpg(proc.pid, 0)  # the kernel still answers for the zombie ...
        assert not group_alive(proc.pid)  # ... but nothing in the group runs
    finally:
        proc.kill()
        proc.wait()
    assert not group_alive(proc.pid)
    killpg(proc.pid, 15)  # a group that is gone is no error
