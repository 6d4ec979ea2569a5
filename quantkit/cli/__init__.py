"""The typer app. Each command module parses its options, calls one library function and prints.

Command modules register themselves on `app` when imported below; a module owns its commands.
Heavy imports are inside the commands: building the app imports typer, rich and the pydantic
settings the options are made from, and `quantkit --help` starts in about 0.5 s.
"""

from __future__ import annotations

import os
import signal
import sys

import typer

from .. import __version__
from ..console import interrupt_handler, redeliver_swallowed_interrupts
from ..errors import QuantkitError

app = typer.Typer(
    name="quantkit",
    help="Quantize LLMs (AWQ, GPTQ, INT8, FP8), serve them in vLLM, measure speed and accuracy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain help: whole option names at any width, flags without a `<bool>` placeholder
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"quantkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show the libraries' own output (llm-compressor, lm-eval, ...) as well; it always goes to the run's log."),
) -> None:
    if verbose:
        os.environ["QUANTKIT_VERBOSE"] = "1"  # subprocesses and library_output() read it


# Command modules (each adds its commands to `app`).
from . import convert  # noqa: E402,F401
from . import serving  # noqa: E402,F401
from . import eval as _eval  # noqa: E402,F401
from . import run as _run  # noqa: E402,F401
from . import runs as _runs  # noqa: E402,F401
from . import push as _push  # noqa: E402,F401
from . import admin as _admin  # noqa: E402,F401
from . import fidelity as _fidelity  # noqa: E402,F401


_STACK_STREAM = None


def _stacks_on_sigusr1() -> None:
    """`kill -USR1 <pid>` prints every thread's stack to the terminal, and the run goes on: the
    way to see where a long run (or a stuck one) is. A copy of fd 2 is kept for it because a
    library call routes fd 2 to the run's log while it runs."""
    global _STACK_STREAM
    import faulthandler

    if hasattr(signal, "SIGUSR1") and _STACK_STREAM is None:
        _STACK_STREAM = os.fdopen(os.dup(2), "w")
        faulthandler.register(signal.SIGUSR1, file=_STACK_STREAM, all_threads=True)


def _refused(exc: typer.TyperException) -> int:
    """What the command line's parser refused, as one line and its exit code (2 for a usage
    error). Typer vendors click since 0.26 and exports only the base of its parser's errors,
    `typer.TyperException` (the `click` package's classes are others, and no dependency of
    typer), so they are told apart by what they carry: a usage error its command's context, and
    a group called with no arguments that context's help as its message (typer's
    `no_args_is_help`), which is printed as `--help` would."""
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and exc.format_message() == ctx.get_help():
        print(exc.format_message())
        return 0
    message = " ".join(exc.format_message().split()).rstrip(".")
    hint = f"; see `{ctx.command_path if ctx is not None else 'quantkit'} --help`" if exc.exit_code == 2 else ""
    sys.stderr.write(f"error: {message}{hint}\n")
    return exc.exit_code


def main() -> None:
    """The console script: signals take the clean-up path; usage errors are one line (exit 2)."""
    signal.signal(signal.SIGTERM, interrupt_handler)
    signal.signal(signal.SIGINT, interrupt_handler)
    redeliver_swallowed_interrupts()
    _stacks_on_sigusr1()
    try:
        from ..machine import imitate_in_process

        imitate_in_process()  # QUANTKIT_CPU_ISA: before anything imports torch
    except QuantkitError as exc:
        sys.stderr.write(f"error: {exc.one_line()}\n")
        sys.exit(exc.exit_code)
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as exc:
        code = _refused(exc)
    except typer.Abort:
        sys.stderr.write("interrupted\n")
        code = 130
    except KeyboardInterrupt:  # an interrupt outside a command body (while importing, parsing)
        from ..console import interrupted_exit_code

        sys.stderr.write("interrupted\n")
        code = interrupted_exit_code()
    # The command is over (its record written, its servers stopped): a Ctrl-C from here on has
    # nothing to interrupt, and would only end the process by SIGINT in place of its exit code.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code if isinstance(code, int) else 0)
