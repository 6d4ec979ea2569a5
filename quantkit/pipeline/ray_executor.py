"""The Ray executor: one variant per lane, lanes in parallel as the cluster's resources allow.

`quantkit run RECIPE --executor ray [--address HEAD:6379]`. Without an address (and without
$RAY_ADDRESS) a Ray instance is started on this machine and stopped at the end; with one, the run
joins that cluster as a driver (it must run on a node of the cluster: the store is on the driver).

- A lane is one Ray task (`ray_lane.run_variant`: convert, then one vLLM server for the
  measurements) asking for what it needs: `executor.num_gpus`, else tensor x pipeline parallel
  GPUs on a GPU cluster (none when vLLM places its own workers through Ray), `executor.num_cpus`
  (1), `executor.memory_gb`, `executor.resources`. A lane no node can hold is a usage error
  before anything runs.
- The store stays on the driver (`ray_store.StoreActor`); run keys are built from the driver's run
  context, as the local executor's are, so a run started locally can be finished on a cluster and
  vice versa. Lanes whose stages are all done are skipped before anything is submitted. Joining a
  cluster, the nodes that can hold a lane are asked first for their quantkit and vLLM versions and
  hardware: they must agree (the keys name them).
- Faults: Ray retries a lane whose node or worker process was lost (`executor.max_retries`, 1);
  after that its open and pending stages are recorded failed with the reason, and the other lanes
  go on. Ctrl-C (or SIGTERM) cancels every lane: each task gets KeyboardInterrupt, so its vLLM
  server is torn down and its records say interrupted; a task still running after a grace period
  is killed, and its server goes down with it (the server's watchdog, serve/group.Reaper).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from .. import __version__, settings
from ..console import OutputMode, info, warn
from ..errors import BackendError, QuantkitError, SetupError, UsageError
from ..serve.env import free_port
from ..store import Store
from .progress import LaneView
from .ray_lane import converted, finished, method_folder, planned_stages, run_variant
from .ray_store import StoreActor
from .recipe import ExecutorSettings
from .stages import Lane, RunContext, RunSummary, StageOutcome, convert_key, run_lane

CANCEL_GRACE_S = 30.0  # Ctrl-C: how long lanes get to stop their servers before they are killed
PROBE_TIMEOUT_S = 600.0  # the nodes' quantkit/vLLM/hardware probe (a node still starting workers)
POLL_S = 0.5  # how often the progress view asks the store actor for news
# what a worker inherits from the driver's environment (settings, Hub and vLLM options)
FORWARDED_PREFIXES = ("QUANTKIT_", "HF_", "VLLM_", "TRANSFORMERS_", "TOKENIZERS_")


class RayExecutor:
    def __init__(self, config: ExecutorSettings | None = None, output: OutputMode | None = None):
        self.config = config or ExecutorSettings(kind="ray")
        self.output = output or OutputMode()
        self.address = self.config.address or os.environ.get("RAY_ADDRESS") or None
        if self.address and self.address.startswith("ray://"):
            raise UsageError(f"--address {self.address}: Ray Client addresses are not supported (the result store "
                             "lives with the driver); run quantkit on a node of the cluster with --address HEAD:PORT, "
                             "or through `ray job submit`")
        # what the benchmark reads: connect time; per lane when it was submitted and returned, and
        # how long its task body ran on the worker
        self.timings: dict[str, Any] = {"lanes": {}}
        self.seen = 0  # store-actor events shown so far

    # -- the run

    def run(self, ctx: RunContext, lanes: list[Lane], store: Store, summary: RunSummary) -> None:
        import ray

        t0 = time.monotonic()
        self.connect()
        self.timings["connect_s"] = time.monotonic() - t0
        try:
            self.run_connected(ray, ctx, lanes, store, summary)
        finally:
            ray.shutdown()  # a local instance stops; a cluster's job ends and Ray reaps its workers

    def connect(self) -> None:
        import ray

        quiet = self.output.json or self.output.quiet
        options: dict[str, Any] = {"runtime_env": {"env_vars": worker_env()}, "log_to_driver": not quiet,
                                   "namespace": "quantkit"}
        try:
            if self.address is None:
                # its own dashboard port: Ray's default (8265) may be another Ray's on this machine
                ray.init(address="local", include_dashboard=False, dashboard_port=free_port(), **options)
                info(f"Ray: a local instance with {ray.cluster_resources().get('CPU', 0):.0f} CPUs, "
                     f"{ray.cluster_resources().get('GPU', 0):.0f} GPUs")
            else:
                reachable(self.address)  # Ray itself retries an address that answers nothing for minutes
                ray.init(address=self.address, **options)
                info(f"Ray: joined the cluster at {self.address} ({len(alive_nodes())} nodes)")
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
            raise SetupError(f"cannot reach {where}: {first[:300]}; start one with `ray start --head` (a cluster with "
                             "token authentication also needs RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN here)") from None

    def run_connected(self, ray, ctx: RunContext, lanes: list[Lane], store: Store, summary: RunSummary) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        request = self.lane_request(ray, ctx)
        nodes = lane_nodes(request, alive_nodes())
        if self.address is not None:
            self.check_nodes(ray, ctx, nodes)
        here = ray.get_runtime_context().get_node_id()
        actor = ray.remote(num_cpus=0, max_restarts=0)(StoreActor).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote(str(store.path))
        task = ray.remote(run_variant)
        outcomes: dict[str, list[StageOutcome]] = {lane.label: [] for lane in lanes}
        pending: dict[Any, str] = {}
        with LaneView([lane.label for lane in lanes], self.output) as view:
            try:
                for lane in lanes:
                    if finished(ctx, lane, store):  # every stage done: skipped here, nothing submitted
                        done = RunSummary(recipe=summary.recipe, model=summary.model)
                        run_lane(ctx, lane, store, done)
                        outcomes[lane.label] = done.outcomes
                        view.apply({"event": "lane", "variant": lane.label, "status": "done earlier", "t": time.time()})
                        continue
                    ray.get(actor.plan.remote(lane.label, planned_stages(ctx, lane, store)[0]))
                    options = dict(request, name=f"quantkit:{lane.label}", max_retries=self.config.max_retries,
                                   retry_exceptions=False)
                    node = preferred_node(ray, ctx, lane, store)
                    if node is not None:
                        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
                    pending[task.options(**options).remote(ctx, lane, actor, str(store.path), __version__)] = lane.label
                    self.timings["lanes"][lane.label] = {"submitted": time.time()}
                    view.apply({"event": "lane", "variant": lane.label, "status": "queued", "t": time.time()})
                self.wait(ray, pending, actor, view, outcomes)
            except KeyboardInterrupt:
                self.cancel(ray, pending, actor, view, [lane.label for lane in lanes])
                raise
            except ray.exceptions.RayActorError as exc:
                raise BackendError(f"the result store's actor on this node was lost ({type(exc).__name__}: "
                                   f"{' '.join(str(exc).split())[:200]}); every record made before it is in "
                                   f"{store.path}: run again to resume") from None
            finally:
                ray.kill(actor)
        summary.outcomes.extend(o for lane in lanes for o in outcomes[lane.label])

    def wait(self, ray, pending: dict[Any, str], actor, view: LaneView, outcomes: dict[str, list[StageOutcome]]) -> None:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            self.pump(ray, actor, view)
            for ref in ready:
                label = pending.pop(ref)
                self.timings["lanes"][label]["returned"] = time.time()
                try:
                    result = ray.get(ref)
                    outcomes[label] = result["outcomes"]
                    self.timings["lanes"][label]["work_s"] = result["ended"] - result["started"]
                    # an attempt before a retry may have left records open
                    ray.get(actor.close_lane.remote(label, "interrupted: its node was lost; the lane was retried",
                                                    "interrupted"))
                    counts = {s: sum(o.status == s for o in outcomes[label]) for s in ("done", "skipped", "failed")}
                    view.apply({"event": "lane", "variant": label, "status": "ended", "t": time.time(),
                                "figure": ", ".join(f"{n} {s}" for s, n in counts.items() if n)})
                except ray.exceptions.RayError as exc:
                    reason = self.explain(ray, exc, view.rows[label].node)
                    ended = ray.get(actor.close_lane.remote(label, reason))
                    outcomes[label] = [StageOutcome(variant=label, kind=kind, status="failed", run_key=key, error=reason)
                                       for kind, key in ended] or [
                        StageOutcome(variant=label, kind="lane", status="failed", run_key="-", error=reason)]
                    warn(f"[{label}] {reason}; the other variants go on")
            self.pump(ray, actor, view)

    def pump(self, ray, actor, view: LaneView) -> None:
        """Show the store actor's events that this driver has not shown yet."""
        events = ray.get(actor.events_since.remote(self.seen))
        self.seen += len(events)
        for event in events:
            view.apply(event)
            lane = self.timings["lanes"].get(event["variant"])
            if lane is not None and event["event"] == "lane" and event.get("status") == "running":
                lane.setdefault("started", event["t"])  # the first attempt's start

    def cancel(self, ray, pending: dict[Any, str], actor, view: LaneView, labels: list[str]) -> None:
        """Ctrl-C: every lane gets KeyboardInterrupt (its server stops, its records say interrupted);
        what still runs after the grace period (or a second Ctrl-C) is killed with its worker."""
        warn(f"interrupted: stopping {len(pending)} lane(s) and their vLLM servers (up to {CANCEL_GRACE_S:.0f} s)")
        for ref in pending:
            ray.cancel(ref)
        deadline = time.monotonic() + CANCEL_GRACE_S
        try:
            while pending and time.monotonic() < deadline:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=1.0)
                for ref in ready:
                    pending.pop(ref)
        except KeyboardInterrupt:
            pass
        for ref in pending:
            ray.cancel(ref, force=True)
        if pending:
            ray.wait(list(pending), num_returns=len(pending), timeout=10.0)
        try:
            for label in labels:
                ray.get(actor.close_lane.remote(label, "interrupted: the run was stopped", "interrupted"), timeout=10)
            self.pump(ray, actor, view)
        except (ray.exceptions.RayError, KeyboardInterrupt):
            pass  # the store actor is gone; the next run marks rows left running as interrupted

    def explain(self, ray, exc: Exception, node: str = "-") -> str:
        """Why a lane's task ended without its outcomes, in one line (Ray's own text is long)."""
        retried = f" (after {self.config.max_retries} retr{'y' if self.config.max_retries == 1 else 'ies'})" \
            if self.config.max_retries else ""
        cause = getattr(exc, "cause", None)
        if isinstance(exc, ray.exceptions.RayTaskError) and cause is not None:
            if isinstance(cause, QuantkitError):
                return cause.one_line()
            if isinstance(cause, (KeyboardInterrupt, ray.exceptions.TaskCancelledError)):
                return "interrupted: the run was stopped"
            return f"{type(cause).__name__}: {' '.join(str(cause).split())[:300]}"
        if isinstance(exc, ray.exceptions.NodeDiedError):
            return f"its node {node} was lost{retried} (Ray: NodeDiedError)"
        if isinstance(exc, ray.exceptions.WorkerCrashedError):
            return f"its worker process on {node} died{retried} (Ray: WorkerCrashedError; out of memory?)"
        if isinstance(exc, ray.exceptions.TaskCancelledError):
            return "interrupted: the run was stopped"
        first = " ".join(str(exc).split())[:300]
        return f"{type(exc).__name__} on {node}{retried}: {first}"

    # -- resources and nodes

    def lane_request(self, ray, ctx: RunContext) -> dict[str, Any]:
        """The Ray task options of one lane: what a variant's chain needs."""
        c, serve = self.config, ctx.plan.serve
        if c.num_gpus is not None:
            gpus = c.num_gpus
        elif serve.distributed_executor_backend == "ray":
            gpus = 0  # vLLM reserves its tensor/pipeline-parallel GPUs itself, in a placement group
        elif ray.cluster_resources().get("GPU", 0):
            gpus = (serve.tensor_parallel_size or 1) * (serve.pipeline_parallel_size or 1)
        else:
            gpus = 0
        request: dict[str, Any] = {"num_cpus": c.num_cpus if c.num_cpus is not None else 1, "num_gpus": gpus}
        if c.resources:
            request["resources"] = dict(c.resources)
        if c.memory_gb:
            request["memory"] = int(c.memory_gb * 2**30)
        return request

    def check_nodes(self, ray, ctx: RunContext, nodes: list[dict[str, Any]]) -> None:
        """The nodes that can hold a lane run the same quantkit and vLLM on the same hardware (the
        run keys name them); the keys take theirs when the driver's node differs (a CPU head)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from .ray_lane import node_facts

        probe = ray.remote(num_cpus=0, max_calls=1)(node_facts)
        refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                for n in nodes]
        facts = []
        deadline = time.monotonic() + PROBE_TIMEOUT_S  # one wait for all nodes, not one each
        for node, ref in zip(nodes, refs):
            try:
                facts.append(ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
            except (ray.exceptions.TaskUnschedulableError, ray.exceptions.NodeDiedError,
                    ray.exceptions.WorkerCrashedError) as exc:
                # Ray lists a lost node as alive until its heartbeats time out (~30 s): a re-run
                # right after a loss must not fail on it; its lanes go to the nodes that answer
                warn(f"Ray: node {node.get('NodeManagerAddress', '?')} ({node['NodeID'][:8]}) did not answer "
                     f"({type(exc).__name__}); no lane is placed there")
        if not facts:
            raise SetupError("no node of the Ray cluster that can hold a lane answered; check `ray status`")
        for what in ("quantkit", "vllm", "hardware"):
            values = {json.dumps(f[what], sort_keys=True): f["node"]["name"] for f in facts}
            if len(values) > 1 or (what == "quantkit" and facts[0]["quantkit"] != __version__):
                listing = "; ".join(f"{f['node']['name']}: {f[what]}" for f in facts)
                raise SetupError(f"the nodes that can hold a lane differ in {what} ({listing}); the run keys name "
                                 "it: give every node the same environment, or keep one kind of node per run "
                                 "with executor.resources")
        hardware, vllm = facts[0]["hardware"], facts[0]["vllm"]
        if hardware != ctx.common.get("hardware") or vllm != ctx.vllm:
            info(f"Ray: the lanes' nodes ({hardware.get('gpu') or hardware.get('cpu')}, vLLM {vllm}) are not this "
                 "driver's; run keys name theirs")
            ctx.common["hardware"], ctx.vllm = hardware, vllm


def reachable(address: str) -> None:
    """A Ray head listens at HOST:PORT, or a one-line setup error at once."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--address {address}: give the Ray head as HOST:PORT (e.g. 10.0.0.1:6379)")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as exc:
        raise SetupError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start its head with "
                         f"`ray start --head --port {port}` or give the right --address") from None


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def lane_nodes(request: dict[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes (as `ray.nodes()` lists them) that can hold one lane; none is a usage error, not
    a wait that never ends."""
    need = {"CPU": request.get("num_cpus", 0), "GPU": request.get("num_gpus", 0), "memory": request.get("memory", 0),
            **request.get("resources", {})}
    need = {k: v for k, v in need.items() if v}
    fit = [n for n in nodes if all(n["Resources"].get(k, 0) >= v for k, v in need.items())]
    if not fit:
        have = "; ".join(", ".join(f"{k}={v:g}" for k, v in sorted(n["Resources"].items())
                                   if not k.startswith(("node:", "object_store"))) for n in nodes)
        wants = ", ".join(f"{k}={v:g}" for k, v in need.items())
        raise UsageError(f"no node of the Ray cluster can hold a lane ({wants}); its nodes have: {have}. Lower "
                         "executor.num_cpus / num_gpus / memory_gb / resources in the recipe, or add a node")
    return fit


def preferred_node(ray, ctx: RunContext, lane: Lane, store: Store) -> str | None:
    """The node that made a method's checkpoint, when this driver cannot see it (the models folder
    is not shared): the lane goes back there rather than converting again elsewhere."""
    if lane.entry is None or ctx.force:
        return None
    done = store.done(convert_key(ctx, lane.entry))
    if done is None or converted(method_folder(ctx, lane, store)):
        return None
    node_id = (done.params.get("node") or {}).get("ray_node_id")
    return node_id if node_id in {n["NodeID"] for n in alive_nodes()} else None


def worker_env() -> dict[str, str]:
    """The driver's settings as every worker sees them: folders made absolute (a worker's working
    directory is Ray's), so QUANTKIT_MODELS_DIR and QUANTKIT_DATA_DIR name the same place on
    every node; that place must exist there (shared storage) or be made by each node."""
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIXES)}
    env["QUANTKIT_HOME"] = str(settings.home().absolute())
    env["QUANTKIT_MODELS_DIR"] = str(settings.models_dir().absolute())
    if env.get("QUANTKIT_DATA_DIR"):
        env["QUANTKIT_DATA_DIR"] = str(Path(env["QUANTKIT_DATA_DIR"]).expanduser().absolute())
    # Ray forwards a worker's output line by line: rich should not wrap it at 80 columns
    env.setdefault("COLUMNS", os.environ.get("COLUMNS", "200"))
    # A worker that dies (its node lost, a forced cancel) must not SIGKILL its children on the
    # way out, as Ray does by default: that kills a vLLM server's API process alone and orphans
    # its engine and workers. Left alone, the server's watchdog (serve/group.Reaper) ends its whole
    # process group: SIGTERM, then SIGKILL after the grace period.
    env["RAY_kill_child_processes_on_worker_exit"] = "0"
    return env
