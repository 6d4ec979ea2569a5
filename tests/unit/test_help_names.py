"""Five option help texts list a registry's names, generated from the registry (profiles, tiers,
backends, executors): each names every entry, so a user learns of the one added last."""

import typing

import pytest
import typer

from quantkit.cli import app
from quantkit.measure.capacity import profiles
from quantkit.measure.stats import tiers
from quantkit.pipeline.recipe import ExecutorSettings
from quantkit.registry import BACKENDS


def option_help(command: str, flag: str) -> str:
    group = typer.main.get_command(app)
    cmd = group.commands[command]
    (param,) = [p for p in cmd.params if flag in p.opts]
    return param.help


@pytest.mark.parametrize("command, flag, names", [
    ("bench", "--capacity-profile", list(profiles.PROFILES)),
    ("bench", "--span", list(tiers.TIERS)),
    ("compare", "--slo", list(tiers.TIERS)),
    ("setup", "--backend", [n for n in BACKENDS.names() if n != "llmcompressor"]),  # the main one needs none
    ("run", "--executor", list(typing.get_args(ExecutorSettings.model_fields["kind"].annotation))),
])
def test_a_help_text_that_lists_names_lists_them_all(command, flag, names):
    text = option_help(command, flag)
    missing = [n for n in names if n not in text]
    assert names and not missing, f"quantkit {command} {flag}'s help does not name {missing}: {text}"


def test_the_hand_written_table_of_builders_names_every_method():
    """The llm-compressor backend's table of builders is prose: it must name every method it builds (a
    newcomer's added method was missing from it). The user guide's data-free list, the other such list,
    is checked by scripts/check_docs.py, outside pytest."""
    import re

    from quantkit.methods import METHODS
    from quantkit.quantize import llmcompressor

    table = llmcompressor.__doc__
    missing = [m.name for m in METHODS if "llmcompressor" in m.backends and not re.search(rf"[\s,]{re.escape(m.name)}\b", table)]
    assert not missing, f"quantize/llmcompressor.py's docstring names no builder for {missing}"
