"""Recipes: schema, file:line errors, overrides, hash, method names."""

from __future__ import annotations

import pytest

from quantkit.quantize import recipe as recipes
from quantkit.errors import UsageError


def test_every_builtin_recipe_loads_and_is_named_after_its_method():
    names = recipes.builtin_names()
    assert {"awq", "gptq", "int8", "fp8", "w4a16-rtn", "w8a16"} <= set(names)
    for name in names:
        r = recipes.load(name)
        assert r.name == name and r.method == name
        assert r.needs_calibration == (r.calibration is not None)


def test_unknown_key_is_reported_with_file_line_and_suggestion(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nmethod: gptq\nscheme: W4A16\ncalibration:\n  dataset: c4\n  num_sample: 8\n")
    with pytest.raises(UsageError) as err:
        recipes.load(str(path))
    message = err.value.one_line()
    assert message.startswith(f"{path}:6: unknown key 'num_sample' in calibration")
    assert "did you mean 'num_samples'" in message


def test_top_level_unknown_key_and_bad_yaml(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: x\nmethod: fp8\nscheme: FP8_DYNAMIC\ngroup_sise: 64\n")
    with pytest.raises(UsageError, match=r"r.yaml:4: unknown key 'group_sise'.*group_size"):
        recipes.load(str(path))
    path.write_text("name: x\nmethod: [fp8\n")
    with pytest.raises(UsageError, match=r"r.yaml:\d+: not valid YAML"):
        recipes.load(str(path))


def test_unknown_and_removed_methods():
    with pytest.raises(UsageError, match="unknown method 'gtpq'; did you mean 'gptq'"):
        recipes.check_method("gtpq")
    with pytest.raises(UsageError, match="vLLM removed SqueezeLLM"):
        recipes.check_method("squeezellm")
    with pytest.raises(UsageError, match="unknown recipe 'awk'; did you mean 'awq'"):
        recipes.load("awk")


def test_overrides_change_single_fields_and_the_hash():
    base = recipes.load("gptq")
    changed = recipes.override(base, num_samples=8, seq_len=64, calib="x.jsonl", ignore=["lm_head", "re:.*gate.*"])
    assert changed.calibration.num_samples == 8 and changed.calibration.seq_len == 64
    assert changed.calibration.dataset == "x.jsonl"
    assert changed.ignore == ["lm_head", "re:.*gate.*"]
    assert base.calibration.num_samples == 64  # the original is untouched
    assert changed.hash() != base.hash()
    assert recipes.override(base, num_samples=None).hash() == base.hash()
    with pytest.raises(UsageError, match="group_size"):
        recipes.override(base, group_size=96)


def test_hash_ignores_name_and_description_and_unused_calibration():
    a = recipes.load("fp8")
    b = a.model_copy(update={"name": "other", "description": "something else"})
    assert a.hash() == b.hash()
    # fp8 is data-free: a calibration block cannot change its output, so it does not change the hash
    c = recipes.override(a, num_samples=3)
    assert c.hash() == a.hash()


def test_a_run_recipes_fidelity_stage_takes_the_commands_settings_and_gates(tmp_path):
    from quantkit.fidelity.gate import DEFAULT_MAX_DELTA_NLL
    from quantkit.fidelity.result import FidelitySettings
    from quantkit.pipeline.recipe import load_run

    path = tmp_path / "run.yaml"
    path.write_text("kind: run\nname: r\nmodel: m\nfidelity:\n  windows: 16\n  gates: {min_top1: null}\n")
    stage = load_run(path).fidelity
    assert stage.settings() == FidelitySettings(windows=16)  # the rest as `quantkit fidelity`'s defaults
    assert (stage.gates.max_delta_nll, stage.gates.min_top1) == (DEFAULT_MAX_DELTA_NLL, None)  # null: that gate off
    path.write_text("kind: run\nname: r\nmodel: m\n")
    assert load_run(path).fidelity is None  # off unless asked for
    path.write_text("kind: run\nname: r\nmodel: m\nfidelity:\n  window: 16\n")
    with pytest.raises(UsageError, match=r"run.yaml:5: unknown key 'window' in fidelity.*did you mean 'windows'"):
        load_run(path)


def test_a_fidelity_stage_whose_texts_are_not_there_is_refused_before_any_work(tmp_path, monkeypatch):
    from quantkit.pipeline.checks import check_plan
    from quantkit.pipeline.recipe import load_run

    path = tmp_path / "run.yaml"
    path.write_text("kind: run\nname: r\nmodel: m\neval: null\nfidelity: {windows: 4}\n")
    monkeypatch.setenv("QUANTKIT_DATA_DIR", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"run.yaml: fidelity: .*empty/.* is missing from QUANTKIT_DATA_DIR=.*'wikitext2' texts"):
        check_plan(load_run(path), str(path))
    path.write_text("kind: run\nname: r\nmodel: m\neval: null\nfidelity: {sources: [pile]}\n")
    with pytest.raises(UsageError, match=r"run.yaml: fidelity: unknown fidelity text source 'pile'; choices: wikitext2, c4"):
        check_plan(load_run(path), str(path))
