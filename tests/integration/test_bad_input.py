"""Bad input, as a new user and a reliability engineer would give it: every command, every class.

Each case runs the real CLI in a subprocess against a home whose store already holds a result,
and asserts: the exit code (2 usage, 1 failure); exactly one line on stderr, starting `error:`,
naming the problem (and, where there is one, the fix); no traceback; the time to fail (checks
up front take seconds, a vLLM start takes 30 s or more); and that the stored result is intact.
No vLLM server is started by any case: catching the problem before one starts is the point.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# Well under a vLLM-CPU start (30 s eager on a quiet 2-core machine, 100+ s compiled), plus a
# margin scaled by this machine's own speed today: a bare `quantkit --version` is the reference.
FAIL_FAST_S = 20.0


@pytest.fixture(scope="module")
def world(smollm2_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    home = root / "home"
    home.mkdir()
    from quantkit.store import Store, run_key

    with Store(home / "results.db") as store:  # a result that must survive every case
        rid = store.begin(run_key("bench", x="kept"), "bench", "smollm2-135m", "baseline", {"checkpoint": str(smollm2_dir)})
        store.add_point(rid, {"concurrency": 1, "output_tok_s": 21.0})
        store.finish(rid, {"kind": "quantkit.bench", "complete": True})
    model = root / "model"
    shutil.copytree(smollm2_dir, model)

    def broken(name: str, change) -> Path:
        folder = root / name
        shutil.copytree(smollm2_dir, folder)
        change(folder)
        return folder

    def truncate(folder: Path) -> None:
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 3])

    def deep500(folder: Path) -> None:  # parses, then exhausts the stack of whatever walks it (vLLM, transformers)
        config = json.loads((folder / "config.json").read_text())
        config["x"] = json.loads("[" * 500 + "]" * 500)
        (folder / "config.json").write_text(json.dumps(config))

    def arch(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config["architectures"] = ["NoSuchForCausalLM"]
        (folder / "config.json").write_text(json.dumps(config))

    folders = {
        "model": model,
        "truncated": broken("truncated", truncate),
        "badconfig": broken("badconfig", lambda f: (f / "config.json").write_text('{"architectures": [')),
        "noconfig": broken("noconfig", lambda f: (f / "config.json").unlink()),
        "unknownarch": broken("unknownarch", arch),
        "notok": broken("notok", lambda f: [p.unlink() for p in f.glob("tokenizer*")]),
        "nonempty": broken("nonempty", lambda f: None),
        "deepconfig": broken("deepconfig", lambda f: (f / "config.json").write_text("[" * 100_000 + "]" * 100_000)),
        "listconfig": broken("listconfig", lambda f: (f / "config.json").write_text('["LlamaForCausalLM"]')),
        "deep500config": broken("deep500config", deep500),
    }
    (root / "a-file").write_text("not a folder")
    (root / "a-folder").mkdir()
    (root / "deep-import.json").write_text("[" * 100_000 + "]" * 100_000)
    (root / "prompts-bad.jsonl").write_text('{"prompt": "hi"}\nnot json\n')
    (root / "notjson.json").write_text("{ nope")
    (root / "method.yaml").write_text((REPO / "recipes" / "gptq.yaml").read_text())
    run = f"kind: run\nname: t\nmodel: {model}\n"
    (root / "serve-typo.yaml").write_text(run + "serve: {max_num_seq: 8}\n")
    (root / "task-typo.yaml").write_text(run + "eval: {tasks: arc_esy}\n")
    (root / "yaml-error.yaml").write_text(run + "bench: {concurrency: [1, 4\n")
    (root / "gate-task.yaml").write_text(run + "eval: {tasks: arc_easy}\ngates: {tasks: {piqa: 0.9}}\n")
    (root / "calib-missing.yaml").write_text(run + "methods: [{method: gptq, calib: /nonexistent/calib.jsonl}]\n")
    (root / "bad-method.yaml").write_text(run + "methods: [{method: gptqq}]\n")
    (root / "bomb.yaml").write_text(run + _alias_bomb(9))  # 9^10 values expanded: a MemoryError before
    (root / "bomb-method.yaml").write_text("name: b\nmethod: gptq\nscheme: W4A16\noptions:\n"
                                           + "".join("  " + line + "\n" for line in _alias_bomb(9).splitlines()))
    (root / "recursive.yaml").write_text(run + "serve: &s {extra: [*s]}\n")
    for name, bench in (("bench-c0", "{concurrency: [0]}"), ("bench-in0", "{input_len: 0}"),
                        ("bench-out-1", "{output_len: -1}"), ("bench-empty", "{concurrency: []}")):
        (root / f"{name}.yaml").write_text(run + f"bench: {bench}\n")
    not_exec = root / "not-executable"
    not_exec.write_text("#!/bin/sh\n")
    # the vLLM environment's architecture list, asked once (seconds) and cached in the home
    subprocess.run([sys.executable, "-c", "from quantkit.serve.env import supported_architectures as s; s()"],
                   env={**os.environ, "QUANTKIT_HOME": str(home)}, check=True, timeout=300)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "quantkit", "--version"], check=True, capture_output=True, timeout=120)
    reference_s = time.monotonic() - started
    return {"root": root, "home": home, "not_exec": not_exec, "limit_s": FAIL_FAST_S + 4 * reference_s, **folders}


def _alias_bomb(depth: int) -> str:
    """A few hundred bytes of YAML whose aliases expand to 9^(depth+1) values."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, depth + 1)]
    return "\n".join(lines) + "\n"


def W(key: str, *parts: str):
    """A placeholder for a path of the world fixture (cases are declared before it exists)."""
    return ("world", key, *parts)


# (id, args, exit code, words the line must contain, extra environment)
CASES = [
    # convert
    ("convert-missing-model", ["convert", "/nonexistent/model", "--method", "gptq"], 2, ["not found"], {}),
    ("convert-squeezellm", ["convert", W("model"), "--method", "squeezellm"], 2, ["removed SqueezeLLM", "awq"], {}),
    ("convert-unknown-method", ["convert", W("model"), "--method", "gptqq"], 2, ["unknown method", "did you mean 'gptq'"], {}),
    ("convert-no-method", ["convert", W("model")], 2, ["--method", "--recipe"], {}),
    ("convert-output-exists", ["convert", W("model"), "--method", "fp8", "-o", W("nonempty")], 2, ["already exists", "--force"], {}),
    ("convert-recipe-missing", ["convert", W("model"), "--recipe", "/nonexistent/r.yaml"], 2, ["does not exist"], {}),
    ("convert-group-size", ["convert", W("model"), "--method", "gptq", "--group-size", "3"], 2, ["power of two"], {}),
    ("convert-num-samples", ["convert", W("model"), "--method", "gptq", "--num-samples", "0"], 2, ["num_samples"], {}),
    ("convert-bad-config", ["convert", W("badconfig"), "--method", "fp8"], 2, ["not valid JSON"], {}),
    ("convert-deep-config", ["convert", W("deepconfig"), "--method", "fp8"], 2, ["deepconfig/config.json is not a valid Hugging Face config", "nests deeper"], {}),
    ("convert-fp8-num-samples", ["convert", W("model"), "--method", "fp8", "--num-samples", "8"], 2, ["--num-samples does not apply to fp8", "data-free", "leave it out"], {}),
    ("convert-rtn-calib", ["convert", W("model"), "--method", "w4a16-rtn", "--calib", "c4", "--seq-len", "64"], 2, ["--seq-len and --calib do not apply to w4a16-rtn"], {}),
    ("convert-recipe-data-free", ["convert", W("model"), "--recipe", "w8a16", "--num-samples", "8"], 2, ["does not apply to w8a16"], {}),
    ("convert-recipe-alias-bomb", ["convert", W("model"), "--recipe", W("root", "bomb-method.yaml")], 2, ["bomb-method.yaml:10:", "alias bomb"], {}),
    ("convert-unknown-backend", ["convert", W("model"), "--method", "gptq", "--backend", "gptqmodl"], 2, ["unknown backend", "did you mean 'gptqmodel'"], {}),
    # bench: numbers, paths, checkpoints, environments
    ("bench-empty-item", ["bench", W("model"), "-c", "1,,4"], 2, ["--concurrency", "1,4,16"], {}),
    ("bench-zero-concurrency", ["bench", W("model"), "-c", "0"], 2, ["--concurrency", "greater than or equal to 1"], {}),
    ("bench-zero-prompts", ["bench", W("model"), "-n", "0"], 2, ["--num-prompts", "greater than or equal to 1"], {}),
    ("bench-port-range", ["bench", W("model"), "--port", "99999"], 2, ["--port", "65535"], {}),
    ("bench-negative-rate", ["bench", W("model"), "--rate", "-1"], 2, ["--rate", "greater than or equal to 0.1"], {}),
    ("bench-two-profiles", ["bench", W("model"), "-c", "1", "--rate", "2"], 2, ["one of --concurrency"], {}),
    ("bench-api", ["bench", W("model"), "--api", "grpc"], 2, ["--api", "completions or chat"], {}),
    ("bench-slo-syntax", ["bench", W("model"), "--slo", "ttft=1"], 2, ["--slo", "ttft_p95=0.5"], {}),
    ("bench-slo-negative", ["bench", W("model"), "--slo", "ttft_p95=-1"], 2, ["--slo"], {}),
    ("bench-missing-dir", ["bench", "/nonexistent/dir"], 2, ["does not exist"], {}),
    ("bench-no-tokenizer", ["bench", W("notok")], 2, ["no tokenizer"], {}),
    ("bench-truncated-weights", ["bench", W("truncated"), "--enforce-eager"], 2, ["truncated or damaged", "re-download or re-convert"], {}),
    ("bench-config-not-json", ["bench", W("badconfig")], 2, ["not valid JSON"], {}),
    ("bench-no-config", ["bench", W("noconfig")], 2, ["no config.json"], {}),
    ("bench-deep-config", ["bench", W("deepconfig")], 2, ["deepconfig/config.json is not a valid Hugging Face config", "nests deeper"], {}),
    ("bench-list-config", ["bench", W("listconfig")], 2, ["listconfig/config.json is not a valid Hugging Face config", "a list, not an object"], {}),
    ("bench-unknown-architecture", ["bench", W("unknownarch")], 2, ["NoSuchForCausalLM", "not supported"], {}),
    ("bench-url-scheme", ["bench", W("model"), "--url", "localhost:8000"], 2, ["http://"], {}),
    ("bench-url-unreachable", ["bench", W("model"), "--url", "http://127.0.0.1:9", "-c", "1"], 1, ["cannot reach"], {}),
    ("bench-vllm-without-vllm", ["bench", W("model"), "-c", "1"], 1, ["has no vLLM", "QUANTKIT_VLLM"], {"QUANTKIT_VLLM": sys.executable}),
    ("bench-vllm-not-executable", ["bench", W("model"), "-c", "1"], 1, ["not an executable", "QUANTKIT_VLLM"], {"QUANTKIT_VLLM": W("not_exec")}),
    ("bench-dataset-missing", ["bench", W("model"), "--dataset", "/nonexistent/p.jsonl"], 2, ["does not exist"], {}),
    ("bench-dataset-bad-line", ["bench", W("model"), "--dataset", W("root", "prompts-bad.jsonl")], 2, ["prompts-bad.jsonl:2 is not valid JSON"], {}),
    ("bench-unwritable-results", ["bench", W("model"), "-c", "1", "--results-dir", "/proc/quantkit"], 2, ["cannot write results to /proc/quantkit", "--results-dir"], {}),
    ("bench-bad-serve-arg", ["bench", W("model"), "--serve-arg", "port=1"], 2, ["set by quantkit itself"], {}),
    ("bench-bad-knob", ["bench", W("model"), "--gpu-memory-utilization", "1.5"], 2, ["gpu-memory-utilization"], {}),
    # numbers (issue 39): not finite, too small to end, too big to hold; the unit tests take every spelling
    ("bench-rate-nan", ["bench", W("model"), "--rate", "nan"], 2, ["--rate value 'nan'", "finite number"], {}),
    ("bench-rate-inf", ["bench", W("model"), "--rate", "inf"], 2, ["--rate value 'inf'", "finite number"], {}),
    ("bench-rate-tiny", ["bench", W("model"), "--rate", "1e-300"], 2, ["--rate value '1e-300'", "greater than or equal to 0.1"], {}),
    ("bench-concurrency-20-digits", ["bench", W("model"), "-c", "12345678901234567890"], 2, ["--concurrency", "less than or equal to 100000"], {}),
    ("bench-url-port", ["bench", W("model"), "--url", "http://127.0.0.1:99999", "-c", "1"], 2, ["port '99999'", "1 to 65535"], {}),
    ("bench-deep500-config", ["bench", W("deep500config"), "-c", "1"], 2, ["deep500config/config.json", "nests deeper than 64 levels"], {}),
    ("serve-deep500-config", ["serve", W("deep500config")], 2, ["deep500config/config.json", "nests deeper than 64 levels"], {}),
    # serve
    ("serve-missing-dir", ["serve", "/nonexistent/dir"], 2, ["does not exist"], {}),
    ("serve-truncated", ["serve", W("truncated")], 2, ["truncated or damaged"], {}),
    ("serve-deep-config", ["serve", W("deepconfig")], 2, ["config.json is not a valid Hugging Face config"], {}),
    # tune
    ("tune-missing-dir", ["tune", "/nonexistent/dir"], 2, ["does not exist"], {}),
    ("tune-bad-slo", ["tune", W("model"), "--slo", "latency=1"], 2, ["--slo"], {}),
    ("tune-space-negative", ["tune", W("model"), "--slo", "ttft_p95=1", "--space", "max-num-seqs=-1,0"], 2, ["bad tune choice max-num-seqs=-1"], {}),
    # a lever vLLM-CPU ignores: in the space, or in the base configuration (serve/flag_support.py)
    ("tune-space-cpu-ignores", ["tune", W("model"), "--slo", "ttft_p95=1", "--space", "max-cudagraph-capture-size=256"], 2,
     ["tune space max-cudagraph-capture-size", "vLLM-CPU captures no CUDA graphs", "serve on a GPU"], {}),
    ("tune-base-cpu-ignores", ["tune", W("model"), "--slo", "ttft_p95=1", "--async-scheduling"], 2,
     ["vLLM-CPU turns async scheduling off", "leave it out"], {}),
    # eval
    ("eval-task-typo", ["eval", W("model"), "--tasks", "arc_esy"], 2, ["unknown task 'arc_esy'", "did you mean 'arc_easy'"], {}),
    ("eval-limit", ["eval", W("model"), "--tasks", "arc_easy", "--limit", "0"], 2, ["--limit"], {}),
    ("eval-fewshot", ["eval", W("model"), "--tasks", "arc_easy", "--num-fewshot", "-1"], 2, ["--num-fewshot"], {}),
    ("eval-concurrency-zero", ["eval", W("model"), "--tasks", "arc_easy", "--concurrency", "0"], 2, ["--concurrency", "greater than or equal to 1"], {}),
    ("eval-grow-to-zero", ["eval", W("model"), "--tasks", "arc_easy", "--grow-to", "0"], 2, ["--grow-to", "greater than or equal to 1"], {}),
    ("eval-alias-task-typo", ["eval", "smollm2-135m", "--tasks", "arc_esy"], 2, ["unknown task 'arc_esy'"], {}),
    ("eval-gate-no-baseline", ["eval", W("model"), "--tasks", "arc_easy", "--min-recovery", "0.9"], 2, ["--baseline"], {}),
    ("eval-gate-syntax", ["eval", W("model"), "--tasks", "arc_easy", "--gate", "arc_easy"], 2, ["TASK=MIN_RECOVERY"], {}),
    ("eval-baseline-missing", ["eval", W("model"), "--tasks", "arc_easy", "--baseline", "/nonexistent/b.json"], 2, ["baseline"], {}),
    ("eval-no-config", ["eval", W("noconfig"), "--tasks", "arc_easy"], 2, ["no config.json"], {}),
    ("eval-deep-config", ["eval", W("deepconfig"), "--tasks", "arc_easy"], 2, ["config.json is not a valid Hugging Face config"], {}),
    ("eval-data-dir", ["eval", W("model"), "--tasks", "arc_easy"], 1, ["QUANTKIT_DATA_DIR", "not a directory"], {"QUANTKIT_DATA_DIR": "/nonexistent/data"}),
    # run
    ("run-method-recipe", ["run", W("root", "method.yaml")], 2, ["method recipe", "run recipe"], {}),
    ("run-serve-typo", ["run", W("root", "serve-typo.yaml")], 2, ["serve-typo.yaml:4", "did you mean 'max_num_seqs'"], {}),
    ("run-task-typo", ["run", W("root", "task-typo.yaml")], 2, ["unknown task 'arc_esy'"], {}),
    ("run-yaml-error", ["run", W("root", "yaml-error.yaml")], 2, ["yaml-error.yaml:", "not valid YAML"], {}),
    ("run-gate-task", ["run", W("root", "gate-task.yaml")], 2, ["gates name task", "piqa"], {}),
    ("run-calibration-missing", ["run", W("root", "calib-missing.yaml")], 2, ["/nonexistent/calib.jsonl"], {}),
    ("run-bad-method", ["run", W("root", "bad-method.yaml")], 2, ["unknown method 'gptqq'"], {}),
    ("run-missing", ["run", "/nonexistent/run.yaml"], 2, ["does not exist"], {}),
    ("run-alias-bomb", ["run", W("root", "bomb.yaml")], 2, ["bomb.yaml:9:", "alias bomb"], {}),
    ("run-recursive-alias", ["run", W("root", "recursive.yaml")], 2, ["recursive.yaml:4:", "recursive alias"], {}),
    ("run-bench-concurrency-0", ["run", W("root", "bench-c0.yaml")], 2, ["bench-c0.yaml:4: bench.concurrency.0"], {}),
    ("run-bench-input-len-0", ["run", W("root", "bench-in0.yaml")], 2, ["bench-in0.yaml:4: bench.input_len"], {}),
    ("run-bench-output-len-negative", ["run", W("root", "bench-out-1.yaml")], 2, ["bench-out-1.yaml:4: bench.output_len"], {}),
    ("run-bench-concurrency-empty", ["run", W("root", "bench-empty.yaml")], 2, ["bench-empty.yaml:4: bench.concurrency", "bench: null"], {}),
    # the store and what reads it
    ("compare-unknown-model", ["compare", "--model", "nope"], 2, ["nothing stored for model 'nope'"], {}),
    ("runs-show-unknown", ["runs", "show", "ffffffffff"], 2, ["no run with key"], {}),
    ("runs-rm-short", ["runs", "rm", "ab"], 2, ["at least 4 characters"], {}),
    ("runs-import-not-json", ["runs", "import", W("root", "notjson.json")], 2, ["is not valid JSON"], {}),
    ("runs-import-deep", ["runs", "import", W("root", "deep-import.json")], 2, ["deep-import.json is not a quantkit result file", "nests deeper"], {}),
    ("compare-min-recovery-nan", ["compare", "--model", "smollm2-135m", "--min-recovery", "nan"], 2, ["--min-recovery", "finite number"], {}),
    ("compare-bandwidth-nan", ["compare", "--model", "smollm2-135m", "--bandwidth-gbs", "nan"], 2, ["--bandwidth-gbs", "finite number"], {}),
    ("compare-bandwidth-negative", ["compare", "--model", "smollm2-135m", "--bandwidth-gbs", "-5"], 2, ["--bandwidth-gbs", "greater than 0"], {}),
    ("compare-output-file", ["compare", "--model", "smollm2-135m", "-o", W("root", "a-file")], 2, ["--output", "is a file, not a folder"], {}),
    ("card-gate-nan", ["card", W("model"), "--gate", "task=nan"], 2, ["--gate", "finite number"], {}),
    ("card-output-folder", ["card", W("model"), "-o", W("root", "a-folder")], 2, ["--output", "is a folder, not a file"], {}),
    ("push-bad-repo", ["push", W("model"), "--repo", "no-slash"], 2, ["ORG/NAME"], {}),
    ("push-missing-dir", ["push", "/nonexistent/dir", "--repo", "a/b"], 2, ["is not a folder"], {}),
    ("push-repo-double-dash", ["push", W("model"), "--repo", "org/name--x"], 2, ["'org/name--x' is not a valid Hub repository id", "ORG/NAME"], {}),
    ("push-repo-dot-git", ["push", W("model"), "--repo", "org/name.git"], 2, ["not a valid Hub repository id"], {}),
    ("push-repo-non-ascii", ["push", W("model"), "--repo", "örg/name"], 2, ["not a valid Hub repository id"], {}),
    ("card-repo-leading-dash", ["card", W("model"), "--repo", "org/-name", "-o", W("root", "card.md")], 2, ["not a valid Hub repository id"], {}),
    ("card-no-config", ["card", W("noconfig")], 2, ["no config.json"], {}),
    ("models-rm-unknown", ["models", "rm", "nope"], 2, ["not a checkpoint quantkit knows"], {}),
    ("unknown-command", ["benhc"], 2, ["No such command 'benhc'", "quantkit --help"], {}),
    ("missing-argument", ["bench"], 2, ["Missing argument", "quantkit bench --help"], {}),
    ("keep-logs-setting", ["bench", W("model"), "-c", "1"], 1, ["QUANTKIT_KEEP_LOGS"], {"QUANTKIT_KEEP_LOGS": "many"}),
]


def _resolve(world, value):
    if isinstance(value, tuple) and value and value[0] == "world":
        base = world[value[1]]
        return str(Path(base, *value[2:]))
    return value


def _records(home: Path) -> list[tuple]:
    with sqlite3.connect(home / "results.db") as db:
        return db.execute("SELECT run_key, status, result FROM records WHERE status = 'done' ORDER BY id").fetchall()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_with_the_fix(world, case):
    name, args, code, words, extra_env = case
    before = _records(world["home"])
    env = {**os.environ, "QUANTKIT_HOME": str(world["home"]), "NO_COLOR": "1",
           **{k: _resolve(world, v) for k, v in extra_env.items()}}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "quantkit", *(_resolve(world, a) for a in args)], cwd=world["root"],
                          capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == errors[0]  # the error is the last word
    for word in words:
        assert word in errors[0], (word, errors[0])
    assert elapsed < world["limit_s"], f"{name} took {elapsed:.1f} s to fail (limit {world['limit_s']:.1f} s)"
    assert _records(world["home"]) == before  # nothing computed was lost


def test_json_mode_prints_the_error_object_on_stdout(world):
    env = {**os.environ, "QUANTKIT_HOME": str(world["home"])}
    proc = subprocess.run([sys.executable, "-m", "quantkit", "bench", "/nonexistent/dir", "--json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert json.loads(proc.stdout) == {"error": "model folder /nonexistent/dir does not exist", "exit_code": 2}
    assert proc.stderr.startswith("error: model folder /nonexistent/dir does not exist")


def test_corrupt_store_is_one_line_and_left_for_the_user(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "results.db").write_bytes(b"not sqlite" * 200)
    proc = subprocess.run([sys.executable, "-m", "quantkit", "runs", "ls"], capture_output=True, text=True,
                          env={**os.environ, "QUANTKIT_HOME": str(home)}, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "is corrupted" in proc.stderr and "move it aside" in proc.stderr
    assert (home / "results.db").read_bytes() == b"not sqlite" * 200  # nothing overwritten


def test_no_temp_file_survives_a_failed_write(tmp_path, monkeypatch):
    """A write that fails halfway (a full disk) leaves neither a half file nor its temp file."""
    import errno

    from quantkit.files import atomic_write_json

    real_fdopen = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: Full(real_fdopen(fd, *a, **k)))
    with pytest.raises(OSError):
        atomic_write_json(tmp_path / "bench.json", {"points": []})
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# Servers that are not what they seem (issue 31): loopback stand-ins, no vLLM started


def _quantkit(world, args: list[str], timeout: float = 120, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    full_env = {**os.environ, "QUANTKIT_HOME": str(world["home"]), "NO_COLOR": "1", **env}
    for name in ("QUANTKIT_API_KEY", "OPENAI_API_KEY", "VLLM_API_KEY", "QUANTKIT_SERVED_MODEL_NAME"):
        if name not in env:
            full_env.pop(name, None)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "quantkit", *args], cwd=world["root"], capture_output=True,
                          text=True, env=full_env, timeout=timeout)
    return proc, time.monotonic() - started


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and proc.stderr.strip().splitlines()[-1] == errors[0], proc.stderr[-2000:]
    return errors[0]


def test_url_serving_another_model_stores_nothing_under_this_checkpoint(world):
    from fixtures.hostile_server import HostileServer

    before = _records(world["home"])
    with HostileServer(model="another-model") as other:
        for args in (["bench", str(world["model"]), "--url", other.url, "-c", "1"],
                     ["bench", str(world["model"]), "--url", other.api_url, "--capacity", "--slo", "ttft_p95=1"],
                     ["eval", str(world["model"]), "--url", other.url, "--tasks", "arc_easy", "--limit", "2"]):
            proc, elapsed = _quantkit(world, args)
            assert proc.returncode == 2, (args, proc.stderr[-2000:])
            line = _one_error_line(proc)
            assert f"the server at {other.url} serves another-model, not the checkpoint model" in line
            assert "QUANTKIT_SERVED_MODEL_NAME=another-model" in line
            assert elapsed < world["limit_s"]
        proc, _ = _quantkit(world, ["bench", str(world["model"]), "--url", other.url, "-c", "1", "--json"])
        assert proc.returncode == 2 and json.loads(proc.stdout)["exit_code"] == 2
        assert "serves another-model" in json.loads(proc.stdout)["error"]
    assert _records(world["home"]) == before


def test_url_that_wants_an_api_key_says_which_setting_gives_it(world):
    from fixtures.hostile_server import HostileServer

    with HostileServer(model="model", key="s3cret-key") as keyed:
        proc, _ = _quantkit(world, ["bench", str(world["model"]), "--url", keyed.url, "-c", "1"])
        assert proc.returncode == 2, proc.stderr[-2000:]
        line = _one_error_line(proc)
        assert "wants an API key, and quantkit sent none (HTTP 401 from /v1/models" in line and "QUANTKIT_API_KEY" in line
        proc, _ = _quantkit(world, ["bench", str(world["model"]), "--url", keyed.url, "-c", "1"],
                            QUANTKIT_API_KEY="wrong-key")
        assert proc.returncode == 2 and "refused the API key quantkit sent" in _one_error_line(proc)
        assert "wrong-key" not in proc.stderr + proc.stdout


def _fake_vllm_env(world, tmp_path, mode: str, **env: str) -> tuple[dict[str, str], Path]:
    from fixtures.hostile_server import fake_vllm

    pids = tmp_path / "pids"
    return {"QUANTKIT_VLLM": str(fake_vllm(tmp_path)), "HOSTILE_MODE": mode, "HOSTILE_PIDS": str(pids), **env}, pids


def _nothing_left(pids: Path) -> None:
    from fixtures.hostile_server import alive

    listed = [int(p) for p in pids.read_text().split()]
    assert len(listed) == 2  # the server and its child (vLLM's EngineCore)
    deadline = time.monotonic() + 5  # the kernel may still be reaping a group killed a moment ago
    while any(alive(p) for p in listed) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in listed if alive(p)], "a server process outlived quantkit"


def test_a_server_that_refuses_its_key_fails_at_once_and_leaves_nothing(world, tmp_path):
    """--serve-arg api-key: quantkit polled without the key and waited out the start timeout."""
    env, pids = _fake_vllm_env(world, tmp_path, "keyed", HOSTILE_KEY="another-key")
    before = _records(world["home"])
    proc, elapsed = _quantkit(world, ["bench", str(world["model"]), "-c", "1", "--serve-arg", "api-key=s3cret-key",
                                      "--startup-timeout", "90"], **env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = _one_error_line(proc)
    assert "refused the API key quantkit sent (HTTP 401 from /v1/models" in line
    assert "s3cret-key" not in proc.stderr + proc.stdout
    assert elapsed < world["limit_s"] + 15  # the fake's start, then a 15-s grace at most: not the 90 s
    _nothing_left(pids)
    assert _records(world["home"]) == before


def test_a_start_that_times_out_or_is_interrupted_leaves_nothing(world, tmp_path):
    import signal

    env, pids = _fake_vllm_env(world, tmp_path, "slow")
    # 8 s: the fake (a python) may take a few seconds to print its first line on 2 busy cores
    proc, _ = _quantkit(world, ["bench", str(world["model"]), "-c", "1", "--startup-timeout", "8"], **env)
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert "did not become ready within 8 s" in line and "Loading safetensors checkpoint shards" in line
    assert "QUANTKIT_STARTUP_TIMEOUT" in line
    _nothing_left(pids)
    pids.unlink()
    full_env = {**os.environ, "QUANTKIT_HOME": str(world["home"]), "NO_COLOR": "1", **env}
    child = subprocess.Popen([sys.executable, "-m", "quantkit", "bench", str(world["model"]), "-c", "1"],
                             cwd=world["root"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
    deadline = time.monotonic() + 60
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr
    _nothing_left(pids)
