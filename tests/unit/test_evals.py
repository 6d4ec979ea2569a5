"""Evaluation logic without a model server: task registry, offline task configs, recovery, gates."""

from __future__ import annotations

import json
import math
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from quantkit.evals import gates as evals_gates, results as evals_results, run as evals_run, tasks as evals_tasks
from quantkit.cli import app
from quantkit.errors import QuantkitError, BackendError, GateFailed, SetupError, UsageError

ALL_TASKS = ["arc_easy", "arc_challenge", "hellaswag", "piqa", "winogrande", "boolq", "lambada_openai",
             "gsm8k", "mmlu", "truthfulqa_mc2", "wikitext"]


# ---------------------------------------------------------------------------------------------
# Registry, suites, did-you-mean


def test_registry_has_the_issue_tasks_and_suites():
    assert sorted(evals_tasks.registry()) == sorted(ALL_TASKS)
    assert set(evals_tasks.suites()) == {"quick", "openllm"}
    assert evals_tasks.registry()["wikitext"].higher_is_better is False


def test_stock_templates_exist_in_the_pinned_lm_eval():
    root = evals_tasks.lm_eval_tasks_dir()
    for task in evals_tasks.registry().values():
        assert (root / task.stock).is_file(), task.stock


def test_openllm_suite_is_the_published_protocol():
    specs = evals_tasks.resolve("openllm")
    assert [(s.name, s.num_fewshot, s.limit) for s in specs] == [
        ("arc_challenge", 25, None), ("hellaswag", 10, None), ("mmlu", 5, None),
        ("truthfulqa_mc2", 0, None), ("winogrande", 5, None), ("gsm8k", 5, None),
    ]
    assert all(s.suite == "openllm" for s in specs)


def test_quick_suite_is_a_few_hundred_items_and_overrides_replace_its_values():
    quick = evals_tasks.resolve("quick")
    assert 200 <= sum(s.limit for s in quick) <= 1000
    overridden = evals_tasks.resolve("quick", limit=7, num_fewshot=1)
    assert {(s.limit, s.num_fewshot) for s in overridden} == {(7, 1)}


def test_tasks_and_suites_mix_and_names_are_case_insensitive():
    specs = evals_tasks.resolve("ARC_Easy, gsm8k", limit=3)
    assert [(s.name, s.limit, s.num_fewshot, s.suite) for s in specs] == [
        ("arc_easy", 3, None, None), ("gsm8k", 3, None, None)]


def test_unknown_task_says_did_you_mean_and_lists_tasks_and_suites():
    with pytest.raises(UsageError) as err:
        evals_tasks.resolve("arc_esy")
    msg = err.value.one_line()
    assert "unknown task 'arc_esy'" in msg and "did you mean 'arc_easy'" in msg
    assert "quick" in msg and "wikitext" in msg and "\n" not in msg
    assert err.value.exit_code == 2


def test_task_requested_twice_is_refused():
    with pytest.raises(UsageError, match="requested twice"):
        evals_tasks.resolve("quick,arc_easy")


@pytest.mark.parametrize("kwargs", [{"limit": 0}, {"num_fewshot": -1}])
def test_nonsense_limits_are_usage_errors(kwargs):
    with pytest.raises(UsageError):
        evals_tasks.resolve("arc_easy", **kwargs)


def test_cli_unknown_task_exits_2_with_one_line(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    result = CliRunner().invoke(app, ["eval", str(tmp_path), "--tasks", "hellaswg"])
    assert result.exit_code == 2
    assert "did you mean 'hellaswag'" in result.output


def test_cli_gates_without_baseline_exit_2(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    result = CliRunner().invoke(app, ["eval", str(tmp_path), "--tasks", "arc_easy", "--min-recovery", "0.97"])
    assert result.exit_code == 2
    assert "need --baseline" in result.output


# ---------------------------------------------------------------------------------------------
# Offline task configs


def _generated(tmp_path: Path, data_dir: Path, names: list[str]) -> evals_tasks.TaskSetup:
    return evals_tasks.prepare_tasks(evals_tasks.resolve(",".join(names)), data_dir, tmp_path / "cfg")


def test_offline_configs_point_at_existing_files_and_stock_templates(tmp_path, data_dir):
    setup = _generated(tmp_path, data_dir, ALL_TASKS)
    generated = sorted((tmp_path / "cfg").glob("*.yaml"))
    # 10 leaf tasks + 57 mmlu subjects
    assert len(generated) == 10 + 57
    for path in generated:
        cfg = yaml.safe_load(path.read_text())
        assert cfg["dataset_path"] == "json"
        assert Path(cfg["include"]).is_file(), cfg["include"]
        for split, file in cfg["dataset_kwargs"]["data_files"].items():
            assert Path(file).is_file(), (path.name, split, file)
            assert Path(file).is_relative_to(data_dir)
    hella = yaml.safe_load((tmp_path / "cfg" / "hellaswag.yaml").read_text())
    assert hella["include"].endswith("evals/tasks/hellaswag_preprocessed.yaml")
    assert setup.sources["hellaswag"].template.startswith("quantkit:")
    assert "not bit-identical" in setup.sources["hellaswag"].note
    arc = yaml.safe_load((tmp_path / "cfg" / "arc_easy.yaml").read_text())
    assert arc["include"].endswith("lm_eval/tasks/arc/arc_easy.yaml")
    assert set(arc["dataset_kwargs"]["data_files"]) == {"train", "validation", "test"}
    anatomy = yaml.safe_load((tmp_path / "cfg" / "mmlu_anatomy.yaml").read_text())
    assert anatomy["dataset_kwargs"]["data_files"] == {
        "test": str(data_dir / "mmlu/test/anatomy.jsonl"), "dev": str(data_dir / "mmlu/dev/anatomy.jsonl")}
    assert all(s.source == "offline" for s in setup.sources.values())


def test_offline_tasks_load_with_the_readme_row_counts(tmp_path, data_dir):
    setup = _generated(tmp_path, data_dir, ALL_TASKS)
    tm = evals_tasks.task_manager(setup)
    expected = {"arc_easy": 2376, "arc_challenge": 1172, "hellaswag": 10042, "piqa": 1838, "winogrande": 1267,
                "boolq": 3270, "lambada_openai": 5153, "gsm8k": 1319, "mmlu": 14042, "truthfulqa_mc2": 817,
                "wikitext": 62}
    for name, rows in expected.items():
        loaded = tm.load([name])
        assert sum(len(t.eval_docs) for t in loaded["tasks"].values()) == rows, name
    mmlu = tm.load(["mmlu"])
    assert len(mmlu["tasks"]) == 57 and "mmlu" in mmlu["groups"]
    # The stock prompt survives the data swap (the point of reusing the stock templates).
    arc = tm.load(["arc_easy"])["tasks"]["arc_easy"]
    doc = arc.eval_docs[0]
    assert arc.doc_to_text(doc).startswith("Question: ") and arc.doc_to_text(doc).endswith("\nAnswer:")
    hella = tm.load(["hellaswag"])["tasks"]["hellaswag"]
    assert hella.doc_to_target(hella.eval_docs[0]) in range(4)
    assert len(hella.doc_to_choice(hella.eval_docs[0])) == 4


def test_online_mode_indexes_the_stock_task_directories(tmp_path):
    setup = evals_tasks.prepare_tasks(evals_tasks.resolve("arc_easy,mmlu"), None, tmp_path / "cfg")
    root = evals_tasks.lm_eval_tasks_dir()
    assert setup.include_paths == [root / "arc", root / "mmlu/default"]
    assert setup.sources["arc_easy"].source == "hub"
    assert not (tmp_path / "cfg").exists()


def test_missing_data_file_is_one_line_naming_the_file(tmp_path, data_dir):
    partial = tmp_path / "data"
    (partial / "arc_easy").mkdir(parents=True)
    shutil.copy(data_dir / "arc_easy" / "train.jsonl", partial / "arc_easy" / "train.jsonl")
    with pytest.raises(SetupError) as err:
        _generated(tmp_path, partial, ["arc_easy"])
    msg = err.value.one_line()
    assert str(partial / "arc_easy" / "validation.jsonl") in msg and "arc_easy" in msg and "\n" not in msg


def test_limit_larger_than_the_split_scores_the_whole_split_with_a_warning(tmp_path, data_dir, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    # The limit is checked (and warned about) before anything else; the empty model folder then
    # stops the run.
    with pytest.raises(QuantkitError):
        evals_run.prepare_eval(model, "boolq", limit=5000, output_dir=tmp_path / "out")
    warned = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "--limit 5000 is more than boolq's validation split (3270 items); all 3270 are scored" in warned
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


# ---------------------------------------------------------------------------------------------
# A server without logprobs


class _NoLogprobs(BaseHTTPRequestHandler):
    # Answers completions like a chat-only or text-only backend: text, no logprobs.
    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("content-length", 0))
        self.rfile.read(length)
        body = json.dumps({"choices": [{"index": 0, "text": "x", "logprobs": None}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_server_without_logprobs_is_one_line():
    server = HTTPServer(("127.0.0.1", 0), _NoLogprobs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(BackendError) as err:
            evals_run.check_logprobs(f"http://127.0.0.1:{server.server_port}/v1", "m", [1, 2, 3])
    finally:
        server.shutdown()
        server.server_close()
    msg = err.value.one_line()
    assert "returned no prompt logprobs" in msg and "\n" not in msg


# ---------------------------------------------------------------------------------------------
# Recovery, stderr, gates


def _task(name: str, value: float, stderr: float | None, *, metric="acc,none", higher=True, n_shot=0, limit=100) -> evals_results.TaskResult:
    return evals_results.TaskResult(
        task=name, version="1.0", n_shot=n_shot, limit=limit, n_samples=limit or 1000, n_available=1000,
        output_type="multiple_choice", chat_template=False, add_bos_token=False,
        data=evals_results.DataInfo(source="offline", template="stock:x.yaml"), primary_metric=metric,
        higher_is_better=higher, metrics={metric: evals_results.Metric(value=value, stderr=stderr)}, wall_time_s=1.0,
    )


def _run(*tasks: evals_results.TaskResult, name="q") -> evals_results.EvalRun:
    return evals_results.EvalRun(created_at="2026-11-29T00:00:00+00:00", model_dir=f"/m/{name}", checkpoint={}, server={},
                              protocol={}, data_dir=None, versions={}, tasks=list(tasks), results_file=f"/r/{name}.json")


def test_ratio_stderr_matches_the_delta_method_and_a_monte_carlo_check():
    import random

    q, se_q, b, se_b = 0.45, 0.02, 0.5, 0.025
    expected = (q / b) * math.sqrt((se_q / q) ** 2 + (se_b / b) ** 2)
    assert evals_gates.ratio_stderr(q, se_q, b, se_b) == pytest.approx(expected)
    rng = random.Random(0)
    ratios = [rng.gauss(q, se_q) / rng.gauss(b, se_b) for _ in range(200_000)]
    mean = sum(ratios) / len(ratios)
    sd = math.sqrt(sum((r - mean) ** 2 for r in ratios) / len(ratios))
    assert sd == pytest.approx(expected, rel=0.05)
    assert evals_gates.ratio_stderr(q, None, b, se_b) is None


def test_recovery_per_task_average_and_propagated_stderr():
    quant = _run(_task("arc_easy", 0.45, 0.02), _task("piqa", 0.60, 0.03),
                 _task("wikitext", 22.0, None, metric="word_perplexity,none", higher=False))
    base = _run(_task("arc_easy", 0.50, 0.025), _task("piqa", 0.60, 0.03),
                _task("wikitext", 20.0, None, metric="word_perplexity,none", higher=False), name="b")
    report = evals_gates.compare_to_baseline(quant, base)
    rows = {r.task: r for r in report.tasks}
    assert rows["arc_easy"].recovery == pytest.approx(0.9)
    assert rows["arc_easy"].recovery_stderr == pytest.approx(0.9 * math.sqrt((0.02 / 0.45) ** 2 + (0.025 / 0.5) ** 2))
    assert rows["piqa"].recovery == pytest.approx(1.0)
    # Perplexity: lower is better, so recovery = baseline / quantized; lm-eval gives no stderr.
    assert rows["wikitext"].recovery == pytest.approx(20 / 22)
    assert rows["wikitext"].recovery_stderr is None
    # The average covers accuracy tasks only.
    assert report.mean_recovery == pytest.approx(0.95)
    se = math.sqrt(rows["arc_easy"].recovery_stderr ** 2 + rows["piqa"].recovery_stderr ** 2) / 2
    assert report.mean_recovery_stderr == pytest.approx(se)
    assert report.passed and report.gates == []


def test_protocol_mismatch_is_refused():
    quant = _run(_task("arc_easy", 0.45, 0.02, n_shot=5))
    base = _run(_task("arc_easy", 0.50, 0.02, n_shot=0), name="b")
    with pytest.raises(UsageError, match="different protocol than the baseline: n_shot 5 vs baseline 0"):
        evals_gates.compare_to_baseline(quant, base)
    with pytest.raises(UsageError, match="have no 'piqa'"):
        evals_gates.compare_to_baseline(_run(_task("piqa", 0.5, 0.01)), base)


def test_gates_pass_and_fail_with_task_and_shortfall():
    # records without per-item scores: the independent interval decides (narrow here: small stderrs)
    quant = _run(_task("arc_easy", 0.45, 0.002), _task("piqa", 0.60, 0.003))
    base = _run(_task("arc_easy", 0.50, 0.0025), _task("piqa", 0.60, 0.003), name="b")
    ok = evals_gates.compare_to_baseline(quant, base, {"min_recovery": 0.94})
    assert ok.passed and ok.verdict == "pass" and ok.gates[0].value == pytest.approx(0.95)
    assert ok.tasks[0].method == "independent delta"

    with pytest.raises(GateFailed) as err:
        evals_gates.compare_to_baseline(quant, base, {"min_task_recovery": 0.97})
    msg = err.value.one_line()
    assert err.value.exit_code == 3
    assert re.search(r"arc_easy recovery 0\.9000 \[0\.88\d\d, 0\.91\d\d\] < 0\.97 \(short by 0\.0700\)", msg), msg
    assert "piqa" not in msg  # piqa passed

    report = evals_gates.compare_to_baseline(quant, base, evals_gates.Gates(min_recovery=0.97, tasks={"piqa": 0.98}),
                                            raise_on_fail=False)
    assert not report.passed and report.verdict == "fail"
    assert [(g.gate, g.task, g.passed) for g in report.gates] == [("min_recovery", None, False), ("tasks", "piqa", True)]
    assert re.search(r"average recovery 0\.9500 \[[\d.]+, [\d.]+\] < 0\.97 \(short by 0\.0200\)",
                     evals_gates.gate_failure_message(report))

    with pytest.raises(UsageError, match="not in these results: gsm8k"):
        evals_gates.compare_to_baseline(quant, base, {"tasks": {"gsm8k": 0.9}})


def test_zero_baseline_fails_a_gate_instead_of_dividing_by_zero():
    report = evals_gates.compare_to_baseline(_run(_task("gsm8k", 0.0, 0.0)), _run(_task("gsm8k", 0.0, 0.0), name="b"),
                                            {"min_task_recovery": 0.9}, raise_on_fail=False)
    assert report.tasks[0].recovery is None and not report.passed
    assert "undefined" in evals_gates.gate_failure_message(report)


def test_results_round_trip_and_baseline_lookup_in_the_store(tmp_path):
    from quantkit.serve.config import ServeConfig
    from quantkit.store import Store, standalone

    run = _run(_task("arc_easy", 0.45, 0.02))
    run.model_dir = str(tmp_path)
    folder = evals_results.results_dir(tmp_path)
    folder.mkdir()
    run.write(folder / "20261129T000000Z.json")
    again = evals_results.EvalRun.read(folder / "20261129T000000Z.json")
    assert again == run
    # a folder's baseline is its newest stored eval (the export file alone does not count)
    with pytest.raises(UsageError, match="the store has no eval of"):
        evals_results.find_baseline(tmp_path, like=run)
    with Store() as store, standalone(store, "eval", tmp_path, ServeConfig(), {"tasks": "arc_easy"}) as rec:
        rec.finish(run.model_dump(mode="json"), run.results_file)
    assert evals_results.find_baseline(tmp_path, like=run).results_file == str(folder / "20261129T000000Z.json")
    other = _run(_task("arc_easy", 0.45, 0.02, n_shot=5))
    with pytest.raises(UsageError, match="matches this run's protocol"):
        evals_results.find_baseline(tmp_path, like=other)
    # an exported results file still works as a baseline by path
    assert evals_results.find_baseline(folder / "20261129T000000Z.json") == run
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "quantkit.convert"}))
    with pytest.raises(UsageError, match="not a quantkit eval results file"):
        evals_results.EvalRun.read(tmp_path / "bad.json")


def test_cli_gate_failure_exits_3_and_names_the_task(tmp_path, monkeypatch):
    quant = _run(_task("arc_easy", 0.45, 0.002))
    base = _run(_task("arc_easy", 0.50, 0.0025), name="b")
    base.write(tmp_path / "base.json")
    (tmp_path / "config.json").write_text("{}")
    # The evaluation itself is the integration tests' job; here only the CLI's gate wiring runs.
    monkeypatch.setattr(evals_run, "evaluate", lambda *a, **k: quant)
    result = CliRunner().invoke(app, ["eval", str(tmp_path), "-t", "arc_easy", "--baseline", str(tmp_path / "base.json"),
                                      "--min-recovery", "0.97", "--json"])
    assert result.exit_code == 3
    assert "gate failed: average recovery 0.9000 [" in result.output and "< 0.97 (short by 0.0700)" in result.output
    assert '"recovery"' in result.output  # the report is printed before the failure line


def test_lm_eval_result_block_becomes_metrics_with_stderr():
    block = {"alias": "wikitext", "sample_len": 62, "word_perplexity,none": 33.98, "word_perplexity_stderr,none": "N/A",
             "acc,none": 0.41, "acc_stderr,none": 0.0494, "exact_match,strict-match": 0.0,
             "exact_match_stderr,strict-match": 0.0}
    metrics = evals_run._reported_metrics(block)
    assert set(metrics) == {"word_perplexity,none", "acc,none", "exact_match,strict-match"}
    assert metrics["word_perplexity,none"].stderr is None
    assert metrics["acc,none"] == evals_results.Metric(value=0.41, stderr=0.0494)
    assert metrics["exact_match,strict-match"].stderr == 0.0
