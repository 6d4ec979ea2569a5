"""The external backends' logic without their environments: `--quantization` checks, lock files,
worker errors, and the one-line refusals (AutoGPTQ on a CPU, SqueezeLLM)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from quantkit.errors import UsageError
from quantkit.quantize import external
from quantkit.serve import formats
from quantkit.registry import BACKENDS

WORKERS = Path(external.__file__).parent / "workers"
EXTERNAL = ["gptqmodel", "autoawq", "optimum", "auto-gptq"]


def quantkit(*args, env=None):
    return subprocess.run([sys.executable, "-m", "quantkit", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def checkpoint(tmp_path: Path, name: str, qc: dict | None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    if qc is not None:
        config["quantization_config"] = qc
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# config.json quantization_config as each backend writes it (trimmed)
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 64, "sym": True, "desc_act": False, "format": "gptq"}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"}
CT = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}}


@pytest.mark.parametrize("value", [None, "gptq", "gptq_marlin", "auto_gptq", "marlin", "moe_wna16", "humming"])
def test_gptq_checkpoint_takes_what_vllm_takes(tmp_path, value):
    formats.check_quantization_flag(checkpoint(tmp_path, "g", GPTQ), value, gpu=False)


@pytest.mark.parametrize("value", ["awq", "compressed-tensors", "fp8", "gtpq"])
def test_gptq_checkpoint_refuses_the_rest_in_one_line(tmp_path, value):
    folder = checkpoint(tmp_path, "g", GPTQ)
    with pytest.raises(UsageError) as err:
        formats.check_quantization_flag(folder, value, gpu=False)
    line = err.value.one_line()
    assert "\n" not in line and err.value.exit_code == 2
    assert line == (f"{folder} is a GPTQ checkpoint (config.json quant_method 'gptq'); --quantization {value} "
                    "does not fit it: use gptq, gptq_marlin or auto_gptq, or leave --quantization out (vLLM detects it)")


def test_awq_aliases_differ_between_vllm_cpu_and_gpu(tmp_path):
    folder = checkpoint(tmp_path, "a", AWQ)
    formats.check_quantization_flag(folder, "awq", gpu=False)
    for alias in ("awq_marlin", "auto_awq", "marlin"):
        formats.check_quantization_flag(folder, alias, gpu=True)
        # vLLM-CPU's AutoAWQConfig steps aside on the CPU, so only `awq` itself matches there
        with pytest.raises(UsageError, match=f"--quantization {alias} does not fit it on a CPU build of vLLM: use awq,"):
            formats.check_quantization_flag(folder, alias, gpu=False)
    with pytest.raises(UsageError, match="AWQ checkpoint .* use awq, awq_marlin, auto_awq or marlin, or leave"):
        formats.check_quantization_flag(folder, "gptq", gpu=True)


def test_compressed_tensors_takes_only_its_name(tmp_path):
    folder = checkpoint(tmp_path, "c", CT)
    formats.check_quantization_flag(folder, "compressed-tensors", gpu=False)
    with pytest.raises(UsageError, match="is a compressed-tensors checkpoint .* use compressed-tensors, or leave"):
        formats.check_quantization_flag(folder, "gptq", gpu=False)


def test_unquantized_and_unknown_formats(tmp_path):
    plain = checkpoint(tmp_path, "bf16", None)
    formats.check_quantization_flag(plain, "fp8", gpu=False)  # online quantization: vLLM's call
    with pytest.raises(UsageError, match="is not a quantized checkpoint .* --quantization gptq needs a gptq checkpoint"):
        formats.check_quantization_flag(plain, "gptq", gpu=False)
    other = checkpoint(tmp_path, "fp8", {"quant_method": "fp8"})
    formats.check_quantization_flag(other, "anything", gpu=False)  # a format quantkit does not write: vLLM judges
    formats.check_quantization_flag(tmp_path / "missing", "gptq", gpu=False)  # the server reports a missing folder
    assert formats.accepted_values(checkpoint(tmp_path, "g", GPTQ), gpu=False)[:3] == ["gptq", "gptq_marlin", "auto_gptq"]


def test_squeezellm_is_explained_with_every_backend():
    for backend in ("llmcompressor", *EXTERNAL):
        proc = quantkit("convert", "smollm2-135m", "--method", "squeezellm", "--backend", backend)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert "vLLM removed SqueezeLLM support (v0.6); use --method awq or --method gptq" in lines[0]


def test_auto_gptq_on_a_cpu_names_the_working_backend(tmp_path, tiny_llama_dir):
    root = tmp_path / "venvs"
    env = {"QUANTKIT_VENV_ROOT": str(root), "CUDA_VISIBLE_DEVICES": ""}
    for args in (["setup", "--backend", "auto-gptq"],
                 ["convert", str(tiny_llama_dir), "--method", "gptq", "--backend", "auto-gptq", "-o", str(tmp_path / "o")]):
        proc = quantkit(*args, env=env)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert "backend 'auto-gptq' needs a CUDA GPU" in lines[0] and "use --backend gptqmodel" in lines[0]
        assert "transformers 4.57" in lines[0]
    assert not root.exists() and not (tmp_path / "o").exists()  # refused before building or writing anything


def test_gptqmodel_awq_on_a_cpu_names_the_working_backends(tmp_path, tiny_llama_dir):
    """GPTQModel 7.6 calibrates AWQ for minutes and then fails without CUDA: refused up front."""
    proc = quantkit("convert", str(tiny_llama_dir), "--method", "awq", "--backend", "gptqmodel", "-o", str(tmp_path / "o"),
                    env={"CUDA_VISIBLE_DEVICES": ""})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "backend 'gptqmodel' does awq only on a CUDA GPU" in lines[0] and "use --backend autoawq" in lines[0]


def test_autogptq_worker_names_the_alternative_when_auto_gptq_cannot_import(tmp_path):
    """The main environment has transformers 5.x and no auto_gptq: the worker's real ImportError path."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "m", "out": str(tmp_path / "o"), "method": "gptq", "bits": 4,
                                "group_size": 64, "symmetric": True, "calibration": None, "options": {}}))
    proc = subprocess.run([sys.executable, str(WORKERS / "autogptq_worker.py"), str(spec)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3
    reason = external.worker_error(proc.stderr)
    assert reason and reason.startswith("AutoGPTQ 0.7.1 does not import here")
    assert "it needs transformers 4.57.x" in reason and reason.endswith("use --backend gptqmodel (GPTQ in the same checkpoint format, CPU or GPU)")


def test_worker_error_is_the_last_marker_line():
    log = "noise\nQUANTKIT_ERROR first\nTraceback ...\nQUANTKIT_ERROR the  reason\nmore noise\n"
    assert external.worker_error(log) == "the  reason"
    assert external.worker_error("Traceback\nValueError: x\n") is None


@pytest.mark.parametrize("name", EXTERNAL)
def test_lock_files_pin_everything_and_agree_with_the_top_level_pins(name):
    backend = BACKENDS.load(name)
    lines = [line for line in backend.setup.lock_file(name).read_text().splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-]+", line) for line in lines), lines
    locked = {line.split("==")[0].lower().replace("_", "-"): line.split("==")[1] for line in lines}
    for req in backend.setup.requirements:
        pkg, version = req.split("==")
        assert locked[pkg.lower()].split("+")[0] == version, (pkg, locked.get(pkg.lower()))
    assert locked["torch"] == "2.13.0+cpu"
    assert not [pkg for pkg in locked if pkg.startswith("nvidia-")]  # CPU-only stacks


def test_setup_with_an_up_to_date_stamp_installs_nothing(tmp_path):
    """A second `quantkit setup` finds the lock's digest stamped and only re-checks the import (which
    fails here: the main environment has no gptqmodel), so no pip ran."""
    import hashlib

    venv = tmp_path / ".venv-gptqmodel"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    lock = external.GPTQModelBackend.setup.lock_file("gptqmodel")
    (venv / external.STAMP).write_text(hashlib.sha256(lock.read_bytes()).hexdigest()[:16] + "\n")
    proc = quantkit("setup", "--backend", "gptqmodel", env={"QUANTKIT_VENV_ROOT": str(tmp_path)})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1
    assert "is up to date with requirements-gptqmodel.txt" in " ".join(proc.stderr.split()), proc.stderr  # rich wraps
    assert "gptqmodel installed but `import gptqmodel` fails" in lines[-1]


def test_backend_python_env_names_have_no_dash(monkeypatch, tmp_path):
    from quantkit import settings

    monkeypatch.setenv("QUANTKIT_AUTO_GPTQ_PYTHON", sys.executable)
    assert settings.backend_python("auto-gptq") == Path(sys.executable)


def test_fix_quantization_config_rewrites_both_files(tmp_path):
    sys.path.insert(0, str(WORKERS))
    try:
        from _common import carry_options, fix_quantization_config
    finally:
        sys.path.remove(str(WORKERS))
    qc = {"quant_method": "gptq", "format": "gptq_v2", "dataset": ["a long calibration text"] * 3, "bits": 4}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "quantization_config": qc}))
    (tmp_path / "quantize_config.json").write_text(json.dumps({**qc, "format": "gptq"}))
    fix_quantization_config(tmp_path, drop=("dataset",), set_values={"format": "gptq"})
    fixed = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert fixed == {"quant_method": "gptq", "format": "gptq", "bits": 4}
    assert json.loads((tmp_path / "quantize_config.json").read_text()) == fixed
    assert carry_options({"dampening_frac": 0.01, "duo_scaling": True}, {"damp_percent"}, {"dampening_frac": "damp_percent"}, "X") \
        == {"damp_percent": 0.01}
