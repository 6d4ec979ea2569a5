"""`bench --capacity` and `tune` share one declaration of the capacity options: the same range as
the settings model (CapacitySettings, WindowSettings), the same one-line refusal, in both helps.
No server starts: every command here ends at option parsing or at the missing model folder."""

from __future__ import annotations

import math
import subprocess
import sys
import typing

import pytest
import typer
from pydantic import BaseModel, ValidationError

from quantkit.cli import capacity_options as opts
from quantkit.cli.serving import BenchNumPrompts, TuneNumPrompts
from quantkit.cli.eval import parse_gates
from quantkit.errors import UsageError, validation_as_usage_error
from quantkit.measure.capacity.live import CapacitySettings
from quantkit.measure.stats.point import WindowSettings
from quantkit.numbers import base_type, field_constraints

MISSING = "/nonexistent/quantkit-model"
# both commands reach the capacity settings with these (bench only searches with --capacity)
COMMANDS = {"bench": ["bench", MISSING, "--capacity", "--slo", "ttft_p95=1"],
            "tune": ["tune", MISSING, "--slo", "ttft_p95=1"]}


def quantkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quantkit", *args], capture_output=True, text=True, timeout=120)


def check_of(alias) -> typing.Callable:
    return typing.get_args(alias)[1].callback  # the typer.Option inside the Annotated alias


# alias, the model and field it must set: listed here, not read from the module, so a miswired alias fails
ALIASES = [
    (opts.Tolerance, CapacitySettings, "tolerance"),
    (opts.CapacityStart, CapacitySettings, "start"),
    (opts.CapacityMax, CapacitySettings, "max"),
    (opts.Waves, CapacitySettings, "waves"),
    (opts.InputLen, CapacitySettings, "input_len"),
    (opts.OutputLen, CapacitySettings, "output_len"),
    (opts.WindowMin, WindowSettings, "min_s"),
    (opts.WindowMax, WindowSettings, "max_s"),
    (opts.WindowWarmup, WindowSettings, "warmup_s"),
    (opts.Confidence, WindowSettings, "confidence"),
    (BenchNumPrompts, CapacitySettings, "max_requests"),
    (TuneNumPrompts, CapacitySettings, "max_requests"),
]


def model_accepts(model: type[BaseModel], field: str, value) -> bool:
    try:
        model.model_validate({field: value})
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("alias, model, field", ALIASES, ids=[f for _, _, f in ALIASES])
def test_every_option_accepts_exactly_what_its_settings_field_accepts(alias, model, field):
    check = check_of(alias)
    is_int = base_type(model.model_fields[field].annotation) is int
    near = [1, 0.5] if not is_int else [1]
    values = {-1, 0, 0.001, 0.5, 0.51, 0.999, 1, 3.99, 4, 1024, 1e300, 10**20, math.inf, math.nan}
    for constraint in field_constraints(model.model_fields[field]):
        for bound in (getattr(constraint, a, None) for a in ("gt", "ge", "lt", "le")):
            if bound is not None:
                values |= {bound, *(bound + d for d in near), *(bound - d for d in near)}
    for value in values:
        if is_int and not (math.isfinite(value) and value == int(value)):
            continue  # typer refuses a non-integer before the check
        value = int(value) if is_int else float(value)
        try:
            check(value)
            cli_accepts = True
        except typer.BadParameter:
            cli_accepts = False
        assert cli_accepts == model_accepts(model, field, value), (field, value)


def test_the_profile_option_takes_the_models_names_and_its_old_alias():
    check = check_of(opts.CapacityProfile)
    for name in ("poisson", "concurrency", "burst", "rate"):
        assert check(name) == name
    with pytest.raises(typer.BadParameter, match="Input should be 'poisson', 'concurrency' or 'burst', not 'steady'"):
        check("steady")


def test_help_states_the_models_range():
    assert opts.allowed_range(CapacitySettings, "tolerance") == ("0<x<4", "greater than 0 and less than 4")
    assert opts.allowed_range(CapacitySettings, "input_len") == (
        "1<=x<=16777216", "greater than or equal to 1 and less than or equal to 16777216")
    assert opts.allowed_range(CapacitySettings, "max_requests")[0] == "1<=x<=1000000"  # inside `Count | None`
    assert opts.allowed_range(WindowSettings, "confidence") == ("0.5<x<1", "greater than 0.5 and less than 1")
    assert opts.allowed_range(CapacitySettings, "profile") == ("", "")
    assert typing.get_args(opts.Tolerance)[1].help.endswith("[0<x<4]")


@pytest.mark.parametrize("value", ["0.005", "1.5", "3.99"])
def test_bench_and_tune_accept_the_same_tolerances(value):
    # accepted: parsing passes and both stop at the missing model folder, not at --tolerance
    for name, command in COMMANDS.items():
        proc = quantkit(*command, "--tolerance", value)
        assert proc.returncode == 2, (name, proc.stderr)
        assert "does not exist" in proc.stderr and "--tolerance" not in proc.stderr, (name, proc.stderr)


@pytest.mark.parametrize("args, words", [
    (["--tolerance", "4"], ["--tolerance", "greater than 0 and less than 4", "not 4"]),
    (["--tolerance", "0"], ["--tolerance", "greater than 0 and less than 4", "not 0"]),
    (["--capacity-start", "0"], ["--capacity-start", "greater than or equal to 0.1"]),
    (["--waves", "-1"], ["--waves", "greater than 0"]),
    (["--window-min", "0"], ["--window-min", "greater than 0"]),
    (["-n", "0"], ["--num-prompts", "greater than or equal to 1"]),
    (["--capacity-profile", "steady"], ["--capacity-profile", "'poisson', 'concurrency' or 'burst'", "not 'steady'"]),
])
def test_bench_and_tune_refuse_a_bad_value_with_the_same_line(args, words):
    lines = {}
    for name, command in COMMANDS.items():
        proc = quantkit(*command, *args)
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), (name, proc.stderr)
        assert all(w in proc.stderr for w in words), (name, proc.stderr)
        lines[name] = proc.stderr.replace(f"quantkit {name} --help", "quantkit COMMAND --help")
    assert lines["bench"] == lines["tune"]


def test_the_tolerance_refusal_names_the_option_and_the_range():
    proc = quantkit(*COMMANDS["tune"], "--tolerance", "4")
    # the hint names the command as it was run (`python -m quantkit tune` here)
    message, _, hint = proc.stderr.partition("; see `")
    assert message == "error: Invalid value for '--tolerance': Input should be greater than 0 and less than 4, not 4"
    assert hint.endswith("quantkit tune --help`\n")


def test_both_helps_list_the_shared_options():
    shared = ["--capacity-profile", "--tolerance", "--capacity-start", "--capacity-max", "--waves", "--input-len",
              "--output-len", "--num-prompts", "[0<x<4]", "--window-min", "--window-max", "--window-warmup",
              "--confidence"]
    for name in COMMANDS:
        proc = quantkit(name, "--help")
        assert proc.returncode == 0, proc.stderr
        missing = [flag for flag in shared if flag not in proc.stdout]
        assert not missing, (name, missing)


def test_a_validation_error_is_one_line_that_names_the_option():
    with pytest.raises(UsageError) as caught:
        with validation_as_usage_error("capacity option", {"tolerance": "--tolerance"}):
            CapacitySettings(tolerance=9)
    assert caught.value.one_line() == "bad --tolerance: Input should be less than 4"
    with pytest.raises(UsageError, match=r"^bad capacity option seed: Input should be a valid integer"):
        with validation_as_usage_error("capacity option"):
            CapacitySettings(seed="x")
    with pytest.raises(UsageError, match=r"^bad gate: no such gate$"):
        with validation_as_usage_error("gate"):
            raise ValueError("no such\n gate")


def test_gate_errors_name_their_option():
    with pytest.raises(UsageError, match=r"^bad --min-recovery: Input should be greater than 0$"):
        parse_gates(0, None, [])
    with pytest.raises(UsageError, match=r"^bad --min-task-recovery: "):
        parse_gates(None, -1, [])


def test_the_window_options_given_go_over_the_machines_defaults():
    from quantkit.cli.serving import chosen_window
    from quantkit.measure.capacity.profiles import CPU_WINDOW

    assert chosen_window(dict(min_s=None, max_s=None, warmup_s=None, confidence=None), local=False) is None
    window = chosen_window(dict(min_s=20.0, max_s=None, warmup_s=8.0, confidence=None), local=False)
    assert (window.min_s, window.warmup_s) == (20.0, 8.0)
    assert (window.max_s, window.min_requests) == (CPU_WINDOW.max_s, CPU_WINDOW.min_requests)
