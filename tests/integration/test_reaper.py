"""A server's process group ends when quantkit does, SIGKILL included (serve/group.Reaper).

The fixture stands in for vLLM at the moment that matters: a group leader with a child (the API
server and its EngineCore) that catches SIGTERM and carries on, as a vLLM starting its engine did
on 12-06 (`quantkit bench` SIGKILLed: server and engine still up minutes later). Its owner is a
Python process that starts it the way VLLMServer does (own session, then a Reaper) and is then
SIGKILLed: nothing of quantkit's runs any more, so only the watchdog can end the group. The
processes are real; what they do on SIGTERM is the truth the test knows (a marker file).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fixtures.groups import group_gone, group_members
from quantkit.serve.group import Reaper

GRACE = 1.5

# The server stand-in, leader and engine alike (its own source is in $QK_STANDIN, so the leader can
# start the engine): on SIGTERM each writes MARK.<role>, then exits ("honour") or carries on ("ignore").
STANDIN = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    mark, mode, role = sys.argv[1], sys.argv[2], sys.argv[3]
    def on_term(*_):
        open(f"{mark}.{role}", "w").close()
        if mode != "ignore":
            os._exit(0)
    signal.signal(signal.SIGTERM, on_term)
    if role == "leader":  # the engine shares the leader's process group, as vLLM's EngineCore does
        subprocess.Popen([sys.executable, "-c", os.environ["QK_STANDIN"], mark, mode, "engine"])
    while True:
        time.sleep(0.1)
""")


def owner_code(grace: float, spawn_after: bool) -> str:
    """quantkit's part: the group in its own session, a Reaper, then (optionally) another child of
    its own that outlives it (a later subprocess must not hold the watchdog's pipe open)."""
    return textwrap.dedent(f"""
        import os, subprocess, sys, time
        from quantkit.serve.group import Reaper
        leader = subprocess.Popen([sys.executable, "-c", os.environ["QK_STANDIN"], sys.argv[1], sys.argv[2], "leader"],
                                  start_new_session=True)
        reaper = Reaper(leader.pid, grace={grace})
        if {spawn_after}:
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(leader.pid, flush=True)
        time.sleep(600)
    """)


def run_owner(tmp_path: Path, mode: str, spawn_after: bool = False):
    env = {**os.environ, "QK_STANDIN": STANDIN}
    owner = subprocess.Popen([sys.executable, "-c", owner_code(GRACE, spawn_after), str(tmp_path / "term"), mode],
                             stdout=subprocess.PIPE, text=True, env=env)
    pgid = int(owner.stdout.readline())
    deadline = time.monotonic() + 20
    while len(group_members(pgid)) < 2:  # leader and engine up
        assert time.monotonic() < deadline, "the stand-in server did not start its engine"
        time.sleep(0.05)
    time.sleep(0.3)  # both have installed their SIGTERM handlers
    return owner, pgid


def gone_within(pgid: int, seconds: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if group_gone(pgid):  # read as a user would (psutil), apart from the code under test
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def kill_owner(tmp_path: Path, mode: str, spawn_after: bool = False) -> float | None:
    """SIGKILL the owner; how long its server's group outlived it (None: still up after the grace + 10 s)."""
    owner, pgid = run_owner(tmp_path, mode, spawn_after)
    try:
        owner.kill()
        owner.wait()
        return gone_within(pgid, GRACE + 10)
    finally:
        if not group_gone(pgid):  # the test failed: leave nothing behind
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.parametrize("mode", ["honour", "ignore"])
def test_a_sigkilled_owner_leaves_no_server_behind(tmp_path, mode):
    took = kill_owner(tmp_path, mode)
    assert took is not None, "the server's group outlived its SIGKILLed owner"
    marks = sorted(p.name for p in tmp_path.glob("term.*"))
    # SIGTERM first, to both: a server that honours it is gone at once, one that ignores it at the grace's end
    assert marks == ["term.engine", "term.leader"], marks
    if mode == "honour":
        assert took < GRACE, f"a server that honours SIGTERM took {took:.1f} s"
    else:
        assert GRACE - 0.5 <= took < GRACE + 5, f"ended {took:.1f} s after its owner died, grace {GRACE} s"


def test_a_later_child_of_the_owner_does_not_keep_the_watchdog_waiting(tmp_path):
    took = kill_owner(tmp_path, "ignore", spawn_after=True)
    assert took is not None, "the watchdog never saw its owner die: a later child held its pipe open"


def test_release_after_a_normal_stop_ends_the_watchdog_with_nothing_to_do(tmp_path):
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    reaper = Reaper(leader.pid, grace=GRACE)
    os.killpg(leader.pid, signal.SIGTERM)  # the normal stop: quantkit ends the group itself
    leader.wait()
    started = time.monotonic()
    reaper.release()
    assert reaper.proc.returncode == 0 and time.monotonic() - started < 2
    reaper.release()  # idempotent
