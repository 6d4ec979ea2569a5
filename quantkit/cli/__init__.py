"""The typer app. Each command module parses its options, calls one library function and prints.

Command modules register themselves on `app` when imported below; a module owns its commands.
"""

from __future__ import annotations

import os
import signal
import sys

import typer

from .. import __version__
from ..console import sigterm_as_interrupt

app = typer.Typer(
    name="quantkit",
    help="Quantize LLMs (AWQ, GPTQ, INT8, FP8), serve them in vLLM, measure speed and accuracy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


def main() -> None:
    signal.signal(signal.SIGTERM, sigterm_as_interrupt)
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
