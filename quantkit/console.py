"""Progress on stderr, data on stdout, errors mapped to one line and an exit code.

Every command goes through `run_command`: it calls one library function, prints its result as a
human table or as JSON (`--json`), and turns a QuantkitError (or Ctrl-C) into one line on stderr
and the exit code of DESIGN.md. A traceback is shown only with QUANTKIT_DEBUG=1.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from rich.console import Console

from . import settings
from .errors import QuantkitError

stderr = Console(stderr=True, highlight=False)
stdout = Console(highlight=False, soft_wrap=True)


@dataclass
class OutputMode:
    json: bool = False
    quiet: bool = False


def info(message: str) -> None:
    """A progress line on stderr (never on stdout, which carries data)."""
    stderr.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}")


def warn(message: str) -> None:
    stderr.print(f"[yellow]warning:[/yellow] {message}")


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


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (fd 1) to stderr while a library runs.

    llm-compressor logs to stdout through loguru (which keeps its own reference to the original
    stream) and tqdm/C code may too; stdout must carry only the command's data (`--json`), so
    the redirection is done on the file descriptor, not on sys.stdout.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


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


def fail(message: str, code: int) -> None:
    stderr.print(f"[bold red]error:[/bold red] {message}", soft_wrap=True)
    raise SystemExit(code)


def run_command(fn: Callable[[], Any], mode: OutputMode, human: Callable[[Any], None] | None = None) -> None:
    """Run one command body; map known failures to one line and an exit code."""
    try:
        result = fn()
    except QuantkitError as exc:
        if settings.debug():
            stderr.print_exception()
        fail(exc.one_line(), exc.exit_code)
    except KeyboardInterrupt:
        stderr.print("[bold red]interrupted[/bold red]: nothing finished after the last saved result")
        raise SystemExit(130)
    except Exception as exc:  # an unexpected bug: still one line, traceback on demand
        if settings.debug():
            stderr.print_exception()
        fail(
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]} "
            "(set QUANTKIT_DEBUG=1 for the traceback)",
            1,
        )
    else:
        emit(result, mode, human)
