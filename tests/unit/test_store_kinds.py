"""The stage kinds are named once (store/kinds.py): the store, the importer and the report all
read that module, so these checks tie the names to what each of them does with them."""

from __future__ import annotations

import pytest

from quantkit.store import Store, run_key
from quantkit.store.kinds import (IMPORTABLE_KINDS, IMPORTABLE_RESULTS, KINDS, MEASURED_KINDS, POINT_KINDS, REPORTED_KINDS,
                                  RESULT_SCHEMAS, STAGE_KINDS, result_kind, stage_kind)


def test_every_named_subset_is_a_stage_kind():
    assert len(set(STAGE_KINDS)) == len(STAGE_KINDS)
    for subset in (REPORTED_KINDS, MEASURED_KINDS, IMPORTABLE_KINDS):
        assert set(subset) <= set(STAGE_KINDS), subset
    assert set(MEASURED_KINDS) <= set(REPORTED_KINDS)  # a workload's records are ones the report reads


def test_importable_results_are_the_schemas_the_importer_validates_and_carry_their_kind():
    assert sorted(IMPORTABLE_RESULTS) == RESULT_SCHEMAS.names()
    for json_kind, kind in IMPORTABLE_RESULTS.items():
        assert json_kind == result_kind(kind) == f"quantkit.{kind}"
        # the result model writes the same `kind` the importer reads back
        assert RESULT_SCHEMAS.load(json_kind).model_fields["kind"].default == json_kind


def test_the_store_records_each_stage_kind_and_refuses_any_other(tmp_path):
    with Store(tmp_path / "results.db") as store:
        for kind in STAGE_KINDS:
            store.begin(run_key(kind, x=1), kind, "m", "baseline", {})
        assert sorted(r.kind for r in store.records()) == sorted(STAGE_KINDS)
        with pytest.raises(ValueError, match="unknown record kind 'report'"):
            store.begin(run_key("report", x=1), "report", "m", "baseline", {})


def test_the_registry_derives_the_named_subsets_as_they_were():
    assert STAGE_KINDS == tuple(KINDS) and set(STAGE_KINDS) == {"convert", "bench", "eval", "tune", "capacity", "trial"}
    assert REPORTED_KINDS == ("convert", "bench", "eval", "capacity", "tune")  # the report's reading order
    assert MEASURED_KINDS == ("capacity", "tune")
    assert IMPORTABLE_KINDS == ("bench", "eval", "capacity")
    assert POINT_KINDS == ("bench", "capacity")
    for name, entry in KINDS.items():
        assert entry.name == name and stage_kind(name) is entry and entry.result_kind == result_kind(name)
    with pytest.raises(ValueError, match="unknown record kind 'report'"):
        stage_kind("report")


def test_every_kind_s_result_model_resolves_and_carries_its_kind():
    from pydantic import BaseModel

    for entry in KINDS.values():
        model = entry.result_model()
        assert isinstance(model, type) and issubclass(model, BaseModel), entry.name
        if "kind" in model.model_fields:  # a trial is stored as its Trial, which names no kind
            assert model.model_fields["kind"].default == entry.result_kind, entry.name

