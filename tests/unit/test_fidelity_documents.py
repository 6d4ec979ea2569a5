"""The texts fidelity scores: offline sources cut into fixed-length windows of the model's tokens."""

from __future__ import annotations

import pytest

from quantkit.errors import SetupError, UsageError
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


def test_a_tasks_prompts_are_lm_evals_contexts_with_the_gold_answer(data_dir, tokenizer):
    import json

    texts = documents.load_texts("task:arc_easy", data_dir, limit=3)
    rows = [json.loads(line) for line in (data_dir / "arc_easy" / "test.jsonl").read_text().splitlines()[:3]]
    assert len(texts) == 3
    for text, row in zip(texts, rows):
        gold = row["choices"]["text"][row["choices"]["label"].index(row["answerKey"])]
        # arc's stock template (lm-eval's arc_easy.yaml), zero-shot, then the right choice
        assert text == f"Question: {row['question']}\nAnswer: {gold}"
    gsm = documents.load_texts("task:gsm8k", data_dir, limit=1)[0]
    assert gsm.startswith("Question: ") and gsm.count("Question: ") == 1 and "\n#### " in gsm  # zero-shot
    # a prompt is one window of its own length (the last `length` tokens where longer)
    windows = documents.windows(texts, tokenizer, "task:arc_easy", 256)
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert [w.token_ids[1:] for w in windows] == ids and all(w.start == 0 for w in windows)
    cut = documents.windows(texts[:1], tokenizer, "task:arc_easy", 8)
    assert cut[0].token_ids[1:] == ids[0][-8:] and cut[0].start == len(ids[0]) - 8


def test_bad_task_sources_are_usage_errors(data_dir, tmp_path):
    with pytest.raises(UsageError, match="unknown task 'nope'"):
        documents.source_path("task:nope", data_dir)
    with pytest.raises(UsageError, match="not the group or suite 'quick'"):
        documents.source_path("task:quick", data_dir)
    with pytest.raises(SetupError, match="arc_easy/train.jsonl for task 'arc_easy' is missing"):
        documents.source_path("task:arc_easy", tmp_path)
