"""Shared fixtures. Every test session gets its own QUANTKIT_HOME (the llm `tests point the home
dir at a temp folder` pattern); the built-in demo model is converted once per session into it, or
once per QUANTKIT_TEST_MODEL_CACHE (make's runs share build/test-models)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def quantkit_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("quantkit-home")
    os.environ["QUANTKIT_HOME"] = str(home)
    os.environ["QUANTKIT_MODELS_DIR"] = str(home / "models-out")
    # every fresh home a test makes shares one cache: vLLM's architecture list is asked once per
    # session, not once per home (importing vLLM takes seconds on 2 cores)
    os.environ["QUANTKIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("quantkit-cache"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if "QUANTKIT_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
        os.environ["QUANTKIT_DATA_DIR"] = str(SHARED_DATA)
    return home


def shared_demo_model(cache: Path) -> Path:
    """The demo model converted once into `cache`, in a folder named by the converter's source (a
    changed quantkit/models.py converts again), under a lock: the unit tier's workers start together."""
    import fcntl
    import hashlib

    from quantkit import models, settings

    cache.mkdir(parents=True, exist_ok=True)
    home = cache / hashlib.sha256(Path(models.__file__).read_bytes()).hexdigest()[:12]
    legacy = cache / "smollm2-135m"  # a folder holding the model itself (the former opt-in's layout)
    if (legacy / "config.json").exists():
        return legacy
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = os.environ.get("QUANTKIT_HOME")
        os.environ["QUANTKIT_HOME"] = str(home)
        try:
            assert settings.home() == home
            return models.resolve("smollm2-135m").path
        finally:
            if saved is None:
                del os.environ["QUANTKIT_HOME"]
            else:
                os.environ["QUANTKIT_HOME"] = saved


@pytest.fixture(scope="session")
def data_dir() -> Path:
    value = os.environ.get("QUANTKIT_DATA_DIR")
    if not value or not Path(value).is_dir():
        pytest.skip("offline data dir (QUANTKIT_DATA_DIR, ../shared/data) is not available")
    return Path(value)


@pytest.fixture(scope="session")
def smollm2_dir(quantkit_home) -> Path:
    """The built-in demo model as a bf16 safetensors checkpoint (SmolLM2-135M-Instruct).

    Its conversion is pure input, not a result under test: QUANTKIT_TEST_MODEL_CACHE (the Makefile's
    build/test-models) converts it once for make test's two tiers, test-slow and the backends' tests,
    which each converted it again (~25-37 s each on 2 cores). A clean clone (CI) still converts it,
    once, through the real path; a session that never asks for it converts nothing."""
    from quantkit import models

    link = quantkit_home / "models" / "smollm2-135m"
    if (cache := os.environ.get("QUANTKIT_TEST_MODEL_CACHE")) and not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(shared_demo_model(Path(cache)), link)
    return models.resolve("smollm2-135m").path


def _tiny_llama(out: Path, tokenizer_from: Path, hidden: int, mlp: int, heads: int, kv_heads: int) -> Path:
    """A 2-layer Llama with random weights (seed 0) and SmolLM2's tokenizer (ids below its 49,152)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=49152, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=64, max_position_embeddings=2048,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2, rms_norm_eps=1e-5,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_llama_dir(smollm2_dir, tmp_path_factory) -> Path:
    """A 2-layer Llama with SmolLM2's tokenizer and random weights: calibrated methods finish in
    seconds on 2 cores. Hidden size 576 keeps SmolLM2's awkward shape (group 128 does not fit)."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smollm2_dir, 576, 1536, 9, 3)


@pytest.fixture(scope="session")
def tiny_llama128_dir(smollm2_dir, tmp_path_factory) -> Path:
    """tiny_llama_dir's twin with layer sizes 128 divides (hidden 256, MLP 512): W4A8-FP8 takes group
    128 only (vLLM's kernel), which SmolLM2's 576 refuses."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama128"), smollm2_dir, 256, 512, 4, 2)


@pytest.fixture
def fake_cpu(monkeypatch):
    """`fake_cpu("avx2")`: quantkit sees a CPU of that ISA class (its /proc/cpuinfo flags faked,
    QUANTKIT_CPU_ISA unset), for the choices that depend on it (dtype, refusals, demo recipe)."""
    from fixtures.cpu import CPU_FLAGS
    from quantkit import machine

    def fake(name: str) -> None:
        arch, flags = CPU_FLAGS[name]
        monkeypatch.setattr(machine, "cpu_flags", lambda: (arch, frozenset(flags.split())))
        monkeypatch.delenv("QUANTKIT_CPU_ISA", raising=False)

    return fake
