"""The stop rule's check of a running point: each finished request converted once, the rule off the
sending loop (an H200's steady-state points were each called client-limited because a check
converted every finished request again on that loop: benchmarks/stop_rule_cost.py)."""

import asyncio
import threading
import time
from array import array

from quantkit.measure.loadgen import generator as loadgen
from quantkit.measure.loadgen.client import Raw
from quantkit.measure.loadgen.generator import Converted, to_result
from quantkit.measure.loadgen.watchers import stop_watch


def _raw(i: int, start: float, tokens: int = 8) -> Raw:
    times = array("d", [start + 0.1 + 0.01 * k for k in range(tokens)])
    return Raw(index=i, start=start, status_ok=True, read_times=times, read_chunks=array("i", [1] * tokens),
               chunks=tokens, text_chunks=tokens, text_bytes=4 * tokens, first_choice=start + 0.1,
               completion_tokens=tokens, sent=True)


def test_each_finished_request_is_converted_once(monkeypatch):
    done = [_raw(i, 0.5 * i) for i in range(3)]
    calls = []
    real = loadgen.to_result
    monkeypatch.setattr(loadgen, "to_result", lambda raw, t0: calls.append(raw.index) or real(raw, t0))
    converted = Converted(done, 0.0)
    first = list(converted())
    done += [_raw(i, 0.5 * i) for i in range(3, 5)]
    second = converted()
    assert calls == [0, 1, 2, 3, 4]  # the first three were not converted again
    assert second[:3] == first
    assert [r.model_dump() for r in second] == [to_result(r, 0.0).model_dump() for r in done]
    assert abs(second[4].ttft - 0.1) < 1e-9 and abs(second[4].start_s - 2.0) < 1e-9


def test_the_rule_runs_off_the_loop_on_a_copy_and_halts_with_its_reason():
    seen: list[tuple[str, int, float]] = []
    results = [object()] * 3

    def rule(finished, elapsed):
        seen.append((threading.current_thread().name, len(finished), elapsed))
        finished.append("mutated")  # a copy: the caller's list is untouched
        return "decided" if len(seen) == 2 else None

    halted, reason = [], []

    async def go():
        loop_thread = threading.current_thread().name
        await asyncio.wait_for(stop_watch(rule, lambda: results, time.perf_counter(), lambda: halted.append(1),
                                          reason), timeout=10)
        return loop_thread

    loop_thread = asyncio.run(go())
    assert [name for name, _, _ in seen] and all(name != loop_thread for name, _, _ in seen)
    assert [n for _, n, _ in seen] == [3, 3] and len(results) == 3
    assert 0.9 < seen[0][2] < seen[1][2]
    assert halted == [1] and reason == ["decided"]
