"""Model references and the CLI's error contract (one line, exit code), without quantizing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from quantkit import models
from quantkit.errors import UsageError
from quantkit.registry import BACKENDS


def quantkit(*args, env=None):
    return subprocess.run([sys.executable, "-m", "quantkit", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_resolve_errors(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        models.resolve(str(tmp_path / "nope"))
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        models.resolve(str(tmp_path / "file.txt"))
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(UsageError, match="not a causal language model"):
        models.resolve(str(tmp_path / "enc"))
    (tmp_path / "noweights").mkdir()
    (tmp_path / "noweights" / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(UsageError, match="no weight files"):
        models.resolve(str(tmp_path / "noweights"))
    with pytest.raises(UsageError, match="GGUF file .* does not exist"):
        models.resolve(str(tmp_path / "x.gguf"))


def test_hub_id_offline_is_refused(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="Hub is offline"):
        models.resolve("HuggingFaceTB/SmolLM2-135M")


def test_registry_is_lazy_and_suggests():
    assert "llmcompressor" in BACKENDS.names()
    with pytest.raises(UsageError, match="did you mean 'gptqmodel'"):
        BACKENDS.check("gptqmodl")
    code = "import quantkit.cli, sys; print('llmcompressor' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split()
    assert out == ["False", "False"]


@pytest.mark.parametrize(
    "args, code, pattern",
    [
        (["convert", "/no/such/dir", "--method", "awq"], 2, "model '/no/such/dir' not found"),
        (["convert", "smollm2-135m", "--method", "awk"], 2, "unknown method 'awk'; did you mean 'awq'"),
        (["convert", "smollm2-135m", "--method", "squeezellm"], 2, "vLLM removed SqueezeLLM"),
        (["convert", "smollm2-135m"], 2, "say what to do: --method"),
        (["convert", "smollm2-135m", "--recipe", "/no/recipe.yaml"], 2, "recipe file /no/recipe.yaml does not exist"),
        (["convert", "smollm2-135m", "--method", "awq", "--backend", "nope"], 2, "unknown backend 'nope'"),
        (["convert", "smollm2-135m", "--method", "int8", "--backend", "gptqmodel"], 2, "backend 'gptqmodel' does not do method 'int8'"),
    ],
)
def test_cli_bad_input_is_one_line_with_exit_code(args, code, pattern):
    proc = quantkit(*args)
    assert proc.returncode == code, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert pattern in lines[0]
    assert proc.stdout == ""


def test_external_backend_not_set_up_says_how(tmp_path, tiny_llama_dir):
    # an empty venv root: no .venv-gptqmodel there, whatever this checkout has
    env = {"QUANTKIT_GPTQMODEL_PYTHON": "", "QUANTKIT_VENV_ROOT": str(tmp_path / "venvs")}
    proc = quantkit("convert", str(tiny_llama_dir), "--method", "gptq", "--backend", "gptqmodel",
                    "-o", str(tmp_path / "out"), "--num-samples", "2", env=env)
    assert proc.returncode == 1
    assert "backend 'gptqmodel' is not set up: run `quantkit setup --backend gptqmodel`" in proc.stderr
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp")]


def test_output_dir_exists_is_refused_without_force(tmp_path, tiny_llama_dir):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = quantkit("convert", str(tiny_llama_dir), "--method", "fp8", "-o", str(out))
    assert proc.returncode == 2 and "already exists; pass --force" in proc.stderr
    assert (out / "keep.txt").read_text() == "mine"


def test_sigterm_is_an_interrupt_here_and_a_quiet_death_in_a_forked_worker():
    """lm-eval's bootstrap pool forks workers that inherit the handler and are ended with SIGTERM:
    they must die quietly, not print a KeyboardInterrupt traceback into the user's run."""
    import os
    import signal
    import time

    from quantkit import console

    with pytest.raises(KeyboardInterrupt):
        console.sigterm_as_interrupt(signal.SIGTERM, None)
    old = signal.signal(signal.SIGTERM, console.sigterm_as_interrupt)
    try:
        pid = os.fork()
        if pid == 0:  # the worker
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                os._exit(7)  # reached only if the handler raised or returned
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, old)
