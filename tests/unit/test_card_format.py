"""The model card writes its numbers with the report's formatters (report/render.py): the same
value reads the same in report.md and in README.md, and a value the store lacks reads "missing".
A store filled the way `quantkit run` fills it (tests/push_world.py): no vLLM, no Hub."""

from __future__ import annotations

from pathlib import Path

from push_world import bench_run, make_checkpoint, store_runs

from quantkit.hub import build_card, gather_evidence
from quantkit.measure.point import BenchPoint, Stats
from quantkit.report import render as R
from quantkit.store import Store, run_key

# (concurrency, output tok/s, TTFT p50 s, ITL p50 s, E2E p50 s): GPU-scale magnitudes, where
# significant digits and thousands separators show
POINTS = ((1, 187.345, 0.01234, 0.00531, 0.3456), (64, 12345.6, 1.2345, 0.0123, 12.345))


def _point(c: int, tok_s: float, ttft: float, itl: float, e2e: float) -> BenchPoint:
    def stats(p50: float) -> Stats:
        return Stats(n=8, mean=p50, p50=p50, p90=p50 * 1.2, p95=p50 * 1.3, p99=p50 * 1.5, min=p50 / 2, max=p50 * 2)

    return BenchPoint(profile="concurrency", concurrency=c, input_len=128, output_len=64, num_requests=4 * c,
                      started_at="2026-11-29T16:08:57+00:00", duration_s=40.1, successes=4 * c, failures=0,
                      prompt_tokens=512 * c, completion_tokens=256 * c, output_tok_s=tok_s, total_tok_s=3 * tok_s,
                      req_s=tok_s / 64, ttft=stats(ttft), itl=stats(itl), tpot=stats(itl), e2e=stats(e2e))


def _card(tmp_path: Path) -> str:
    ckpt = make_checkpoint(tmp_path / "models" / "smollm2-135m-gptq")
    baseline = tmp_path / "models" / "smollm2-135m"
    baseline.mkdir()
    home = tmp_path / "home"
    store_runs(home, ckpt, baseline, bench=False)
    with Store(home / "results.db") as store:
        store.db.execute("UPDATE records SET result = json_set(result, '$.size_bytes', 4567891234, "
                         "'$.wall_time_s', 1140.2) WHERE kind = 'convert'")
        run = bench_run(ckpt, [0.0, 0.0])
        run.points = [_point(*p) for p in POINTS]
        result = run.model_dump(mode="json", exclude={"path"})
        result["points"][1]["ttft"]["p50"] = None  # quantiles a record lacks
        result["points"][1]["itl"] = None
        rid = store.begin(run_key("bench", gpu=1), "bench", "smollm2-135m", "gptq", {"checkpoint": str(ckpt)})
        store.finish(rid, result)
        ev = gather_evidence(store, ckpt, None)
        return str(build_card(store, ev, "quantkit-tests/tiny-gptq"))


def test_card_formats_numbers_as_the_report_does(tmp_path):
    text = _card(tmp_path)
    assert "| quantized on | Intel(R) Xeon(R) Processor (2 CPUs) in 1,140 s |" in text
    assert "| checkpoint size | 4.25 GiB |" in text
    assert "| arc_easy | acc_norm | 0 | 500 of 2376 | 0.6200 ± 0.0217 | 0.6000 ± 0.0219 | 0.9677 [0.9481, 0.9874] |" in text
    assert "| arc_easy | 1.0 | 0 | 500 (500) | no | no | offline stock:arc_easy.yaml |" in text
    # tok/s, TTFT and ITL p50 / p95 in ms, E2E p50 in s: three significant digits; a lacking
    # quantile, or a whole lacking latency, reads "missing"
    assert "| concurrency 1 | 4 (0) | 187 | 22.0 | 12.3 / 16.0 | 5.31 / 6.90 | 0.346 |" in text
    assert "| concurrency 64 | 256 (0) | 12,346 | missing | missing / 1,605 | missing | 12.3 |" in text
    assert "concurrency 64, 12,346 output tok/s, TTFT p95 1,605 ms, ITL p95 missing ms." in text


def test_card_cells_are_the_report_formatters_with_the_cards_missing_word():
    assert R.fmt(None, missing="missing") == "missing" and R.fmt(2345.67, missing="missing") == "2,346"
    assert R.fmt_ms((None, None), missing="missing") == "missing"
    assert R.fmt_ms((None, 1.6048), missing="missing") == "missing / 1,605"
    assert R.fmt_ms((0.0876,)) == "87.6" and R.fmt_ms((0.1737, None)) == "174 / —"
    assert R.fmt_bytes(None, missing="missing") == "missing" and R.fmt_bytes(4567891234) == "4.25 GiB"
    assert R.fmt_str(None) == R.DASH and R.fmt_str(0, missing="missing") == "0" and R.fmt_str("1.0") == "1.0"
    assert R.fmt_pm(None, None, missing="missing") == "missing" and R.fmt_pm(0.6, 0.0219) == "0.6000 ± 0.0219"


def test_the_card_says_which_dtype_served_and_why(tmp_path):
    """Issue 38: a checkpoint measured on a CPU without native bf16 was served in float32; its card
    says so beside the throughput and the accuracy."""
    ckpt = make_checkpoint(tmp_path / "models" / "smollm2-135m-gptq")
    baseline = tmp_path / "models" / "smollm2-135m"
    baseline.mkdir()
    home = tmp_path / "home"
    store_runs(home, ckpt, baseline, bench=False)
    why = "AVX2 has no bf16 arithmetic: bf16 would be emulated (2-4x slower), float32 is native"
    with Store(home / "results.db") as store:
        store.db.execute("UPDATE records SET result = json_set(result, '$.server.dtype', 'float32', "
                         "'$.server.dtype_reason', ?) WHERE kind = 'eval'", (why,))
        run = bench_run(ckpt, [20.0, 80.0])
        run.server.dtype, run.server.dtype_reason = "float32", why
        rid = store.begin(run_key("bench", dtype=1), "bench", "smollm2-135m", "gptq", {"checkpoint": str(ckpt)})
        store.finish(rid, run.model_dump(mode="json", exclude={"path"}))
        text = str(build_card(store, gather_evidence(store, ckpt, None), "quantkit-tests/tiny-gptq"))
    assert text.count(f", computing in float32 ({why})") == 2, text  # throughput and accuracy
