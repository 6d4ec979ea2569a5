"""`quantkit compare` keeps capacities of different workloads apart (issue 19's two workloads).

The store is the first H200 session's own (tests/data/h200/decision-2026-12-01/raw/results.db: bf16
and fp8 capacity at 512 in / 256 out); a long-context capacity of the baseline is added to a copy,
as `quantkit run benchmarks/gpu/recipes/llama8b-long.yaml --only baseline` stores it. The second
session's store, with both workloads measured, gives the committed reports.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from quantkit.errors import UsageError
from quantkit.measure.stats.slo import Slo
from quantkit.report.gather import compare, parse_workload, pick_workload, workload_of
from quantkit.store import Store

REPORTS = Path(__file__).resolve().parents[2] / "tests/data/h200"
SEED = REPORTS / "decision-2026-12-01/raw/results.db"


@pytest.fixture
def store(tmp_path):
    shutil.copy(SEED, tmp_path / "results.db")
    with Store(tmp_path / "results.db") as s:
        (base,) = [r for r in s.records(kind="capacity", status="done") if r.variant == "baseline"]
        params = json.loads(json.dumps(base.params))
        params["capacity"].update(input_len=4096, output_len=512)
        result = json.loads(json.dumps(base.result))
        result["capacity"]["load"] = 9.0  # a different figure: which record the report used is visible
        s.finish(s.begin("long-baseline-capacity", "capacity", base.model, "baseline", params), result)
        yield s


def rows(result):
    return {r.name: r for r in result["report"].rows}


def test_newest_workload_is_shown_alone_and_the_other_is_named(store, tmp_path):
    result = compare(store, model="llama8b-random", out_dir=tmp_path / "r")
    by_name = rows(result)
    assert by_name["baseline"].capacity.load == 9.0  # the long-context record, the newest
    assert by_name["fp8"].capacity is None  # fp8 has no long-context capacity: not mixed in from 512/256
    (note,) = [n for n in result["report"].notes if n.startswith("capacity shown for")]
    assert "4096 in / 512 out" in note and "also measured: 512 in / 256 out" in note and "--workload" in note


def test_a_named_workload_compares_its_own_records(store, tmp_path):
    result = compare(store, model="llama8b-random", out_dir=tmp_path / "r", workload=(512, 256))
    by_name = rows(result)
    assert by_name["baseline"].capacity.load == 70 and by_name["fp8"].capacity.load == 111
    decision = result["report"].decision
    assert decision.status == "recommended" and decision.recommended.variant == "fp8"
    assert decision.ratio_vs_baseline == pytest.approx(41.53 / 26.0, rel=0.01)
    # a recipe's report asks for its whole workload (profile, lengths, SLO)
    full = compare(store, model="llama8b-random", out_dir=tmp_path / "r2",
                   workload=("burst", 512, 256, Slo.model_validate("ttft_p95=1,tpot_p95=0.05")))  # measured as waves: migrated to burst
    assert rows(full)["fp8"].capacity.load == 111


def test_an_unmeasured_workload_is_a_one_line_error(store, tmp_path):
    with pytest.raises(UsageError, match="no capacity was measured at 1024 in / 128 out; measured: 4096 in / 512 out"):
        compare(store, model="llama8b-random", out_dir=tmp_path / "r", workload=(1024, 128))
    assert parse_workload("4096/512") == (4096, 512) == parse_workload("4096x512")
    with pytest.raises(UsageError, match="give e.g. --workload 512/256"):
        parse_workload("long")


def test_the_second_sessions_store_gives_its_two_decisions(tmp_path):
    shutil.copy(REPORTS / "decision-2026-12-01-tuned-long/raw/results.db", tmp_path / "results.db")
    with Store(tmp_path / "results.db") as store:
        short = compare(store, model="llama8b-random", out_dir=tmp_path / "512", workload=(512, 256))
        long = compare(store, model="llama8b-random", out_dir=tmp_path / "4096", workload=(4096, 512))
    assert rows(long)["baseline"].capacity.load == 9 and rows(long)["fp8"].capacity.load == 14
    assert long["report"].decision.ratio_vs_baseline == pytest.approx(3.448 / 2.057, rel=0.01)
    assert rows(short)["fp8"].capacity.load == 111 and rows(short)["fp8"].capacity_tuned.load == 111  # defaults kept
    # int8's capacity was stopped at the session's deadline: said once, not "interrupted: interrupted"
    assert rows(short)["int8"].error == "capacity interrupted"


def test_a_recipes_workload_without_a_finished_capacity_keeps_its_failed_record(tmp_path):
    shutil.copy(REPORTS / "decision-2026-12-01-tuned-long/raw/results.db", tmp_path / "results.db")
    with Store(tmp_path / "results.db") as store:
        capacities = store.records(kind="capacity")
    # int8's 512/256 capacity was interrupted; beside it, the long-context capacities that finished
    (int8,) = [r for r in capacities if r.variant == "int8"]
    long = [r for r in capacities if r.status == "done" and workload_of(r)[1] == 4096]
    kept, notes = pick_workload([int8, *long], workload_of(int8))  # as int8's recipe asks for its report
    assert kept == [int8]  # shown as interrupted, not dropped, and no long-context figure in its place
    assert notes == ["no capacity of this workload is stored; also measured: 4096 in / 512 out, burst profile (c prompts at "
                     "once: not a steady state) under "
                     "ttft_p95=1,tpot_p95=0.05 (`quantkit compare --workload IN/OUT` shows one of them)"]
