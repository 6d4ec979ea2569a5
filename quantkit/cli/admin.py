"""`quantkit models ls|rm` (what quantkit left on disk) and `quantkit doctor` (what to fix)."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from ..console import run_command, stdout
from ..errors import QuantkitError
from . import app
from .. import numbers
from .options import Json, Quiet, mode, number_option

models_app = typer.Typer(help="Converted checkpoints on disk: list them, remove them with their records.",
                         no_args_is_help=True)
app.add_typer(models_app, name="models")


@models_app.command("ls")
def models_ls(json: Json = False, quiet: Quiet = False) -> None:
    """List checkpoints in the models folder or named by stored records: size, age, method, records."""
    from ..console import warn
    from ..housekeeping import leftovers, leftovers_line, list_checkpoints
    from ..report.render import fmt_bytes
    from ..store import Store

    def body():
        with Store() as store:
            rows = list_checkpoints(store)
        found = leftovers()
        if found:  # on stderr: the rows on stdout stay what they were
            warn(leftovers_line(found))
        return rows

    def human(rows):
        table = Table("checkpoint", "method", "size", "age (days)", "records", "model")
        for r in rows:
            table.add_row(r["path"] + ("" if r["exists"] else " (missing)"), r["method"] or "-", fmt_bytes(r["size_bytes"], missing="-"),
                          "-" if r["age_days"] is None else f"{r['age_days']:g}", str(r["records"]),
                          ", ".join(r["models"]) or "-")
        stdout.print(table)

    run_command(body, mode(json, quiet), human)


@models_app.command("rm")
def models_rm(
    checkpoint: str = typer.Argument(..., help="Checkpoint folder, or its name in the models folder."),
    keep_records: bool = typer.Option(False, "--keep-records", help="Delete only the folder; keep its store records (a run redoes the conversion)."),
    json: Json = False, quiet: Quiet = False,
) -> None:
    """Delete a converted checkpoint and the store records about it."""
    from ..housekeeping import remove_checkpoint
    from ..store import Store

    def body():
        with Store() as store:
            return remove_checkpoint(store, checkpoint, keep_records=keep_records)

    run_command(body, mode(json, quiet), lambda r: stdout.print(
        f"removed {r['path']}" + ("" if r["removed_folder"] else " (the folder was already gone)")
        + f" and {r['removed_records']} record(s)"))


@app.command()
def doctor(
    recipe: Optional[str] = typer.Option(None, "--recipe", help="Check the limits against this run recipe's concurrencies."),
    concurrency: int = number_option(numbers.Concurrency, "--concurrency", "-c", default=256, help="Concurrency to check the load-test limits against."),
    json: Json = False, quiet: Quiet = False,
) -> None:
    """Check the environments, data, store, disk and load-test limits; say what to fix (exit 1 on a failure)."""
    from ..doctor import run_checks

    def body():
        checks = [c.__dict__ for c in run_checks(concurrency, recipe)]
        failed = [c for c in checks if c["status"] == "fail"]
        if failed:
            _print(checks) if not json else None
            error = QuantkitError(f"{len(failed)} check(s) failed: " + "; ".join(f"{c['name']}: {c['detail']}" for c in failed))
            error.result = checks
            raise error
        return checks

    def _print(checks):
        table = Table("check", "status", "detail")
        for c in checks:
            table.add_row(c["name"], c["status"], c["detail"])
        stdout.print(table)

    run_command(body, mode(json, quiet), _print)
