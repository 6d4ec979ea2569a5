"""Options shared by several commands."""

from __future__ import annotations

import typer

from ..console import OutputMode

JSON = typer.Option(False, "--json", help="Print the result as JSON on stdout.")
QUIET = typer.Option(False, "--quiet", "-q", help="Print nothing on success (exit code only).")


def mode(json: bool, quiet: bool) -> OutputMode:
    return OutputMode(json=json, quiet=quiet)
