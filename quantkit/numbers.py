"""Numbers a user gives quantkit: one rule per kind of quantity, finite and in range.

A number enters by many doors (a typed option, a comma list such as `-c 1,4,16`, a `--slo`,
`--space` or `--gate` term, a run recipe's field), and each door once took whatever Python's
`float()` and `int()` take: `nan`, `inf`, `1e309` (inf), `1e-300`, `-1`, a 20-digit count. Such
a value failed late (a raw exception after vLLM started), never ended (a rate of 1e-300 req/s),
or was stored as a `NaN` that is not JSON. Every door now checks its value against one of the
kinds below (pydantic types: a model's field declares one; `check` and `parse` apply one to a
value or to text), so every spelling of a bad value is one usage line (exit 2) before anything
starts, and the command line and a recipe accept the same values.

The bounds are generous limits on what one run can do, not tuning advice:
- MIN_RATE: a Poisson rate below 0.1 req/s (one request per 10 s) makes a point of the default 8
  requests take minutes to send, and a rate such as 1e-300 never ends.
- MAX_LOAD: concurrent streams or requests per second of one load point (each stream holds two
  sockets; one client machine drives thousands, not hundreds of thousands).
- MAX_COUNT: requests, items, trials, rounds: a point, a task or a study a run can finish.
- MAX_TOKENS: prompt, output and context lengths (2^24, above the longest context served today).
- MAX_SECONDS: a timeout or a window of one day.
- MAX_SEED: seeds reach numpy (optuna's samplers), which takes 32-bit ones.
"""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from .errors import UsageError

MIN_RATE = 0.1
MAX_LOAD = 100_000
MAX_COUNT = 1_000_000
MAX_TOKENS = 1 << 24
MAX_SECONDS = 86_400.0
MAX_SEED = 2**32 - 1

# The kinds. A float kind is finite (pydantic's allow_inf_nan=False): nan, inf and 1e309 are refused.
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # a bandwidth, a price, a recovery
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
Rate = Annotated[float, Field(ge=MIN_RATE, le=MAX_LOAD, allow_inf_nan=False)]  # requests/s (a load)
Concurrency = Annotated[int, Field(ge=1, le=MAX_LOAD)]
Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]
CountOrZero = Annotated[int, Field(ge=0, le=MAX_COUNT)]  # warm-up requests, few-shot examples
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]

_ADAPTERS: dict[Any, TypeAdapter] = {}
# pydantic's constraint attributes, with the words and symbols a message and a help range use
_LOWER = (("gt", "<", "greater than"), ("ge", "<=", "greater than or equal to"))
_UPPER = (("lt", "<", "less than"), ("le", "<=", "less than or equal to"))


def _bound(metadata: list, kinds: tuple) -> tuple[float, str, str] | None:
    for constraint in metadata:
        for attribute, symbol, words in kinds:
            if getattr(constraint, attribute, None) is not None:
                return getattr(constraint, attribute), symbol, words
    return None


def shown(value: Any) -> str:
    """A number as a message or a help range writes it: whole numbers whole (4294967295, not
    4.29497e+09), others as %g; text quoted as typed."""
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:g}"


def allowed(metadata: list) -> tuple[str, str]:
    """The bounds in a field's (or a kind's) metadata as a help range and as words:
    (`0<x<4`, `greater than 0 and less than 4`); empty strings where there are none."""
    lower, upper = _bound(metadata, _LOWER), _bound(metadata, _UPPER)
    words = " and ".join(f"{w} {shown(v)}" for v, _, w in (b for b in (lower, upper) if b))
    if lower and upper:
        return f"{shown(lower[0])}{lower[1]}x{upper[1]}{shown(upper[0])}", words
    if lower:  # one bound reads from x: x>0, x>=1
        return f"x{lower[1].replace('<', '>')}{shown(lower[0])}", words
    if upper:
        return f"x{upper[1]}{shown(upper[0])}", words
    return "", ""


def metadata_of(kind: Any) -> list:
    """A kind's constraints (Ge, Le, ...), as a model field declared with it holds them; an
    optional kind's (`Count | None`), whose constraints pydantic leaves inside the annotation."""
    if get_origin(kind) in (Union, UnionType):
        return next((found for arg in get_args(kind) if (found := metadata_of(arg))), [])
    return [c for item in getattr(kind, "__metadata__", ()) for c in getattr(item, "metadata", [item])]


def field_constraints(field: FieldInfo) -> list:
    """A model field's constraints, wherever pydantic keeps them (the field, or an optional kind)."""
    return list(field.metadata) or metadata_of(field.annotation)


def base_type(annotation: Any) -> Any:
    """`int` of `Count`, `Count | None` or `int | None`: the type a command-line parser converts to."""
    args = [a for a in get_args(annotation) if a is not type(None)] if get_origin(annotation) in (Union, UnionType) else [annotation]
    kind = args[0] if len(args) == 1 else annotation
    return get_args(kind)[0] if get_origin(kind) is Annotated else kind


def problem(exc: ValidationError, metadata: list) -> str:
    """pydantic's first complaint as a user reads it: `Input should be greater than 0 and less
    than 4` (both bounds, whichever was broken), `Input should be a finite number`."""
    error = exc.errors()[0]
    words = allowed(metadata)[1]
    bound_broken = error["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
    return f"Input should be {words}" if words and bound_broken else error["msg"]


def adapter(kind: Any) -> TypeAdapter:
    """The validator of `kind`, built once."""
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def check(kind: Any, value: Any, name: str) -> Any:
    """`value` (a number, or text as a user typed it) as `kind` holds it, or a UsageError:
    `bad NAME 'TEXT': Input should be ...`."""
    try:
        return adapter(kind).validate_python(value.strip() if isinstance(value, str) else value)
    except ValidationError as exc:
        raise UsageError(f"bad {name} {shown(value)}: {problem(exc, metadata_of(kind))}") from None


def parse_list(text: str | None, kind: Any, name: str, example: str = "1,4,16") -> list | None:
    """`1,4,16` -> [1, 4, 16], each item a `kind`; an empty item (`1,,4`) is an error."""
    if text is None:
        return None
    items = [x.strip() for x in text.split(",")]
    if any(x == "" for x in items):
        raise UsageError(f"bad {name} '{text}': expected comma-separated numbers like {example}")
    return [check(kind, item, f"{name} value") for item in items]
