"""Executor selection, lane resources, the store actor's bookkeeping and the progress view: the pure
logic of the Ray executor (the real cluster is in tests/integration/test_ray.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantkit.console import OutputMode
from quantkit.errors import SetupError, UsageError
from quantkit.pipeline.executors import LocalExecutor, choose
from quantkit.pipeline.progress import LaneView, figure
from quantkit.pipeline.ray_executor import RayExecutor, lane_nodes, reachable, worker_env
from quantkit.pipeline.ray_store import StoreActor
from quantkit.pipeline.recipe import ExecutorSettings, RunRecipe
from quantkit.quantize.recipe import parse_model

NODE = {"name": "vm:abc123", "hostname": "vm", "ip": "10.0.0.2", "ray_node_id": "abc123" * 8, "pid": 7}


def test_recipe_executor_settings():
    run = parse_model("kind: run\nname: x\nmodel: m\nexecutor: {kind: ray, resources: {lane: 1}, max_retries: 0}\n",
                      "r.yaml", RunRecipe)
    assert run.executor.kind == "ray" and run.executor.resources == {"lane": 1} and run.executor.max_retries == 0
    assert RunRecipe(name="x", model="m").executor.kind == "local"
    with pytest.raises(UsageError, match="r.yaml:2: unknown key 'num_gpu' in executor; did you mean 'num_gpus'"):
        parse_model("kind: run\nexecutor: {num_gpu: 1}\nname: x\nmodel: m\n", "r.yaml", RunRecipe)


def test_choose_executor():
    assert isinstance(choose(ExecutorSettings()), LocalExecutor)
    ray = choose(ExecutorSettings(), address="10.0.0.1:6379")  # an address alone means Ray
    assert isinstance(ray, RayExecutor) and ray.address == "10.0.0.1:6379"
    assert isinstance(choose(ExecutorSettings(kind="ray", max_retries=3)), RayExecutor)
    assert isinstance(choose(ExecutorSettings(kind="ray"), kind="local"), LocalExecutor)  # --executor wins
    with pytest.raises(UsageError, match="needs --executor ray"):
        choose(ExecutorSettings(), kind="local", address="h:1")
    with pytest.raises(UsageError, match="unknown executor 'dask'"):
        choose(ExecutorSettings(), kind="dask")
    with pytest.raises(UsageError, match="Ray Client addresses are not supported"):
        choose(ExecutorSettings(), address="ray://head:10001")


def test_an_address_that_answers_nothing_fails_at_once():
    from quantkit.serve.env import free_port

    with pytest.raises(SetupError, match="no Ray cluster answers at 127.0.0.1:"):
        reachable(f"127.0.0.1:{free_port()}")
    with pytest.raises(UsageError, match="give the Ray head as HOST:PORT"):
        reachable("headnode")


def test_free_ports_are_distinct_and_avoid_the_ones_taken():
    import socket

    from quantkit.serve.env import free_ports

    first = free_ports(40)
    assert len(set(first)) == 40
    again = free_ports(40, avoid=set(first))
    assert len(set(again)) == 40 and not set(again) & set(first)
    for port in first[:3]:  # each one is free: it can be bound
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_lane_nodes_refuses_a_lane_no_node_can_hold():
    nodes = [{"NodeID": "a", "Resources": {"CPU": 8.0, "GPU": 1.0, "memory": 64e9, "node:1.2.3.4": 1.0}},
             {"NodeID": "b", "Resources": {"CPU": 8.0, "GPU": 4.0, "memory": 64e9, "lane": 1.0}}]
    assert [n["NodeID"] for n in lane_nodes({"num_cpus": 1, "num_gpus": 2}, nodes)] == ["b"]
    assert [n["NodeID"] for n in lane_nodes({"num_cpus": 1, "num_gpus": 0, "resources": {"lane": 1}}, nodes)] == ["b"]
    with pytest.raises(UsageError, match=r"no node of the Ray cluster can hold a lane \(CPU=1, GPU=8\)"):
        lane_nodes({"num_cpus": 1, "num_gpus": 8}, nodes)


def test_worker_env_names_absolute_folders(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("QUANTKIT_DATA_DIR", "data")
    monkeypatch.delenv("QUANTKIT_MODELS_DIR", raising=False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("UNRELATED", "x")
    env = worker_env()
    assert env["QUANTKIT_DATA_DIR"] == str(tmp_path / "data")
    assert env["QUANTKIT_MODELS_DIR"] == str(tmp_path / "models")
    assert Path(env["QUANTKIT_HOME"]).is_absolute() and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "UNRELATED" not in env


def test_figures():
    assert figure("point", {"concurrency": 4, "output_tok_s": 55.04, "failures": 0}) == "c=4: 55.0 tok/s"
    assert figure("point", {"rate": 2.0, "output_tok_s": 9.0, "failures": 2}) == "rate=2.0: 9.0 tok/s, 2 failed"
    assert figure("convert", {"size_bytes": 63_900_000, "wall_time_s": 14.1}) == "64 MB in 14 s"
    assert figure("bench", {"points": [{"concurrency": 1, "output_tok_s": 20.0}, {"concurrency": 4, "output_tok_s": 50.0}]}) \
        == "best c=4: 50.0 tok/s"
    task = {"task": "arc_easy", "primary_metric": "acc", "metrics": {"acc": {"value": 0.5}}}
    assert figure("eval", {"tasks": [task]}) == "arc_easy acc 0.500"
    assert figure("tune", {"x": 1}) is None and figure("convert", {"size_bytes": 1}) is None
    fidelity = {"figures": {"delta_nll": {"value": 0.01234}, "top1_agreement": {"value": 0.9171}}, "verdict": "pass"}
    assert figure("fidelity", fidelity) == "ΔNLL 0.0123, top-1 0.917: pass"
    assert figure("point", {"window": "c4/3@0", "positions": 256}) is None  # a fidelity window: no figure


def test_store_actor_fails_open_and_planned_stages_of_a_lost_lane(tmp_path):
    actor = StoreActor(str(tmp_path / "results.db"))
    plan = [{"kind": k, "key": f"key-{k}", "model": "tiny", "variant": "w4", "params": {"checkpoint": "/m"}}
            for k in ("convert", "bench", "eval")]
    actor.plan("w4", plan)
    actor.lane_started("w4", NODE)
    rid = actor.begin("w4", NODE, "key-convert", "convert", "tiny", "w4", {"recipe": {}}, None)
    actor.finish("w4", rid, {"size_bytes": 2e6, "wall_time_s": 3}, "/m/quantkit.json")
    rid = actor.begin("w4", NODE, "key-bench", "bench", "tiny", "w4", {}, None)
    actor.add_point("w4", rid, {"concurrency": 1, "output_tok_s": 20.0, "failures": 0})

    ended = actor.close_lane("w4", "its node vm:abc123 was lost")
    assert ended == [("bench", "key-bench"), ("eval", "key-eval")]
    records = {r.kind: r for r in actor.store.records()}
    assert records["convert"].status == "done" and records["convert"].params["node"]["name"] == "vm:abc123"
    assert records["bench"].status == "failed" and "was lost" in records["bench"].error
    assert actor.store.points(records["bench"].id) == [{"concurrency": 1, "output_tok_s": 20.0, "failures": 0}]
    assert records["eval"].status == "failed" and records["eval"].params == {"checkpoint": "/m"}
    assert actor.close_lane("w4", "again") == []  # nothing left open or pending
    kinds = [(e["event"], e.get("stage"), e.get("status")) for e in actor.events_since(0)]
    assert kinds == [("lane", None, "running"), ("stage", "convert", "running"), ("stage", "convert", "done"),
                     ("stage", "bench", "running"), ("point", "bench", None), ("lane", None, "failed")]
    assert actor.events_since(0)[4]["figure"] == "c=1: 20.0 tok/s"


def test_store_actor_retried_lane_interrupts_the_earlier_attempt(tmp_path):
    actor = StoreActor(str(tmp_path / "results.db"))
    actor.lane_started("base", NODE)
    first = actor.begin("base", NODE, "key-bench", "bench", "tiny", "base", {}, None)
    actor.lane_started("base", {**NODE, "name": "vm:def456"})  # Ray ran the lane again elsewhere
    record = actor.store.records()[0]
    assert record.id == first and record.status == "interrupted" and "retried on vm:def456" in record.error


def test_lane_view_json_events(capsys):
    with LaneView(["baseline", "w4"], OutputMode(json=True)) as view:
        view.apply({"event": "stage", "variant": "w4", "stage": "bench", "status": "running", "node": "n1", "t": 1.0})
        view.apply({"event": "point", "variant": "w4", "stage": "bench", "figure": "c=1: 2.0 tok/s", "t": 2.0})
        view.apply({"event": "lane", "variant": "other", "status": "running"})  # not a lane of this run
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [e["event"] for e in lines] == ["stage", "point"]
    row = view.rows["w4"]
    assert (row.stage, row.status, row.node, row.last) == ("bench", "running", "n1", "c=1: 2.0 tok/s")
    assert view.rows["baseline"].status == "queued"
    assert [c.header for c in view.table().columns] == ["variant", "stage", "status", "node", "elapsed", "last"]


def test_a_lane_on_a_worker_that_ignores_sigint_can_still_be_cancelled():
    """Ray cancels a running task with `_thread.interrupt_main()`, a no-op where SIGINT is ignored
    (a worker of a cluster started from a background shell): the lane restores Python's default."""
    import signal
    import subprocess
    import sys

    code = ("import _thread, signal, time\n"
            "from quantkit.pipeline.ray_lane import interruptible\n"
            "assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"
            "interruptible()\n"
            "try:\n"
            "    _thread.interrupt_main(); time.sleep(5); print('not interrupted')\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout.strip() == "interrupted", proc.stderr
