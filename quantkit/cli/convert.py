"""`quantkit convert`, `quantkit recipes`, `quantkit setup`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..console import run_command, stdout
from ..methods import METHODS
from ..registry import BACKENDS
from . import app
from .options import Json, Quiet, mode


@app.command()
def convert(
    model: str = typer.Argument(..., help="Checkpoint dir, .gguf file, Hub id, or built-in alias (smollm2-135m)."),
    method: Optional[str] = typer.Option(None, "--method", "-m", help=f"One of: {', '.join(METHODS.names())}."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Output folder (default: models/<model>-<method>)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", "-r", help="Built-in recipe name or YAML file."),
    num_samples: Optional[int] = typer.Option(None, "--num-samples", help="Calibration samples."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Tokens per calibration sample."),
    calib: Optional[str] = typer.Option(None, "--calib", help="Calibration set: c4, a .jsonl/.txt/.parquet file, or a Hub id."),
    ignore: Optional[str] = typer.Option(None, "--ignore", help="Comma-separated layers left unquantized (default lm_head)."),
    group_size: Optional[int] = typer.Option(None, "--group-size", help="Preferred group size for grouped schemes."),
    backend: Optional[str] = typer.Option(None, "--backend", help="Quantization backend (default llmcompressor)."),
    kv_cache: Optional[str] = typer.Option(None, "--kv-cache", help="Add a calibrated KV cache: fp8 (per-layer K/V scales, used by vLLM with --kv-cache-dtype fp8; any method, calibrates even a data-free one)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output folder."),
    verify: bool = typer.Option(False, "--verify", help="Then load the output in vLLM and generate a few tokens."),
    json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Quantize MODEL with a method or recipe; writes the checkpoint and DIR/quantkit.json."""
    from ..quantize import convert as do_convert

    overrides = {
        "num_samples": num_samples,
        "seq_len": seq_len,
        "calib": calib,
        "ignore": [x.strip() for x in ignore.split(",") if x.strip()] if ignore is not None else None,
        "group_size": group_size,
        "backend": backend,
        "kv_cache": _kv_cache(kv_cache),
    }
    def body():
        if kv_cache is None:  # a calibrated KV cache calibrates any method: the flags then apply
            _refuse_calibration_flags(method, recipe, {"--num-samples": num_samples, "--seq-len": seq_len, "--calib": calib})
        return do_convert(model, method, output, recipe, overrides, force, verify)

    run_command(body, mode(json, quiet), _print_record)


def _kv_cache(value: str | None) -> str | None:
    if value is None or value.strip().lower() == "fp8":
        return value and "fp8"
    from ..errors import UsageError

    raise UsageError(f"--kv-cache {value}: the calibrated KV cache quantkit makes is fp8 (--kv-cache fp8)")


def _refuse_calibration_flags(method: str | None, recipe: str | None, flags: dict[str, object]) -> None:
    """Calibration flags on a data-free method are refused, not ignored (recipe.refuse_calibration,
    the rule a run recipe's variants follow too)."""
    from ..quantize import recipe as recipes

    given = [flag for flag, value in flags.items() if value is not None]
    if not given or (method is None and recipe is None):
        return  # nothing to refuse, or plan() says what is missing
    chosen = recipes.load(recipe) if recipe else recipes.for_method(method)  # type: ignore[arg-type]
    if method is not None and recipe is not None and recipes.check_method(method) != chosen.method:
        return  # plan() reports the contradiction itself
    recipes.refuse_calibration(chosen, given, "--kv-cache fp8")


def _print_record(record) -> None:
    from ..checkpoint import ConvertRecord
    from ..report import records
    from ..files import fmt_bytes

    table = Table(show_header=False, box=None, pad_edge=False)
    record = records.read(ConvertRecord, record)  # its recipe, calibration and vLLM check as models
    calib, kv_cache = record.calibration, record.recipe.kv_cache if record.recipe is not None else None
    rows = [
        ("output", record.output_dir),
        ("method", f"{record.method} ({record.scheme}" + (f", group {record.group_size}" if record.group_size else "")
         + (f", calibrated {kv_cache} KV cache)" if kv_cache else ")")),
        ("backend", f"{record.backend} {record.versions.get(record.backend, '')}".strip()),  # package -> version
        ("recipe", f"{record.recipe_name} ({record.recipe_hash})"),
        ("source", f"{record.source.ref} {record.source.fingerprint[:19]}"),
        ("calibration", f"{calib.num_samples} x {calib.seq_len} tokens from {calib.dataset}" if calib else "none"),
        ("size", fmt_bytes(record.size_bytes)),
        ("wall time", f"{record.wall_time_s:.1f} s (quantizer {record.quantize_time_s:.1f} s)"),
        ("peak RSS", f"{record.peak_rss_mb:.0f} MB"),
    ]
    if check := record.vllm_check:
        rows.append(("vLLM", f"loads and generates (vLLM {check.vllm}, {check.load_s} s to load)"
                     if check.ok else f"does not load: {check.error}"))
    for key, value in rows:
        table.add_row(f"[bold]{key}[/bold]", str(value))
    stdout.print(table)


@app.command("recipes")
def list_recipes(json: Json = False, quiet: Quiet = False) -> None:
    """List the built-in recipes."""
    from ..quantize import recipe as recipes

    def body():
        return [
            {"name": r.name, "method": r.method, "backend": r.backend, "scheme": r.scheme,
             "group_size": r.group_size, "calibrated": r.needs_calibration, "description": r.description}
            for r in (recipes.load(name) for name in recipes.builtin_names())
        ]

    def human(rows):
        table = Table("name", "method", "backend", "scheme", "group", "calibrated", "description")
        for r in rows:
            table.add_row(r["name"], r["method"], r["backend"], r["scheme"], str(r["group_size"] or "-"),
                          "yes" if r["calibrated"] else "no", r["description"])
        stdout.print(table)

    run_command(body, mode(json, quiet), human)


@app.command()
def setup(
    backend: str = typer.Option(..., "--backend", help="Backend to set up in its own environment ("
                                 + ", ".join(n for n in BACKENDS.names() if n != "llmcompressor") + ")."),
    json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Create the environment of a quantization backend that cannot share quantkit's (.venv-NAME)."""
    from ..quantize.external import setup_backend

    run_command(lambda: {"backend": backend, "python": str(setup_backend(backend))}, mode(json, quiet),
                lambda r: stdout.print(f"{r['backend']} ready: {r['python']}"))
