"""What a card names as its base model, and what leaves the machine: local paths scrubbed from
uploaded text files, the local files untouched."""

from __future__ import annotations

import json
from pathlib import Path

from quantkit import hub
from quantkit.report import records
from quantkit.report.card import base_model_of, baseline_provenance


def _source(kind: str, ref: str, path: str = "/nowhere") -> records.Convert:
    # a conversion record holding only its source, read as the card reads stored records
    return records.Convert.model_validate({"source": {"kind": kind, "ref": ref, "path": path, "fingerprint": "sha256:0"}})


def test_base_model_of_each_kind_of_source(tmp_path):
    assert base_model_of(_source("builtin", "smollm2-135m")) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert base_model_of(_source("hub", "Qwen/Qwen3-0.6B")) == "Qwen/Qwen3-0.6B"
    assert base_model_of(_source("hub", "Qwen/Qwen3-0.6B"), "org/other") == "org/other"  # --base-model wins
    named = tmp_path / "mine"
    named.mkdir()
    (named / "config.json").write_text(json.dumps({"_name_or_path": "meta-llama/Llama-3.1-8B"}))
    assert base_model_of(_source("local", str(named), str(named))) == "meta-llama/Llama-3.1-8B"
    # a config naming a local folder is no Hub id
    (named / "config.json").write_text(json.dumps({"_name_or_path": str(tmp_path)}))
    assert base_model_of(_source("local", str(named), str(named))) is None
    cache = tmp_path / "hub" / "models--org--some-model" / "snapshots" / "abc123"
    cache.mkdir(parents=True)
    assert base_model_of(_source("local", str(cache), str(cache))) == "org/some-model"
    assert base_model_of(_source("gguf", "x.gguf")) is None and base_model_of(None) is None


def test_baseline_provenance_of_the_demo_model():
    assert "dequantized from the Q4_1 GGUF" in baseline_provenance(_source("builtin", "smollm2-135m"), None)
    assert "dequantized from the Q4_1 GGUF" in baseline_provenance(None, "smollm2-135m")
    assert baseline_provenance(_source("hub", "org/x"), "x") is None


def test_uploaded_text_files_lose_local_paths_and_the_local_files_keep_them(tmp_path, monkeypatch):
    home = tmp_path / "home" / "me"
    checkout = Path(hub.__file__).resolve().parents[1]
    ckpt = tmp_path / "models" / "m-gptq"
    ckpt.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("QUANTKIT_HOME", str(home / ".cache" / "quantkit"))
    monkeypatch.setenv("QUANTKIT_MODELS_DIR", str(tmp_path / "models"))
    record = {"source": {"path": str(home / ".cache/quantkit/models/smollm2-135m")}, "output_dir": str(ckpt),
              "calibration": {"resolved": str(checkout / "data" / "c4.jsonl")}, "elsewhere": "/opt/data/x.jsonl",
              "url": "https://huggingface.co/org/name", "note": "group size 128 does not divide 576/64"}
    (ckpt / "quantkit.json").write_text(json.dumps(record))
    (ckpt / "tokenizer.json").write_text(json.dumps({"vocab": {"/opt": 1, "/root": 2}}))
    (ckpt / "recipe.yaml").write_text(f"output_dir: {ckpt}/stage\n")
    roots = hub.local_roots(ckpt)
    clean = json.loads(hub.upload_bytes("quantkit.json", ckpt / "quantkit.json", roots))
    assert clean == {"source": {"path": "$QUANTKIT_HOME/models/smollm2-135m"}, "output_dir": ".",
                     "calibration": {"resolved": "<checkout>/data/c4.jsonl"}, "elsewhere": "<local>/x.jsonl",
                     "url": "https://huggingface.co/org/name", "note": "group size 128 does not divide 576/64"}
    assert hub.upload_bytes("recipe.yaml", ckpt / "recipe.yaml", roots) == b"output_dir: ./stage\n"
    assert hub.upload_bytes("tokenizer.json", ckpt / "tokenizer.json", roots) is None  # nothing local: as it is
    assert json.loads((ckpt / "quantkit.json").read_text()) == record  # the local file is unchanged
