"""The exceptions quantkit raises on purpose, each mapped to one line and an exit code.

Exit codes (docs/GUIDE.md, "Conventions"): 0 ok, 1 failure, 2 usage (bad input the user can fix), 3 a gate failed,
4 a gate is inconclusive (its confidence interval straddles the threshold: more items decide it;
a failed gate elsewhere in the same run takes precedence, 3).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Mapping


class QuantkitError(Exception):
    """An error whose message is a complete, one-line explanation for the user."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.result = None  # what was computed before the failure (--json prints it with the error)

    def one_line(self) -> str:
        text = " ".join(self.message.split())
        return f"{text}; {self.hint}" if self.hint else text


class UsageError(QuantkitError):
    """Bad input: a path that does not exist, an unknown method, a malformed recipe."""

    exit_code = 2


class SetupError(QuantkitError):
    """An environment or backend that is missing or misconfigured."""

    exit_code = 1


class BackendError(QuantkitError):
    """The quantizer, vLLM or lm-eval failed while doing its work."""

    exit_code = 1


class GateFailed(QuantkitError):
    exit_code = 3


class GateInconclusive(QuantkitError):
    """A gate neither passed nor failed: the interval holds the threshold (never a validation)."""

    exit_code = 4


def did_you_mean(word: str, choices: list[str]) -> str:
    """`unknown X 'foo'` helper: the closest choice, or the list when nothing is close."""
    import difflib

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    listing = ", ".join(sorted(choices))
    if close:
        return f"did you mean '{close[0]}'? (choices: {listing})"
    return f"choices: {listing}"


@contextlib.contextmanager
def validation_as_usage_error(what: str, option_of: Mapping[str, str] | None = None) -> Iterator[None]:
    """Settings built from command-line values: a pydantic ValidationError raised inside becomes
    one UsageError line about its first problem, `bad OPTION: PROBLEM` where `option_of` maps the
    field to the option that sets it (the user typed the option, not the field), else
    `bad WHAT FIELD: PROBLEM`. A recipe file's errors point at file:line instead (recipe._explain)."""
    try:
        yield
    except ValueError as exc:  # pydantic's ValidationError is a ValueError, as a validator's own is
        raise UsageError(_first_problem(exc, what, option_of or {})) from None


def _first_problem(exc: ValueError, what: str, option_of: Mapping[str, str]) -> str:
    errors = exc.errors() if callable(getattr(exc, "errors", None)) else []
    if not errors:  # a plain ValueError: its own text, on one line
        return f"bad {what}: {' '.join(str(exc).split())}"
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ())]
    option = option_of.get(loc[0]) if loc else None
    where = " ".join([option, *loc[1:]]) if option else " ".join([what, ".".join(loc)]).rstrip()
    return f"bad {where}: {first.get('msg', exc)}"
