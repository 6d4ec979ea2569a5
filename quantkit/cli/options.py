"""Options shared by several commands: one spelling, one help text, one validation each.

- `Json`, `Quiet`: the output mode of every command.
- `@serving_options`: the vLLM serving knobs (the same flags on serve, bench, tune and eval; the
  same names as a run recipe's `serve:` keys and `--serve-arg NAME=VALUE`), one flag per
  serve/config.ServeConfig field, its help the field's description. The command receives
  them as one `serve: ServingOptions` argument and builds the ServeConfig inside its body, so a bad
  value is a one-line usage error like any other.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Optional

import typer
from pydantic import Field, ValidationError

from ..console import OutputMode
from ..numbers import MAX_SECONDS, adapter, allowed, metadata_of, problem, shown
from ..serve.config import BOOL_KNOBS, KNOBS, ServeConfig, knob_type

Json = Annotated[bool, typer.Option("--json", help="Print the result (or the error) as JSON on stdout.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success (exit code only).")]

PANEL = "vLLM serving options"


def checked_option(validate: Callable[[Any], Any], metadata: list, *flags: str, help: str, **kwargs: Any) -> Any:
    """A typer option whose value `validate` (a pydantic check) accepts or refuses while the command
    line is parsed: a refusal is one line naming the option and its range (exit 2), before
    anything starts. `metadata`: the constraints the message words (numbers.allowed)."""
    def check(value: Any) -> Any:
        if value is None:  # not given: a default applies later
            return value
        try:
            validate(value)
        except ValidationError as exc:
            raise typer.BadParameter(f"{problem(exc, metadata)}, not {shown(value)}") from None
        return value

    if "default" in kwargs:  # a parameter's default (an `Annotated` alias takes none: typer's rule)
        return typer.Option(kwargs.pop("default"), *flags, callback=check, help=help, **kwargs)
    return typer.Option(*flags, callback=check, help=help, **kwargs)


def number_option(kind: Any, *flags: str, help: str, **kwargs: Any) -> Any:
    """A typer option that takes a `kind` of number (numbers.py: finite, in its range); its help
    ends with the range."""
    shown, _ = allowed(metadata_of(kind))
    return checked_option(adapter(kind).validate_python, metadata_of(kind), *flags, help=f"{help}  [{shown}]" if shown else help, **kwargs)


# Numbers and ports are checked where they are parsed: a bad value is a usage error (exit 2)
# before anything starts.
Port = Annotated[Optional[int], typer.Option("--port", min=1, max=65535, help="Port for the server (default: a free one).")]
StartupTimeout = Annotated[float, number_option(
    Annotated[float, Field(ge=1.0, le=MAX_SECONDS, allow_inf_nan=False)], "--startup-timeout",
    envvar="QUANTKIT_STARTUP_TIMEOUT", help="Seconds to wait for the server to become ready (default 600; QUANTKIT_STARTUP_TIMEOUT).")]


def mode(json: bool, quiet: bool) -> OutputMode:
    return OutputMode(json=json, quiet=quiet)


def _opt(*names: str, help: str, default: Any = None) -> Any:
    return typer.Option(default, *names, help=help, rich_help_panel=PANEL)


def _knob_option(name: str) -> tuple[Any, Any]:
    """A ServeConfig knob as a flag: its name with dashes (a bool: `--x/--no-x`), its field's
    description as help, its field's default (a bool's is None, not given: a command's own
    default, eval's eager start, applies then)."""
    field = ServeConfig.model_fields[name]
    flag = "--" + name.replace("_", "-")
    if name in BOOL_KNOBS:
        return Optional[bool], _opt(f"{flag}/--no-{flag[2:]}", help=field.description)
    return Optional[knob_type(name)], _opt(flag, help=field.description, default=field.default)


def _knob_options() -> dict[str, tuple[Any, Any]]:
    return {**{name: _knob_option(name) for name in KNOBS},
            "serve_arg": (Optional[list[str]], _opt("--serve-arg", "--serve", help="Any other `vllm serve` flag as NAME=VALUE (or NAME); repeatable."))}


# name -> (type, option): the ServeConfig knobs as command-line flags, in its fields' order
KNOB_OPTIONS: dict[str, tuple[Any, Any]] = _knob_options()


@dataclass
class ServingOptions:
    """The serving flags as given (None = not given)."""

    values: dict[str, Any]

    def config(self, **defaults: Any):
        """The ServeConfig these flags make; `defaults` fill knobs the user did not set (eval's
        server starts eager unless told otherwise)."""
        knobs = {k: v for k, v in self.values.items() if k != "serve_arg"}
        return ServeConfig.from_options(self.values.get("serve_arg") or [], defaults=defaults, **knobs)

    def given(self) -> bool:
        """Any flag set away from its default (they do not apply to --url)."""
        return any(v not in (None, [], KNOB_OPTIONS[k][1].default) for k, v in self.values.items())


def serving_options(fn: Callable) -> Callable:
    """Give command `fn` the shared serving flags; it receives them as `serve: ServingOptions`."""
    sig = inspect.signature(fn, eval_str=True)
    params = [p for p in sig.parameters.values() if p.name != "serve"]
    knobs = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
             for name, (kind, option) in KNOB_OPTIONS.items()]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["serve"] = ServingOptions({name: kwargs.pop(name) for name in KNOB_OPTIONS})
        return fn(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params + knobs)
    wrapper.__annotations__ = {p.name: p.annotation for p in params + knobs}
    return wrapper
