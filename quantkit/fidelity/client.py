"""Prompt log-probabilities of token windows from a served model (vLLM's OpenAI completions API).

One request per window: POST /v1/completions with the window as token ids (so the baseline's and
the variant's servers score exactly the same tokens, whatever their text handling), `max_tokens:
1`, and vLLM's extra parameter `prompt_logprobs: k`. vLLM (0.32: entrypoints/openai/completion)
answers `choices[0].prompt_logprobs`: None for the first token, then for every later position a
map token id -> {logprob, rank, decoded_token} holding the k most likely tokens plus the actual
token when it is not among them (k or k + 1 entries; a -inf log-probability is sent as -9999).
`return_token_ids: true` has it echo the prompt's ids, checked against the window's. vLLM refuses
k above its `--max-logprobs` (ModelConfig.max_logprobs, default 20: `MAX_K`), with HTTP 400.

Requests run `concurrency` at a time. Every answer is read to a cap (a window's worth of entries,
generously) and checked for that shape; anything else is a BackendError naming the window.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

import httpx

from .. import settings
from ..errors import BackendError, UsageError
from ..serve.answers import IDENTITY
from ..serve.env import auth_headers
from .documents import Window

MAX_K = 20  # vLLM's default --max-logprobs: the most prompt log-probabilities it gives per position
DEFAULT_CONCURRENCY = 8
ENTRY_BYTES = 256  # an entry `"123": {"logprob": -1.23, "rank": 4, "decoded_token": "..."}` with room


@dataclass(frozen=True)
class WindowLogprobs:
    window: Window
    listed: list[dict[int, float]]  # per scored position (token 1, 2, ...): token id -> log-probability


def check_k(k: int) -> int:
    if not 1 <= k <= MAX_K:
        raise UsageError(f"bad top-k {k}: vLLM gives 1 to {MAX_K} prompt log-probabilities per position by default; "
                         f"more needs the servers started with --serve-arg max-logprobs=K")
    return k


def _parse(body: Any, window: Window, k: int) -> WindowLogprobs:
    """A completions answer as the window's listed tokens; ValueError naming what is wrong."""
    try:
        choice = body["choices"][0]
        entries = choice["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("no choices[0].prompt_logprobs in the answer (is it a vLLM server?)") from None
    ids = window.token_ids
    echoed = choice.get("prompt_token_ids")
    if echoed is not None and list(echoed) != list(ids):
        raise ValueError("the server scored other tokens than the window's (prompt_token_ids differ)")
    if not isinstance(entries, list) or len(entries) != len(ids):
        raise ValueError(f"prompt_logprobs has {len(entries) if isinstance(entries, list) else 'no'} entries "
                         f"for {len(ids)} prompt tokens")
    listed = []
    for i, entry in enumerate(entries[1:], start=1):
        if not isinstance(entry, dict) or not 1 <= len(entry) <= k + 1:
            raise ValueError(f"position {i}: expected a map of {k} or {k + 1} tokens")
        row = {}
        for token, value in entry.items():
            logprob = value.get("logprob") if isinstance(value, dict) else None
            if not isinstance(logprob, (int, float)) or not math.isfinite(logprob) or logprob > 1e-3:
                raise ValueError(f"position {i}: token {token} has log-probability {logprob!r}")
            row[int(token)] = min(float(logprob), 0.0)  # -9999 (vLLM's -inf) stays finite: exp() is 0
        if ids[i] not in row:
            raise ValueError(f"position {i}: the actual token {ids[i]} is not listed")
        listed.append(row)
    return WindowLogprobs(window, listed)


async def _one(client: httpx.AsyncClient, url: str, model: str, window: Window, k: int) -> WindowLogprobs:
    payload = {"model": model, "prompt": window.token_ids, "max_tokens": 1, "temperature": 0,
               "prompt_logprobs": k, "return_token_ids": True}
    limit = 4096 + len(window.token_ids) * (k + 2) * ENTRY_BYTES
    what = f"{url} for {window.document} (tokens {window.start}-{window.start + window.scored})"
    try:
        async with client.stream("POST", url, json=payload, headers=IDENTITY) as response:
            body = bytearray()
            async for piece in response.aiter_raw():
                body += piece
                if len(body) > limit:
                    raise BackendError(f"{what} answered with more than {limit / (1 << 20):.1f} MiB")
    except httpx.HTTPError as exc:
        raise BackendError(f"{what}: {type(exc).__name__}: {exc}".rstrip(": ")) from None
    if response.status_code != 200:
        text = " ".join(bytes(body[:300]).decode("utf-8", "replace").split())
        hint = "; start the servers with --serve-arg max-logprobs=K for more" if "max allowed" in text else ""
        raise BackendError(f"{what} answered HTTP {response.status_code}: {text}{hint}")
    try:
        data = json.loads(bytes(body))
    except (ValueError, RecursionError):  # a decoder recursing once per level of [ or {
        raise BackendError(f"{what} answered with what is not JSON (is it a vLLM server?)") from None
    try:
        return _parse(data, window, k)
    except ValueError as exc:
        raise BackendError(f"{what}: {exc}") from None


async def _all(api_url: str, model: str, windows: Sequence[Window], k: int, concurrency: int,
               headers: dict[str, str], timeout: float) -> list[WindowLogprobs]:
    gate = asyncio.Semaphore(concurrency)
    url = api_url.rstrip("/") + "/completions"
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=timeout, headers=headers, limits=limits) as client:
        async def bounded(window: Window) -> WindowLogprobs:
            async with gate:
                return await _one(client, url, model, window, k)

        tasks = [asyncio.ensure_future(bounded(w)) for w in windows]
        try:
            return list(await asyncio.gather(*tasks))
        finally:  # a failed window ends the others' waits too
            for task in tasks:
                task.cancel()


def prompt_logprobs(server, windows: Sequence[Window], k: int = MAX_K,
                    concurrency: int = DEFAULT_CONCURRENCY) -> list[WindowLogprobs]:
    """Every window's listed tokens per position from `server` (a VLLMServer or RemoteServer:
    its api_url, model_name, api_key), in the windows' order."""
    check_k(k)
    if concurrency < 1:
        raise UsageError(f"bad concurrency {concurrency}: at least 1 request at a time")
    headers = auth_headers(server.api_key)
    return asyncio.run(_all(server.api_url, server.model_name, windows, k, concurrency, headers,
                            settings.request_timeout()))
