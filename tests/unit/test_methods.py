"""The methods' registry (quantkit/methods.py): one entry per method, and everything that reads it."""

from __future__ import annotations

import pytest

from quantkit.quantize import recipe as recipes
from quantkit.errors import UsageError
from quantkit.methods import METHODS, Method, MethodRegistry
from quantkit.registry import BACKENDS
from quantkit.report import records
from quantkit.report.card import _bits


def test_the_methods_are_the_ones_before_the_registry():
    # the order is --method's help and did-you-mean's; calibrated ones are named by the data-free refusal
    assert METHODS.names() == ["awq", "gptq", "int8", "fp8", "w4a8-fp8", "w4a8-fp8-awq", "w4a16-rtn", "w8a16"]
    assert METHODS.calibrated() == ["awq", "gptq", "int8", "w4a8-fp8", "w4a8-fp8-awq"]
    assert {m.name: m.weight_bits for m in METHODS} == {"awq": 4, "gptq": 4, "int8": 8, "fp8": 8, "w4a8-fp8": 4,
                                                        "w4a8-fp8-awq": 4, "w4a16-rtn": 4, "w8a16": 8}


def test_every_method_has_a_builtin_recipe_that_agrees_with_its_entry():
    for method in METHODS:
        recipe = recipes.for_method(method.name)
        assert recipe.method == method.name and recipe.backend in method.backends
        assert recipe.needs_calibration == method.calibrated == (recipe.calibration is not None)
        assert _bits(records.Convert(scheme=recipe.scheme)) == method.weight_bits  # the card's tag, read from the scheme


def test_each_backend_does_the_methods_whose_entry_names_it():
    before = {  # the backends' own lists before the registry
        "llmcompressor": {"awq", "gptq", "int8", "fp8", "w4a16-rtn", "w8a16", "w4a8-fp8", "w4a8-fp8-awq"},
        "gptqmodel": {"gptq", "awq"},
        "autoawq": {"awq"},
        "auto-gptq": {"gptq"},
        "optimum": {"gptq"},
    }
    assert {name: set(BACKENDS.load(name).methods) for name in BACKENDS.names()} == before
    for method in METHODS:
        assert set(method.backends) <= set(BACKENDS.names()), method.name


def test_check_folds_case_and_explains_unknown_and_removed_names():
    assert METHODS.check("GPTQ") == "gptq" and METHODS["W8A16"].name == "w8a16"
    assert recipes.check_method("Int8") == "int8"
    with pytest.raises(UsageError, match="unknown method 'gtpq'; did you mean 'gptq'"):
        METHODS["gtpq"]
    with pytest.raises(UsageError, match="method 'Marlin' is not available: Marlin is a vLLM kernel"):
        METHODS.check("Marlin")
    assert METHODS.get(None) is None and METHODS.get("squeezellm") is None


def test_an_inconsistent_entry_fails_when_the_registry_is_made():
    with pytest.raises(ValueError, match="modifier builder"):
        MethodRegistry([Method("x", "", calibrated=False, weight_bits=4, backends=("llmcompressor",))], removed={})
    with pytest.raises(ValueError, match="modifier builder"):
        MethodRegistry([Method("x", "", False, 4, ("gptqmodel",), modifiers="m:f")], removed={})
    with pytest.raises(ValueError, match="offered and removed"):
        MethodRegistry([Method("x", "", False, 4, ("gptqmodel",))], removed={"x": "gone"})
    with pytest.raises(UsageError, match="no llm-compressor modifiers"):
        Method("x", "", False, 4, ("gptqmodel",)).modifier_builder()


def test_card_bits_read_the_config_then_the_scheme_then_the_method():
    qc = {"config_groups": {"group_0": {"weights": {"num_bits": 4}}}}
    assert _bits(records.Convert.model_validate({"method": "int8", "scheme": "W8A8", "quantization_config": qc})) == 4
    assert _bits(records.Convert.model_validate({"method": "gptq", "quantization_config": {"bits": 8}})) == 8
    assert _bits(records.Convert.model_validate({"method": "gptq", "scheme": "W8A16"})) == 8  # the scheme, not the method's default
    assert _bits(records.Convert.model_validate({"scheme": "FP8_DYNAMIC"})) == 8
    assert _bits(records.Convert.model_validate({"method": "awq", "scheme": "NVFP4A16"})) == 4  # a scheme that does not spell its bits
    assert _bits(records.Convert.model_validate({"method": "nope", "scheme": "NVFP4A16"})) is None and _bits(None) is None


# What build_modifiers built for each case before the registry (llm-compressor 0.14.0.1,
# compressed-tensors 0.19.0): each modifier's type and the fields it was given or its validators
# set (model_dump(exclude_unset=True)). The full dumps were compared too, and were identical.
W4_ASYM_128 = {"dynamic": False, "group_size": 128, "num_bits": 4, "observer": "memoryless_minmax", "strategy": "group",
               "symmetric": False, "type": "int", "zp_dtype": "torch.int8"}
W4_GPTQ_128 = {"dynamic": False, "group_size": 128, "num_bits": 4, "strategy": "group", "symmetric": True, "type": "int",
               "zp_dtype": None}
W8_CHANNEL = {"dynamic": False, "num_bits": 8, "strategy": "channel", "symmetric": True, "type": "int", "zp_dtype": None}
A8_TOKEN = {"dynamic": True, "num_bits": 8, "strategy": "token", "symmetric": True, "type": "int", "zp_dtype": None}
LM_HEAD = {"ignore": ["lm_head"]}
INT8_GPTQ = {"config_groups": {"group_0": {"input_activations": A8_TOKEN, "targets": ["Linear"], "weights": W8_CHANNEL}},
             **LM_HEAD, "type": "GPTQModifier"}
GPTQ_128 = {"config_groups": {"group_0": {"targets": ["Linear"], "weights": W4_GPTQ_128}}, "dampening_frac": 0.01, **LM_HEAD,
            "type": "GPTQModifier"}

BEFORE = {
    "awq": [{"duo_scaling": True, "type": "AWQModifier"},
            {"config_groups": {"group_0": {"targets": ["Linear"], "weights": W4_ASYM_128}}, **LM_HEAD,
             "type": "QuantizationModifier"}],
    "awq group 64": [{"duo_scaling": True, "type": "AWQModifier"},
                     {"config_groups": {"group_0": {"targets": ["Linear"], "weights": {**W4_ASYM_128, "group_size": 64}}},
                      **LM_HEAD, "type": "QuantizationModifier"}],
    "gptq": [GPTQ_128],
    "gptq with SmoothQuant 0.5": [{"smoothing_strength": 0.5, "type": "SmoothQuantModifier"}, GPTQ_128],
    "int8": [{"smoothing_strength": 0.8, "type": "SmoothQuantModifier"}, INT8_GPTQ],
    "int8 without SmoothQuant": [INT8_GPTQ],
    "fp8": [{"config_groups": {"group_0": {
        "input_activations": {"dynamic": True, "num_bits": 8, "observer": None, "strategy": "token", "symmetric": True,
                              "type": "float", "zp_dtype": None},
        "targets": ["Linear"],
        "weights": {**W8_CHANNEL, "observer": "memoryless_minmax", "type": "float"}}},
        **LM_HEAD, "type": "QuantizationModifier"}],
    "w4a16-rtn": [{"config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        **W4_GPTQ_128, "observer": "memoryless_minmax"}}}, **LM_HEAD, "type": "QuantizationModifier"}],
    "w8a16": [{"config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        **W8_CHANNEL, "group_size": None, "observer": "memoryless_minmax"}}}, **LM_HEAD, "type": "QuantizationModifier"}],
}

VARIANTS = {  # case -> (built-in recipe, fields changed, group size); the rest are the built-in recipe as it is
    "awq group 64": ("awq", {}, 64),
    "gptq with SmoothQuant 0.5": ("gptq", {"smoothing_strength": 0.5}, 128),
    "int8 without SmoothQuant": ("int8", {"smoothing_strength": None}, None),
}


def _dump(modifiers) -> list[dict]:
    return [{"type": type(m).__name__, **m.model_dump(mode="json", exclude_unset=True)} for m in modifiers]


@pytest.mark.parametrize("case", list(BEFORE))
def test_modifiers_are_the_ones_built_before_the_registry(case):
    pytest.importorskip("llmcompressor")
    from quantkit.quantize.llmcompressor import build_modifiers

    name, changes, group = VARIANTS.get(case, (case, {}, None))
    recipe = recipes.load(name).model_copy(update=changes)
    built = build_modifiers(recipe, group if case in VARIANTS else recipe.group_size)
    assert _dump(built) == BEFORE[case]


def test_every_llmcompressor_method_builds_modifiers_of_its_bits():
    """A new method's entry is checked with no expectation to write: its builder resolves, and its
    built-in recipe's modifiers quantize the weights to the bits the entry says."""
    pytest.importorskip("llmcompressor")
    from quantkit.quantize.llmcompressor import build_modifiers

    for method in METHODS:
        if method.modifiers is None:
            continue
        recipe = recipes.for_method(method.name)
        groups = [m.config_groups for m in build_modifiers(recipe, recipe.group_size) if getattr(m, "config_groups", None)]
        assert groups and all(g["group_0"].weights.num_bits == method.weight_bits for g in groups), method.name
