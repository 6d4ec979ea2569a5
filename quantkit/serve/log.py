"""Reading a vLLM server's log: KV-cache size, kernels chosen, and why a start failed."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import ServeConfig

_LOG_PREFIX = re.compile(r"^(\(\w+ pid=\d+\)\s+)?(INFO|WARNING|ERROR|DEBUG)\s+\d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\]\s*")
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
# Lines naming the quantization method or the linear/attention kernel vLLM picked.
_QUANT = re.compile(
    r"(Kernel\b|kernel for|Using \w+(Linear|MM|GEMM|Marlin|Machete)\w*|quantization (method|config)|"
    r"CompressedTensors\w+|compressed-tensors|Selected \w+ for|attention backend|Using .*backend)",
    re.IGNORECASE,
)
QUANT_NOISE = re.compile(r"(Triton|torch\.compile|Inductor|CUDAGraph|Scale-out|compile cache|JIT monitor)",
                         re.IGNORECASE)
_WEIGHTS = re.compile(r"Model loading took ([\d.]+) ?GiB")


_ENGINE_DTYPE = re.compile(r"Initializing a V1 LLM engine .*?\bdtype=torch\.(\w+)")


def parse_log(text: str) -> dict[str, Any]:
    """KV-cache size, max concurrency and the kernel/scheme lines from a vLLM server log."""
    out: dict[str, Any] = {"kv_cache_tokens": None, "max_concurrency": None, "quant_lines": [], "weights_gib": None,
                           "dtype": None}
    if m := _ENGINE_DTYPE.search(text):  # the engine's config line: what it computes in, whatever was asked
        out["dtype"] = m.group(1)
    if m := _WEIGHTS.search(text):
        out["weights_gib"] = float(m.group(1))
    if m := _KV_TOKENS.search(text):
        out["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
    if m := _MAX_CONC.search(text):
        out["max_concurrency"] = float(m.group(2))
    seen: set[str] = set()
    for line in text.splitlines():
        prefix = _LOG_PREFIX.match(line)
        if not prefix:  # only vLLM's own log records: tracebacks and warnings quote code
            continue
        body = line[prefix.end():].strip()
        if not body or not _QUANT.search(body) or QUANT_NOISE.search(body):
            continue
        if body not in seen:
            seen.add(body)
            out["quant_lines"].append(body[:300])
    return out


_ERROR_LINE = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit)): (.+)$")
# Wrappers vLLM raises after the real cause was logged above them.
_GENERIC = re.compile(
    r"(Engine core initialization failed|See root cause above|Engine process failed to start|"
    r"EngineCore failed to start|Worker failed|died unexpectedly|APIServer failed|"
    r"See stack trace \(above\) for the root cause)",
    re.IGNORECASE,
)


# vLLM logs these when its engine cannot start; the process usually exits soon after, but with
# tensor parallelism a worker stuck in a collective can keep it alive until the startup timeout.
FATAL = re.compile(r"(EngineCore failed to start|Engine core initialization failed|Worker failed with error)")
FATAL_EXIT_GRACE_S = 30.0


def failure_hint(log_text: str, config: "ServeConfig") -> str:
    """A known way out of a known failure, or ""."""
    tp = config.tensor_parallel_size or 1
    if tp > 1 and "allreduce_rms" in log_text and re.search(r"CUDA error|CUBLAS_STATUS", log_text):
        # seen on 2-GPU H200s without NVLink multicast (vLLM 0.26): FlashInfer's fused
        # all-reduce + RMSNorm ("mnnvl" backend) breaks the first forward pass
        return ("; with tensor parallelism on GPUs without NVLink multicast, turn vLLM's all-reduce fusion off: "
                "--serve-arg 'compilation-config={\"pass_config\":{\"fuse_allreduce_rms\":false}}'")
    return ""


def _advisory(line: str) -> bool:
    prefix = _LOG_PREFIX.match(line)
    return prefix is not None and prefix.group(2) != "ERROR"


def failure_reason(log_text: str) -> str:
    """vLLM's reason for failing: the last specific `XxxError: message` line of its log, else the
    last ERROR line, else the last non-empty line."""
    # an error named inside vLLM's own INFO/WARNING line is advice, not the failure (its start-up
    # warns that a low ulimit "can cause ... OSError: [Errno 24] Too many open files")
    every = [body for ln in log_text.splitlines() if (body := _LOG_PREFIX.sub("", ln).strip())]
    lines = [body for ln in log_text.splitlines() if not _advisory(ln) and (body := _LOG_PREFIX.sub("", ln).strip())]
    for index in range(len(lines) - 1, -1, -1):
        m = _ERROR_LINE.search(lines[index])
        if not m or _GENERIC.search(m.group(2)):
            continue
        message = m.group(2).strip()
        if re.match(r"\d+ validation errors? for", message) and index + 1 < len(lines):
            # pydantic puts the reason on the next line: "Value error, <reason> [type=...]"
            detail = re.sub(r"^Value error, ", "", re.sub(r"\s*\[type=.*$", "", lines[index + 1]))
            detail = re.sub(r"Supported architectures: dict_keys\(.*$", "(the log lists the supported ones)", detail)
            message = f"{message}: {detail}"
        elif message.endswith(":"):
            # "Reasons:" and the like: the reasons follow on their own lines; keep them on this one
            tail = []
            for follow in lines[index + 1 : index + 6]:
                if follow.startswith(("Traceback", "File ", "[")) or _ERROR_LINE.search(follow):
                    break
                tail.append(follow)
            message = f"{message} {'; '.join(tail)}"
        return _clip(f"{m.group(1).rsplit('.', 1)[-1]}: {message}")
    for ln in reversed(log_text.splitlines()):
        if " ERROR " in ln or ln.startswith("ERROR"):
            return _clip(_LOG_PREFIX.sub("", ln).strip())
    # no error anywhere: the last line of any level (a start that hangs logs only INFO lines)
    return _clip(every[-1]) if every else "no output"


def _clip(text: str, limit: int = 500) -> str:
    # one readable line: vLLM lists e.g. every supported architecture (several KB) in one message
    return text if len(text) <= limit else text[: limit - 1] + "…"



def last_line(log_text: str, limit: int = 200) -> str:
    """The log's last non-empty line without vLLM's prefix (what a waiting user wants to see)."""
    for line in reversed(log_text.splitlines()):
        body = _LOG_PREFIX.sub("", line).strip()
        if body:
            return _clip(body, limit)
    return "no output yet"
