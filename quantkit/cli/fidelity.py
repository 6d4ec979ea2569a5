"""`quantkit fidelity`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from .. import numbers
from ..console import emit, run_command, stdout
from ..errors import QuantkitError, UsageError, validation_as_usage_error
from . import app
from .options import Json, Quiet, ServingOptions, mode, number_option, serving_options

# FidelityGates field -> the option that sets it
GATE_OPTION_OF_FIELD = {"max_delta_nll": "--max-delta-nll", "min_top1": "--min-top1"}
# The figures' rows, in the table's order, with what each is
FIGURE_ROWS = (
    ("kl_lower", "KL lower bound (nats/token)"),
    ("kl_union", "KL on the top-k union (approx.)"),
    ("top1_agreement", "top-1 agreement"),
    ("delta_nll", "ΔNLL (nats/token)"),
)


@app.command("fidelity")
@serving_options
def fidelity_command(
    variant: Path = typer.Argument(..., help="The quantized checkpoint folder (the record is stored under it)."),
    baseline: str = typer.Option(..., "--baseline", help="The baseline checkpoint folder, or smollm2-135m; its tokenizer cuts the windows."),
    windows: int = number_option(numbers.Count, "--windows", default=64, help="Token windows in all, split evenly over --sources."),
    sources: str = typer.Option("wikitext2,c4", "--sources", help="Texts, comma-separated: wikitext2 (test pages), c4 (documents calibration never read), task:NAME (an evaluation task's prompts with their gold answers, e.g. task:arc_easy)."),
    window_len: int = number_option(numbers.Tokens, "--window-len", default=256, help="Tokens per window, each one scored."),
    k: int = typer.Option(20, "--k", help="Log-probabilities per position from each server (1 to 20, vLLM's default --max-logprobs)."),
    url: Optional[str] = typer.Option(None, "--url", help="Use this running server for VARIANT instead of starting vLLM on it."),
    baseline_url: Optional[str] = typer.Option(None, "--baseline-url", help="Use this running server for the baseline instead of starting vLLM on it."),
    concurrency: int = number_option(numbers.Concurrency, "--concurrency", default=8, help="Windows scored at a time."),
    max_delta_nll: float = typer.Option(0.05, "--max-delta-nll", help="Gate: ΔNLL's upper bound at most this (nats/token; exit 3 above it, 4 when the interval straddles it)."),
    min_top1: float = typer.Option(0.85, "--min-top1", help="Gate: top-1 agreement's lower bound at least this."),
    no_gate: bool = typer.Option(False, "--no-gate", help="Only measure: no gate, exit 0."),
    json: Json = False,
    quiet: Quiet = False,
    serve: ServingOptions = None,
) -> None:
    """Compare VARIANT's next-token distributions with the baseline's on the same token windows
    (both served by vLLM, one at a time); store them per window; gate on ΔNLL and top-1 agreement."""
    out_mode = mode(json, quiet)

    def body() -> dict[str, Any]:
        from ..fidelity import gate as gate_mod
        from ..fidelity.result import FidelitySettings
        from ..fidelity.run import FIDELITY_SERVE_DEFAULTS, measure

        with validation_as_usage_error("fidelity gate", GATE_OPTION_OF_FIELD):
            gates = None if no_gate else gate_mod.FidelityGates(max_delta_nll=max_delta_nll, min_top1=min_top1)
        with validation_as_usage_error("fidelity setting", {"k": "--k", "windows": "--windows", "window_len": "--window-len"}):
            settings = FidelitySettings(windows=windows, window_len=window_len, k=k,
                                        sources=tuple(x.strip() for x in sources.split(",") if x.strip()))
        if not settings.sources:
            raise UsageError("--sources names no text: give e.g. wikitext2,c4 or task:arc_easy")
        from ..fidelity.documents import source_path

        for source in settings.sources:  # an unknown source or a missing file: one line, before any server
            source_path(source)
        result = measure(variant, baseline, settings=settings, gates=gates, url=url, baseline_url=baseline_url,
                         serve=serve.config(**FIDELITY_SERVE_DEFAULTS), concurrency=concurrency)
        data = result.model_dump(mode="json")
        try:
            gate_mod.raise_for_verdicts(result.verdicts)
        except QuantkitError as exc:  # the table, then the one line and exit 3 or 4 (--json: the result under "result")
            if out_mode.json:
                exc.result = data
            else:
                emit(data, out_mode, _print_result)
            raise
        return data

    run_command(body, out_mode, _print_result)


def _print_result(result: dict[str, Any]) -> None:
    level = f"{result['confidence']:.0%} interval"
    table = Table("figure", "value", level, title=f"{Path(result['variant_dir']).name} vs {Path(result['baseline_dir']).name}",
                  title_justify="left")
    for name, label in FIGURE_ROWS:
        f = result["figures"][name]
        interval = "-" if f["low"] is None else f"[{f['low']:.4f}, {f['high']:.4f}]"
        table.add_row(label, f"{f['value']:.4f}", interval)
    stdout.print(table)
    stdout.print(f"{result['windows']} windows of {result['settings']['window_len']} tokens from {result['documents']} "
                 f"documents ({result['tokens']} tokens, top-{result['settings']['k']}; {result['reused_windows']} read "
                 f"from the store); {result['method']}")
    stdout.print("KL lower bound: never above the true KL; the union figure approximates it; top-1 and ΔNLL are exact.")
    colour = {"pass": "green", "fail": "red", "inconclusive": "yellow"}
    from ..fidelity.gate import FidelityVerdict

    for v in result["verdicts"]:
        c = colour[v["verdict"]]
        stdout.print(f"gate {v['gate']}: [{c}]{v['verdict']}[/{c}]: {FidelityVerdict.model_validate(v).describe()}",
                     soft_wrap=True)
    stdout.print(f"record: {result['run_key'][:10]}")
