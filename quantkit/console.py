"""Progress on stderr, data on stdout, library output in the run's log, errors as one line.

Every command goes through `run_command`: it calls one library function, prints its result as a
human table or as JSON (`--json`), and turns a QuantkitError (or Ctrl-C) into one line on stderr
and the exit code of DESIGN.md. A traceback is shown only with QUANTKIT_DEBUG=1.

While a library works (llm-compressor, lm-eval, transformers, datasets), `library_output()` sends
everything written to file descriptors 1 and 2 (loguru, logging, tqdm bars, print, C code) to the
run's log file, `$QUANTKIT_HOME/logs/quantkit-<time>-<pid>.log`; quantkit's own progress keeps the
terminal. `-v/--verbose` (or QUANTKIT_VERBOSE=1) shows the libraries' lines as well. A failure
inside names the log file and its last relevant line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.markup import escape

from . import settings
from .errors import QuantkitError

stderr = Console(stderr=True, highlight=False)
stdout = Console(highlight=False, soft_wrap=True)


@dataclass
class OutputMode:
    json: bool = False
    quiet: bool = False


def info(message: str) -> None:
    """A progress line on stderr (never on stdout, which carries data). The message is plain text:
    a `[variant]` prefix or a path with brackets is printed as it is, not read as rich markup."""
    stderr.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {escape(message)}")


def warn(message: str) -> None:
    stderr.print(f"[yellow]warning:[/yellow] {escape(message)}")


@contextlib.contextmanager
def step(message: str) -> Iterator[None]:
    """A spinner on stderr for a long step, then the step's wall time."""
    start = time.monotonic()
    if stderr.is_terminal:
        with stderr.status(message):
            yield
    else:
        info(f"{message} ...")
        yield
    info(f"{message}: done in {time.monotonic() - start:.1f} s")


_OWNER_PID = os.getpid()


def sigterm_as_interrupt(signum, frame) -> None:  # noqa: ARG001
    """SIGTERM takes Ctrl-C's clean-up path: temporary folders are removed and child processes
    (vLLM servers) are stopped by the context managers that own them.

    A worker forked later (lm-eval's bootstrap pool, a datasets map) inherits this handler and
    is ended by its parent with SIGTERM; there it stays a plain, quiet death instead of a
    KeyboardInterrupt traceback printed from inside the library.
    """
    if os.getpid() != _OWNER_PID:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise KeyboardInterrupt


# ----------------------------------------------------------------------------------------------
# Library output: to the run's log, not the terminal

_LOG: Path | None = None
_CAPTURING = threading.Lock()
# tqdm redraws, blank lines and bare progress are not "the last relevant line" of a failure
_NOT_RELEVANT = re.compile(r"^\s*$|\d+%\|.*\||^\s*\d+it \[")


def verbose() -> bool:
    return os.environ.get("QUANTKIT_VERBOSE", "") not in ("", "0", "false")


def log_path() -> Path:
    """This process's log file (created on first use)."""
    global _LOG
    if _LOG is None:
        folder = settings.home() / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        _LOG = folder / f"quantkit-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    return _LOG


def last_relevant_line(path: Path) -> str | None:
    try:
        lines = path.read_text(errors="replace").replace("\r", "\n").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if not _NOT_RELEVANT.search(line):
            return " ".join(line.split())[:300]
    return None


@contextlib.contextmanager
def library_output(what: str) -> Iterator[None]:
    """Route fd 1 and fd 2 to the run's log while `what` (a library) runs; quantkit's own console
    keeps the terminal. Re-entrant: an inner call inside an outer one does nothing more."""
    if not _CAPTURING.acquire(blocking=False):
        yield
        return
    path = log_path()
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_err), "w", buffering=1, encoding="utf-8", errors="replace")
    log = open(path, "ab", buffering=0)
    log.write(f"\n===== {datetime.now().isoformat(timespec='seconds')} {what} =====\n".encode())
    pump = None
    if verbose():
        read_end, write_end = os.pipe()
        target = write_end
        pump = threading.Thread(target=_tee, args=(read_end, log, saved_err), daemon=True)
        pump.start()
    else:
        target = log.fileno()
    os.dup2(target, 1)
    os.dup2(target, 2)
    stderr.file = terminal  # quantkit's progress lines
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, Exception) and getattr(exc, "log_file", None) is None:
            try:
                exc.log_file = str(path)  # run_command names it in the one-line error
            except AttributeError:
                pass
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        if pump is not None:
            os.close(target)
            pump.join(timeout=5)
        os.close(saved_out)
        os.close(saved_err)
        stderr.file = None  # back to sys.stderr
        terminal.close()
        log.close()
        _CAPTURING.release()


def _tee(read_end: int, log, terminal_fd: int) -> None:
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        for chunk in iter(lambda: pipe.read(65536), b""):
            log.write(chunk)
            os.write(terminal_fd, chunk)


def to_jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def emit(result: Any, mode: OutputMode, human: Callable[[Any], None] | None = None) -> None:
    """Print a command's result: JSON for machines, the human renderer otherwise."""
    if mode.quiet or result is None:
        return
    if mode.json:
        sys.stdout.write(json.dumps(to_jsonable(result), indent=2, sort_keys=False) + "\n")
        sys.stdout.flush()
    elif human is not None:
        human(result)
    else:
        stdout.print(json.dumps(to_jsonable(result), indent=2))


def fail(message: str, code: int, exc: BaseException | None = None) -> None:
    log = getattr(exc, "log_file", None)
    if log and log not in message:
        last = last_relevant_line(Path(log))
        message += f" (library log: {log}" + (f"; its last line: {last}" if last and last not in message else "") + ")"
    stderr.print(f"[bold red]error:[/bold red] {escape(message)}", soft_wrap=True, highlight=False)
    raise SystemExit(code)


def run_command(fn: Callable[[], Any], mode: OutputMode, human: Callable[[Any], None] | None = None) -> None:
    """Run one command body; map known failures to one line and an exit code."""
    try:
        result = fn()
    except QuantkitError as exc:
        if settings.debug():
            stderr.print_exception()
        fail(exc.one_line(), exc.exit_code, exc)
    except KeyboardInterrupt:
        stderr.print("[bold red]interrupted[/bold red]: nothing finished after the last saved result")
        raise SystemExit(130)
    except Exception as exc:  # an unexpected bug: still one line, traceback on demand
        if settings.debug():
            stderr.print_exception()
        fail(
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]} "
            "(set QUANTKIT_DEBUG=1 for the traceback)",
            1, exc,
        )
    else:
        emit(result, mode, human)
