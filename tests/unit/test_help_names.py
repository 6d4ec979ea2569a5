"""Five option help texts list a registry's names by hand (with a word on each, which a registry
does not hold): each must name every entry, or a user never learns of the one added last."""

import typing

import pytest
import typer

from quantkit.cli import app
from quantkit.measure import profiles, tiers
from quantkit.recipe import ExecutorSettings
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
