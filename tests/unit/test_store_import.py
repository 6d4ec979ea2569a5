"""`quantkit runs import`: standalone bench/eval JSON into the store, then into `compare`."""

from __future__ import annotations

import json

import pytest

from quantkit.report.gather import gather, variant_of as _variant
from quantkit.errors import UsageError
from quantkit.store import Store
from quantkit.store import default_names, import_result


def point(concurrency, tok_s):
    return {"profile": "concurrency", "concurrency": concurrency, "output_len": 256, "num_requests": 4 * concurrency,
            "started_at": "2026-11-30T21:21:10+00:00", "duration_s": 4 * concurrency * 256 / tok_s,
            "successes": 4 * concurrency, "failures": 0, "prompt_tokens": 2048 * concurrency,
            "completion_tokens": 1024 * concurrency, "output_tok_s": tok_s, "total_tok_s": 3 * tok_s, "req_s": tok_s / 256}


def bench_json(tmp_path, name="bench.json", model_name="llama8b-random-int8-cec64e5a", method="int8"):
    data = {
        "schema_version": 1, "kind": "quantkit.bench", "created_at": "2026-11-30T21:21:02+00:00",
        "model_dir": f"/tmp/qkmodels/{model_name}", "model_name": model_name,
        "checkpoint": {"method": method, "weights_bytes": 9_087_541_648},
        "server": None, "workload": {"input_len": 512, "output_len": 256}, "hardware": {"gpu": "NVIDIA H200"},
        "points": [point(1, 265.0), point(64, 8228.0)],
        "complete": True,
    }
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_names_follow_quantkit_s_own_folder_convention():
    assert default_names({"model_name": "llama8b-random-int8-cec64e5a", "checkpoint": {"method": "int8"}}) == (
        "llama8b-random", "int8")
    assert default_names({"model_name": "llama8b-random", "checkpoint": {"method": "none"}}) == (
        "llama8b-random", "baseline")
    # a folder that is not `<model>-<method>-<hash8>` keeps its whole name
    assert default_names({"model_dir": "/x/my-int8", "checkpoint": {"method": "int8"}}) == ("my-int8", "int8")
    # an eval names an unquantized folder "baseline"; a checkpoint quantized elsewhere is never the baseline
    assert default_names({"model_name": "m", "checkpoint": {"method": "baseline"}}) == ("m", "baseline")
    assert default_names({"model_name": "m-gptq", "checkpoint": {"method": "unknown", "quant_method": "gptq"}}) == (
        "m-gptq", "gptq")
    assert default_names({"model_name": "m-q", "checkpoint": {"method": "unknown"}}) == ("m-q", "unknown")


def test_import_is_stored_once_and_compare_sees_it(tmp_path):
    path = bench_json(tmp_path)
    with Store(tmp_path / "r.db") as store:
        first = import_result(store, path)
        again = import_result(store, path)
        assert first["imported"] and first["model"] == "llama8b-random" and first["variant"] == "int8"
        assert not again["imported"] and again["run_key"] == first["run_key"]
        model, variants, _ = gather(store, model="llama8b-random")
        record = variants["int8"]["bench"]
        assert record.status == "done" and [p["output_tok_s"] for p in record.result["points"]] == [265.0, 8228.0]
        assert [p["concurrency"] for p in store.points(record.id)] == [1, 64]
        assert record.params["imported_from"] == str(path.resolve())


def test_an_unfinished_export_is_stored_as_interrupted(tmp_path):
    """A results-dir JSON is rewritten after every point: one copied before its run ended says
    complete: false, and is never stored as a finished (`done`) record."""
    path = bench_json(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "complete": False}))
    with Store(tmp_path / "r.db") as store:
        row = import_result(store, path)
        (record,) = store.records(model="llama8b-random")
        assert record.status == "interrupted" and "complete: false" in record.error and row["note"].startswith("unfinished")
        assert len(store.points(record.id)) == 2  # what it measured is kept


def test_labels_can_be_given(tmp_path):
    path = bench_json(tmp_path, model_name="llama8b-random", method="none")
    with Store(tmp_path / "r.db") as store:
        row = import_result(store, path, model="llama-3.1-8b", variant="bf16-tp2")
        assert (row["model"], row["variant"]) == ("llama-3.1-8b", "bf16-tp2")
        quantized = bench_json(tmp_path, name="q.json")
        import_result(store, quantized, model="llama-3.1-8b", variant="int8-tp2")
        # a variant with no convert record takes its method from the checkpoint, not its label
        _, by_variant, _ = gather(store, model="llama-3.1-8b")
        methods = {name: _variant(store, name, stages, None, None).method for name, stages in by_variant.items()}
        assert methods == {"bf16-tp2": "bf16", "int8-tp2": "int8"}


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("", "is empty"),
    ("{not json", "is not valid JSON"),
    ('{"kind": "quantkit.tune"}', "is not a quantkit bench, eval or capacity result"),
    ('{"kind": "quantkit.bench"}', "does not match the bench result schema"),
])
def test_bad_files_are_one_line_errors_and_store_nothing(tmp_path, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    with Store(tmp_path / "r.db") as store:
        with pytest.raises(UsageError) as err:
            import_result(store, path)
        assert message in err.value.one_line() and "\n" not in err.value.one_line()
        assert store.records() == []
