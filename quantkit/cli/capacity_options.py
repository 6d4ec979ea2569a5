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
from pydantic import BaseModel

from ..measure.capacity.settings import CapacitySettings
from ..measure.stats.point import WindowSettings
from ..measure.capacity.profiles import CPU_WINDOW, GPU_WINDOW, PROFILES
from ..measure.stats.tiers import TIERS
from ..numbers import allowed, field_constraints
from .options import checked_option

CAPACITY_DEFAULTS = CapacitySettings()

# settings field -> the option that sets it: an error about the field names what the user typed
OPTION_OF_FIELD: dict[str, str] = {}


def allowed_range(model: type[BaseModel], field: str) -> tuple[str, str]:
    """A numeric field's bounds as typer's help writes a range and as words:
    (`0<x<4`, `greater than 0 and less than 4`); empty strings for a field without bounds."""
    return allowed(field_constraints(model.model_fields[field]))


def settings_option(model: type[BaseModel], field: str, *flags: str, help: str) -> Any:
    """A typer option for `model.field`: the model checks every value given, while the command line
    is parsed (a usage error before any server starts), and the help ends with the field's range.
    typer's own min/max cannot stand in: they are inclusive, most of these bounds are not, and
    they take nan (no comparison refuses it)."""
    shown, _ = allowed_range(model, field)

    def validate(value: Any) -> Any:
        model.model_validate({field: value})
        return value

    OPTION_OF_FIELD[field] = flags[0]
    return checked_option(validate, field_constraints(model.model_fields[field]), *flags,
                          help=f"{help}  [{shown}]" if shown else help)


def num_prompts_option(help: str) -> Any:
    """`-n`: one bound, but two meanings (bench's fixed points are this size; a capacity search,
    bench's or tune's, caps its points at it), so each command words its own help."""
    return Annotated[Optional[int], settings_option(CapacitySettings, "max_requests", "--num-prompts", "-n", help=help)]


def _machine_default(field: str) -> str:
    return f"default {getattr(GPU_WINDOW, field):g} on GPUs, {getattr(CPU_WINDOW, field):g} on CPUs"


CapacityProfile = Annotated[str, settings_option(
    CapacitySettings, "profile", "--capacity-profile",
    help="Capacity search load: " + "; ".join(
        f"{p.name} ({p.describe}" + (", the default)" if p.name == CapacitySettings().profile else ")")
        for p in PROFILES.values()) + ".")]
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
    "--span", help=f"Capacity search: also bracket this SLO or tier ({', '.join(TIERS)}) on the same ladder, "
                   "measuring only the loads it lacks; repeatable. `quantkit compare --slo` then answers it.")]
OPTION_OF_FIELD["span"] = "--span"
