"""The serving knobs are ServeConfig's fields: KNOBS, the commands' flags, the tuner's knob names
and the flags a capacity bound's advice names all follow from (or are checked against) them."""

import re

from quantkit.cli.options import KNOB_OPTIONS
from quantkit.measure.observe import bounds
from quantkit.measure.tune import space as tune_space
from quantkit.serve.config import BOOL_KNOBS, KNOBS, ServeConfig


def test_knobs_are_the_fields():
    assert KNOBS == [name for name in ServeConfig.model_fields if name != "extra"]
    assert BOOL_KNOBS == {"enable_chunked_prefill", "enforce_eager", "async_scheduling"}
    assert all(ServeConfig.model_fields[name].description for name in KNOBS)  # each flag's help


def test_every_knob_is_a_flag():
    assert list(KNOB_OPTIONS) == [*KNOBS, "serve_arg"]
    for name in KNOBS:
        decls = KNOB_OPTIONS[name][1].param_decls
        assert decls[0].split("/")[0] == "--" + name.replace("_", "-")
        assert KNOB_OPTIONS[name][1].help == ServeConfig.model_fields[name].description
    assert KNOB_OPTIONS["max_model_len"][1].default == 2048 and KNOB_OPTIONS["enforce_eager"][1].default is None


def test_tune_space_names_knobs():
    assert tune_space.TUNABLE <= set(KNOBS) and set(tune_space.DEFAULT_SPACE) <= set(KNOBS)
    assert set(tune_space.GPU_SPACE) <= set(KNOBS) and tune_space.BOOL_KNOBS is BOOL_KNOBS


def test_bound_advice_names_real_flags():
    text = " ".join([*bounds.LEVERS.values(), bounds.DECODE_KNOB, bounds.PREFILL_KNOB])
    flags = {f[2:].replace("-", "_") for f in re.findall(r"--[a-z][a-z-]*", text)}
    assert flags and flags <= set(KNOBS)
