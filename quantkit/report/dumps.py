"""How the report's models are written (report.json, `compare --json`): a field added after stores
were pinned is left out of a dump while it is None, so the reports of stores that hold none stay
byte-identical (tests/unit/test_output_pins.py)."""

from __future__ import annotations

from typing import Any

from pydantic import model_serializer


def written_when_set(*names: str) -> Any:
    """A model serializer (assign it in the class body) that drops `names` from a dump while None."""

    @model_serializer(mode="wrap")
    def dump(self, handler):
        data = handler(self)
        for name in names:
            if getattr(self, name) is None:
                data.pop(name, None)
        return data

    return dump
