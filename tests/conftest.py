"""Shared fixtures. Every test session gets its own QUANTKIT_HOME (the llm `tests point the home
dir at a temp folder` pattern); the built-in demo model is converted once per session into it."""

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
    # Opt-in for local runs: reuse a converted demo model (pure input, not a result under test;
    # the GGUF conversion itself has its own test). CI converts it afresh.
    cached = Path(os.environ.get("QUANTKIT_TEST_MODEL_CACHE", "/nonexistent"))
    if (cached / "smollm2-135m" / "config.json").exists():
        (home / "models").mkdir(parents=True, exist_ok=True)
        os.symlink(cached / "smollm2-135m", home / "models" / "smollm2-135m")
    return home


@pytest.fixture(scope="session")
def data_dir() -> Path:
    value = os.environ.get("QUANTKIT_DATA_DIR")
    if not value or not Path(value).is_dir():
        pytest.skip("offline data dir (QUANTKIT_DATA_DIR, ../shared/data) is not available")
    return Path(value)


@pytest.fixture(scope="session")
def smollm2_dir(quantkit_home) -> Path:
    """The built-in demo model as a bf16 safetensors checkpoint (SmolLM2-135M-Instruct)."""
    from quantkit import models

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
