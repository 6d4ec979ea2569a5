"""The prompt tokenizer read without transformers (quantkit/tokenizer.py) gives the ids, the
special tokens and the text transformers' AutoTokenizer gives, so random prompts are unchanged;
where it cannot be sure, it is transformers that reads the checkpoint."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from quantkit import tokenizer
from quantkit.measure.loadgen.workload import PromptSource


def transformers_view(folder: Path) -> tuple[frozenset[int], int, object]:
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(str(folder))
    return frozenset(t.all_special_ids or []), len(t), t


def assert_same_as_transformers(folder: Path) -> None:
    special, size, reference = transformers_view(folder)
    ours = tokenizer.load(folder)
    assert ours.reader == "tokenizers"
    assert (ours.special_ids, ours.size) == (special, size)
    rng = random.Random(0)
    allowed = [i for i in range(size) if i not in special]
    for _ in range(50):
        ids = [allowed[rng.randrange(len(allowed))] for _ in range(rng.randrange(1, 64))]
        assert ours.decode(ids) == reference.decode(ids)


def test_the_demo_model_reads_as_transformers_reads_it(smollm2_dir):
    assert_same_as_transformers(smollm2_dir)


def test_the_random_prompts_are_the_ids_they_were(smollm2_dir, monkeypatch):
    fast = PromptSource(smollm2_dir, input_len=32, seed=5).prompts(4, 0)
    special, size, reference = transformers_view(smollm2_dir)
    monkeypatch.setattr(tokenizer, "_load_fast", lambda folder: None)  # transformers' reading, as before
    assert PromptSource(smollm2_dir, input_len=32, seed=5).prompts(4, 0) == fast
    chat = PromptSource(smollm2_dir, input_len=16, seed=5, api="chat").prompts(2, 1)
    monkeypatch.undo()
    assert PromptSource(smollm2_dir, input_len=16, seed=5, api="chat").prompts(2, 1) == chat


def word_level(folder: Path, **special) -> Path:
    """A small fast tokenizer saved by transformers, with the special tokens given."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "a", "b", "c", "<s>", "</s>", "<x>", "<y>", "<pad>", "d", "e"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, **special).save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize("special", [
    {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "[UNK]"},
    {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "additional_special_tokens": ["<x>", "<y>"]},
    {"eos_token": "</s>"},
    {},
], ids=["named", "named-and-extra", "eos-only", "none"])
def test_saved_tokenizers_read_as_transformers_reads_them(tmp_path, special):
    assert_same_as_transformers(word_level(tmp_path / "tok", **special))


def test_a_serialised_added_token_reads_by_its_content(tmp_path):
    folder = word_level(tmp_path / "tok", bos_token="<s>", eos_token="</s>")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["bos_token"] = {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
                           "single_word": False, "special": True, "__type": "AddedToken"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert_same_as_transformers(folder)


@pytest.mark.parametrize("change", [
    {"bos_token": "<not-in-the-vocabulary>"},  # transformers adds it: its id is transformers' to give
    {"bos_token": 7},
    {"extra_special_tokens": "<x>"},
], ids=["unknown-token", "not-a-token", "extra-not-a-list"])
def test_what_this_reading_does_not_cover_goes_to_transformers(tmp_path, change):
    folder = word_level(tmp_path / "tok", bos_token="<s>", eos_token="</s>")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **change}))
    assert tokenizer._load_fast(folder) is None


def test_no_tokenizer_json_goes_to_transformers(tmp_path):
    folder = word_level(tmp_path / "tok", bos_token="<s>", eos_token="</s>")
    (folder / "tokenizer.json").unlink()
    assert tokenizer._load_fast(folder) is None


def test_building_prompts_does_not_import_torch(smollm2_dir):
    code = ("import sys; from pathlib import Path; from quantkit.measure.loadgen.workload import PromptSource; "
            f"PromptSource(Path({str(smollm2_dir)!r}), input_len=8).prompts(2, 0); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
