"""`python -m quantkit` ends an interrupted command with exit code 130, never by SIGINT (-2), and a
command line its parser refuses with one line and exit code 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import quantkit


def test_python_m_exits_130_even_after_a_keyboardinterrupt_escaped_a_string_exec(tmp_path):
    # CPython (3.11) under `python -m` ends the process by SIGINT when a KeyboardInterrupt once
    # escaped exec() of a source string, even if caught. Set that flag at start-up, then make the
    # command end the way an interrupted one does (SystemExit(130) from quantkit's handler).
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import os, signal, threading
        import quantkit.cli

        def interrupted():
            threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            try:
                exec("while True: pass")
            except KeyboardInterrupt:
                pass
            raise SystemExit(130)

        quantkit.cli.main = interrupted
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    # SIGINT as a terminal delivers it: a test run started in the background (CI's `.ci/run &`)
    # passes SIGINT on ignored, and a child that ignores it would loop in the exec forever
    proc = subprocess.run([sys.executable, "-m", "quantkit"], env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr


def _quantkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quantkit", *args], capture_output=True, text=True, timeout=120)


def test_the_parser_s_refusals_through_typer_s_public_errors():
    # typer vendors click: its parser raises typer.TyperException subclasses, not click's
    for group in ([], ["runs"]):  # no arguments: the group's help, exit 0
        proc = _quantkit(*group)
        assert proc.returncode == 0 and proc.stdout.startswith("Usage: ") and proc.stderr == "", proc.stderr
        assert "Commands" in proc.stdout
    proc = _quantkit("benhc")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "error: No such command 'benhc'. Did you mean 'bench'?; see `python -m quantkit --help`\n"
    proc = _quantkit("bench")
    assert (proc.returncode, proc.stderr) == (2, "error: Missing argument 'model_dir'; see `python -m quantkit bench --help`\n")


def test_no_module_imports_typer_s_private_click():
    sources = Path(quantkit.__file__).parent.rglob("*.py")
    assert [p.name for p in sources if "typer._click" in p.read_text()] == []
