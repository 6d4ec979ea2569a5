"""A server's HTTP answers, read as evidence: never more than a cap, and checked for the shape they
must have.

A server decides how much it sends: a `/v1/models` of 400 MB was read whole (1.78 GB of memory) and
accepted (issue 39). Every answer quantkit reads from a server it starts or measures (`/health`,
`/v1/models`, `/version`, `/metrics`) comes through `get`/`aget`: the body is read up to a limit,
and one over it is `TooLarge`, never read on. Bodies are asked for uncompressed (a compressed body's
size says nothing of what it decompresses to) and read raw: a server that compresses anyway sends
bytes that do not parse, an error like any other bad answer. `alive` checks reads no body at all.
The streamed completions are bounded by the load generator's client (measure/loadgen/client.py).
"""

from __future__ import annotations

from typing import Any

import httpx

API_LIMIT = 4 << 20  # /v1/models, /version, /health: a few KB from vLLM, even with many LoRA adapters
METRICS_LIMIT = 32 << 20  # /metrics: ~100 KB from vLLM
IDENTITY = {"Accept-Encoding": "identity"}
_DROPPED = {"content-encoding", "content-length", "transfer-encoding"}  # they described the raw stream


class TooLarge(Exception):
    """A body over its limit: the server answered, with something no server of its kind sends.
    Not an httpx.HTTPError, which callers read as "not up yet"."""

    def __init__(self, url: str, limit: int):
        super().__init__(f"{url} answered with more than {limit / (1 << 20):g} MiB")


def _response(response: httpx.Response, body: bytes) -> httpx.Response:
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED]
    return httpx.Response(response.status_code, headers=headers, content=body, request=response.request)


def _check_declared(response: httpx.Response, url: str, limit: int) -> None:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(url, limit)


def get(client: httpx.Client, url: str, limit: int = API_LIMIT) -> httpx.Response:
    """GET `url`, its body read whole up to `limit` bytes (TooLarge past it)."""
    with client.stream("GET", url, headers=IDENTITY) as response:
        _check_declared(response, url, limit)
        body = bytearray()
        for piece in response.iter_raw():
            body += piece
            if len(body) > limit:
                raise TooLarge(url, limit)
        return _response(response, bytes(body))


async def aget(client: httpx.AsyncClient, url: str, limit: int = API_LIMIT) -> httpx.Response:
    """`get` for an AsyncClient."""
    async with client.stream("GET", url, headers=IDENTITY) as response:
        _check_declared(response, url, limit)
        body = bytearray()
        async for piece in response.aiter_raw():
            body += piece
            if len(body) > limit:
                raise TooLarge(url, limit)
        return _response(response, bytes(body))


def status(url: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> int:
    """The status code `url` answers a GET with; its body is not read."""
    with httpx.Client(timeout=timeout, headers=headers) as client:
        with client.stream("GET", url, headers=IDENTITY) as response:
            return response.status_code


def model_ids(response: httpx.Response) -> list[str]:
    """The model ids of a `/v1/models` answer; ValueError where it is not a model list."""
    try:
        data: Any = response.json()
    except ValueError:
        data = None
    listed = data.get("data") if isinstance(data, dict) else None
    if not isinstance(listed, list):
        raise ValueError(f"{response.request.url} did not answer a model list (JSON: an object with a `data` list)")
    return [str(m["id"]) for m in listed if isinstance(m, dict) and m.get("id")]


def version(client: httpx.Client, url: str) -> str | None:
    """The server's `/version` (vLLM's), None where it has none or it cannot be read."""
    try:
        data = get(client, url).json()
    except (httpx.HTTPError, ValueError, TooLarge):
        return None
    value = data.get("version") if isinstance(data, dict) else None
    return str(value)[:100] if value is not None else None
