"""The stage kinds are named once (store/kinds.py): the store, the importer and the report all
read that module, so these checks tie the names to what each of them does with them."""

from __future__ import annotations

import pytest

from quantkit.registry import RESULT_SCHEMAS
from quantkit.store import Store, run_key
from quantkit.store.kinds import (IMPORTABLE_KINDS, IMPORTABLE_RESULTS, MEASURED_KINDS, REPORTED_KINDS, STAGE_KINDS,
                                  result_kind)


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
