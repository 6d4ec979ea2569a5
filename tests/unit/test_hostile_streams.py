"""A server's stream is evidence, not a measurement (issue 39): the load generator counts the tokens it
received, takes the usage only as a cross-check, and fails a request (never the program) on an event
that is not the chunk it must be. Each class of hostile stream is sent by a scripted loopback server
(tests/fixtures/scripted_server.py), whose truth is the bytes it writes, through the real client.

- inflated or impossible usage: the point is flagged `usage_mismatch`, the tokens credited are those
  received (at most the `max_tokens` asked), and every per-request list stays within that bound;
- JSON that is not a chunk object, and chunks that are not JSON at all: each request fails with the reason;
- more token chunks than asked, an event or an error body without end: the request fails and the
  client stops reading;
- honest streams (merged chunks, empty-text chunks, per-chunk usage, no usage, a closing chunk):
  never flagged, counted as before.
"""

from __future__ import annotations

import pytest

from fixtures.scripted_server import DONE, ScriptedServer, chat_chunk, chunk, endless, event, usage
from quantkit.measure.loadgen.generator import Target, run_point
from quantkit.measure.loadgen.workload import Prompt

ASKED = 16
N = 3  # requests per point


def measure(stream, asked: int = ASKED, api: str = "completions", n: int = N):
    with ScriptedServer(stream=lambda body: stream()) as server:
        prompts = [Prompt(token_ids=[5, 6, 7, 8, 9, 10, 11, 12])] * n if api == "completions" else \
            [Prompt(messages=[{"role": "user", "content": "hi"}])] * n
        point = run_point(Target(api_url=server.api_url, model="scripted", api=api), prompts, asked,
                          concurrency=1, workers=1)
        return point, server


def tokens(n: int, text: str = " tok") -> list[bytes]:
    return [event(chunk(text)) for _ in range(n)]


# --------------------------------------------------------------------------------------------
# A claim the text received cannot hold: flagged, and not credited

INFLATED = {
    # the case: the asked chunks, then a claim of 20 million tokens (8.2e9 tok/s, 1.55 GB on main)
    "twenty-million": lambda: tokens(ASKED) + [event(usage(20_000_000)), DONE],
    "one-over-asked": lambda: tokens(ASKED) + [event(usage(ASKED + 1)), DONE],
    "below-the-chunks": lambda: tokens(ASKED) + [event(usage(3)), DONE],
    "zero": lambda: tokens(ASKED) + [event(usage(0)), DONE],
    # per-chunk usage (continuous_usage_stats) that leaps on its last chunk
    "per-chunk-leap": lambda: [event(chunk(" tok", {"prompt_tokens": 8, "completion_tokens": c}))
                               for c in [*range(1, ASKED), 20_000_000]] + [DONE],
    "per-chunk-only-max": lambda: [event(chunk(" tok", {"prompt_tokens": 8, "completion_tokens": 2 ** 62}))
                                   for _ in range(ASKED)] + [DONE],
    "prompt-inflated": lambda: tokens(ASKED) + [event(usage(ASKED, prompt=10 ** 9)), DONE],
}


@pytest.mark.parametrize("name", INFLATED)
def test_a_claim_the_received_text_cannot_hold_is_flagged_and_the_received_tokens_are_counted(name):
    point, _ = measure(INFLATED[name])
    assert point.successes == N and point.failures == 0, point.failure_reasons
    assert point.completion_tokens == N * ASKED  # counted from the chunks received, whatever the claim
    assert point.prompt_tokens == N * 8  # the token ids sent
    assert point.itl.n == N * (ASKED - 1)  # the per-token list is bounded by what was asked
    assert point.usage_mismatch and f"{N} of {N} requests: usage claimed" in point.usage_mismatch_reason
    assert point.tokens_from_usage is (name == "prompt-inflated")  # there the output tokens claimed were right
    assert point.output_tok_s < 10 * ASKED * N / point.duration_s  # a figure of what came, not of the claim


SHORT = {
    # the second case: 3 chunks and a usage of everything asked ("40,201 tok/s, 2 ok" on main)
    "three-chunks-claim-all": lambda: tokens(3) + [event(usage(ASKED)), DONE],
    "three-chunks-claim-million": lambda: tokens(3) + [event(usage(10 ** 6)), DONE],
    "one-empty-chunk-claims-all": lambda: tokens(1, "") + [event(usage(ASKED)), DONE],
    "per-chunk-claims-all": lambda: [event(chunk(" t", {"prompt_tokens": 8, "completion_tokens": c}))
                                     for c in (5, 10, ASKED)] + [DONE],
}


@pytest.mark.parametrize("name", SHORT)
def test_too_few_chunks_for_the_claim_are_a_short_response_not_a_fast_one(name):
    point, _ = measure(SHORT[name])
    assert point.successes == 0 and point.failures == N and point.output_tok_s == 0
    assert any("short response:" in reason for reason in point.failure_reasons), point.failure_reasons
    assert point.usage_mismatch and "usage claimed" in point.usage_mismatch_reason


# --------------------------------------------------------------------------------------------
# Honest streams: never flagged

HONEST = {
    "one-token-a-chunk": (lambda: tokens(ASKED) + [event(usage(ASKED)), DONE], True),
    # vLLM merges a request's outputs when its stream falls behind (or with --stream-interval)
    "merged-chunks": (lambda: tokens(ASKED // 4, " tok" * 4) + [event(usage(ASKED)), DONE], True),
    "one-chunk-of-all": (lambda: tokens(1, "x" * ASKED) + [event(usage(ASKED)), DONE], True),
    # special tokens (their text skipped) and pieces of UTF-8 characters come as empty chunks
    "empty-text-chunks": (lambda: tokens(ASKED - 4) + tokens(4, "") + [event(usage(ASKED)), DONE], True),
    "multibyte-text": (lambda: tokens(ASKED // 2, "日本") + [event(usage(ASKED)), DONE], True),
    "closing-chunk": (lambda: tokens(ASKED) + [event(chunk("", finish="length")), event(usage(ASKED)), DONE], True),
    "per-chunk-usage": (lambda: [event(chunk(" tok tok", {"prompt_tokens": 8, "completion_tokens": 2 * (i + 1)}))
                                 for i in range(ASKED // 2)] + [event(usage(ASKED)), DONE], True),
    "no-usage": (lambda: tokens(ASKED) + [DONE], False),
    "no-done": (lambda: tokens(ASKED) + [event(usage(ASKED))], True),
}


@pytest.mark.parametrize("name", HONEST)
def test_honest_streams_are_counted_and_not_flagged(name):
    stream, from_usage = HONEST[name]
    point, _ = measure(stream)
    assert point.successes == N and point.completion_tokens == N * ASKED, point.failure_reasons
    assert not point.usage_mismatch and point.usage_mismatch_reason is None
    assert point.tokens_from_usage is from_usage
    assert point.itl.n == N * (ASKED - 1)


def test_an_honest_chat_stream_is_counted_and_not_flagged():
    def stream():
        return [event(chat_chunk("", role="assistant"))] + [event(chat_chunk()) for _ in range(ASKED)] + \
            [event(usage(ASKED)), DONE]

    point, _ = measure(stream, api="chat")
    assert point.successes == N and point.completion_tokens == N * ASKED and not point.usage_mismatch


# --------------------------------------------------------------------------------------------
# Events that are not the object they must be: the request fails, the program goes on

NOT_OBJECTS = {
    "null": b"data: null\n\n",
    "list": b"data: [1]\n\n",
    "number": b"data: 1\n\n",
    "string": b'data: "tok"\n\n',
    "boolean": b"data: true\n\n",
    "choices-string": event({"choices": "tok"}),
    "choices-object": event({"choices": {"text": "tok"}}),
    "choice-number": event({"choices": [1]}),
    "choice-null": event({"choices": [None]}),
    "text-number": event({"choices": [{"index": 0, "text": 5}]}),
    "text-list": event({"choices": [{"index": 0, "text": ["tok"]}]}),
    "usage-lots": event({"choices": [], "usage": "lots"}),
    "usage-list": event({"choices": [], "usage": [64]}),
    "tokens-string": event(usage("64")),
    "tokens-negative": event(usage(-1)),
    "tokens-fraction": event(usage(1.5)),
    "tokens-boolean": event(usage(True)),
    "tokens-nan": b'data: {"choices":[],"usage":{"completion_tokens":NaN}}\n\n',
    "prompt-tokens-string": event(usage(ASKED, prompt="8")),
}


@pytest.mark.parametrize("name", NOT_OBJECTS)
def test_an_event_that_is_not_a_chunk_object_fails_its_request(name):
    point, _ = measure(lambda: tokens(2) + [NOT_OBJECTS[name]] + tokens(ASKED - 2) + [DONE])
    assert point.successes == 0 and point.failures == N
    (reason,) = point.failure_reasons
    assert reason.startswith("the server sent ") and ("not" in reason), reason


CHAT_NOT_OBJECTS = {
    "delta-string": event({"choices": [{"index": 0, "delta": "tok"}]}),
    "delta-list": event({"choices": [{"index": 0, "delta": ["tok"]}]}),
    "content-number": event({"choices": [{"index": 0, "delta": {"content": 7}}]}),
    "tool-calls-string": event({"choices": [{"index": 0, "delta": {"tool_calls": "call"}}]}),
    "null": b"data: null\n\n",
}


@pytest.mark.parametrize("name", CHAT_NOT_OBJECTS)
def test_a_chat_event_that_is_not_a_chunk_object_fails_its_request(name):
    point, _ = measure(lambda: [event(chat_chunk()), CHAT_NOT_OBJECTS[name]]
                       + [event(chat_chunk()) for _ in range(ASKED - 1)] + [DONE], api="chat")
    assert point.successes == 0 and point.failures == N
    (reason,) = point.failure_reasons
    assert reason.startswith("the server sent "), reason


NOT_JSON = {  # each holds `"choices":[{`, which the client once counted as a token without parsing it
    "cut-short": b'data: {"choices":[{"text":" tok"\n\n',
    "prefixed": b'data: x{"choices":[{"text":" tok"}]}\n\n',
    "trailing": b'data: {"choices":[{"text":" tok"}]}}\n\n',
    "single-quotes": b"data: {'choices':[{'text':' tok'}], \"choices\":[{}]}\n\n",
    "two-objects": b'data: {"choices":[{"text":" tok"}]}{"choices":[{"text":" tok"}]}\n\n',
    "not-utf8": b'data: {"choices":[{"text":"\xff\xfe"}]}\n\n',
}


@pytest.mark.parametrize("name", NOT_JSON)
def test_a_chunk_that_is_not_json_fails_its_request(name):
    point, _ = measure(lambda: [NOT_JSON[name]] * ASKED + [event(usage(ASKED)), DONE])
    assert point.successes == 0 and point.failures == N and point.completion_tokens == 0
    (reason,) = point.failure_reasons
    assert reason.startswith("the server sent an event that is not JSON"), reason


# --------------------------------------------------------------------------------------------
# Answers without end: the request fails and the client stops reading

ENDLESS = {
    "more-chunks-than-asked": (lambda: endless(event(chunk(" t")), 200 << 20), "more token chunks than the 16 tokens"),
    "more-empty-chunks": (lambda: endless(event(chunk("")), 200 << 20), "more token chunks than the 16 tokens"),
    "one-event-without-end": (lambda: [b'data: {"choices":[{"text":"'] + list(endless(b"t" * 65536, 200 << 20)),
                              "an event of more than"),
    "error-body": (lambda: [500, b'{"error":{"message":"' + b"e" * 300] + list(endless(b"e" * 65536, 200 << 20)),
                   "HTTP 500: "),
}


@pytest.mark.parametrize("name", ENDLESS)
def test_an_answer_without_end_fails_the_request_and_is_not_read_on(name):
    stream, said = ENDLESS[name]
    point, server = measure(stream, n=1)
    assert point.successes == 0 and point.failures == 1
    (reason,) = point.failure_reasons
    assert said in reason, reason
    # the client hung up: of the 200 MB each answer holds, it let through a few socket buffers at most
    assert server.sent < 32 << 20, server.sent
