"""The report's typed seam (report/records.py): stored result JSON is validated once, where the
Variants are built, into its result model's tolerant form; the report reads attributes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from quantkit.measure.capacity.bench import BenchRun
from quantkit.measure.capacity.live import CapacityResult
from quantkit.report import build as R
from quantkit.report import records


def test_an_old_record_missing_fields_still_loads_with_the_model_s_defaults():
    # a bench record of an older quantkit: no server, no knee, a point without most of its fields
    bench = records.read(BenchRun, {"model_dir": "/m", "points": [{"profile": "concurrency", "concurrency": 1,
                                                                    "ttft": {"p50": 0.01}, "retired_field": 3}]})
    assert isinstance(bench, BenchRun) and bench.server is None and bench.complete is False
    point = bench.points[0]
    assert point.ttft.p50 == 0.01 and point.ttft.p95 is None and point.successes is None
    assert not hasattr(point, "retired_field")  # unknown stored keys are ignored
    # a capacity's settings stored before profiles had names keep the model's validators (rate -> poisson)
    assert records.read(CapacityResult, {"settings": {"profile": "rate"}}).settings.profile == "poisson"


def test_a_stored_value_of_the_wrong_type_fails_at_the_boundary():
    with pytest.raises(ValidationError):
        R.Variant(name="b", method="bf16", model_dir="/m", bench={"points": [{"output_tok_s": "fast"}]})


def test_a_field_the_model_does_not_have_is_an_error_not_a_dash():
    # a renamed result field: the report's read fails loudly instead of printing "—"
    v = R.Variant(name="b", method="bf16", model_dir="/m", bench={"model_dir": "/m"})
    with pytest.raises(AttributeError):
        v.bench.output_tokens_per_s  # noqa: B018


def test_variant_fields_are_typed_from_dicts_and_strict_models_alike():
    strict = BenchRun(model_dir="/m")
    for given in (strict, strict.model_dump(mode="json")):
        v = R.Variant(name="b", method="bf16", model_dir="/m", bench=given)
        assert isinstance(v.bench, BenchRun) and type(v.bench) is records.Bench
    v.capacity = {"slo": "ttft_p95=1"}  # assignment is validated too (ladders.py, proxy.py assign)
    assert type(v.capacity) is records.Capacity and str(v.capacity.slo) == "ttft_p95=1"


def test_as_model_gives_the_strict_model_or_fails_when_a_field_is_missing():
    with pytest.raises(ValidationError):
        records.as_model(CapacityResult, records.read(CapacityResult, {"slo": "ttft_p95=1"}))


def test_a_result_s_plain_sub_dicts_are_read_as_their_shapes_and_stored_as_written():
    from quantkit.checkpoint import ConvertRecord
    from quantkit.evals.results import EvalRun

    hardware = {"machine": "x86_64", "cpu": "Xeon", "cpu_count": 16}  # machine.hardware() without a GPU
    written = BenchRun(model_dir="/m", hardware=hardware, workload={"input_len": 512, "output_len": 256},
                       checkpoint={"method": "awq", "quantization_config": {
                           "quant_method": "compressed-tensors", "format": "pack-quantized",
                           "config_groups": {"group_0": {"weights": {"num_bits": 4, "symmetric": False}}}}})
    assert written.model_dump(mode="json")["hardware"] == hardware  # the store keeps what was written
    bench = records.read(BenchRun, written)
    assert bench.hardware.device == "Xeon" and bench.hardware.gpu is None and bench.workload.output_len == 256
    assert bench.checkpoint.quantization_config.weight_bits == 4 and bench.checkpoint.method == "awq"
    assert records.read(BenchRun, {"model_dir": "/m"}).hardware.device is None  # none stored: nothing set

    convert = records.read(ConvertRecord, {"recipe": {"name": "awq", "method": "awq", "scheme": "W4A16_ASYM"},
                                           "calibration": {"dataset": "c4", "num_samples": 64},
                                           "quantization_config": {"quant_method": "gptq", "bits": 4}})
    assert convert.recipe.ignore == ["lm_head"] and convert.calibration.num_samples == 64
    assert convert.quantization_config.weight_bits == 4 and convert.vllm_check is None
    # a stored recipe is read as written, even one naming a method this quantkit no longer registers
    gone = records.read(ConvertRecord, {"recipe": {"name": "x", "method": "retired-method", "scheme": "W4A16"}})
    assert gone.recipe.method == "retired-method"
    run = records.read(EvalRun, {"server": {"vllm_version": "0.26.0"}, "protocol": {"seeds": {"random_seed": 0}}})
    assert run.server.vllm_version == "0.26.0" and run.protocol.seeds == {"random_seed": 0}
    with pytest.raises(ValidationError):
        records.read(BenchRun, {"hardware": {"gpu_count": "several"}})


def test_a_record_s_params_are_read_typed():
    from quantkit.store import Record

    def record(kind, params):
        return Record(id=1, run_key="k", kind=kind, model="m", variant="v", status="done", params=params, result=None,
                      result_path=None, error=None, recipe_hash=None, started_at="", finished_at=None)

    # capacity settings stored before profiles had names were a burst
    old = records.params(record("capacity", {"capacity": {"input_len": 512, "output_len": 256}, "slo": "ttft_p95=1"}))
    assert (old.capacity.profile, old.capacity.input_len, str(old.slo)) == ("burst", 512, "ttft_p95=1")
    gated = record("eval", {"checkpoint": "/m", "gates": {"min_recovery": 0.9, "min_task_recovery": None, "tasks": {}}})
    assert records.params(gated).checkpoint == "/m" and records.gates_of(gated) == {"min_recovery": 0.9}
    assert records.gates_of(record("eval", {})) == {}


def test_a_driver_a_result_names_reaches_the_report_s_environment():
    from quantkit.report.build import Variant
    from quantkit.report.gather import environment

    bench = {"model_dir": "/m", "hardware": {"gpu": "NVIDIA H200", "gpu_count": 1, "cpu_count": 16, "driver": "570.86"}}
    env = environment([Variant(name="baseline", method="bf16", model_dir="/m", bench=bench)])
    assert (env["device"], env["driver"]) == ("NVIDIA H200", "570.86")
    assert "driver" not in environment([Variant(name="b", method="bf16", model_dir="/m",
                                                bench={"model_dir": "/m", "hardware": {"cpu": "Xeon"}})])
