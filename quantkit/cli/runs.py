"""`quantkit runs ls|show|import|rm`: the result store."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from ..console import run_command, stdout
from . import app
from .options import Json, Quiet, mode

runs_app = typer.Typer(help="The result store: list, show, import and remove stored runs.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")


@runs_app.command("ls")
def runs_ls(model: Optional[str] = typer.Option(None, "--model", "-m", help="Only this model's records."),
            kind: Optional[str] = typer.Option(None, "--kind", help="Only this stage: convert, bench, eval or tune."),
            status: Optional[str] = typer.Option(None, "--status", help="Only this status: done, failed, interrupted, running or missing."),
            json: Json = False, quiet: Quiet = False) -> None:
    """List stored records (a converted checkpoint whose folder is gone shows as missing)."""
    from ..store import Store

    def body():
        with Store() as store:
            rows = [r.summary() for r in store.records(model=model, kind=kind,
                                                       status=None if status == "missing" else status)]
        return [r for r in rows if status is None or r["status"] == status]

    def human(rows):
        whole = not stdout.is_terminal  # piped: whole keys and errors, for the next program
        table = Table("key", "model", "variant", "stage", "status", "finished", "error")
        for r in rows:
            table.add_row(r["run_key"] if whole else r["run_key"][:10], r["model"], r["variant"], r["kind"],
                          r["status"], r["finished_at"] or "", (r["error"] or "") if whole else (r["error"] or "")[:60])
        stdout.print(table)

    run_command(body, mode(json, quiet), human)


@runs_app.command("show")
def runs_show(key: str = typer.Argument(..., help="Run key or prefix."), json: Json = False, quiet: Quiet = False) -> None:
    """Show one stored record with its parameters and result."""
    from ..store import Store

    def body():
        with Store() as store:
            record = store.get(key)
            return {**record.summary(), "params": record.params, "result": record.result,
                    "points": store.points(record.id)}

    run_command(body, mode(json, quiet))


@runs_app.command("import")
def runs_import(files: List[Path] = typer.Argument(..., help="JSON files `quantkit bench --json` or `quantkit eval` wrote."),
                model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name to store under (default: from the file)."),
                variant: Optional[str] = typer.Option(None, "--variant", help="Variant label (default: the checkpoint's method, or baseline)."),
                json: Json = False, quiet: Quiet = False) -> None:
    """Store standalone bench/eval results so that `quantkit compare` reports them."""
    from ..errors import UsageError
    from ..store import Store
    from ..store import import_result

    def body():
        if variant and len(files) > 1:
            raise UsageError("--variant labels one result; import the files one at a time")
        with Store() as store:
            return [import_result(store, f, model=model, variant=variant) for f in files]

    def human(rows):
        for r in rows:
            what = "imported" if r["imported"] else "already stored"
            stdout.print(f"{what}: {r['kind']} {r['model']} / {r['variant']} ({r['run_key'][:10]}) from {r['file']}")

    run_command(body, mode(json, quiet), human)


@runs_app.command("rm")
def runs_rm(key: str = typer.Argument(..., help="Run key or prefix."),
            force: bool = typer.Option(False, "--force", help="Remove it even while a live run is running it (that run's stage then fails, saying so)."),
            json: Json = False, quiet: Quiet = False) -> None:
    """Remove stored records (all attempts of a key); the next `quantkit run` redoes them. A record a
    live run is running is refused without --force."""
    from ..store import Store

    def body():
        with Store() as store:
            return {"removed": store.remove(key, force=force)}

    run_command(body, mode(json, quiet), lambda r: stdout.print(f"removed {r['removed']} record(s)"))
