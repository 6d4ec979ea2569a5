"""The client's own logic without a server: token cadence from network reads, the client-limited
verdict, worker counts, the shared schedule, and that old stored points still validate."""

from __future__ import annotations

import pytest

from quantkit.measure.loadgen import generator as loadgen
from quantkit.measure.loadgen.client import SharedSchedule
from quantkit.measure.stats.point import BenchPoint, ClientStats, RequestResult, client_limit, summarize, token_timeline
from quantkit.measure.loadgen.workload import Prompt


def test_one_token_per_read_gives_the_read_gaps():
    # start 0, first chunk at 0.1, then one chunk every 20 ms: exactly vLLM bench's per-chunk gaps
    times = [0.1 + 0.02 * i for i in range(5)]
    ttft, itl, e2e, tokens = token_timeline(0.0, 0.1, times, [1] * 5, False, 5)
    assert ttft == pytest.approx(0.1) and e2e == pytest.approx(0.18) and tokens == 5
    assert itl == pytest.approx([0.02] * 4)


def test_a_burst_shares_its_gap_instead_of_reading_zero():
    # a late reader: chunks 2-4 came in one read at 0.16; vLLM bench would record 0.06, ~0, ~0
    ttft, itl, e2e, tokens = token_timeline(0.0, 0.1, [0.1, 0.16, 0.18], [1, 3, 1], False, 5)
    assert itl == pytest.approx([0.02, 0.02, 0.02, 0.02])
    assert len(itl) == tokens - 1 and sum(itl) == pytest.approx(e2e - ttft)


def test_multi_token_chunks_without_per_chunk_usage_are_spread_by_the_final_usage():
    # 1 + 4 x 4 tokens in 5 chunks, 80 ms apart: the usage says 17 tokens
    times = [0.1 + 0.08 * i for i in range(5)]
    ttft, itl, e2e, tokens = token_timeline(0.0, 0.1, times, [1] * 5, False, 17)
    assert tokens == 17 and len(itl) == 16
    assert itl == pytest.approx([0.02] * 16)
    # the TPOT these give is the stream's own
    assert (e2e - ttft) / (tokens - 1) == pytest.approx(0.02)


def test_exact_counts_from_per_chunk_usage_are_taken_as_they_are():
    ttft, itl, _, tokens = token_timeline(0.0, 0.1, [0.1, 0.18, 0.26], [4, 4, 2], True, 10)
    assert tokens == 10
    assert itl == pytest.approx([0.0] * 3 + [0.02] * 4 + [0.04] * 2)


def test_a_chat_role_chunk_sets_ttft_without_a_token():
    # the role-only chunk at 0.1 carries no token; tokens follow 20 ms apart
    ttft, itl, e2e, tokens = token_timeline(0.0, 0.1, [0.12, 0.14], [1, 1], False, 2)
    assert ttft == pytest.approx(0.1) and e2e == pytest.approx(0.14) and itl == pytest.approx([0.02, 0.02])


def test_no_chunk_with_choices_means_no_timeline():
    assert token_timeline(0.0, None, [], [], False, None) is None


def stats(**kw) -> ClientStats:
    base = dict(workers=1, cpu_s=1.0, cores=0.2, busiest_worker=0.2, loop_lag_p50_ms=0.2, loop_lag_p99_ms=1.0)
    return ClientStats(**(base | kw))


def test_client_limit_names_what_saturated():
    assert client_limit(stats()) is None
    assert "95% of a core" in client_limit(stats(busiest_worker=0.95))
    assert "event-loop lag" in client_limit(stats(loop_lag_p99_ms=40.0))
    assert "event-loop lag" in client_limit(stats(loop_lag_p50_ms=5.0))
    assert "behind the schedule" in client_limit(stats(send_lag_p50_ms=1.0, send_lag_p99_ms=80.0))
    # beside 2-s requests an 80-ms late send changes when load arrives, not what was measured
    assert client_limit(stats(send_lag_p50_ms=1.0, send_lag_p99_ms=80.0), e2e_p50_s=2.0) is None
    assert "behind the schedule" in client_limit(stats(send_lag_p99_ms=150.0), e2e_p50_s=2.0)
    # lag is judged against the cadence it blurs: 30 ms late is noise beside a 200 ms ITL
    assert client_limit(stats(loop_lag_p50_ms=3.0, loop_lag_p99_ms=30.0), itl_p50_s=0.2) is None
    assert "other processes" in client_limit(stats(loop_lag_p50_ms=3.0, loop_lag_p99_ms=30.0), itl_p50_s=0.02)


def test_summarize_carries_the_verdict_and_old_points_still_validate():
    ok = RequestResult(ok=True, ttft=0.1, itl=[0.02], e2e=0.12, tpot=0.02, prompt_tokens=4, completion_tokens=2)
    p = summarize([ok], 1.0, profile="concurrency", concurrency=1, rate=None, output_len=2, input_len=4,
                  api="completions", started_at="t", client=stats(busiest_worker=0.99))
    assert p.client_limited and "99% of a core" in p.client_limited_reason and p.client.workers == 1
    stored = p.model_dump(mode="json")
    for key in ("client", "client_limited", "client_limited_reason"):
        stored.pop(key)  # a point stored before issue 13
    old = BenchPoint.model_validate(stored)
    assert old.client is None and old.client_limited is False


def test_worker_counts(monkeypatch):
    monkeypatch.setenv("QUANTKIT_CLIENT_MAX_WORKERS", "8")
    assert loadgen.max_workers() == 8
    assert loadgen.auto_workers(1, None) == 1 and loadgen.auto_workers(256, None) == 1
    assert loadgen.auto_workers(512, None) == 2 and loadgen.auto_workers(1024, None) == 4
    assert loadgen.auto_workers(100_000, None) == 8 and loadgen.auto_workers(None, 5.0) == 1
    monkeypatch.setenv("QUANTKIT_CLIENT_MAX_WORKERS", "1")
    assert loadgen.auto_workers(1024, None) == 1


def test_jobs_split_the_slots_and_the_schedule():
    target = loadgen.Target(api_url="http://x/v1", model="m")
    bodies = [b"{}"] * 10
    jobs = loadgen.plan_jobs(target, bodies, 3, 7, None, 60.0)
    assert [j.slots for j in jobs] == [3, 2, 2] and all(j.indices is None for j in jobs)
    offsets = [0.1 * i for i in range(10)]
    jobs = loadgen.plan_jobs(target, bodies, 3, 10, offsets, 60.0)
    assert sorted(i for j in jobs for i in j.indices) == list(range(10))
    assert jobs[0].url == "http://x/v1/completions"
    assert len(loadgen.plan_jobs(target, bodies[:2], 8, 2, None, 60.0)) == 2  # never more workers than slots


def test_retry_prompts_are_new_to_a_prefix_cache_but_the_same_length():
    prompts = [Prompt(token_ids=[1, 2, 3, 4])]
    fresh = loadgen.fresh_prompts(prompts, 1)
    assert fresh[0].token_ids == [2, 3, 4, 1]
    assert loadgen.fresh_prompts([Prompt(text="hi")], 1) is None


def test_shared_schedule_counts_across_handles(tmp_path):
    path = str(tmp_path / "schedule")
    a = SharedSchedule.create(path)
    b = SharedSchedule(path)
    assert [a.take(), b.take(), a.take()] == [0, 1, 2]
    assert not b.stopped()
    a.stop()
    assert b.stopped()
    a.close()
    b.close()


def test_request_body_is_what_vllm_bench_sends():
    import json

    target = loadgen.Target(api_url="http://x/v1", model="m")
    body = json.loads(loadgen.request_body(target, Prompt(token_ids=[5, 6]), 8))
    assert body == {"model": "m", "prompt": [5, 6], "max_tokens": 8, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}


def test_the_report_marks_a_client_limited_point_and_shows_tpot():
    from quantkit import report as R
    from quantkit.measure.capacity.bench import BenchRun
    from quantkit.measure.stats.point import Stats

    def point(c: int, limited: bool) -> BenchPoint:
        s = Stats(n=8, mean=0.02, p50=0.02, p90=0.03, p95=0.03, p99=0.04, min=0.01, max=0.05)
        return BenchPoint(profile="concurrency", concurrency=c, output_len=64, input_len=128, num_requests=8,
                          started_at="t", duration_s=1.0, successes=8, failures=0, prompt_tokens=1024,
                          completion_tokens=512, output_tok_s=512.0, total_tok_s=1536.0, req_s=8.0,
                          ttft=s, itl=s, tpot=s.model_copy(update={"p50": 0.025}), client=stats(busiest_worker=0.99),
                          client_limited=limited, client_limited_reason="a client worker used 99% of a core")

    run = BenchRun(model_dir="/m", points=[point(1, False), point(512, True)], complete=True)
    variant = R.Variant(name="baseline", method="bf16", model_dir="/m", bench=run.model_dump(mode="json"))
    report = R.build_report([variant], title="t", environment={})
    (row,) = report.rows
    assert row.top.client_limited and not row.c1.client_limited and row.top.tpot_p50 == 0.025
    title, header, rows, caption = next(t for t in R.tables(report) if t[0] == "Throughput and latency")
    assert "[client-limited]" in rows[0][2] and "[client-limited]" not in rows[0][1]
    assert "TPOT p50 (ms) at knee" in header and rows[0][header.index("TPOT p50 (ms) at knee")] == "25.0"
    assert "client-limited" in caption


@pytest.mark.parametrize("flag, mark", [("usage_mismatch", "[usage mismatch]"), ("started_busy", "[started busy]")])
def test_the_report_marks_a_point_the_server_misreported_or_started_busy(flag, mark):
    """Issue 39's flags travel as client_limited does: stored point -> report row -> table and caption."""
    from quantkit import report as R
    from quantkit.measure.capacity.bench import BenchRun
    from quantkit.measure.stats.point import Stats

    s = Stats(n=8, mean=0.02, p50=0.02, p90=0.03, p95=0.03, p99=0.04, min=0.01, max=0.05)

    def point(c: int, flagged: bool) -> BenchPoint:
        return BenchPoint(profile="concurrency", concurrency=c, output_len=64, input_len=128, num_requests=8,
                          started_at="t", duration_s=1.0, successes=8, failures=0, prompt_tokens=1024,
                          completion_tokens=512, output_tok_s=512.0, total_tok_s=1536.0, req_s=8.0,
                          ttft=s, itl=s, tpot=s, **{flag: flagged, f"{flag}_reason": "why" if flagged else None})

    run = BenchRun(model_dir="/m", points=[point(1, False), point(16, True)], complete=True)
    variant = R.Variant(name="baseline", method="bf16", model_dir="/m", bench=run.model_dump(mode="json"))
    report = R.build_report([variant], title="t", environment={})
    (row,) = report.rows
    assert getattr(row.top, flag) and not getattr(row.c1, flag)
    title, header, rows, caption = next(t for t in R.tables(report) if t[0] == "Throughput and latency")
    assert mark in rows[0][2] and mark not in rows[0][1] and mark in caption


@pytest.mark.parametrize("busiest, attempts", [(0.1, 2), (0.95, 1)])
def test_a_client_kept_waiting_is_measured_once_more_where_no_worker_can_be_added(monkeypatch, busiest, attempts):
    """One core for the client (QUANTKIT_CLIENT_MAX_WORKERS=1): a point where the idle client was kept
    waiting by other processes is run once more; a client busy on its own core is not (it would
    be again), and neither is retried twice."""
    from quantkit.measure.stats.point import Stats

    monkeypatch.setenv("QUANTKIT_CLIENT_MAX_WORKERS", "1")
    runs: list[int] = []
    s = Stats(n=8, mean=0.02, p50=0.02, p90=0.03, p95=0.03, p99=0.04, min=0.01, max=0.05)

    async def measure_once(target, prompts, output_len, **kw):
        runs.append(kw["workers"])
        limited = True  # every run is limited: the loop must still stop
        point = BenchPoint(profile="concurrency", concurrency=4, output_len=8, input_len=2, num_requests=4,
                           started_at="t", duration_s=1.0, successes=4, failures=0, prompt_tokens=8,
                           completion_tokens=32, output_tok_s=32.0, total_tok_s=40.0, req_s=4.0, ttft=s, itl=s,
                           tpot=s, client=stats(busiest_worker=busiest, loop_lag_p99_ms=40.0),
                           client_limited=limited, client_limited_reason="event-loop lag")
        return point, []

    monkeypatch.setattr(loadgen, "_measure_once", measure_once)
    target = loadgen.Target(api_url="http://x/v1", model="m")
    point = loadgen.run_point(target, [Prompt(token_ids=[1, 2, 3])] * 4, 8, concurrency=4)
    assert runs == [1] * attempts and point.client.attempts == attempts and point.client_limited


def test_a_point_measured_again_hands_its_next_attempt_a_fresh_stop_rule(monkeypatch):
    """`restart` is called once per attempt after the first, and what it returns is the next
    attempt's stop rule: the first attempt's rule (and the caller's samples) describe a discarded
    run. 12-07: a retried point's /metrics summary counted both attempts' engine steps (51 for ~25)."""
    from quantkit.measure.stats.point import Stats

    monkeypatch.setenv("QUANTKIT_CLIENT_MAX_WORKERS", "1")
    seen: list[object] = []
    s = Stats(n=8, mean=0.02, p50=0.02, p90=0.03, p95=0.03, p99=0.04, min=0.01, max=0.05)

    async def measure_once(target, prompts, output_len, **kw):
        seen.append(kw["stop_when"])
        point = BenchPoint(profile="concurrency", concurrency=4, output_len=8, input_len=2, num_requests=4,
                           started_at="t", duration_s=1.0, successes=4, failures=0, prompt_tokens=8,
                           completion_tokens=32, output_tok_s=32.0, total_tok_s=40.0, req_s=4.0, ttft=s, itl=s,
                           tpot=s, client=stats(busiest_worker=0.1, loop_lag_p99_ms=40.0),
                           client_limited=True, client_limited_reason="event-loop lag")
        return point, []

    monkeypatch.setattr(loadgen, "_measure_once", measure_once)
    first, fresh = (lambda finished, elapsed: None), (lambda finished, elapsed: None)
    restarts: list[int] = []

    def restart():
        restarts.append(1)
        return fresh

    target = loadgen.Target(api_url="http://x/v1", model="m")
    point = loadgen.run_point(target, [Prompt(token_ids=[1, 2, 3])] * 4, 8, concurrency=4, stop_when=first,
                              restart=restart)
    assert point.client.attempts == 2 and restarts == [1] and seen == [first, fresh]


def test_a_signal_during_the_loop_cancels_it_then_reaches_the_programs_handler():
    """quantkit's CLI handler raises KeyboardInterrupt; raised inside a uvloop callback it would be
    logged and lost. run_loop turns the signal into a cancel, then calls the handler outside the loop."""
    import asyncio
    import os
    import signal

    from quantkit.measure.loadgen import client

    seen = []

    def handler(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt

    async def work():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append("cancelled")  # the coroutine's clean-up runs first
            raise

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            client.run_loop(work())
        assert seen == ["cancelled", signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is handler  # the program's handler is back
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("when", ["last stretch", "before the loop"])
def test_a_signal_in_the_coroutines_last_stretch_is_not_lost(when):
    """A signal that comes while the coroutine runs its last lines without yielding, or before the
    loop has started, still reaches the program's handler once the loop is closed (CI saw a
    Ctrl-C vanish there: the loop's self-pipe still held it when its handler was removed)."""
    import os
    import signal
    import time

    from quantkit.measure.loadgen import client

    seen = []

    def handler(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt

    async def work():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the last stretch: no await, so the loop cannot run in between
        return "finished"

    async def nothing():
        return "finished"

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            if when == "last stretch":
                client.run_loop(work())
            else:
                coro = nothing()
                original = client.asyncio.get_running_loop

                def signal_first():  # the signal lands as the loop starts, before the coroutine runs
                    os.kill(os.getpid(), signal.SIGINT)
                    return original()

                client.asyncio.get_running_loop = signal_first
                try:
                    client.run_loop(coro)
                finally:
                    client.asyncio.get_running_loop = original
        assert seen == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)


def _message(obj, damage=None) -> bytes:
    import io

    from quantkit.measure.loadgen import wire

    out = io.BytesIO()
    wire.send(out, obj)
    data = bytearray(out.getvalue())
    if damage is not None:
        data[damage] ^= 0xFF
    return bytes(data)


@pytest.mark.parametrize("written, said", [
    (_message(("done", list(range(50_000))), damage=-7), "arrived damaged (CRC-32"),  # bytes changed on the way
    (_message(("done", list(range(50_000))))[:70_000], "ended after 69984 of"),  # cut short
    (__import__("pickle").dumps(("done", list(range(100)))), "something else wrote to the stream"),  # a bare pickle
    (b"", "exited (0)"),  # nothing before the end of the stream
])
def test_a_worker_report_that_cannot_be_read_fails_the_point_with_its_reason(tmp_path, written, said):
    """The parent never raises a traceback for a worker's stream; the point fails with the reason."""
    import subprocess
    import sys

    from quantkit.measure.loadgen.generator import _recv

    (tmp_path / "worker-0.err").write_text("the worker's last line\n")
    (tmp_path / "stream").write_bytes(written)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())",
                             str(tmp_path / "stream")], stdout=subprocess.PIPE)
    status, reason = _recv(proc, str(tmp_path), 0)
    proc.stdout.close()
    assert status == "failed" and said in reason and reason.endswith(": the worker's last line"), reason


def test_a_worker_still_writing_a_report_that_does_not_check_is_killed_not_waited_for(tmp_path):
    """The H200 hang: the parent gave up on a stream while the worker was still writing it, then
    waited for a worker that waited for it. Now the worker gets 5 s, then is killed."""
    import subprocess
    import sys
    import time

    from quantkit.measure.loadgen.generator import _recv

    (tmp_path / "worker-0.err").write_text("")
    writer = "import sys, time; sys.stdout.buffer.write(b'XXXX' + bytes(1 << 20)); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE)
    started = time.monotonic()
    status, reason = _recv(proc, str(tmp_path), 0)
    proc.stdout.close()
    assert status == "failed" and "something else wrote to the stream" in reason, reason
    assert time.monotonic() - started < 30 and proc.returncode is not None


@pytest.mark.parametrize("left, said", [
    (None, "left no report; exit code 3: the worker's last line"),
    (_message(("done", list(range(50_000))), damage=100), "left a report that could not be read (WireError: "
                                                           "a message of"),
])
def test_a_worker_without_a_whole_report_fails_the_point_with_its_reason(tmp_path, left, said):
    import subprocess
    import sys

    from quantkit.measure.loadgen.generator import _report

    (tmp_path / "worker-0.err").write_text("the worker's last line\n")
    if left is not None:
        (tmp_path / "report-0").write_bytes(left)
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    status, reason = _report(proc, str(tmp_path), 0)
    assert status == "failed" and said in reason, reason


def test_a_report_file_round_trips(tmp_path):
    from quantkit.measure.loadgen import wire
    from quantkit.measure.loadgen.generator import _report
    import subprocess
    import sys

    (tmp_path / "worker-0.err").write_text("")
    wire.write_file(str(tmp_path / "report-0"), ("done", {"raws": list(range(100_000))}))
    assert not (tmp_path / "report-0.partial").exists()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    assert _report(proc, str(tmp_path), 0) == ("done", {"raws": list(range(100_000))})


def test_a_slot_that_breaks_fails_the_job_instead_of_ending_it_short():
    """A broken `on_done` (here a NameError) once ended each worker's share after its first
    requests, and the point came back short with no error: it must raise."""
    from quantkit.measure.loadgen import client
    from quantkit.serve.env import free_port

    job = client.Job(url=f"http://127.0.0.1:{free_port()}/v1/completions", bodies=[b"{}"] * 20, slots=2,
                     request_timeout=5.0)

    def broken(raw):
        raise NameError("name 'pickle' is not defined")

    with pytest.raises(NameError, match="pickle"):
        client.run_loop(client.run_job(job, None, client.Counter().take, lambda: False, on_done=broken))


def test_the_collector_leaves_the_processs_old_objects_alone_during_a_point():
    """A full collection over a process that imported torch and llm-compressor paused the demo's
    client for ~344 ms inside a point; run_loop freezes what existed before it and thaws it after."""
    import gc

    from quantkit.measure.loadgen import client

    kept = [object() for _ in range(1000)]  # stands for the process's imports
    seen = {}

    async def point():
        seen["frozen"] = gc.get_freeze_count()

    assert gc.get_freeze_count() == 0
    client.run_loop(point())
    assert seen["frozen"] >= len(kept)
    assert gc.get_freeze_count() == 0  # thawed: the process collects as usual after the point
