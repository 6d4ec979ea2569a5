"""Pure logic of the quantize package: group sizes, ignore rules, calibration parsing."""

from __future__ import annotations

import json

import pytest

from quantkit.errors import UsageError
from quantkit.quantize import calibration
from quantkit.quantize.base import choose_group_size, is_ignored
from quantkit.quantize.recipe import Calibration

SMOLLM2_INPUTS = {  # SmolLM2-135M: hidden 576, 9 heads x 64, intermediate 1536
    "model.layers.0.self_attn.q_proj": 576,
    "model.layers.0.self_attn.o_proj": 576,
    "model.layers.0.mlp.up_proj": 576,
    "model.layers.0.mlp.down_proj": 1536,
}


def test_group_size_falls_back_to_the_largest_divisor():
    assert choose_group_size(SMOLLM2_INPUTS, 128, auto=True) == 64
    assert choose_group_size({"a": 4096, "b": 14336}, 128, auto=True) == 128


def test_group_size_without_auto_names_the_layer():
    with pytest.raises(UsageError, match=r"group size 128 does not divide the input size 576 of model.layers.0.self_attn.q_proj"):
        choose_group_size(SMOLLM2_INPUTS, 128, auto=False)


def test_group_size_with_no_divisor_says_what_to_do():
    with pytest.raises(UsageError, match="per-channel method"):
        choose_group_size({"odd": 577}, 128, auto=True)


def test_ignore_rules_follow_llm_compressor():
    assert is_ignored("lm_head", ["lm_head"])
    assert is_ignored("model.layers.3.mlp.gate_proj", ["re:.*gate_proj$"])
    assert is_ignored("model.layers.3.mlp.gate_proj", ["gate_proj"])
    assert not is_ignored("model.layers.3.mlp.up_proj", ["lm_head", "re:.*gate_proj$"])


class _Tok:
    """A whitespace tokenizer: enough to test truncation and counting without a model."""

    def __call__(self, text, add_special_tokens=True):
        ids = [len(w) for w in text.split()]
        return {"input_ids": ([1] if add_special_tokens else []) + ids}

    def apply_chat_template(self, messages, tokenize=False):
        return " ".join(f"<{m['role']}> {m['content']}" for m in messages)


def test_local_jsonl_txt_parquet_and_chat(tmp_path):
    rows = [{"text": f"sample number {i} " * 5} for i in range(6)]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    cs = calibration.load(Calibration(dataset=str(jsonl), num_samples=4, seq_len=8))
    samples = calibration.tokenize(cs, _Tok(), 4, 8)
    assert len(samples) == 4 and all(len(s["input_ids"]) == 8 for s in samples)

    txt = tmp_path / "c.txt"
    txt.write_text("first paragraph here\n\nsecond one\n\n\nthird")
    assert len(calibration.load(Calibration(dataset=str(txt))).records) == 3

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    assert len(calibration.load(Calibration(dataset=str(tmp_path / "c.parquet"))).records) == 6

    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi there"}]}) + "\n")
    cs = calibration.load(Calibration(dataset=str(chat), num_samples=1))
    assert cs.conversational
    assert calibration.tokenize(cs, _Tok(), 1, 16)[0]["input_ids"][:1] == [len("<user>")]


def test_calibration_errors_are_one_line(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        calibration.load(Calibration(dataset=str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{not json\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:2 is not valid JSON \(Expecting property name"):
        calibration.load(Calibration(dataset=str(bad)))
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text('{"body": "x"}\n')
    with pytest.raises(UsageError, match="no text field .*body"):
        calibration.load(Calibration(dataset=str(nofield)))
    few = tmp_path / "few.jsonl"
    few.write_text('{"text": "a b c"}\n')
    cs = calibration.load(Calibration(dataset=str(few)))
    with pytest.raises(UsageError, match="only 1 usable samples; lower --num-samples"):
        calibration.tokenize(cs, _Tok(), 5, 8)


def test_offline_c4_comes_from_the_data_dir(data_dir):
    cs = calibration.load(Calibration(dataset="c4", num_samples=2))
    assert cs.resolved.endswith("c4/en_train_first1000.jsonl")
    assert len(cs.records) == 1000
