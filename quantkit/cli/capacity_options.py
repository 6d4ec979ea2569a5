"""The capacity search's options, declared once: `bench --capacity` and `tune` take the same ones.

Each is a typer `Annotated` alias (as huggingface_hub's `hf` CLI declares its shared options) made
from the settings field it sets, in `CapacitySettings` or `WindowSettings`: the field's own check
refuses a bad value, and the help states the field's own bounds. A command line so accepts exactly
what a run recipe's `capacity:` accepts, and the two commands cannot drift apart again. Defaults
stay in the command signatures (typer takes none inside `Annotated`) and read CAPACITY_DEFAULTS,
the model's own.
"""

from __future__ import annotations

from typing import Annotated, Any, List, Optional

import typer
from pydantic import BaseModel, ValidationError

from ..measure.capacity import CapacitySettings
from ..measure.point import WindowSettings
from ..measure.profiles import CPU_WINDOW, GPU_WINDOW

CAPACITY_DEFAULTS = CapacitySettings()

# settings field -> the option that sets it: an error about the field names what the user typed
OPTION_OF_FIELD: dict[str, str] = {}

# pydantic keeps Field(gt=0, lt=4) as annotated_types.Gt(gt=0), Lt(lt=4): (attribute, symbol, words)
_LOWER = (("gt", "<", "greater than"), ("ge", "<=", "greater than or equal to"))
_UPPER = (("lt", "<", "less than"), ("le", "<=", "less than or equal to"))


def _bound(model: type[BaseModel], field: str, kinds: tuple) -> tuple[float, str, str] | None:
    for constraint in model.model_fields[field].metadata:
        for attribute, symbol, words in kinds:
            if getattr(constraint, attribute, None) is not None:
                return getattr(constraint, attribute), symbol, words
    return None


def allowed_range(model: type[BaseModel], field: str) -> tuple[str, str]:
    """A numeric field's bounds as typer's help writes a range and as words:
    (`0<x<4`, `greater than 0 and less than 4`); empty strings for a field without bounds."""
    lower, upper = _bound(model, field, _LOWER), _bound(model, field, _UPPER)
    words = " and ".join(f"{w} {v:g}" for v, _, w in (b for b in (lower, upper) if b))
    if lower and upper:
        return f"{lower[0]:g}{lower[1]}x{upper[1]}{upper[0]:g}", words
    if lower:  # one bound reads from x: x>0, x>=1
        return f"x{lower[1].replace('<', '>')}{lower[0]:g}", words
    if upper:
        return f"x{upper[1]}{upper[0]:g}", words
    return "", ""


def settings_option(model: type[BaseModel], field: str, *flags: str, help: str) -> Any:
    """A typer option for `model.field`: the model checks every value given, while the command line
    is parsed (a usage error before any server starts), and the help ends with the field's range.
    typer's own min/max cannot stand in: they are inclusive, and most of these bounds are not."""
    shown, words = allowed_range(model, field)

    def check(value: Any) -> Any:
        if value is None:  # not given: the machine's default applies later
            return value
        try:
            model.model_validate({field: value})
        except ValidationError as exc:
            problem = f"Input should be {words}" if words else exc.errors()[0]["msg"]
            given = f"{value:g}" if isinstance(value, (int, float)) else f"'{value}'"
            raise typer.BadParameter(f"{problem}, not {given}") from None
        return value

    OPTION_OF_FIELD[field] = flags[0]
    return typer.Option(*flags, callback=check, help=f"{help}  [{shown}]" if shown else help)


def num_prompts_option(help: str) -> Any:
    """`-n`: one bound, but two meanings (bench's fixed points are this size; a capacity search,
    bench's or tune's, caps its points at it), so each command words its own help."""
    return Annotated[Optional[int], settings_option(CapacitySettings, "max_requests", "--num-prompts", "-n", help=help)]


def _machine_default(field: str) -> str:
    return f"default {getattr(GPU_WINDOW, field):g} on GPUs, {getattr(CPU_WINDOW, field):g} on CPUs"


CapacityProfile = Annotated[str, settings_option(
    CapacitySettings, "profile", "--capacity-profile",
    help="Capacity search load: poisson (open-loop arrivals, req/s; default), concurrency (C staggered "
         "streams) or burst (waves of C prompts at once: a prefill burst, not a steady state).")]
Tolerance = Annotated[float, settings_option(
    CapacitySettings, "tolerance", "--tolerance", help="Capacity search: bracket the capacity to this share (0.1 = 10%).")]
CapacityStart = Annotated[float, settings_option(
    CapacitySettings, "start", "--capacity-start", help="Capacity search: the lowest load tried.")]
CapacityMax = Annotated[float, settings_option(
    CapacitySettings, "max", "--capacity-max", help="Capacity search: the highest load tried.")]
Waves = Annotated[float, settings_option(
    CapacitySettings, "waves", "--waves",
    help=f"Capacity search, burst profile: requests per point = waves x concurrency "
         f"(min {CAPACITY_DEFAULTS.min_requests}; -n caps it).")]
InputLen = Annotated[int, settings_option(CapacitySettings, "input_len", "--input-len", help="Prompt tokens (exact).")]
OutputLen = Annotated[int, settings_option(
    CapacitySettings, "output_len", "--output-len", help="Generated tokens per request (exact: ignore_eos).")]

# A steady-state point's window; an option not given keeps the machine's default for it
WindowMin = Annotated[Optional[float], settings_option(
    WindowSettings, "min_s", "--window-min",
    help=f"Capacity search: shortest measured window of a point, seconds ({_machine_default('min_s')}).")]
WindowMax = Annotated[Optional[float], settings_option(
    WindowSettings, "max_s", "--window-max",
    help=f"Capacity search: longest window; a point still undecided then is reported undecided "
         f"({_machine_default('max_s')}).")]
WindowWarmup = Annotated[Optional[float], settings_option(
    WindowSettings, "warmup_s", "--window-warmup",
    help=f"Capacity search: seconds of each point left out as warm-up (at least 1.5 request durations; "
         f"{_machine_default('warmup_s')}).")]
Confidence = Annotated[Optional[float], settings_option(
    WindowSettings, "confidence", "--confidence",
    help=f"Capacity search: confidence of a point's pass or fail verdict (default {WindowSettings().confidence:g}).")]
Span = Annotated[Optional[List[str]], typer.Option(
    "--span", help="Capacity search: also bracket this SLO or tier (mlperf-server, interactive) on the same ladder, "
                   "measuring only the loads it lacks; repeatable. `quantkit compare --slo` then answers it.")]
OPTION_OF_FIELD["span"] = "--span"
