"""Which environments scripts/setup.sh builds (scripts/accel.sh: an NVIDIA GPU, detected or forced
by QUANTKIT_ACCEL) and what `quantkit doctor` says of them (the stamp's kind; the GPU's name and
compute capability). The GPU is a fake `nvidia-smi` on PATH: its answer is the fixture's truth."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quantkit import doctor, machine

ROOT = Path(__file__).resolve().parents[2]


def fake_nvidia_smi(folder: Path, listing: str, query: str = "", rc: int = 0) -> dict:
    """An nvidia-smi that answers `-L` with `listing` and --query-gpu with `query`; the environment
    that puts it first on PATH."""
    script = folder / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
case "$1" in
  -L) printf '{listing}' ;;
  --query-gpu=*) printf '{query}' ;;
esac
exit {rc}
""")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def accel(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts/accel.sh")], env=env, capture_output=True, text=True)


H200_LISTING = "GPU 0: NVIDIA H200 (UUID: GPU-0f1e2d3c)\\n"


def test_a_listed_gpu_selects_the_cuda_environments(tmp_path):
    env = fake_nvidia_smi(tmp_path, H200_LISTING)
    env.pop("QUANTKIT_ACCEL", None)
    proc = accel(env)
    assert (proc.returncode, proc.stdout) == (0, "cuda\n")


@pytest.mark.skipif(Path("/proc/driver/nvidia/gpus").is_dir(), reason="this machine has an NVIDIA driver")
def test_an_nvidia_smi_that_lists_nothing_leaves_the_cpu_path(tmp_path):
    env = fake_nvidia_smi(tmp_path, "No devices were found\\n", rc=6)
    env.pop("QUANTKIT_ACCEL", None)
    assert accel(env).stdout == "cpu\n"


def test_the_setting_overrides_detection_both_ways(tmp_path):
    env = fake_nvidia_smi(tmp_path, H200_LISTING)
    assert accel({**env, "QUANTKIT_ACCEL": "cpu"}).stdout == "cpu\n"
    assert accel({**os.environ, "QUANTKIT_ACCEL": "cuda"}).stdout == "cuda\n"


def test_a_bad_setting_is_one_line_and_exit_2():
    proc = accel({**os.environ, "QUANTKIT_ACCEL": "gpu"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "QUANTKIT_ACCEL=gpu" in proc.stderr and "cuda, cpu or auto" in proc.stderr


@pytest.mark.skipif(sys.version_info[:2] == (3, 12), reason="the refusal is for a Python other than 3.12")
def test_setup_takes_the_cuda_locks_on_a_gpu_and_refuses_another_python(tmp_path):
    """The CUDA path is chosen (its lock files are for Python 3.12) before anything is built."""
    env = fake_nvidia_smi(tmp_path, H200_LISTING)
    env.pop("QUANTKIT_ACCEL", None)
    proc = subprocess.run(["bash", str(ROOT / "scripts/setup.sh")], env={**env, "PYTHON": sys.executable},
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "CUDA lock files are for Python 3.12" in proc.stderr


def test_the_cuda_lock_files_pin_the_serving_and_quantizing_stacks():
    def pins(name):
        lines = (ROOT / "requirements" / name).read_text().splitlines()
        return dict(line.split("==") for line in lines if line and not line.startswith("#"))

    vllm, main = pins("vllm-cuda.txt"), pins("main-cuda.txt")
    assert (vllm["vllm"], vllm["torch"], vllm["transformers"]) == ("0.26.0", "2.11.0", "5.17.0")
    assert (main["torch"], main["llmcompressor"], main["lm_eval"]) == ("2.11.0", "0.14.0.1", "0.4.13")
    assert "nvidia-cublas" in main and "triton" in main  # CUDA torch's own libraries, resolved
    cpu_main = pins("main.txt")
    assert {k: v for k, v in cpu_main.items() if k != "torch"}.items() <= main.items()  # main.txt, torch swapped


def test_gpus_reads_name_and_compute_capability(tmp_path, monkeypatch):
    env = fake_nvidia_smi(tmp_path, H200_LISTING, "NVIDIA H200, 9.0\\nNVIDIA H200, 9.0\\n")
    monkeypatch.setenv("PATH", env["PATH"])
    assert machine.gpus() == [{"name": "NVIDIA H200", "compute_cap": "9.0"}] * 2
    assert doctor._gpu() == ("ok", "2 x NVIDIA H200 (compute capability 9.0)")


def test_no_gpu_is_reported_as_the_cpu_path(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, "", rc=9)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert machine.gpus() == []
    assert doctor._gpu()[0] == "ok" and "no NVIDIA GPU" in doctor._gpu()[1]


@pytest.mark.parametrize("stamp, kind", [
    ("0123456789abcdef setup cuda", "cuda, scripts/setup.sh"),
    ("0123456789abcdef bundle cuda", "cuda, bundle"),
    ("0123456789abcdef setup cpu", "cpu, scripts/setup.sh"),
    ("0123456789abcdef", "cpu, scripts/setup.sh"),  # a stamp written before the GPU builds
])
def test_the_stamp_says_which_environment_was_built(tmp_path, stamp, kind):
    (tmp_path / ".quantkit-stamp").write_text(stamp + "\n")
    assert machine.environment_kind(tmp_path) == kind


def test_no_stamp_no_kind(tmp_path):
    assert machine.environment_kind(tmp_path) is None


def test_doctor_warns_of_a_cpu_build_beside_a_gpu(tmp_path, monkeypatch):
    (tmp_path / ".quantkit-stamp").write_text("0123456789abcdef setup cpu\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_nvidia_smi(bin_dir, H200_LISTING, "NVIDIA H200, 9.0\\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    warning = doctor._kind_warning(tmp_path, "rebuild it")
    assert warning == "the CPU build on a machine with an NVIDIA GPU: rebuild it"
    (tmp_path / ".quantkit-stamp").write_text("0123456789abcdef setup cuda\n")
    assert doctor._kind_warning(tmp_path, "rebuild it") is None
