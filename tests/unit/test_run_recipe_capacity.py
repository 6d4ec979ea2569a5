"""Run recipes' slo:, capacity:, tune: and checkpoint: variants, validated up front."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantkit.errors import UsageError
from quantkit.pipeline.recipe import load_run

RUNS = Path(__file__).resolve().parents[2] / "recipes" / "runs"


def test_demo_tune_reuses_every_stage_of_the_demo():
    demo, tuned = load_run(RUNS / "demo.yaml"), load_run(RUNS / "demo-tune.yaml")
    assert demo.slo == tuned.slo and str(demo.slo) == "ttft_p95=2,tpot_p95=0.15" and demo.tune is None and tuned.tune.budget == 3
    # the fields that make run keys (conversions, capacity, evals) are the same: demo-tune only adds tuning
    for field in ("model", "baseline", "methods", "serve", "bench", "eval", "capacity", "slo"):
        assert getattr(demo, field) == getattr(tuned, field), field


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text("kind: run\nname: r\nmodel: smollm2-135m\n" + body)
    return path


def test_slo_as_a_mapping_and_a_checkpoint_variant(tmp_path):
    plan = load_run(write(tmp_path, "slo: {ttft_p95: 1, tpot_p95: 50ms, attainment: 0.9}\n"
                                    "methods:\n  - name: awq-hub\n    checkpoint: org/Model-AWQ\n"))
    assert str(plan.slo) == "ttft_p95=1,tpot_p95=0.05,attainment=0.9"
    assert plan.methods[0].label() == "awq-hub" and plan.methods[0].method is None
    from quantkit.pipeline.checks import check_plan

    check_plan(plan, "r.yaml")  # a checkpoint: variant has no method, so no calibration to check


@pytest.mark.parametrize("body,message", [
    ("tune: {budget: 2}\n", "set slo: too"),
    ("slo: ttft_p42=1\n", "unknown statistic"),
    ("methods:\n  - method: int8\n    checkpoint: some/dir\n", "not both"),
    ("methods:\n  - name: x\n", "not neither"),
    ("methods:\n  - checkpoint: d\n    num_samples: 4\n", "is not converted"),
    ("slo: ttft_p95=1\ntune: {space: {max_num_seq: [1, 2]}}\n", "unknown tune knob"),
    ("slo: ttft_p95=1\ncapacity: {tolerence: 0.2}\n", "unknown key 'tolerence'"),
])
def test_bad_recipes_are_one_line_errors(tmp_path, body, message):
    with pytest.raises(UsageError, match=message) as info:
        load_run(write(tmp_path, body))
    assert "\n" not in info.value.message
