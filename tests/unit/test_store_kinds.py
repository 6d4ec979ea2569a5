"""The stage kinds are named once (store/kinds.py): the store, the importer and the report all
read that module, so these checks tie the names to what each of them does with them."""

from __future__ import annotations

import pytest

from quantkit.pipeline import measures
from quantkit.pipeline.stages import Lane
from quantkit.store import Store, run_key
from quantkit.store.kinds import (IMPORTABLE_KINDS, IMPORTABLE_RESULTS, KINDS, MEASURED_KINDS, POINT_KINDS, REPORTED_KINDS,
                                  RESULT_SCHEMAS, STAGE_KINDS, result_kind, stage_kind)

BASELINE = Lane("baseline", None)  # a checkpoint's measurement keys are the same whichever lane measures it


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
    assert STAGE_KINDS == tuple(KINDS) and set(STAGE_KINDS) == {"convert", "bench", "eval", "tune", "capacity", "trial",
                                                                     "fidelity"}
    assert REPORTED_KINDS == ("convert", "bench", "eval", "capacity", "tune", "fidelity")  # the report's reading order
    assert MEASURED_KINDS == ("capacity", "tune")
    assert IMPORTABLE_KINDS == ("bench", "eval", "capacity")
    assert POINT_KINDS == ("bench", "capacity", "fidelity")  # a fidelity record's points are its windows
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


def test_the_lane_s_stage_table_lists_every_stage_in_run_order_and_each_measurement_has_its_runner():
    from quantkit.pipeline.stages import STAGES

    # the run order, which the run's summary keeps
    assert [(s.kind, s.place) for s in STAGES] == [("checkpoint", "before"), ("convert", "before"), ("capacity", "server"),
                                                   ("bench", "server"), ("eval", "server"), ("tune", "own"),
                                                   ("fidelity", "own")]
    assert {s.kind for s in STAGES} - {"checkpoint"} <= set(KINDS)  # an existing checkpoint is never stored
    on_server = [s.kind for s in STAGES if s.place == "server"]
    assert all(s.run is None for s in STAGES if s.place == "server") and all(
        s.run is not None for s in STAGES if s.place != "server")
    for name in on_server:
        assert measures.runner(name).kind == name
    for name in set(KINDS) - set(on_server):
        with pytest.raises(ValueError, match="not measured"):
            measures.runner(name)


def test_the_stage_table_picks_each_lane_s_stages(tmp_path):
    from quantkit.pipeline.recipe import MethodEntry, RunRecipe
    from quantkit.pipeline.stages import Lane, lane_stages

    plan = RunRecipe(name="t", model="m", slo="ttft_p95=1", tune={"budget": 3})
    lanes = {"baseline": Lane("baseline", None), "awq": Lane("awq", MethodEntry(method="awq")),
             "kept": Lane("kept", MethodEntry(method="awq", checkpoint=str(tmp_path)))}
    picked = {name: [s.kind for place in ("before", "server", "own") for s in lane_stages(plan, lane, place)]
              for name, lane in lanes.items()}
    assert picked == {"baseline": ["capacity", "bench", "eval", "tune"],
                      "awq": ["convert", "capacity", "bench", "eval", "tune"],
                      "kept": ["checkpoint", "capacity", "bench", "eval", "tune"]}
    plan = RunRecipe(name="t", model="m", bench=None)
    assert [s.kind for s in lane_stages(plan, lanes["awq"], "server")] == ["eval"]
    assert lane_stages(plan, lanes["awq"], "own") == []
    # fidelity: each quantized lane against the baseline (the run's model); the baseline has none
    plan = RunRecipe(name="t", model="m", fidelity={})
    assert {name: [s.kind for s in lane_stages(plan, lane, "own")] for name, lane in lanes.items()} == {
        "baseline": [], "awq": ["fidelity"], "kept": ["fidelity"]}


def test_measurement_keys_and_params_are_what_they_were(tmp_path):
    """Run keys decide resume: the registry's runners must build the keys (and params) the
    pipeline built before them, or every stored measurement would be redone."""
    from quantkit.pipeline.stages import RunContext, measure_keys
    from quantkit.pipeline.recipe import RunRecipe

    for span in ([], ["ttft_p95=2"]):
        plan = RunRecipe(name="t", model="m", slo="ttft_p95=1", capacity={"span": span})
        common = {"hardware": "h", "quantkit": "0"}
        ctx = RunContext(plan=plan, model=None, force=False, vllm="0.32.0", common=common)
        # the fields the stored keys were made with (KEY_FIELDS); a later field joins a key only once
        # set (store.keyed), so a newly added knob or setting leaves this test, and the keys, as they are
        serve = {k: v for k, v in plan.serve.model_dump().items() if k in type(plan.serve).KEY_FIELDS}
        cap = {k: v for k, v in plan.capacity.model_dump().items()
               if k in type(plan.capacity).KEY_FIELDS or (k == "span" and span)}
        assert measure_keys(ctx, BASELINE, "fp") == [
            ("capacity", run_key("capacity", checkpoint="fp", slo=plan.slo, capacity=cap, serve=serve, vllm="0.32.0",
                                 **common)),
            ("bench", run_key("bench", checkpoint="fp", bench=plan.bench.model_dump(), serve=serve, vllm="0.32.0",
                              **common)),
            ("eval", run_key("eval", checkpoint="fp", eval=plan.eval.model_dump(exclude={"grow"}), serve=serve,
                             vllm="0.32.0", **common)),
        ]
    plan = RunRecipe(name="t", model="m", bench=None)
    ctx = RunContext(plan=plan, model=None, force=False, vllm="v")
    assert [kind for kind, _ in measure_keys(ctx, BASELINE, "fp")] == ["eval"]  # no slo: no capacity; no bench
    base = {"checkpoint": str(tmp_path), "fingerprint": "fp", "serve": plan.serve.model_dump()}
    runner = measures.runner("eval")
    assert runner.params(plan, tmp_path, "fp") == {**base, "eval": plan.eval.model_dump(),
                                                    "gates": plan.gates.model_dump()}
    plan = RunRecipe(name="t", model="m", slo="ttft_p95=1")
    assert measures.runner("capacity").params(plan, tmp_path, "fp") == {
        **base, "capacity": plan.capacity.model_dump(), "slo": "ttft_p95=1"}
    assert measures.runner("bench").params(plan, tmp_path, "fp") == {**base, "bench": plan.bench.model_dump()}


class _Result:
    def __init__(self, kind, **fields):
        self.fields, self.path, self.results_file = {"kind": f"quantkit.{kind}", **fields}, f"/r/{kind}.json", f"/r/{kind}.json"

    def model_dump(self, mode=None, exclude=None):
        return dict(self.fields)


def test_a_lane_s_measurements_run_through_their_runners_and_record_what_they_did(tmp_path, monkeypatch):
    from contextlib import contextmanager

    from quantkit.pipeline.stages import RunContext, RunSummary, measure_stages
    from quantkit.pipeline.recipe import RunRecipe

    @contextmanager
    def no_server(folder, serve):
        yield "server"

    class P:
        def __init__(self, n):
            self.n = n

        def model_dump(self, mode=None):
            return {"n": self.n}

    calls = []

    def fake_capacity(server, folder, slo, settings, label, on_point):
        calls.append(("capacity", server, label, str(slo is not None)))
        on_point(P(1))
        return _Result("capacity", capacity={"req_s": 1.0})

    def fake_bench(server, folder, *, concurrency, input_len, output_len, num_prompts, seed, warmup_requests, on_point):
        calls.append(("bench", server, tuple(concurrency), input_len))
        on_point(P(2))
        on_point(P(3))
        return _Result("bench")

    def fake_eval(server, prepared):
        calls.append(("eval", server, prepared))
        return _Result("eval")

    monkeypatch.setattr("quantkit.serve.server.VLLMServer", no_server)
    monkeypatch.setattr("quantkit.measure.capacity.live.run_capacity", fake_capacity)
    monkeypatch.setattr("quantkit.measure.capacity.bench.run_bench", fake_bench)
    monkeypatch.setattr("quantkit.evals.run.run_eval", fake_eval)
    monkeypatch.setattr("quantkit.evals.run.prepare_eval", lambda folder, tasks, **k: f"prepared {tasks}")
    monkeypatch.setattr("quantkit.checkpoint.fingerprint", lambda folder: "fp")
    plan = RunRecipe(name="t", model="m", slo="ttft_p95=1", bench={"concurrency": [1, 2], "input_len": 16},
                     eval={"tasks": "arc_easy", "limit": 4})
    model = type("M", (), {"name": "m", "path": tmp_path})()
    ctx = RunContext(plan=plan, model=model, force=False, vllm="v")
    summary = RunSummary(recipe="t", model="m")
    with Store(tmp_path / "results.db") as store:
        measure_stages(ctx, Lane("baseline", None), tmp_path, store, summary)
        records = {r.kind: r for r in store.records()}
        points = {kind: len(store.points(r.id)) for kind, r in records.items()}
    assert [c[0] for c in calls] == ["capacity", "bench", "eval"] and all(c[1] == "server" for c in calls)
    assert calls[1][2:] == ((1, 2), 16) and calls[2][2] == "prepared arc_easy"
    assert [(o.kind, o.status) for o in summary.outcomes] == [("capacity", "done"), ("bench", "done"), ("eval", "done")]
    base = {"checkpoint": str(tmp_path), "fingerprint": "fp", "serve": plan.serve.model_dump()}
    assert records["capacity"].params == {**base, "capacity": plan.capacity.model_dump(), "slo": "ttft_p95=1"}
    assert records["bench"].params == {**base, "bench": plan.bench.model_dump()}
    assert records["eval"].params == {**base, "eval": plan.eval.model_dump(), "gates": plan.gates.model_dump()}
    assert {k: r.result["kind"] for k, r in records.items()} == {k: f"quantkit.{k}" for k in records}
    assert all(r.status == "done" and r.result_path == f"/r/{k}.json" for k, r in records.items())
    assert points == {"capacity": 1, "bench": 2, "eval": 0}


def test_stored_run_keys_stay_what_they_are(monkeypatch):
    """The keys of records already stored, written out: a change to what goes into a key (or to a
    setting's default) would make every stored run of that kind run again. Pinned from main
    2e61afa; a deliberate key change updates these and says so."""
    from pathlib import Path

    from quantkit.measure.tune import study as tune
    from quantkit.pipeline.stages import RunContext, measure_keys
    from quantkit.pipeline.recipe import RunRecipe

    plan = RunRecipe(name="t", model="m", slo="ttft_p95=1", tune={"budget": 3})
    common = {"hardware": "h", "quantkit": "0"}
    ctx = RunContext(plan=plan, model=None, force=False, vllm="0.32.0", common=common)
    assert measure_keys(ctx, BASELINE, "sha256:fp") == [("capacity", "428f7cf23eb1743958c1"), ("bench", "3f3f8cbccd78b5f8ab97"),
                                              ("eval", "339fa5d102801b87497e")]
    monkeypatch.setattr("quantkit.checkpoint.fingerprint", lambda folder: "sha256:fp")
    study = tune.study_key(Path("/m"), plan.slo, plan.capacity, plan.tune, {"max_num_seqs": [64, 128]},
                           plan.serve, "0.32.0", common)
    assert (study, run_key("tune", study=study, budget=3)) == ("4de844ef2c44c05a731f", "19a80706c4ca70270ae3")


def test_a_standalone_command_and_a_run_stage_record_one_params_shape(tmp_path):
    """`quantkit bench --capacity` and a run's capacity stage: the report reads a record's
    workload from its params, so both build them through the kind's one `params`."""
    from quantkit.measure.capacity.live import CapacitySettings
    from quantkit.pipeline.recipe import RunRecipe
    from quantkit.serve.config import ServeConfig
    from quantkit.store import standalone

    plan = RunRecipe(name="t", model="m", slo="ttft_p95=1", capacity={"input_len": 64, "profile": "poisson"})
    (tmp_path / "config.json").write_text("{}")
    ran = measures.runner("capacity").params(plan, tmp_path.resolve(), "fp")
    with Store(tmp_path / "results.db") as store:
        with standalone(store, "capacity", tmp_path, ServeConfig(), CapacitySettings(input_len=64, profile="poisson"),
                        slo=plan.slo, url=None) as rec:
            rec.finish({"kind": "quantkit.capacity"})
        alone = store.records(kind="capacity")[0].params
    assert set(alone) == set(ran) | {"standalone", "url"}
    assert {k: alone[k] for k in ran if k != "fingerprint"} == {k: v for k, v in ran.items() if k != "fingerprint"}
    assert alone["fingerprint"].startswith("sha256:")
    tune = stage_kind("tune").params(tmp_path, "fp", plan.serve, plan.tune or {"budget": 1}, study="s", slo=plan.slo,
                                     capacity=plan.capacity.model_dump(mode="json"))
    assert set(tune) == {"checkpoint", "fingerprint", "serve", "tune", "study", "slo", "capacity"}


def test_a_setting_added_later_keeps_every_stored_key_until_it_is_set():
    # a newcomer's timed pass added a ServeConfig knob and every stored capacity, bench and eval key
    # changed with it (the keys hashed the whole dump, the new None field included)
    from quantkit.measure.capacity.live import CapacitySettings
    from quantkit.serve.config import ServeConfig
    from quantkit.store import keyed

    class Later(ServeConfig):
        speculative_tokens: int | None = None

    assert keyed(Later()) == keyed(ServeConfig()) and "speculative_tokens" not in keyed(Later())
    assert keyed(Later(speculative_tokens=4))["speculative_tokens"] == 4
    assert "span" not in keyed(CapacitySettings()) and keyed(CapacitySettings(span=["mlperf-server"]))["span"]
    for model in (ServeConfig, CapacitySettings):  # a KEY_FIELDS name that is no field would be a typo
        assert model.KEY_FIELDS <= set(model.model_fields), model.KEY_FIELDS - set(model.model_fields)
