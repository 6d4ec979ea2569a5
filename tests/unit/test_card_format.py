"""The model card writes its numbers with the report's formatters (report/render.py): the same
value reads the same in report.md and in README.md, and a value the store lacks reads "missing".
A store filled the way `quantkit run` fills it (tests/push_world.py): no vLLM, no Hub."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.markdown import rendered, structure
from push_world import bench_run, make_checkpoint, store_runs

from quantkit.hub import build_card, gather_evidence
from quantkit.measure.stats.point import BenchPoint, Stats
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


# -- issue 39: the card pasted into a shell and rendered as Markdown ------------------------------------

def _hostile_card(tmp_path: Path, *, extra: dict | None = None, text: str | None = None, folder: str = "m-gptq",
                  base_model: str | None = None) -> str:
    """The body of the card of a checkpoint whose stored bench was served with `extra` flags, and
    whose stored records hold `text` wherever a record holds words (method, scheme, backend, notes,
    source, recipe name, kernel lines, versions)."""
    import json

    from quantkit.serve.config import ServeConfig

    ckpt = make_checkpoint(tmp_path / "models" / folder)
    baseline = tmp_path / "models" / "smollm2-135m"
    baseline.mkdir()
    home = tmp_path / "home"
    store_runs(home, ckpt, baseline, bench=False)
    with Store(home / "results.db") as store:
        run = bench_run(ckpt, [17.0, 72.0])
        run.server.serve_config = ServeConfig(enforce_eager=True, extra=extra or {}).model_dump()
        if text is not None:
            run.server.quant_lines = [text]
            value = json.dumps(text)
            store.db.execute("UPDATE records SET result = json_set(result, '$.method', json(?), '$.scheme', json(?), "
                             "'$.backend', json(?), '$.notes', json_array(json(?)), '$.source.ref', json(?), "
                             "'$.recipe_name', json(?), '$.versions.llmcompressor', json(?)) WHERE kind = 'convert'",
                             (value,) * 7)
            store.db.execute("UPDATE records SET result = json_set(result, '$.versions.lm_eval', json(?)) "
                             "WHERE kind = 'eval'", (value,))
        rid = store.begin(run_key("bench", hostile=1), "bench", "smollm2-135m", "gptq", {"checkpoint": str(ckpt)})
        store.finish(rid, run.model_dump(mode="json", exclude={"path"}))
        ev = gather_evidence(store, ckpt, None)
        return build_card(store, ev, "quantkit-tests/tiny-gptq", base_model=base_model).text


# serve-arg values that a shell would run, split, expand or glob when pasted unquoted
SHELL_VALUES = ["$(touch pwned)", "`id`", "a; rm -rf ~", "x | tee y", "x && y", "*", "~/x", "a b",
                "it's", '"dq"', "$HOME", "a\\b", "```", "~~~", "line\nbreak", "--x=1 --y", "{a,b}", "!!", ""]


@pytest.mark.parametrize("value", SHELL_VALUES)
def test_how_to_serve_pastes_as_one_word_per_argument(tmp_path, value):
    """The card's `vllm serve` block pasted into bash (vllm a function that prints its arguments), in
    a folder with a file a glob would find: every argument arrives as written, nothing runs."""
    import subprocess

    body = _hostile_card(tmp_path, extra={"chat-template": value, "api-key": "s3cr3t", "disable-log-requests": None})
    section = body[body.index("## How to serve"):].splitlines()
    fence = section[2]
    assert fence.startswith("```") and fence.endswith("bash")
    pasted = "\n".join(section[3:section.index(fence.removesuffix("bash"), 3)])
    shell = tmp_path / "shell"
    shell.mkdir()
    (shell / "a-file").write_text("")
    proc = subprocess.run(["bash", "-c", "vllm() { printf '%s\\0' \"$@\"; }\n" + pasted], cwd=shell,
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": "/home-of-nobody"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\0")[:-1] == ["serve", "quantkit-tests/tiny-gptq", "--max-model-len", "2048",
                                            "--enforce-eager", "--chat-template", value, "--api-key", "***",
                                            "--disable-log-requests"]
    assert sorted(p.name for p in shell.iterdir()) == ["a-file"]  # nothing ran


# what a store's words may hold: a tag, a link, an image, emphasis, a fence, a table cell's end
CARD_TEXTS = ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "[x](javascript:alert(1))",
              "x)](javascript:alert(1)", "![i](http://evil.example/x.png)", "<https://evil.example>", "**b** _e_ ~~s~~",
              "`x` ```", "a|b", "&#60;b&#62;", "# heading", "- item", "[a]: javascript:alert(1)"]


@pytest.mark.parametrize("text", CARD_TEXTS)
def test_a_card_renders_the_stores_words_as_text(tmp_path, text):
    """The store's words in every place a card writes words, and --base-model: the rendered card has
    exactly the elements it has with a plain word there, and shows the text."""
    from markdown_it.common.utils import escapeHtml

    plain = rendered(_hostile_card(tmp_path / "plain", text="plainword", folder="plainword", base_model="plainword"))
    folder = text.replace("/", "_")  # a folder name holds no '/'
    html = rendered(_hostile_card(tmp_path / "hostile", text=text, folder=folder, base_model=text))
    assert structure(html) == structure(plain)
    assert escapeHtml(text) in html
