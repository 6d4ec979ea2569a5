"""Issue 39: a run recipe's variants. Calibration keys on a data-free method are refused as
`convert --method fp8 --num-samples 8` is (one rule, recipe.refuse_calibration), and two entries
that are one variant under two names (the same conversion, or the same checkpoint) are refused:
their one run key would name both, the second conversion replacing the first's record and
leaving a checkpoint no record names. Entries that differ get keys and folders of their own."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from quantkit.errors import UsageError
from quantkit.methods import METHODS
from quantkit.pipeline.stages import checkpoint_dir, convert_key
from quantkit.pipeline.recipe import load_run

REPO = Path(__file__).resolve().parents[2]
DATA_FREE = [m.name for m in METHODS if not m.calibrated]
CALIBRATED = ", ".join(METHODS.calibrated())

# Calibration keys as a recipe may spell them (a file that does not exist among them: it was
# written into the stored recipe), and the words the refusal starts with.
CALIBRATION_KEYS = [
    ("num_samples: 32", "num_samples does not apply"),
    ("num_samples: 1", "num_samples does not apply"),
    ("seq_len: 64", "seq_len does not apply"),
    ("calib: /nonexistent/calib.jsonl", "calib does not apply"),
    ("calib: c4", "calib does not apply"),
    ("calib: allenai/c4", "calib does not apply"),
    ("num_samples: 32, seq_len: 64", "num_samples and seq_len do not apply"),
    ("num_samples: 4, seq_len: 8, calib: x.jsonl", "num_samples and seq_len and calib do not apply"),
]


def write(tmp_path: Path, methods: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"kind: run\nname: t\nmodel: smollm2-135m\nbench: null\neval: null\nmethods:\n{methods}")
    return path


@pytest.mark.parametrize("keys,words", CALIBRATION_KEYS, ids=[k for k, _ in CALIBRATION_KEYS])
@pytest.mark.parametrize("method", DATA_FREE)
@pytest.mark.parametrize("spelled", ["method", "upper-case", "named", "recipe"])
def test_calibration_keys_on_a_data_free_variant_are_refused(tmp_path, method, keys, words, spelled):
    entry = {"method": f"method: {method}", "upper-case": f"method: {method.upper()}",
             "named": f"method: {method}, name: {method}cal",
             "recipe": f"method: {method}, recipe: {method}, name: mine"}[spelled]
    path = write(tmp_path, f"  - {{{entry}, {keys}}}\n")
    with pytest.raises(UsageError) as refused:
        load_run(path)
    line = refused.value.one_line()
    assert line.startswith(f"{path}: method ") and f"{words} to {method}: it is data-free (no calibration)" in line
    assert f"a calibrated method ({CALIBRATED}), or add a calibrated KV cache (kv_cache: fp8)" in line
    assert "\n" not in line


@pytest.mark.parametrize("keys,words", CALIBRATION_KEYS[:3], ids=[k for k, _ in CALIBRATION_KEYS[:3]])
@pytest.mark.parametrize("method", DATA_FREE)
def test_a_calibrated_kv_cache_takes_the_calibration_keys(tmp_path, method, keys, words):
    """kv_cache: fp8 calibrates any method (its K/V scales): the keys then shape the result."""
    run = load_run(write(tmp_path, f"  - {{method: {method}, kv_cache: fp8, {keys}}}\n"))
    assert run.methods[0].quant_recipe().needs_calibration


@pytest.mark.parametrize("method", METHODS.calibrated())
def test_calibrated_methods_take_the_calibration_keys(tmp_path, method):
    run = load_run(write(tmp_path, f"  - {{method: {method}, num_samples: 8, seq_len: 64, calib: c4}}\n"))
    calibration = run.methods[0].quant_recipe().calibration
    assert (calibration.num_samples, calibration.seq_len) == (8, 64)


# Two entries that are one variant: the same conversion (whatever the spelling) or the same checkpoint.
SAME = {
    "fp8-named": "  - method: fp8\n  - {method: fp8, name: fp8cal}\n",
    "fp8-upper-case": "  - method: fp8\n  - {method: FP8, name: fp8b}\n",
    "fp8-its-recipe": "  - method: fp8\n  - {method: fp8, name: f2, recipe: fp8}\n",
    "rtn-default-backend": "  - method: w4a16-rtn\n  - {method: w4a16-rtn, name: r2, backend: llmcompressor}\n",
    "gptq-default-calib": "  - method: gptq\n  - {method: gptq, name: g2, calib: c4}\n",
    "gptq-default-samples": "  - method: gptq\n  - {method: gptq, name: g2, num_samples: 64, seq_len: 512}\n",
    "gptq-same-samples": "  - {method: gptq, num_samples: 32}\n  - {method: gptq, name: g2, num_samples: 32}\n",
    "gptq-default-group": "  - method: gptq\n  - {method: gptq, name: g2, group_size: 128}\n",
    "int8-kv": "  - {method: int8, kv_cache: fp8}\n  - {method: int8, kv_cache: fp8, name: k2}\n",
    "first-and-third": "  - method: fp8\n  - method: gptq\n  - {method: fp8, name: again}\n",
}
SAME_CHECKPOINT = {
    "hub-id": "  - {checkpoint: org/Model-AWQ, name: a}\n  - {checkpoint: org/Model-AWQ, name: b}\n",
    "relative-path": "  - {checkpoint: ./ckpt, name: a}\n  - {checkpoint: ckpt/, name: b}\n",
    "absolute-path": "  - {checkpoint: /models/x, name: a}\n  - {checkpoint: /models/./x/, name: b}\n",
}


def keys_and_folders(run) -> tuple[list[str], list[Path]]:
    ctx = SimpleNamespace(model=SimpleNamespace(name="m", fingerprint=lambda: "sha256:base"),
                          common={"hardware": "h", "quantkit": "v"})
    converted = [e for e in run.methods if e.method is not None]
    return [convert_key(ctx, e) for e in converted], [checkpoint_dir(ctx, e) for e in converted]


@pytest.mark.parametrize("methods", list(SAME.values()), ids=list(SAME))
def test_one_conversion_under_two_names_is_refused(tmp_path, methods):
    path = write(tmp_path, methods)
    with pytest.raises(UsageError) as refused:
        load_run(path)
    line = refused.value.one_line()
    assert line.startswith(f"{path}: methods ") and "are the same conversion (method " in line
    assert "one variant under two names; remove one, or make them differ" in line and "\n" not in line
    # what is refused is what collided: the two entries' run keys were one
    from quantkit import safeload
    from quantkit.pipeline.recipe import MethodEntry, RunRecipe

    data, _ = safeload.load_yaml(path.read_text(), str(path))
    entries = [MethodEntry.model_validate(m) for m in data["methods"]]
    keys, _ = keys_and_folders(RunRecipe(name="t", model="m", methods=entries))
    assert len(set(keys)) < len(keys)


@pytest.mark.parametrize("methods", list(SAME_CHECKPOINT.values()), ids=list(SAME_CHECKPOINT))
def test_one_checkpoint_under_two_names_is_refused(tmp_path, methods):
    path = write(tmp_path, methods)
    with pytest.raises(UsageError, match=r"methods a and b are the same checkpoint \(.*\): one variant under two names"):
        load_run(path)


DIFFERENT = {
    "gptq-fewer-samples": "  - method: gptq\n  - {method: gptq, name: g32, num_samples: 32}\n",
    "gptq-shorter": "  - method: gptq\n  - {method: gptq, name: g64, seq_len: 64}\n",
    "gptq-group": "  - method: gptq\n  - {method: gptq, name: g64, group_size: 64}\n",
    "gptq-backend": "  - method: gptq\n  - {method: gptq, name: gm, backend: gptqmodel}\n",
    "fp8-kv": "  - method: fp8\n  - {method: fp8, name: fp8kv, kv_cache: fp8}\n",
    "fp8-kv-calibrated": "  - {method: fp8, kv_cache: fp8}\n  - {method: fp8, name: fp8cal, kv_cache: fp8, num_samples: 32}\n",
    "awq-calib-file": "  - method: awq\n  - {method: awq, name: awq-mine, calib: /data/mine.jsonl}\n",
    "two-methods": "  - method: fp8\n  - method: w8a16\n  - method: w4a16-rtn\n",
    "two-checkpoints": "  - {checkpoint: org/A, name: a}\n  - {checkpoint: org/B, name: b}\n",
}


@pytest.mark.parametrize("methods", list(DIFFERENT.values()), ids=list(DIFFERENT))
def test_variants_that_differ_each_get_their_own_key_and_folder(tmp_path, methods):
    run = load_run(write(tmp_path, methods))
    keys, folders = keys_and_folders(run)
    assert len(set(keys)) == len(keys) and len(set(folders)) == len(folders)


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QUANTKIT_HOME": str(home), "QUANTKIT_MODELS_DIR": str(home / "models-out"), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "quantkit", *args], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("methods,words", [
    ("  - method: fp8\n  - {method: fp8, name: fp8cal, num_samples: 32}\n", "num_samples does not apply to fp8"),
    ("  - {method: w4a16-rtn, calib: /nonexistent/calib.jsonl}\n", "calib does not apply to w4a16-rtn"),
    ("  - method: fp8\n  - {method: fp8, name: fp8cal}\n", "methods fp8 and fp8cal are the same conversion"),
], ids=["the-issues-recipe", "missing-calib-file", "same-conversion"])
def test_quantkit_run_refuses_them_in_one_line_and_stores_nothing(tmp_path, methods, words):
    home = tmp_path / "home"
    home.mkdir()
    from quantkit.store import Store, run_key

    with Store(home / "results.db") as store:
        store.finish(store.begin(run_key("bench", kept=1), "bench", "m", "baseline", {}), {"kind": "quantkit.bench"})
    recipe = write(tmp_path, methods)
    proc = cli(home, "run", str(recipe), "--json")
    assert proc.returncode == 2, proc.stderr
    assert words in json.loads(proc.stdout)["error"]
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: ") and words in errors[0], proc.stderr
    with sqlite3.connect(home / "results.db") as db:
        assert db.execute("SELECT kind, status FROM records").fetchall() == [("bench", "done")]
    assert not (home / "models-out").exists()
