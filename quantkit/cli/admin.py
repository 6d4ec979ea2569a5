"""`quantkit models ls|rm` (what quantkit left on disk), `quantkit doctor` (what to fix) and
`quantkit bundle` (the environments packed for a machine with no network)."""

from __future__ import annotations

from pathlib import Path
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
    from ..files import fmt_bytes
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


@app.command()
def bundle(
    out: Path = typer.Argument(..., help="Folder to write the bundle into (emptied first if it holds an earlier bundle)."),
    accel: str = typer.Option("cuda", "--accel", help="Which lock files to pack: cuda (requirements/*-cuda.txt) or cpu."),
    python: str = typer.Option("3.12", "--python", help="The target's Python release (MAJOR.MINOR)."),
    platform: str = typer.Option("manylinux_2_31_x86_64", "--platform", help="The target's platform tag (manylinux_2_N_ARCH: glibc 2.N or newer)."),
    chunk_mb: Optional[float] = typer.Option(None, "--chunk-mb", help="Cut the bundle into folders of at most this many MB (10^6 bytes) each, one per transfer."),
    exclude: str = typer.Option("", "--exclude", help="Packages the target has, left out: comma-separated names or patterns (torch,nvidia-*,triton)."),
    host_has: Optional[Path] = typer.Option(None, "--host-has", help="A `pip freeze` of the target: the pins it lists are left out."),
    requirements: list[str] = typer.Option([], "--requirements", help="ENV=FILE: another lock file for env main or vllm (repeatable)."),
    find_links: list[str] = typer.Option([], "--find-links", help="Also take wheels from this folder (passed to pip; repeatable)."),
    no_index: bool = typer.Option(False, "--no-index", help="Take wheels only from --find-links folders, not the package index."),
    no_quantkit: bool = typer.Option(False, "--no-quantkit", help="Leave quantkit itself out (the target runs it from a checkout)."),
    json: Json = False, quiet: Quiet = False,
) -> None:
    """Pack both environments' wheels for another machine with no network, with an install script (docs/GPU.md)."""
    from .. import bundle as bundling
    from ..errors import UsageError

    def body():
        reqs = {}
        for item in requirements:
            env, sep, file = item.partition("=")
            if not sep:
                raise UsageError(f"--requirements {item}: give ENV=FILE, e.g. main=requirements/main-cuda.txt")
            reqs[env] = Path(file)
        pip_index = [arg for d in find_links for arg in ("--find-links", d)] + (["--no-index"] if no_index else [])
        manifest = bundling.build(out, accel=accel, python=python, platform=platform, chunk_mb=chunk_mb,
                                  exclude=exclude.split(","), host_has=host_has, requirements=reqs,
                                  with_quantkit=not no_quantkit, pip_index=pip_index)
        return {"folder": str(out), "wheels": len(manifest["wheels"]), "bytes": manifest["bytes"],
                "left_out": len(manifest["left_out"]), "chunks": [c["folder"] for c in manifest["chunks"]]}

    def human(r):
        where = (f"{len(r['chunks'])} chunk folders ({r['chunks'][0]} .. {r['chunks'][-1]})" if r["chunks"] else "wheels/")
        stdout.print(f"{r['folder']}: {r['wheels']} wheels, {r['bytes'] / 1e6:.0f} MB in {where}; {r['left_out']} "
                     f"pins left out (the target has them). On the target: bash {r['folder']}/"
                     + ("chunk-NN/install.sh for each chunk" if r["chunks"] else "install.sh"), soft_wrap=True)

    run_command(body, mode(json, quiet), human)
