"""The tokens a streamed request is credited with: counted from what the client received, with the
server's `usage` as a cross-check, never as the measurement.

A server's `usage.completion_tokens` is its word. Taken as the count, one that streamed the 16 chunks
asked and then claimed 20,000,000 tokens was stored at 8 billion output tokens/s (issue 39). What
the client received bounds what a request can be credited with:

- at least its text chunks: every chunk that carried text carried at least one token;
- at most `chunks + text_bytes`: vLLM sends a chunk per engine output (one token, or several merged
  when the request's stream falls behind, or with --stream-interval), and each token beyond a
  chunk's first brings at least one byte of text, except a special token (its text is skipped) or
  part of a UTF-8 character (its bytes come in a later chunk). This is the tokenizer's slack: it
  holds merged chunks of any real text and leaves an inflated claim far outside (3 chunks of " tok"
  cannot hold 64 tokens);
- at most the `max_tokens` the request asked.

The rule: a claim within those bounds is credited (a multi-token chunk's tokens are then shared by
`point.token_timeline`); a claim outside them is a mismatch, said on the request and on its point
(`usage_mismatch`), and the request is credited with its token chunks, capped at what it asked:
what it received, one token a chunk, as without a claim. A request that asked for more is then a
"short response". `vllm bench serve` takes the usage whole where there is one (and re-tokenizes the
text where there is none); quantkit has no tokenizer in its client, and needs none for this bound.

Per-chunk usage (`continuous_usage_stats`) only places the credited tokens in time: it is used where
it rises by at least one token a read and ends at the credited count, and is ignored otherwise.

The prompt's tokens (`prompt`): a prompt sent as token ids has exactly that many, whatever the usage
says; a text prompt's count is the server's (it tokenized it), credited up to the request body's
bytes (every prompt token but a chat template's comes from at least one byte of it, and the body's
JSON around the prompt outweighs a template's tokens).
"""

from __future__ import annotations

from typing import NamedTuple

from .client import Raw


class Credit(NamedTuple):
    tokens: int  # credited
    counts: list[int]  # per read that carried token chunks: its tokens (exact) or its chunks
    exact: bool  # counts are tokens (per-chunk usage), not chunks
    from_usage: bool  # the server's claim was credited
    mismatch: str | None  # why the claim was not credited


def credit(raw: Raw) -> Credit:
    """What `raw` is credited with, by the rule above."""
    chunks, claim, asked = raw.chunks, raw.completion_tokens, raw.asked
    received = min(chunks, asked) if asked is not None else chunks
    counts = list(raw.read_chunks)
    if claim is None:
        return Credit(received, counts, False, False, None)
    mismatch = None
    if asked is not None and claim > asked:
        mismatch = f"usage claimed {claim} tokens, more than the {asked} asked"
    elif claim < raw.text_chunks:
        mismatch = f"usage claimed {claim} tokens where {raw.text_chunks} chunks of text came"
    elif claim > chunks + raw.text_bytes:
        mismatch = (f"usage claimed {claim} tokens where {chunks} chunks with {raw.text_bytes} bytes of text came "
                    "(at most one token a chunk plus one a byte)")
    if mismatch is not None:
        return Credit(received, counts, False, False, mismatch)
    exact = _per_read(raw.read_claims, claim)
    return Credit(claim, exact if exact is not None else counts, exact is not None, True, None)


def _per_read(claims, total: int) -> list[int] | None:
    """Each read's tokens from the per-chunk usage so far, where it rises by a token or more every
    read and ends at `total`; None otherwise."""
    out, before = [], 0
    for claimed in claims:
        if claimed - before < 1:  # -1 (a read without per-chunk usage) lands here too
            return None
        out.append(claimed - before)
        before = claimed
    return out if out and before == total else None


def prompt(claim: int | None, sent_ids: int | None, body_bytes: int | None) -> tuple[int | None, str | None]:
    """A request's prompt tokens and, where the server's usage disagreed, why (the rule above):
    `sent_ids` the token ids sent, `body_bytes` the request body's size."""
    if sent_ids is not None:
        if claim is not None and claim != sent_ids:
            return sent_ids, f"usage claimed {claim} prompt tokens where {sent_ids} token ids were sent"
        return sent_ids, None
    if claim is not None and body_bytes is not None and claim > body_bytes:
        return None, f"usage claimed {claim} prompt tokens for a request of {body_bytes} bytes"
    return claim, None
