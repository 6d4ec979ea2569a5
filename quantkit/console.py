"""Progress on stderr, data on stdout, library output in the run's log, errors as one line.

Every command goes through `run_command`: it calls one library function, prints its result as a
human table or as JSON (`--json`), and turns a QuantkitError (or Ctrl-C) into one line on stderr
and the exit code of docs/GUIDE.md. A traceback is shown only with QUANTKIT_DEBUG=1.

While a library works (llm-compressor, lm-eval, transformers, datasets), `library_output()` sends
everything written to file descriptors 1 and 2 (loguru, logging, tqdm bars, print, C code) to the
run's log file, `$QUANTKIT_HOME/logs/quantkit-<time>-<pid>.log`; quantkit's own progress keeps the
terminal. `-v/--verbose` (or QUANTKIT_VERBOSE=1) shows the libraries' lines as well. A failure
inside names the log file and its last relevant line.
"""

from __future__ import annotations

import contextlib
import json
import logging
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
from .secrets import mask_secrets, mask_text

def _width(stream) -> int | None:
    """A terminal's own width; piped output is not hard-wrapped (log paths, keys stay whole)."""
    try:
        return None if stream.isatty() else 4096
    except (AttributeError, ValueError):
        return 4096


stderr = Console(stderr=True, highlight=False, width=_width(sys.stderr))
stdout = Console(highlight=False, soft_wrap=True, width=_width(sys.stdout))


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
    with activity(message):
        if stderr.is_terminal:
            with stderr.status(message):
                yield
        else:
            info(f"{message} ...")
            yield
    info(f"{message}: done in {time.monotonic() - start:.1f} s")


# ----------------------------------------------------------------------------------------------
# Interrupts: say at once what is being stopped; name the partial results kept

_OWNER_PID = os.getpid()
_ACTIVE: dict[int, str] = {}  # what is running that an interrupt stops (a server, a step)
_PARTIAL: list[str] = []  # result files that keep what finished, named when a run is interrupted
_SIGNAL: list[int] = []  # the signal that interrupted us (SIGINT or SIGTERM), for the exit code


def begin_activity(what: str) -> int:
    """Something an interrupt stops (`the vLLM server for X`), named the moment Ctrl-C lands;
    returns the token that `end_activity` takes."""
    token = len(_ACTIVE) and max(_ACTIVE) + 1
    _ACTIVE[token] = what
    return token


def end_activity(token: int | None) -> None:
    if token is not None:
        _ACTIVE.pop(token, None)


@contextlib.contextmanager
def activity(what: str) -> Iterator[None]:
    token = begin_activity(what)
    try:
        yield
    finally:
        end_activity(token)


def partial_result(path: str | Path) -> None:
    """A file that keeps what finished so far; an interrupt's closing line names it."""
    if str(path) not in _PARTIAL:
        _PARTIAL.append(str(path))


def interrupt_handler(signum, frame) -> None:  # noqa: ARG001
    """SIGINT and SIGTERM: say what is being stopped, then unwind through the context managers
    that own it (servers, temporary folders) as KeyboardInterrupt. A second signal while they
    clean up is handled the same way (and kills what is left: see VLLMServer.stop)."""
    if os.getpid() != _OWNER_PID:
        # a worker forked later (lm-eval's bootstrap pool, a datasets map) inherits this handler;
        # there it stays a plain, quiet death instead of a KeyboardInterrupt traceback
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    first = not _SIGNAL
    _SIGNAL.append(signum)
    if first:
        name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        doing = "; ".join(reversed(list(_ACTIVE.values())))
        try:
            stderr.print(f"[bold red]{name}[/bold red]: stopping" + (f" {escape(doing)}" if doing else "") + " ...",
                         soft_wrap=True, highlight=False)
        except Exception:  # never let the message stop the clean-up
            pass
    raise KeyboardInterrupt


def redeliver_swallowed_interrupts() -> None:
    """Wrap sys.unraisablehook: a KeyboardInterrupt that `interrupt_handler` raised inside a finalizer
    (a weakref.finalize or GC callback, a __del__) is swallowed by Python ("Exception ignored in"),
    and the command would run on as if never signalled. The CI rehearsal of 12-07 saw it: Ctrl-C
    landed in urllib3's connection-pool finalizer, which lm-eval's one-stream client runs at every
    request, and the evaluation went on for two more minutes. The signal is sent again from a
    thread, so that it lands outside the finalizer."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if issubclass(unraisable.exc_type, KeyboardInterrupt) and _SIGNAL and os.getpid() == _OWNER_PID:
            threading.Timer(0.01, os.kill, (os.getpid(), _SIGNAL[0])).start()
            return
        previous(unraisable)

    sys.unraisablehook = hook


def interrupted_exit_code() -> int:
    """130 after Ctrl-C, 143 after SIGTERM (128 + the signal), as shells expect."""
    return 128 + (_SIGNAL[0] if _SIGNAL else signal.SIGINT)




def sigterm_as_interrupt(signum, frame) -> None:
    """Kept for callers that install a SIGTERM handler themselves (VLLMServer outside the CLI)."""
    interrupt_handler(signum, frame)


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
        from .files import prune

        folder = settings.home() / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        prune(folder, "quantkit-*.log", settings.keep_logs() - 1)
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
        # the pump owns its own copies of the log and the terminal: a child the library started
        # may hold the pipe open past the join below, and the pump must then never write to an
        # fd number this function has closed (it may already be someone else's pipe)
        pump = threading.Thread(target=_tee, args=(read_end, open(path, "ab", buffering=0), os.dup(saved_err)),
                                daemon=True)
        pump.start()
    else:
        target = log.fileno()
    os.dup2(target, 1)
    os.dup2(target, 2)
    stderr.file = terminal  # quantkit's progress lines
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            # the library's threads may go on logging while the interrupt unwinds (lm-eval's
            # "Session is closed ... retrying"): this process is ending, so they stay silent
            logging.disable(logging.CRITICAL)
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
    """Copy the library's output to the log and the terminal until every writer has closed it;
    closes what it was given."""
    try:
        with os.fdopen(read_end, "rb", buffering=0) as pipe, log:
            for chunk in iter(lambda: pipe.read(65536), b""):
                log.write(chunk)
                os.write(terminal_fd, chunk)
    finally:
        os.close(terminal_fd)


def to_jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def emit(result: Any, mode: OutputMode, human: Callable[[Any], None] | None = None) -> None:
    """Print a command's result: JSON for machines (secrets masked, as the store holds them), the
    human renderer otherwise."""
    if mode.quiet or result is None:
        return
    if mode.json:
        sys.stdout.write(json.dumps(mask_secrets(to_jsonable(result)), indent=2, sort_keys=False) + "\n")
        sys.stdout.flush()
    elif human is not None:
        human(result)
    else:
        stdout.print(json.dumps(mask_secrets(to_jsonable(result)), indent=2))


def fail(message: str, code: int, exc: BaseException | None = None, mode: OutputMode | None = None) -> None:
    """One line on stderr (and, with --json, `{"error", "exit_code"}` on stdout), then exit. The
    line never shows a secret (a `--url`'s password, a secret flag's value): it is masked here."""
    log = getattr(exc, "log_file", None)
    if log and log not in message:
        last = last_relevant_line(Path(log))
        message += f" (library log: {log}" + (f"; its last line: {last}" if last and last not in message else "") + ")"
    message = mask_text(message)
    if mode is not None and mode.json:
        payload: dict[str, Any] = {"error": message, "exit_code": code}
        if getattr(exc, "result", None) is not None:  # what was computed before the failure
            payload["result"] = mask_secrets(to_jsonable(exc.result))
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        sys.stdout.flush()
    stderr.print(f"[bold red]error:[/bold red] {escape(message)}", soft_wrap=True, highlight=False)
    raise SystemExit(code)


def os_error_line(exc: OSError) -> str:
    """An environment failure in one line: what, which path, what to do."""
    import errno

    where = f" {exc.filename}" if exc.filename else ""
    remedy = {
        errno.ENOSPC: "free some space or point QUANTKIT_HOME / the output option at another disk",
        errno.EACCES: "choose a folder you can write to (or fix its permissions)",
        errno.EPERM: "choose a folder you can write to (or fix its permissions)",
        errno.EROFS: "the file system is read-only: choose another folder",
        errno.ENOENT: "check that the path exists",
    }.get(exc.errno or 0, "check the path and the disk")
    what = exc.strerror or " ".join(str(exc).split())[:300] or type(exc).__name__
    return f"{what}:{where}; {remedy}"


def run_command(fn: Callable[[], Any], mode: OutputMode, human: Callable[[Any], None] | None = None) -> None:
    """Run one command body; map known failures to one line and an exit code."""
    try:
        result = fn()
    except QuantkitError as exc:
        if settings.debug():
            stderr.print_exception()
        fail(exc.one_line(), exc.exit_code, exc, mode)
    except KeyboardInterrupt:
        code = interrupted_exit_code()
        kept = f"; what finished is kept in {', '.join(_PARTIAL)} (the record says interrupted)" if _PARTIAL else ""
        line = f"interrupted: nothing finished after the last saved result{kept}"
        if mode.json:
            sys.stdout.write(json.dumps({"error": line, "exit_code": code}) + "\n")
        stderr.print(f"[bold red]interrupted[/bold red]: nothing finished after the last saved result{escape(kept)}",
                     soft_wrap=True, highlight=False)
        raise SystemExit(code)
    except OSError as exc:  # the environment: a full disk, an unwritable folder
        if settings.debug():
            stderr.print_exception()
        fail(os_error_line(exc), 1, exc, mode)
    except Exception as exc:  # an unexpected bug: still one line, traceback on demand
        if settings.debug():
            stderr.print_exception()
        fail(
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]} "
            "(set QUANTKIT_DEBUG=1 for the traceback)",
            1, exc, mode,
        )
    else:
        emit(result, mode, human)
