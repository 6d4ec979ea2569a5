"""Checkpoint ownership: two stores sharing one models folder never delete each other's work.

Regression test for the data loss a probe found: a second `quantkit run` with another
QUANTKIT_HOME and the same models folder silently replaced the first store's checkpoint. Real
llm-compressor (w4a16-rtn on the 2-layer model: seconds); no vLLM, the recipe converts only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quantkit.checkpoint import ConvertRecord
from quantkit.store import Store

pytestmark = pytest.mark.integration


def run(recipe: Path, home: Path, models: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QUANTKIT_HOME": str(home), "QUANTKIT_MODELS_DIR": str(models), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "quantkit", *args, str(recipe)], capture_output=True, text=True,
                          env=env, timeout=900)


def quantkit(home: Path, models: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QUANTKIT_HOME": str(home), "QUANTKIT_MODELS_DIR": str(models), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "quantkit", *args], capture_output=True, text=True, env=env, timeout=300)


def test_two_stores_one_models_folder_lose_nothing(tiny_llama_dir, tmp_path):
    models = tmp_path / "models"
    recipe = tmp_path / "convert-only.yaml"
    recipe.write_text(f"kind: run\nname: own\nmodel: {tiny_llama_dir}\nbaseline: false\n"
                      "methods: [{method: w4a16-rtn}]\nbench: null\neval: null\n")
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"

    first = run(recipe, home_a, models, "run", "-o", str(tmp_path / "report-a"))
    assert first.returncode == 0, first.stderr[-2000:]
    (folder,) = [p for p in models.iterdir() if p.is_dir() and not p.name.startswith(".")]
    record = ConvertRecord.read(folder)
    assert record.owner and record.owner["store"] == str(home_a / "results.db")
    weights = folder / "model.safetensors"
    stamp = (weights.stat().st_ino, weights.stat().st_mtime_ns)

    # the same recipe from another store: the folder is the same key's work, reused, not replaced
    second = run(recipe, home_b, models, "run", "-o", str(tmp_path / "report-b"))
    assert second.returncode == 0, second.stderr[-2000:]
    assert "reused" in second.stderr
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == stamp
    with Store(home_b / "results.db") as store:
        (convert,) = store.records(kind="convert", status="done")
        assert convert.result["output_dir"] == str(folder) and convert.params.get("adopted") is True

    # a folder another run key made (here: a record whose owner is another key) is never replaced
    foreign = json.loads((folder / "quantkit.json").read_text())
    foreign["owner"] = {"run_key": "another-key", "store": "/elsewhere/results.db"}
    (folder / "quantkit.json").write_text(json.dumps(foreign))
    third = run(recipe, tmp_path / "home-c", models, "run", "-o", str(tmp_path / "report-c"))
    assert third.returncode == 0, third.stderr[-2000:]
    assert "belongs to another run" in third.stderr
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == stamp  # untouched
    beside = [p for p in models.iterdir() if p.name.startswith(folder.name + "-")]
    assert len(beside) == 1 and ConvertRecord.read(beside[0]) is not None

    # a checkpoint whose folder vanished shows as missing, and a run redoes it
    import shutil

    shutil.rmtree(beside[0])
    listed = quantkit(tmp_path / "home-c", models, "runs", "ls", "--kind", "convert", "--json")
    assert [r["status"] for r in json.loads(listed.stdout)] == ["missing"]
    again = run(recipe, tmp_path / "home-c", models, "run", "-o", str(tmp_path / "report-c"))
    assert again.returncode == 0, again.stderr[-2000:]
    assert ConvertRecord.read(beside[0]) is not None

    # models ls names every checkpoint with its records; rm removes a folder and its records
    listed = json.loads(quantkit(home_a, models, "models", "ls", "--json").stdout)
    row = next(r for r in listed if r["path"] == str(folder.resolve()))
    assert row["exists"] and row["records"] == 1 and row["size_bytes"] > 0 and row["method"] == "w4a16-rtn"
    removed = quantkit(tmp_path / "home-c", models, "models", "rm", beside[0].name, "--json")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["removed_records"] >= 1 and not beside[0].exists()
    with Store(tmp_path / "home-c" / "results.db") as store:
        assert not [r for r in store.records() if r.checkpoint_dir() == beside[0].resolve()]
