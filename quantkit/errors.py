"""The exceptions quantkit raises on purpose, each mapped to one line and an exit code.

Exit codes (DESIGN.md): 0 ok, 1 failure, 2 usage (bad input the user can fix), 3 a gate failed.
"""

from __future__ import annotations


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


def did_you_mean(word: str, choices: list[str]) -> str:
    """`unknown X 'foo'` helper: the closest choice, or the list when nothing is close."""
    import difflib

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    listing = ", ".join(sorted(choices))
    if close:
        return f"did you mean '{close[0]}'? (choices: {listing})"
    return f"choices: {listing}"
