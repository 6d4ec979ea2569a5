"""The prompt log-probability client against a scripted server that answers as vLLM does (its
truth: the log-probabilities it is scripted to send); vLLM itself: test_fidelity_served.py."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
from fixtures.scripted_server import ScriptedServer

from quantkit.errors import BackendError, UsageError
from quantkit.fidelity.client import MAX_K, check_k, prompt_logprobs
from quantkit.fidelity.compare import window_sums
from quantkit.fidelity.documents import Window

WINDOWS = [Window("c4", f"c4/{i}", 0, [1, 10 + i, 20 + i, 30 + i]) for i in range(6)]


def listed_for(ids: list[int], position: int) -> dict[int, float]:
    """What the script lists at `position`: two top tokens and, third, the actual one."""
    return {500: -0.5, 501: -1.5, ids[position]: -3.0 - position}


def vllm_answer(body: dict, listed=listed_for, echo=None) -> dict:
    ids = body["prompt"]
    entries = [None] + [{str(t): {"logprob": lp, "rank": r, "decoded_token": "x"}
                         for r, (t, lp) in enumerate(listed(ids, i).items(), 1)} for i in range(1, len(ids))]
    return {"id": "cmpl-1", "object": "text_completion", "model": body["model"],
            "choices": [{"index": 0, "text": " a", "logprobs": None, "finish_reason": "length",
                         "prompt_logprobs": entries, "prompt_token_ids": echo if echo is not None else ids}]}


def served(server: ScriptedServer) -> SimpleNamespace:
    return SimpleNamespace(api_url=server.api_url, model_name="scripted", api_key=None)


def test_every_window_is_asked_once_with_its_token_ids_and_parsed_in_order():
    asked, running, most = [], [0], [0]
    lock = threading.Lock()

    def answer(body):
        with lock:
            asked.append(body)
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return [json.dumps(vllm_answer(body)).encode()]

    with ScriptedServer(stream=answer) as server:
        got = prompt_logprobs(served(server), WINDOWS, k=2, concurrency=2)
    assert [g.window for g in got] == WINDOWS
    assert got[3].listed == [listed_for(WINDOWS[3].token_ids, i) for i in (1, 2, 3)]
    assert len(asked) == 6 and most[0] == 2  # one request per window, two at a time
    assert all(b["prompt_logprobs"] == 2 and b["max_tokens"] == 1 and b["return_token_ids"] for b in asked)
    assert sorted(tuple(b["prompt"]) for b in asked) == sorted(tuple(w.token_ids) for w in WINDOWS)
    # the same answers on both sides: no divergence at all
    sums = window_sums(got, got, k=2)
    assert all(s.kl_lower == 0 and s.top1_agree == 3 and s.nll_variant == s.nll_baseline for s in sums)


@pytest.mark.parametrize("script, error", [
    (lambda b: [400, json.dumps({"error": {"message": "Requested prompt logprobs of 21, which is greater than max "
                                                      "allowed: 20"}}).encode()], "max-logprobs"),
    (lambda b: [json.dumps(vllm_answer(b, listed=lambda ids, i: {500: -0.5})).encode()], "actual token .* not listed"),
    (lambda b: [json.dumps(vllm_answer(b, echo=[1, 2, 3, 4])).encode()], "other tokens than the window"),
    (lambda b: [json.dumps({"choices": [{"text": "a"}]}).encode()], "no choices.0..prompt_logprobs"),
    (lambda b: [json.dumps(vllm_answer(b, listed=lambda ids, i: {ids[i]: 0.7})).encode()], "log-probability 0.7"),
    (lambda b: [b'{"choices": [' + b" " * (8 << 20)], "more than"),
    (lambda b: [b"[" * 5000], "not JSON"),  # deeper than json.loads recurses
    (lambda b: [b"<html>busy</html>"], "not JSON"),
])
def test_an_answer_of_another_shape_fails_naming_the_window(script, error):
    with ScriptedServer(stream=script) as server:
        with pytest.raises(BackendError, match=error) as failed:
            prompt_logprobs(served(server), WINDOWS[:1], k=2)
    assert "c4/0" in str(failed.value)


def test_top_k_beyond_what_vllm_gives_is_refused_before_any_request():
    assert check_k(MAX_K) == 20
    with pytest.raises(UsageError, match="max-logprobs"):
        check_k(21)


def test_windows_of_the_two_sides_must_be_the_same():
    a = [SimpleNamespace(window=WINDOWS[0], listed=[])]
    b = [SimpleNamespace(window=WINDOWS[1], listed=[])]
    with pytest.raises(ValueError, match="same tokens"):
        window_sums(a, b, k=2)
