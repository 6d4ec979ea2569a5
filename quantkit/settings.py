"""QUANTKIT_* settings, read from the environment each time they are asked for.

Nothing here is cached at import: tests point QUANTKIT_HOME at a temporary folder per test, and a
long-running process sees a changed environment the same way a fresh one would.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .errors import SetupError

# The repository root when quantkit runs from a checkout (editable install); the default venvs
# that scripts/setup.sh creates live there.
REPO_ROOT = Path(__file__).resolve().parent.parent


def home() -> Path:
    """Where quantkit keeps its cache (converted demo model) and, later, its result store."""
    value = os.environ.get("QUANTKIT_HOME")
    path = Path(value).expanduser() if value else Path.home() / ".cache" / "quantkit"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir() -> Path:
    """What quantkit can ask again but would rather not (vLLM's architecture list, seconds of
    importing vLLM per version): under the home unless QUANTKIT_CACHE_DIR shares one between homes
    (the test suite points every fresh home at one)."""
    value = os.environ.get("QUANTKIT_CACHE_DIR")
    return Path(value).expanduser() if value else home() / "cache"


def data_dir() -> Path | None:
    """Offline evaluation/calibration data (see ../shared/data/README.md); None means use the Hub."""
    value = os.environ.get("QUANTKIT_DATA_DIR")
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise SetupError(
            f"QUANTKIT_DATA_DIR={value} is not a directory; point it at the offline data folder "
            "(e.g. ../shared/data) or unset it to use the Hugging Face Hub"
        )
    return path


def models_dir() -> Path:
    """Default output folder of `quantkit convert` when -o is not given."""
    value = os.environ.get("QUANTKIT_MODELS_DIR")
    return Path(value).expanduser() if value else Path.cwd() / "models"


def debug() -> bool:
    return os.environ.get("QUANTKIT_DEBUG", "") not in ("", "0", "false")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or os.environ.get(
        "QUANTKIT_OFFLINE", ""
    ) not in ("", "0")


def backend_python(name: str) -> Path | None:
    """The python of a backend that runs in an environment of its own (vllm, gptqmodel, ...).

    Order: QUANTKIT_<NAME>_PYTHON (or QUANTKIT_VLLM for vLLM, which may also name a `vllm`
    executable), then the default venv `.venv-<name>` under venv_root() that `scripts/setup.sh`
    (vLLM) or `quantkit setup --backend NAME` creates.
    """
    # auto-gptq -> QUANTKIT_AUTO_GPTQ_PYTHON: a shell variable name cannot hold a dash
    env_name = "QUANTKIT_VLLM" if name == "vllm" else f"QUANTKIT_{name.upper().replace('-', '_')}_PYTHON"
    value = os.environ.get(env_name) or (
        os.environ.get("QUANTKIT_VLLM_PYTHON") if name == "vllm" else None
    )
    if value:
        path = Path(value).expanduser()
        if not path.exists():
            found = shutil.which(value)
            if not found:
                raise SetupError(f"{env_name}={value} does not exist; point it at a python or executable")
            path = Path(found)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise SetupError(f"{env_name}={value} is not an executable file; point it at a python or executable "
                             "(e.g. .venv-vllm/bin/python)")
        return path
    candidate = venv_root() / f".venv-{name}" / "bin" / "python"
    return candidate if candidate.exists() else None


def venv_root() -> Path:
    """Where the default environments live (.venv-vllm, .venv-<backend>): the checkout's root."""
    value = os.environ.get("QUANTKIT_VENV_ROOT")
    return Path(value).expanduser() if value else REPO_ROOT


def main_python() -> str:
    return sys.executable


def keep_logs() -> int:
    """How many log files of each kind (quantkit's, vLLM's) the home keeps (QUANTKIT_KEEP_LOGS)."""
    value = os.environ.get("QUANTKIT_KEEP_LOGS", "50")
    try:
        return max(1, int(value))
    except ValueError:
        raise SetupError(f"QUANTKIT_KEEP_LOGS={value} is not a number; give how many log files to keep (e.g. 50)") from None


DEFAULT_STARTUP_TIMEOUT_S = 600.0


def startup_timeout() -> float:
    """Seconds a vLLM server may take to become ready before quantkit gives up on it
    (QUANTKIT_STARTUP_TIMEOUT; a command's --startup-timeout wins). A 70B model loading from a slow
    disk, or a first torch.compile, can take longer than the default."""
    return _seconds("QUANTKIT_STARTUP_TIMEOUT", DEFAULT_STARTUP_TIMEOUT_S, example=1200)


def _seconds(name: str, default: float, example: float) -> float:
    """A positive, finite number of seconds from the environment variable `name`, else `default`."""
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0 or seconds == float("inf"):
        raise SetupError(f"{name}={value} is not a positive number of seconds; "
                         f"set it e.g. to {example:g}, or unset it for {default:.0f}")
    return seconds


def api_key() -> str | None:
    """The API key quantkit sends (Authorization: Bearer) to a server given by --url:
    QUANTKIT_API_KEY, else OPENAI_API_KEY (what vLLM's own clients and benchmark send). A server
    quantkit starts is sent the key it was started with (--serve-arg api-key, or VLLM_API_KEY)."""
    return os.environ.get("QUANTKIT_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def served_model_name() -> str | None:
    """The model name a server given by --url serves the checkpoint under, when it is neither the
    checkpoint folder's name nor its path (QUANTKIT_SERVED_MODEL_NAME, e.g. vLLM's
    --served-model-name of that server)."""
    return os.environ.get("QUANTKIT_SERVED_MODEL_NAME") or None


DEFAULT_REQUEST_TIMEOUT_S = 600.0


def request_timeout() -> float:
    """Seconds one load-test request may take before it fails as unanswered
    (QUANTKIT_REQUEST_TIMEOUT; default 600: a long generation under a deep queue takes minutes)."""
    return _seconds("QUANTKIT_REQUEST_TIMEOUT", DEFAULT_REQUEST_TIMEOUT_S, example=120)


DEFAULT_DRAIN_TIMEOUT_S = 120.0


def drain_timeout() -> float:
    """Seconds a load point waits for the server to finish an earlier point's requests before it
    starts anyway, flagged (QUANTKIT_DRAIN_TIMEOUT; default 120: a saturated point can leave a deep
    queue behind on a server that does not abort abandoned requests)."""
    return _seconds("QUANTKIT_DRAIN_TIMEOUT", DEFAULT_DRAIN_TIMEOUT_S, example=300)


def price_per_hour() -> float | None:
    """What the machine serving a variant costs per hour (QUANTKIT_PRICE_PER_HOUR, e.g. a GPU-hour's
    price; `quantkit compare --price-per-hour` wins): the report then adds the cost per million output
    tokens at each capacity. None by default: no price is assumed."""
    value = os.environ.get("QUANTKIT_PRICE_PER_HOUR", "")
    if not value:
        return None
    try:
        price = float(value)
    except ValueError:
        price = 0.0
    if not 0 < price < float("inf"):
        raise SetupError(f"QUANTKIT_PRICE_PER_HOUR={value} is not a positive price; set it e.g. to 3.5 "
                         "(per hour, in your currency), or unset it")
    return price
