"""The report's logic on hand-made records.

The records are built with the real pydantic models (BenchRun/BenchPoint, EvalRun/TaskResult,
ConvertRecord) and the recovery with the real `compare_to_baseline`, so a schema change in those
modules breaks these tests instead of silently emptying the report's columns.
"""

from __future__ import annotations

import json
import math

import pytest

from quantkit import report as R
from quantkit.measure.capacity.bench import BenchRun
from quantkit.measure.capacity.search import KneeProbe, KneeResult
from quantkit.serve.server import ServerInfo
from quantkit.evals.gates import compare_to_baseline
from quantkit.evals.results import DataInfo, EvalRun, ItemScores, Metric, TaskResult
from quantkit.measure.stats.point import BenchPoint, Stats
from quantkit.checkpoint import ConvertRecord, SourceModel

BASE_SIZE = 270_000_000


def stats(p50: float, p95: float) -> Stats:
    return Stats(n=8, mean=p50, p50=p50, p90=p95, p95=p95, p99=p95, min=p50 / 2, max=p95 * 1.2)


def point(c: int, tok_s: float, ttft: float, itl: float, successes: int = 8, failures: int = 0) -> BenchPoint:
    return BenchPoint(
        profile="concurrency", concurrency=c, output_len=64, input_len=128, num_requests=successes + failures,
        started_at="2026-11-29T16:00:00+00:00", duration_s=10.0, successes=successes, failures=failures,
        prompt_tokens=128 * successes, completion_tokens=64 * successes, output_tok_s=tok_s,
        total_tok_s=tok_s * 3, req_s=successes / 10,
        ttft=stats(ttft, ttft * 1.2) if successes else None, itl=stats(itl, itl * 1.3) if successes else None,
    )


def bench(model_dir: str, curve: dict[int, tuple[float, float, float]], knee: int | None = None,
          quant_lines: list[str] | None = None, kv: int | None = 93184) -> dict:
    run = BenchRun(
        model_dir=model_dir, model_name="m", checkpoint={"method": "none"},
        server=ServerInfo(url="http://127.0.0.1:1", model_name="m", vllm_version="0.32.0", kv_cache_tokens=kv,
                          quant_lines=quant_lines or []),
        workload={"input_len": 128, "output_len": 64, "dataset": None, "api": "completions", "seed": 0,
                  "warmup": 2, "num_prompts": 8},
        hardware={"machine": "x86_64", "cpu": "Test CPU", "cpu_count": 2},
        points=[point(c, *v) for c, v in curve.items()],
        knee=KneeResult(knee=knee, reason="saturated", min_gain=0.1,
                        measured=[KneeProbe(x=c, throughput=v[0], slo_ok=True) for c, v in curve.items()])
        if knee is not None else None,
        complete=True,
    )
    return run.model_dump(mode="json", exclude={"path"})


def task(name: str, value: float, stderr: float | None, metric: str = "acc,none", higher: bool = True) -> TaskResult:
    # accuracy tasks carry per-item scores as lm-eval logs them: the first round(100 value) items right
    right = round(value * 100)
    items = ItemScores(ids=[str(i) for i in range(100)], prompts=[f"{i:08x}" for i in range(100)],
                       values={metric: [1] * right + [0] * (100 - right)}) if higher else None
    return TaskResult(items=items,
        task=name, version="1.0", n_shot=0, limit=100, n_samples=100, n_available=1000,
        output_type="multiple_choice" if higher else "loglikelihood_rolling", chat_template=False,
        add_bos_token=False, data=DataInfo(source="offline", template=f"stock:{name}.yaml"),
        primary_metric=metric, higher_is_better=higher, metrics={metric: Metric(value=value, stderr=stderr)},
        wall_time_s=1.0,
    )


def eval_run(model_dir: str, arc: float, piqa: float, ppl: float) -> EvalRun:
    return EvalRun(
        created_at="2026-11-29T16:00:00+00:00", model_dir=model_dir, checkpoint={"method": "x"}, server={},
        protocol={"backend": "lm-eval local-completions"}, data_dir=None, versions={"lm_eval": "0.4.13"},
        tasks=[task("arc_easy", arc, 0.05), task("piqa", piqa, 0.046),
               task("wikitext", ppl, None, metric="word_perplexity,none", higher=False)],
    )


def convert(method: str, scheme: str, group: int | None, size: int, fmt: str) -> dict:
    return ConvertRecord(
        method=method, backend="llmcompressor", scheme=scheme, group_size=group, recipe_name=method,
        recipe_hash="h-" + method, recipe={}, source=SourceModel(ref="m", kind="local", path="/m", fingerprint="sha256:0"),
        quantization_config={"quant_method": "compressed-tensors", "format": fmt}, wall_time_s=123.4,
        size_bytes=size, output_dir=f"/models/m-{method}",
    ).model_dump(mode="json")


@pytest.fixture
def variants() -> list[R.Variant]:
    base_eval = eval_run("/models/m", 0.60, 0.70, 30.0)
    out = [R.Variant(name="baseline", method="bf16", model_dir="/models/m", size_bytes=BASE_SIZE,
                     bench=bench("/models/m", {1: (20.0, 0.10, 0.05), 4: (60.0, 0.30, 0.06), 16: (90.0, 0.9, 0.09)}),
                     eval=base_eval.model_dump(mode="json"))]
    specs = [  # name, scheme, group, size, tok/s at c=1/4/16, arc, piqa, ppl, knee
        ("int8", "W8A8", None, 140_000_000, (30.0, 100.0, 160.0), 0.59, 0.69, 30.5, 16),
        ("awq", "W4A16", 64, 80_000_000, (18.0, 55.0, 80.0), 0.57, 0.70, 31.0, None),
        ("fp8", "FP8_DYNAMIC", None, 140_000_000, (1.0, 4.0, 12.0), 0.60, 0.70, 30.0, None),
    ]
    for name, scheme, group, size, tps, arc, piqa, ppl, knee in specs:
        run = eval_run(f"/models/m-{name}", arc, piqa, ppl)
        rec = compare_to_baseline(run, base_eval, {"min_recovery": 0.96}, raise_on_fail=False)
        out.append(R.Variant(
            name=name, method=name, model_dir=f"/models/m-{name}",
            convert=convert(name, scheme, group, size, "pack-quantized" if group else "int-quantized"),
            bench=bench(f"/models/m-{name}", {c: (t, 0.1 * c / t * 20, 0.05 * 20 / tps[0])
                                             for c, t in zip((1, 4, 16), tps)}, knee=knee,
                        quant_lines=[f"Using {scheme}Linear | kernel for {name}"]),
            eval=run.model_dump(mode="json"), recovery=rec.model_dump(mode="json"),
        ))
    out.append(R.Variant(name="gptq", method="gptq", model_dir="/models/m-gptq", status="failed",
                         error="convert failed: RuntimeError: CUDA out of memory"))
    return out


def build(variants, **kw) -> R.Report:
    kw.setdefault("environment", {"device": "Test CPU", "vllm": "0.32.0", "quantkit": "0.1.0"})
    return R.build_report(variants, title="test report", recipe_hash="abc123", **kw)


# ------------------------------------------------------------------------------------------------


def test_pareto_front_keeps_only_non_dominated_points():
    pts = {"a": (10.0, 1.0), "b": (20.0, 0.95), "c": (15.0, 0.90), "d": (20.0, 0.95), "e": (5.0, 1.0)}
    # c: b is faster and more accurate; e: a ties on recovery and is faster; b and d tie exactly,
    # so neither dominates the other.
    assert R.pareto_front(pts) == {"a", "b", "d"}
    assert R.pareto_front({}) == set()
    assert R.pareto_front({"only": (1.0, 0.5)}) == {"only"}


def test_report_marks_pareto_rows(variants):
    rep = build(variants)
    rows = {r.name: r for r in rep.rows}
    # baseline: knee-less, highest c=16 at 90 tok/s, recovery 1 (reference); int8: knee 16 at 160
    # tok/s; awq (80 tok/s, lower recovery) and fp8 (12 tok/s, recovery 1) are dominated by baseline.
    assert rows["baseline"].recovery == 1.0 and rows["baseline"].gate == "reference"
    assert rows["int8"].top_kind == "knee" and rows["int8"].top.concurrency == 16
    assert rows["baseline"].top_kind == "highest" and rows["baseline"].top.output_tok_s == 90.0
    assert {r.name for r in rep.rows if r.pareto} == {"baseline", "int8"}
    assert not rows["gptq"].pareto


def test_bandwidth_bound_arithmetic():
    b = R.decode_bound(weight_bytes=4_800_000_000, bandwidth_gbs=4800.0, measured_tok_s=500.0)
    assert b.max_tok_s == pytest.approx(1000.0)  # 4.8 TB/s / 4.8 GB per token
    assert b.ratio == pytest.approx(0.5)
    assert R.decode_bound(None, 4800.0, 500.0).max_tok_s is None
    assert R.decode_bound(1000, None, 500.0).ratio is None


@pytest.mark.parametrize("device,expected", [
    ("NVIDIA H200", 4800.0), ("NVIDIA H100 80GB HBM3", 3350.0), ("NVIDIA H100 PCIe", 2000.0),
    ("NVIDIA A100-SXM4-80GB", 2039.0), ("NVIDIA L40S", 864.0), ("Intel(R) Xeon(R) Processor", None), (None, None),
])
def test_bandwidth_lookup(device, expected):
    assert R.lookup_bandwidth(device) == expected


def test_bound_in_report_uses_sizes_and_c1(variants):
    rep = build(variants, environment={"device": "NVIDIA H200"})
    rows = {r.name: r for r in rep.rows}
    assert rep.bandwidth_gbs == 4800.0 and "looked up" in rep.bandwidth_source
    assert rows["baseline"].bound.max_tok_s == pytest.approx(4800e9 / BASE_SIZE)
    assert rows["int8"].bound.max_tok_s == pytest.approx(4800e9 / 140_000_000)
    assert rows["int8"].bound.ratio == pytest.approx(30.0 / (4800e9 / 140_000_000))
    # a given bandwidth wins over the lookup
    assert build(variants, environment={"device": "NVIDIA H200"}, bandwidth_gbs=1000.0).bandwidth_gbs == 1000.0


def test_unknown_bandwidth_says_so(variants):
    rep = build(variants)  # a CPU: not in the table
    assert rep.bandwidth_gbs is None
    assert "not known" in rep.bandwidth_source and "bandwidth" in rep.bandwidth_source
    assert all(r.bound.max_tok_s is None for r in rep.rows)
    md = R.render_markdown(rep)
    assert "not known for Test CPU; pass bandwidth_gbs" in md


def test_missing_measurements_print_as_dash_not_numbers():
    # a variant with a convert record but no bench and no eval: every measured column is "—"
    v = R.Variant(name="w8a16", method="w8a16", model_dir="/m",
                  convert=convert("w8a16", "W8A16", None, 150_000_000, "pack-quantized"))
    rep = build([v])
    row = rep.rows[0]
    assert row.c1 is None and row.top is None and row.recovery is None and row.kv_cache_tokens is None
    by_title = {t[0]: t for t in R.tables(rep)}
    throughput = by_title["Throughput and latency"][2][0]
    assert throughput[0] == "w8a16" and set(throughput[1:]) == {R.DASH}
    checkpoint = by_title["Checkpoints"][2][0]
    assert checkpoint[4] == "143.05 MiB"  # size on disk was measured (convert record)
    assert checkpoint[5] == R.DASH and checkpoint[6] == R.DASH  # weight memory, KV cache: not measured
    assert not any(p.drawn for p in rep.plots)
    assert all(p.note and p.note.startswith("not drawn") for p in rep.plots)


def test_failed_points_give_no_throughput():
    # a point where every request failed measured nothing: not 0 tok/s, and not the "highest"
    b = bench("/m", {1: (20.0, 0.1, 0.05)})
    b["points"].append(point(4, 0.0, 0.0, 0.0, successes=0, failures=8).model_dump(mode="json"))
    rep = build([R.Variant(name="baseline", method="bf16", model_dir="/m", bench=b)])
    row = rep.rows[0]
    assert row.points[1].output_tok_s is None
    assert row.top.concurrency == 1 and row.top_kind == "highest"


def test_failed_variant_shows_its_error(variants):
    rep = build(variants)
    md = R.render_markdown(rep)
    assert "**gptq: failed**: convert failed: RuntimeError: CUDA out of memory" in md
    gptq = next(line for line in md.splitlines() if line.startswith("| gptq | gptq |"))
    assert "failed: convert failed: RuntimeError: CUDA out of memory" in gptq
    html = R.render_html(rep, {})
    assert "convert failed: RuntimeError: CUDA out of memory" in html


def test_markdown_has_every_method_with_numbers(variants):
    rep = build(variants, environment={"device": "NVIDIA H200", "vllm": "0.32.0", "torch": "2.13.0"})
    md = R.render_markdown(rep)
    lines = md.splitlines()

    def row(table: str, name: str) -> list[str]:
        start = lines.index(f"## {table}")
        line = next(x for x in lines[start:] if x.startswith(f"| {name} |"))
        return [c.strip() for c in line.strip("|").split(" | ")]

    for name, c1, top in [("baseline", "20.0", "90.0 (highest c=16)"), ("int8", "30.0", "160 (knee c=16)"),
                          ("awq", "18.0", "80.0 (highest c=16)"), ("fp8", "1.00", "12.0 (highest c=16)")]:
        tp = row("Throughput and latency", name)
        assert tp[1] == c1 and tp[2] == top
    assert row("Checkpoints", "int8")[3] == "W8A8 (int-quantized)"
    assert row("Checkpoints", "awq")[3] == "W4A16 g64 (pack-quantized)"
    assert row("Checkpoints", "awq")[7] == "123 s"
    assert row("Checkpoints", "int8")[8] == "Using W8A8Linear \\| kernel for int8"  # pipe escaped
    acc = row("Accuracy", "int8")
    # arc 0.59 ± 0.05, piqa 0.69 ± 0.046; recovery = mean(0.59/0.6, 0.69/0.7)
    assert acc[1] == "0.5900 ± 0.0500" and acc[2] == "0.6900 ± 0.0460"
    rec = (0.59 / 0.6 + 0.69 / 0.7) / 2
    assert acc[3].startswith(f"{rec:.4f} [0.9631, 1.0060]")  # the paired 95% interval
    # wikitext word perplexity, not an accuracy column, and its recovery 30.0 / 30.5 (no interval:
    # this fixture keeps no per-document log-likelihoods to pair)
    assert acc[4] == f"30.5 ({30.0 / 30.5:.4f})"
    assert row("Accuracy", "baseline")[4] == "30.0"  # the reference: no recovery of its own
    assert acc[5] == "pass"
    assert row("Accuracy", "awq")[5].startswith("inconclusive: average recovery 0.9750 [0.9440, 1.0060] straddles "
                                                "0.96; \\~")
    assert row("Accuracy", "awq")[5].endswith(" more items per task would likely decide it")
    assert row("Accuracy", "baseline")[3] == "1.0000 (reference)"
    bound = row("Batch-1 decode bound from memory bandwidth", "int8")
    assert bound[2] == "4,800" and bound[3] == R.fmt(4800e9 / 140_000_000) and bound[4] == "30.0"
    assert row("Environment", "torch")[1] == "2.13.0" and row("Environment", "recipe hash")[1] == "abc123"
    assert row("Evaluation protocol", "arc_easy")[1:8] == ["1.0", "0", "100", "100", "no", "no", "acc,none"]
    for p in rep.plots:
        assert f"![{p.title}](plots/{p.name}.png)" in md


def test_protocol_mismatch_is_flagged():
    a = eval_run("/a", 0.5, 0.5, 30.0)
    b = eval_run("/b", 0.5, 0.5, 30.0)
    b.tasks[0].n_shot = 5
    rep = build([R.Variant(name="a", method="bf16", model_dir="/a", eval=a.model_dump(mode="json")),
                 R.Variant(name="b", method="int8", model_dir="/b", eval=b.model_dump(mode="json"))])
    arc = [p for p in rep.protocol if p.task == "arc_easy"]
    assert sorted((p.n_shot, tuple(p.variants)) for p in arc) == [(0, ("a",)), (5, ("b",))]
    assert any("arc_easy ran on different protocols" in n for n in rep.notes)


def test_json_round_trips(variants, tmp_path):
    rep = build(variants)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(rep.model_dump(mode="json")))
    back = R.read_report(path)
    assert back == rep
    assert json.loads(path.read_text())["schema_version"] == R.SCHEMA_VERSION
    data = json.loads(path.read_text())
    data["schema_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(Exception, match="schema_version 99"):
        R.read_report(path)


def test_write_report_writes_every_file(variants, tmp_path):
    rep = build(variants)
    paths = R.write_report(rep, tmp_path / "out")
    assert set(paths) == {"md", "html", "json", "plot:recovery_vs_throughput", "plot:itl_vs_throughput",
                          "plot:ttft_vs_concurrency"}
    for key, p in paths.items():
        assert p.is_file() and p.stat().st_size > 0, key
        if key.startswith("plot:"):
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = paths["html"].read_text()
    assert html.count('src="data:image/png;base64,') == 3
    # self-contained: nothing is fetched (no http(s) URL, no external stylesheet or script)
    assert "http://" not in html and "https://" not in html and "<script" not in html and "<link" not in html
    assert R.read_report(paths["json"]) == rep
    assert not list((tmp_path / "out").rglob("*.tmp"))


def test_html_escapes_record_text():
    v = R.Variant(name="x<script>", method="bf16", model_dir="/m", status="failed", error="<b>bad</b> & worse")
    html = R.render_html(build([v]), {})
    assert "<script>" not in html and "&lt;b&gt;bad&lt;/b&gt; &amp; worse" in html


def test_fmt():
    assert R.fmt(None) == R.DASH
    assert R.fmt(12.754) == "12.8" and R.fmt(0.08369) == "0.0837" and R.fmt(43711.0) == "43,711"
    assert R.fmt_ms((0.1737, None)) == "174 / —"
    assert R.fmt_bytes(67259195) == "64.14 MiB"
    assert math.isclose(R.decode_bound(2**30, 1.0, None).max_tok_s, 1e9 / 2**30)


def test_importing_quantkit_report_stays_light():
    import subprocess
    import sys

    code = "import sys, quantkit.report; print('matplotlib' in sys.modules, 'jinja2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_duplicate_variant_names_are_refused():
    from quantkit.errors import UsageError

    v = R.Variant(name="int8", method="int8", model_dir="/m")
    with pytest.raises(UsageError, match="repeated: int8"):
        build([v, v.model_copy()])


def test_plot_without_data_is_skipped_with_a_note(tmp_path):
    # bench but no eval: the latency plots are drawn, the recovery plot is not (and says why)
    v = R.Variant(name="baseline", method="bf16", model_dir="/m", size_bytes=BASE_SIZE,
                  bench=bench("/m", {1: (20.0, 0.1, 0.05), 4: (60.0, 0.3, 0.06)}))
    rep = build([v])
    drawn = {p.name: p.drawn for p in rep.plots}
    assert drawn == {"recovery_vs_throughput": False, "itl_vs_throughput": True, "ttft_vs_concurrency": True}
    paths = R.write_report(rep, tmp_path)
    assert "plot:recovery_vs_throughput" not in paths
    assert not (tmp_path / "plots" / "recovery_vs_throughput.png").exists()
    note = "not drawn: no variant has both accuracy recovery and a measured throughput"
    assert note in paths["md"].read_text() and note in paths["html"].read_text()
    assert paths["html"].read_text().count("data:image/png;base64,") == 2


def test_tensor_parallel_row_adds_bandwidth_sums_weight_memory_and_lists_its_flags():
    # a bf16 checkpoint served with --tensor-parallel-size 2: two GPUs read half the weights each
    b = bench("/m", {1: (280.0, 0.02, 0.0035)}, quant_lines=[
        "Kernel JIT monitor activated; monitored JIT compilations during inference will use mode=warn."])
    b["server"]["serve_config"] = {"max_model_len": 4096, "tensor_parallel_size": 2,
                                   "extra": {"compilation-config": '{"pass_config":{"fuse_allreduce_rms":false}}'}}
    b["server"]["weights_gib"] = 7.54  # one worker's share, as vLLM logs it
    rep = build([R.Variant(name="bf16-tp2", method="bf16", model_dir="/m", size_bytes=16_060_556_384, bench=b)],
                bandwidth_gbs=4800.0)
    row = rep.rows[0]
    assert row.tensor_parallel == 2 and row.bound.gpus == 2
    assert row.bound.max_tok_s == pytest.approx(2 * 4800e9 / 16_060_556_384)
    assert row.weight_memory_bytes == int(7.54 * 2 * 2**30)
    assert row.kernels == []  # the JIT-monitor notice is not a kernel choice
    by_title = {t[0]: t for t in R.tables(rep)}
    assert by_title["Batch-1 decode bound from memory bandwidth"][2][0][2] == "9,600 (2 × 4,800)"
    assert by_title["Checkpoints"][2][0][-1] == R.DASH
    flags = by_title["Bench workload"][2][0][-1]
    assert "--tensor-parallel-size 2" in flags and "--compilation-config" in flags and "fuse_allreduce_rms" in flags


def test_the_environment_says_which_dtype_served_and_why():
    """Issue 38: the report's environment table names the CPU's ISA and the dtype the variants were
    served in, with its reason; variants served in different dtypes are named one by one."""
    from quantkit.report.gather import environment

    def served(name: str, dtype: str, reason: str) -> R.Variant:
        run = bench(f"/models/{name}", {1: (20.0, 0.1, 0.05)})
        run["server"].update(dtype=dtype, dtype_reason=reason, cpu_isa="AVX2")
        return R.Variant(name=name, method="bf16" if name == "baseline" else name, model_dir=f"/models/{name}", bench=run)

    why = "AVX2 has no bf16 arithmetic: bf16 would be emulated (2-4x slower), float32 is native"
    env = environment([served("baseline", "float32", why), served("int8", "float32", why)])
    assert env["cpu_isa"] == "AVX2" and env["served dtype"] == f"float32 ({why})"
    env = environment([served("baseline", "float32", why), served("int8", "bfloat16", "set by the user")])
    assert env["served dtype"] == f"baseline: float32 ({why}); int8: bfloat16 (set by the user)"
    assert "served dtype" not in environment([R.Variant(name="baseline", method="bf16", model_dir="/m",
                                                        bench=bench("/m", {1: (20.0, 0.1, 0.05)}))])
    md = R.render_markdown(build([served("baseline", "float32", why)], environment=env))
    assert "| served dtype | baseline: float32" in md
