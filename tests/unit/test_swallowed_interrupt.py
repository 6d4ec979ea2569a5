"""A signal whose KeyboardInterrupt lands in a finalizer is swallowed by Python ("Exception ignored
in"); quantkit sends it again so the command stops (console.redeliver_swallowed_interrupts). The CI
rehearsal of 12-07 saw Ctrl-C land in urllib3's pool finalizer and lm-eval run on for 2 minutes."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import os, signal, sys, time, weakref
from quantkit import console

signal.signal(signal.SIGINT, console.interrupt_handler)
if sys.argv[1] == "redeliver":
    console.redeliver_swallowed_interrupts()

class Pool:
    pass

pool = Pool()
# the signal arrives while the finalizer runs: its KeyboardInterrupt is raised there, and swallowed
weakref.finalize(pool, lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.5)))
try:
    del pool
    for _ in range(30):
        time.sleep(0.1)
    print("ran on")
except KeyboardInterrupt:
    print("stopped")
"""


@pytest.mark.parametrize("mode,expected", [("plain", "ran on"), ("redeliver", "stopped")])
def test_an_interrupt_swallowed_by_a_finalizer_is_sent_again(mode, expected):
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == expected, (out.stdout, out.stderr)
    assert "Ctrl-C" in out.stderr  # the handler ran, and said so once
    if mode == "redeliver":
        assert "Exception ignored" not in out.stderr and out.stderr.count("Ctrl-C") == 1
