"""Every request of a point, kept compactly so that any figure can be recomputed and audited.

A point's requests are stored as columns (send time, TTFT, TPOT, E2E, ITL p50/p95/max, tokens, ok,
where it fell: warm-up, window or cool-down), packed as float32/int32 arrays, zlib-compressed and
base64-encoded into one string of the point's JSON (`BenchPoint.samples`): about 40 bytes a
request, so a 3,000-request point costs ~120 kB instead of megabytes of JSON. Failed requests keep
their reason in a side table. `decode` gives the rows back as `RequestResult`s (ITL as its summary:
the three statistics, not every gap), which is what `slo.Slo.request_ok` and the window need.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from array import array

from .point import RequestResult, percentile

FLOATS = ("start_s", "ttft", "tpot", "e2e", "itl_p50", "itl_p95", "itl_max")
INTS = ("index", "prompt_tokens", "completion_tokens", "flags")
OK, WARMUP, WINDOW, COOLDOWN = 1, 2, 4, 8
VERSION = 1


def _f(value: float | None) -> float:
    return math.nan if value is None else float(value)


def encode(results: list[RequestResult], window: set[int] | None = None, warmup_s: float | None = None) -> str:
    """The requests as one compact string; `window` holds the indices measured (None: all were)."""
    cols = {name: array("f") for name in FLOATS}
    ints = {name: array("i") for name in INTS}
    errors: dict[str, str] = {}
    for r in results:
        itl = r.itl or []
        row = {"start_s": r.start_s, "ttft": r.ttft, "tpot": r.tpot, "e2e": r.e2e,
               "itl_p50": percentile(itl, 50) if itl else None, "itl_p95": percentile(itl, 95) if itl else None,
               "itl_max": max(itl) if itl else None}
        for name in FLOATS:
            cols[name].append(_f(row[name]))
        index = r.index if r.index is not None else -1
        flags = OK if r.ok else 0
        if window is None or index in window:
            flags |= WINDOW
        elif warmup_s is not None and r.start_s < warmup_s:
            flags |= WARMUP
        else:
            flags |= COOLDOWN
        for name, value in (("index", index), ("prompt_tokens", r.prompt_tokens or 0),
                            ("completion_tokens", r.completion_tokens or 0), ("flags", flags)):
            ints[name].append(value)
        if not r.ok:
            errors[str(index)] = (r.error or "unknown")[:200]
    blob = b"".join(cols[n].tobytes() for n in FLOATS) + b"".join(ints[n].tobytes() for n in INTS)
    head = json.dumps({"v": VERSION, "n": len(results), "errors": errors}, separators=(",", ":")).encode()
    packed = zlib.compress(len(head).to_bytes(4, "little") + head + blob, 6)
    return base64.b64encode(packed).decode()


def decode(text: str) -> list[tuple[RequestResult, str]]:
    """(request, where) per stored request; where is `warmup`, `window` or `cooldown`."""
    raw = zlib.decompress(base64.b64decode(text))
    size = int.from_bytes(raw[:4], "little")
    head = json.loads(raw[4:4 + size])
    n, body = head["n"], raw[4 + size:]
    cols: dict[str, array] = {}
    offset = 0
    for name in FLOATS:
        cols[name] = array("f")
        cols[name].frombytes(body[offset:offset + 4 * n])
        offset += 4 * n
    for name in INTS:
        cols[name] = array("i")
        cols[name].frombytes(body[offset:offset + 4 * n])
        offset += 4 * n
    out = []
    for i in range(n):
        def get(name: str) -> float | None:
            v = float(cols[name][i])
            return None if math.isnan(v) else v

        flags, index = cols["flags"][i], cols["index"][i]
        itl = [v for v in (get("itl_p50"), get("itl_p95"), get("itl_max")) if v is not None]
        r = RequestResult(ok=bool(flags & OK), error=head["errors"].get(str(index)), index=index if index >= 0 else None,
                          start_s=get("start_s") or 0.0, ttft=get("ttft"), tpot=get("tpot"), e2e=get("e2e"),
                          itl=itl, prompt_tokens=cols["prompt_tokens"][i] or None,
                          completion_tokens=cols["completion_tokens"][i] or None)
        where = "window" if flags & WINDOW else "warmup" if flags & WARMUP else "cooldown"
        out.append((r, where))
    return out
