"""The texts fidelity scores: offline sources cut into fixed-length windows of the model's tokens."""

from __future__ import annotations

import pytest

from quantkit.errors import UsageError
from quantkit.fidelity import documents
from quantkit.quantize.recipe import Calibration


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_sources_are_the_stored_wikitext2_pages_and_c4_documents(data_dir):
    assert len(documents.load_texts("wikitext2", data_dir)) == 62  # the README's page count
    c4 = documents.load_texts("c4", data_dir)
    assert len(c4) == 1000 and c4[0].startswith("Beginners BBQ Class Taking Place in Missoula!")


def test_windows_have_a_fixed_length_behind_the_prefix_token(data_dir, tokenizer):
    texts = documents.load_texts("wikitext2", data_dir)[:3]
    windows = documents.windows(texts, tokenizer, "wikitext2", 256)
    assert windows and all(len(w.token_ids) == 257 and w.scored == 256 for w in windows)
    assert all(w.token_ids[0] == tokenizer.bos_token_id for w in windows)
    first = tokenizer(texts[0], add_special_tokens=False)["input_ids"]
    doc0 = [w for w in windows if w.document == "wikitext2/0"]
    assert len(doc0) == len(first) // 256  # the short tail is dropped
    assert [w.start for w in doc0] == [256 * i for i in range(len(doc0))]
    assert doc0[1].token_ids[1:] == first[256:512]
    spread = documents.windows(texts, tokenizer, "wikitext2", 256, per_document=1, limit=2)
    assert [w.document for w in spread] == ["wikitext2/0", "wikitext2/1"]


def test_a_held_out_c4_slice_leaves_out_what_calibration_read(data_dir, tokenizer):
    from quantkit.quantize.calibration import load

    calib = Calibration(num_samples=8, seed=0)
    seen = set(load(calib).records[: calib.num_samples])
    assert len(seen) == 8
    c4 = documents.load_texts("c4", data_dir)
    held_out = documents.windows(c4[:200], tokenizer, "c4", 64, per_document=1, exclude=seen)
    read = {c4[int(w.document.split("/")[1])] for w in held_out}
    assert held_out and not read & seen


def test_bad_sources_are_usage_errors(tmp_path, tokenizer):
    with pytest.raises(UsageError, match="unknown fidelity text source 'pile'.*wikitext2, c4"):
        documents.load_texts("pile", tmp_path)
    with pytest.raises(UsageError, match="wikitext2/test_document_level.jsonl is missing"):
        documents.load_texts("wikitext2", tmp_path)
    with pytest.raises(UsageError, match="at least 1 token"):
        documents.windows(["text"], tokenizer, "c4", 0)
