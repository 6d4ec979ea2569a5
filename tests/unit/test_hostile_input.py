"""Hostile and careless input (issue 31, part B): nothing lost, nothing leaked, nothing misreported.

Servers here are loopback stand-ins whose behaviour is known (tests/fixtures/hostile_server.py):
another model behind --url, a server that wants an API key, a vLLM start that never finishes.
No real vLLM is started. Each case also checks that no process outlives quantkit's teardown.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest

from quantkit import models, settings
from quantkit.errors import BackendError, SetupError, UsageError
from quantkit.pipeline import recipe as run_recipe
from quantkit.quantize import recipe
from quantkit.serve import server as engine
from quantkit.serve.config import ServeConfig
from quantkit.serve.server import VLLMServer, open_server
from fixtures.hostile_server import HostileServer, alive, fake_vllm  # noqa: E402 (tests/ is on sys.path: rootdir conftest)


def _config_only_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    return folder


@pytest.fixture
def no_keys(monkeypatch):
    for name in ("QUANTKIT_API_KEY", "OPENAI_API_KEY", "VLLM_API_KEY", "QUANTKIT_SERVED_MODEL_NAME",
                 "QUANTKIT_STARTUP_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


# ----------------------------------------------------------------------------------------------
# 1. --url serves another model


def test_url_serving_another_model_is_refused_with_what_it_serves(tmp_path, no_keys):
    checkpoint = _config_only_model(tmp_path / "smollm2-135m")
    with HostileServer(model="Qwen/Qwen3-0.6B") as other:
        with pytest.raises(UsageError) as err:
            open_server(checkpoint, other.url)
    message = err.value.one_line()
    assert f"the server at {other.url} serves Qwen/Qwen3-0.6B, not the checkpoint smollm2-135m" in message
    assert "QUANTKIT_SERVED_MODEL_NAME=Qwen/Qwen3-0.6B" in message


@pytest.mark.parametrize("served", ["smollm2-135m", "{abs}", "models/smollm2-135m", "/elsewhere/smollm2-135m/"])
def test_a_server_of_the_checkpoint_is_recognised_by_its_name_or_path(tmp_path, served):
    from quantkit.serve.server import served_as

    checkpoint = _config_only_model(tmp_path / "smollm2-135m")
    served = served.format(abs=checkpoint)
    assert served_as(["other", served], checkpoint, "http://x") == served


def test_a_hub_cache_snapshot_is_its_hub_id(tmp_path):
    from quantkit.serve.server import served_as

    snapshot = _config_only_model(tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M" / "snapshots" / "abc123")
    assert served_as(["HuggingFaceTB/SmolLM2-135M"], snapshot, "http://x") == "HuggingFaceTB/SmolLM2-135M"
    with pytest.raises(UsageError, match="serves HuggingFaceTB/SmolLM2-360M, not the checkpoint abc123"):
        served_as(["HuggingFaceTB/SmolLM2-360M"], snapshot, "http://x")


def test_the_served_name_can_be_given_outright(tmp_path, monkeypatch, no_keys):
    checkpoint = _config_only_model(tmp_path / "smollm2-135m")
    with HostileServer(model="prod-llm") as other:
        monkeypatch.setenv("QUANTKIT_SERVED_MODEL_NAME", "prod-llm")
        assert open_server(checkpoint, other.url).model_name == "prod-llm"
        assert open_server(checkpoint, other.url, served_model_name="prod-llm").model_name == "prod-llm"
        monkeypatch.setenv("QUANTKIT_SERVED_MODEL_NAME", "dev-llm")
        with pytest.raises(UsageError, match="serves prod-llm, not 'dev-llm' \\(QUANTKIT_SERVED_MODEL_NAME\\)"):
            open_server(checkpoint, other.url)


# ----------------------------------------------------------------------------------------------
# 2. API keys: sent when given, a 401 is an answer, never stored


def test_url_that_wants_a_key_says_so_and_takes_quantkit_api_key(tmp_path, monkeypatch, no_keys):
    checkpoint = _config_only_model(tmp_path / "m")
    with HostileServer(model="m", key="s3cret-key") as keyed:
        with pytest.raises(UsageError) as err:
            open_server(checkpoint, keyed.url)
        assert "wants an API key, and quantkit sent none (HTTP 401 from /v1/models" in err.value.one_line()
        assert "QUANTKIT_API_KEY" in err.value.one_line()
        monkeypatch.setenv("QUANTKIT_API_KEY", "wrong")
        with pytest.raises(UsageError, match="refused the API key quantkit sent"):
            open_server(checkpoint, keyed.url)
        monkeypatch.setenv("QUANTKIT_API_KEY", "s3cret-key")
        server = open_server(checkpoint, keyed.url)
        assert server.api_key == "s3cret-key" and server.alive()  # alive() sends the key too
        assert server.info.api_key == "***" and "s3cret-key" not in server.info.model_dump_json()


def test_server_info_never_holds_a_key():
    info = engine.ServerInfo(url="http://x", model_name="m", api_key="s3cret")
    assert info.api_key == "***"
    assert engine.ServerInfo(url="http://x", model_name="m").api_key is None


def _started(tmp_path, monkeypatch, mode: str, serve_args: list[str], **env: str) -> tuple[VLLMServer, Path]:
    monkeypatch.setenv("QUANTKIT_VLLM", str(fake_vllm(tmp_path)))
    monkeypatch.setenv("QUANTKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOSTILE_MODE", mode)
    pids = tmp_path / "pids"
    monkeypatch.setenv("HOSTILE_PIDS", str(pids))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    model = _config_only_model(tmp_path / "model")
    config = ServeConfig.from_options(serve_args, load_format="dummy")
    return VLLMServer(model, config, startup_timeout=60), pids


def _no_orphans(pids: Path) -> None:
    listed = [int(p) for p in pids.read_text().split()]
    assert len(listed) == 2  # the server and its child
    left = [p for p in listed if alive(p)]
    assert not left, f"left running: {left}"


def test_a_keyed_server_is_polled_with_its_key_and_the_key_is_masked(tmp_path, monkeypatch, no_keys):
    server, pids = _started(tmp_path, monkeypatch, "keyed", ["api-key=s3cret-key"])
    t0 = time.monotonic()
    with server:
        assert time.monotonic() - t0 < 30  # not the startup timeout: it answered at once
        assert server.api_key == "s3cret-key"
        stored = server.info.model_dump_json()
        assert "s3cret-key" not in stored and server.info.api_key == "***"
        assert server.info.args[server.info.args.index("--api-key") + 1] == "***"
    _no_orphans(pids)


def test_vllm_api_key_of_the_environment_is_the_servers_key(tmp_path, monkeypatch, no_keys):
    server, pids = _started(tmp_path, monkeypatch, "keyed", [], VLLM_API_KEY="from-env", HOSTILE_KEY="from-env")
    with server:
        assert server.api_key == "from-env"
    _no_orphans(pids)


@pytest.mark.parametrize("serve_args,words", [
    ([], "wants an API key, and quantkit sent none (HTTP 401 from /v1/models"),
    (["api-key=s3cret-key"], "refused the API key quantkit sent (HTTP 401 from /v1/models"),
])
def test_a_401_ends_the_wait_at_once_and_leaves_nothing_running(tmp_path, monkeypatch, no_keys, serve_args, words):
    server, pids = _started(tmp_path, monkeypatch, "keyed", serve_args, HOSTILE_KEY="another-key")
    t0 = time.monotonic()
    with pytest.raises(UsageError) as err:
        server.start()
    assert time.monotonic() - t0 < 30, "waited for the startup timeout"
    assert words in err.value.one_line() and "another-key" not in err.value.one_line()
    _no_orphans(pids)


def test_a_key_no_header_can_carry_is_refused_before_anything_starts(tmp_path, monkeypatch, no_keys):
    server, pids = _started(tmp_path, monkeypatch, "keyed", ["api-key=bad\u00e9key"])
    with pytest.raises(UsageError, match="HTTP header cannot carry"):
        server.start()
    assert server.proc is None and not pids.exists()


# ----------------------------------------------------------------------------------------------
# 3. The start timeout is a setting, and a long start says how it goes


def test_a_long_start_reports_progress_and_the_timeout_is_a_setting(tmp_path, monkeypatch, no_keys):
    lines: list[str] = []
    monkeypatch.setattr(engine, "log_info", lines.append)
    monkeypatch.setattr(engine, "PROGRESS_EVERY_S", 0.5)
    server, pids = _started(tmp_path, monkeypatch, "slow", [], QUANTKIT_STARTUP_TIMEOUT="3")
    server = VLLMServer(server.model_dir, server.config)  # no startup_timeout: the setting's
    assert server.startup_timeout == 3.0
    with pytest.raises(BackendError) as err:
        server.start()
    assert "did not become ready within 3 s" in err.value.message and "QUANTKIT_STARTUP_TIMEOUT" in err.value.message
    progress = [line for line in lines if line.startswith("vLLM still starting: ")]
    assert len(progress) >= 2, lines
    assert " s of 3 s; last log line: Loading safetensors checkpoint shards: " in progress[-1]
    _no_orphans(pids)


def test_startup_timeout_setting(monkeypatch):
    monkeypatch.delenv("QUANTKIT_STARTUP_TIMEOUT", raising=False)
    assert settings.startup_timeout() == 600.0
    monkeypatch.setenv("QUANTKIT_STARTUP_TIMEOUT", "1200")
    assert settings.startup_timeout() == 1200.0
    assert VLLMServer(Path("/nonexistent")).startup_timeout == 1200.0
    assert VLLMServer(Path("/nonexistent"), startup_timeout=5).startup_timeout == 5
    for bad in ("soon", "0", "-3", "inf"):
        monkeypatch.setenv("QUANTKIT_STARTUP_TIMEOUT", bad)
        with pytest.raises(SetupError, match=f"QUANTKIT_STARTUP_TIMEOUT={bad} is not a positive number"):
            settings.startup_timeout()


# ----------------------------------------------------------------------------------------------
# 4. YAML: aliases visited once, bombs and cycles refused with file:line


def _bomb(depth: int) -> str:
    lines = ["kind: run", "name: t", "model: smollm2-135m", 'a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, depth + 1):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("depth", [6, 9])
def test_an_alias_bomb_is_refused_in_milliseconds(depth):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    with pytest.raises(UsageError) as err:
        recipe.parse_model(_bomb(depth), "bomb.yaml", run_recipe.RunRecipe)
    assert time.monotonic() - t0 < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB: under 50 MB
    assert err.value.one_line().startswith("bomb.yaml:9: YAML aliases expand this value to more than 100,000 values")


def test_the_line_index_walks_an_alias_once():
    index = recipe._line_index(_bomb(4))  # 9^5 values expanded (under the limit): walked as 5 short lists
    assert index[("a4",)] == 8 and len(index) < 100
    assert index.get(("a4", 3, 2, 1)) == 5  # a4[3][2][1] is a1: the line where a1 is written


@pytest.mark.parametrize("text,line", [
    ("a: &a [*a]\n", 1),
    ("name: t\nb: &b\n  c: [1, *b]\n", 3),
    ("name: t\nm: &m {x: {y: *m}}\n", 2),
])
def test_a_recursive_alias_is_one_line_with_its_line(tmp_path, text, line):
    path = tmp_path / "rec.yaml"
    path.write_text("kind: run\nmodel: m\n" + text)
    with pytest.raises(UsageError) as err:
        run_recipe.load_run(path)
    assert err.value.one_line().startswith(f"{path}:{line + 2}: the YAML alias *")
    assert "recursive alias" in err.value.one_line()


def test_deep_nesting_is_one_line_not_a_recursion_error(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("name: x\nmethod: fp8\nscheme: FP8_DYNAMIC\noptions:\n  k: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(UsageError, match=r"deep.yaml:5: YAML nested deeper than 64 levels"):
        recipe.load(str(path))
    chain = "name: x\nmethod: fp8\nscheme: FP8_DYNAMIC\nl0: &l0 [1]\n" + "".join(
        f"l{i}: &l{i} [*l{i - 1}]\n" for i in range(1, 80))
    with pytest.raises(UsageError, match="YAML aliases nest this value deeper than 64 levels"):
        recipe.parse(chain, "chain.yaml")


def test_ordinary_aliases_still_work_and_errors_inside_them_name_the_written_line():
    ok = "name: x\nmethod: gptq\nscheme: W4A16\nignore: &ig [lm_head]\noptions: {keep: *ig}\n"
    assert recipe.parse(ok, "r.yaml").options == {"keep": ["lm_head"]}
    bad = "name: x\nmethod: gptq\nscheme: W4A16\noptions: {base: &cal {dataset: c4, num_sample: 8}}\ncalibration: *cal\n"
    with pytest.raises(UsageError, match=r"^r.yaml:4: unknown key 'num_sample' in calibration"):
        recipe.parse(bad, "r.yaml")


# ----------------------------------------------------------------------------------------------
# 5. config.json, --repo, calibration flags on data-free methods


def test_a_deeply_nested_config_json_is_one_line_naming_the_file(tmp_path):
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError) as err:
        models.local_folder(folder)
    assert err.value.one_line().startswith(f"{folder}/config.json is not a valid Hugging Face config: "
                                           "its JSON nests deeper than Python can read")
    with pytest.raises(UsageError, match="nests deeper than Python can read"):
        models.resolve(str(folder))


def test_a_config_json_that_is_not_an_object_is_one_line(tmp_path):
    folder = tmp_path / "list"
    folder.mkdir()
    (folder / "config.json").write_text('["LlamaForCausalLM"]')
    with pytest.raises(UsageError, match=r"config.json is not a valid Hugging Face config: its JSON is a list, not an object"):
        models.local_folder(folder)
    assert models.local_folder(tmp_path / "nothing-here") == tmp_path / "nothing-here"  # left to the checks that name it


def test_read_json(tmp_path):
    from quantkit import safeload

    path = tmp_path / "x.json"
    path.write_text('{"a": [1, 2]}')
    assert safeload.read_json(path, expect=dict) == {"a": [1, 2]}
    path.write_text('{"a": ')
    with pytest.raises(UsageError, match=r"x.json is not valid JSON \(Expecting value at line 1\); fix it"):
        safeload.read_json(path)
    with pytest.raises(UsageError, match="cannot read"):
        safeload.read_json(tmp_path / "missing.json")


@pytest.mark.parametrize("repo", ["org/name--x", "org/a..b", "org/-name", "org/name.git", "org/" + "x" * 97,
                                  "org/na me", "no-slash", "a/b/c"])
def test_invalid_repo_ids_are_usage_errors(repo):
    from quantkit.cli.push import check_repo_id

    with pytest.raises(UsageError) as err:
        check_repo_id(repo)
    assert "ORG/NAME" in err.value.one_line() and repo in err.value.one_line()
    assert check_repo_id("Org-1/Name_2.3") == "Org-1/Name_2.3"


@pytest.mark.parametrize("args,words", [
    (["--method", "fp8", "--num-samples", "8"], "--num-samples does not apply to fp8: it is data-free"),
    (["--method", "w4a16-rtn", "--calib", "c4", "--seq-len", "64"], "--seq-len and --calib do not apply to w4a16-rtn"),
    (["--recipe", "w8a16", "--num-samples", "8"], "--num-samples does not apply to w8a16"),
])
def test_calibration_flags_on_a_data_free_method_are_refused(tmp_path, args, words):
    from typer.testing import CliRunner

    from quantkit.cli import app

    result = CliRunner().invoke(app, ["convert", str(tmp_path / "no-model"), *args])
    assert result.exit_code == 2, result.output
    assert words in result.output and "calibrated method (awq, gptq, int8, w4a8-fp8, w4a8-fp8-awq), or add a calibrated KV cache (--kv-cache fp8)" in result.output


def test_calibration_flags_on_a_calibrated_method_pass_the_check():
    from quantkit.cli.convert import _refuse_calibration_flags

    _refuse_calibration_flags("gptq", None, {"--num-samples": 8})
    _refuse_calibration_flags("fp8", None, {"--num-samples": None})
    _refuse_calibration_flags("fp8", "gptq", {"--num-samples": 8})  # the contradiction is plan()'s to report


# ----------------------------------------------------------------------------------------------
# 6. Numbers (issue 39): every door refuses every spelling of a bad number, one line, exit 2,
#    before anything starts: typed options, comma lists, --slo / --space / --gate terms


NOT_FINITE = ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e309", "-1e309"]
NOT_POSITIVE = ["0", "-1", "-5", "-0.0"]
HUGE = ["99999999999999999999", "18446744073709551616", "9223372036854775808"]
NOT_WHOLE = ["nan", "inf", "1.5", "1e3"]
MISSING = "/nonexistent/quantkit-model"
SLO = ["--slo", "ttft_p95=1"]

# door, the command line with {} for the value, the words the refusal must hold, the spellings
DOORS = [
    ("bench --rate", ["bench", MISSING, "--rate", "{}"], ["--rate"], NOT_FINITE + NOT_POSITIVE + ["1e-300", "0.05", "1e300"]),
    ("bench --rate list", ["bench", MISSING, "--rate", "1,{}"], ["--rate"], NOT_FINITE + ["1e-300"]),
    ("bench -c", ["bench", MISSING, "-c", "{}"], ["--concurrency"], ["0", "-1"] + HUGE + NOT_WHOLE),
    ("bench -c list", ["bench", MISSING, "-c", "1,4,{}"], ["--concurrency"], ["0"] + HUGE),
    ("bench --sweep-max", ["bench", MISSING, "--sweep", "--sweep-max", "{}"], ["--sweep-max"], ["0"] + HUGE),
    ("bench -n", ["bench", MISSING, "-c", "1", "-n", "{}"], ["--num-prompts"], ["0"] + HUGE),
    ("bench --seed", ["bench", MISSING, "--seed", "{}"], ["--seed"], ["-1"] + HUGE),
    ("bench --warmup", ["bench", MISSING, "--warmup", "{}"], ["--warmup"], ["-1"] + HUGE),
    ("bench --client-workers", ["bench", MISSING, "--client-workers", "{}"], ["--client-workers"], ["0"] + HUGE),
    ("bench --startup-timeout", ["bench", MISSING, "--startup-timeout", "{}"], ["--startup-timeout"], NOT_FINITE + NOT_POSITIVE),
    ("bench --input-len", ["bench", MISSING, "--input-len", "{}"], ["--input-len"], ["0", "-1"] + HUGE),
    ("bench --capacity-max", ["bench", MISSING, "--capacity", *SLO, "--capacity-max", "{}"], ["--capacity-max"],
     NOT_FINITE + NOT_POSITIVE + ["1e-300"]),
    ("bench --capacity-start", ["bench", MISSING, "--capacity", *SLO, "--capacity-start", "{}"], ["--capacity-start"],
     NOT_FINITE + ["1e-300"]),
    ("bench --waves", ["bench", MISSING, "--capacity", *SLO, "--waves", "{}"], ["--waves"], NOT_FINITE + ["1e300"]),
    ("bench --window-max", ["bench", MISSING, "--capacity", *SLO, "--window-max", "{}"], ["--window-max"], NOT_FINITE + ["1e300"]),
    ("bench --slo", ["bench", MISSING, "--slo", "ttft_p95={}"], ["--slo"], ["1e999", "1e400ms", "nan", "inf", "0", "-1"]),
    ("tune --budget", ["tune", MISSING, *SLO, "--budget", "{}"], ["--budget"], ["0", "-1"] + HUGE),
    ("tune --space int", ["tune", MISSING, *SLO, "--space", "max-num-seqs=8,{}"], ["max-num-seqs="], ["-1", "0"] + NOT_FINITE + HUGE),
    ("tune --space float", ["tune", MISSING, *SLO, "--space", "gpu-memory-utilization=0.5,{}"], ["gpu-memory-utilization="],
     NOT_FINITE + NOT_POSITIVE),
    ("tune --space tokens", ["tune", MISSING, *SLO, "--space", "max-model-len={}"], ["max-model-len="], ["0"] + HUGE),
    ("eval --limit", ["eval", MISSING, "--tasks", "arc_easy", "--limit", "{}"], ["--limit"], ["0"] + HUGE),
    ("eval --max-gen-toks", ["eval", MISSING, "--tasks", "arc_easy", "--max-gen-toks", "{}"], ["--max-gen-toks"], ["0"] + HUGE),
    ("eval --gate", ["eval", MISSING, "--tasks", "arc_easy", "--gate", "arc_easy={}"], ["--gate"], NOT_FINITE + ["-1"]),
    ("compare --min-recovery", ["compare", "--model", "m", "--min-recovery", "{}"], ["--min-recovery"], NOT_FINITE + ["-1"]),
    ("compare --bandwidth-gbs", ["compare", "--model", "m", "--bandwidth-gbs", "{}"], ["--bandwidth-gbs"], NOT_FINITE + NOT_POSITIVE),
    ("compare --price-per-hour", ["compare", "--model", "m", "--price-per-hour", "{}"], ["--price-per-hour"], NOT_FINITE + NOT_POSITIVE),
    ("card --gate", ["card", MISSING, "--gate", "task={}"], ["--gate"], NOT_FINITE + ["-1", "0"]),
    ("card --min-task-recovery", ["card", MISSING, "--min-task-recovery", "{}"], ["--min-task-recovery"], NOT_FINITE + ["-1"]),
    ("push --min-recovery", ["push", MISSING, "--repo", "org/name", "--min-recovery", "{}"], ["--min-recovery"], NOT_FINITE + ["-1"]),
    ("doctor -c", ["doctor", "-c", "{}"], ["--concurrency"], ["0"] + HUGE),
    ("convert --num-samples", ["convert", MISSING, "--method", "gptq", "--num-samples", "{}"], ["num_samples"], ["0"] + HUGE),
    ("convert --seq-len", ["convert", MISSING, "--method", "gptq", "--seq-len", "{}"], ["seq"], ["0"] + HUGE),
]
NUMBER_CASES = [pytest.param(args, words, value, id=f"{door}={value}") for door, args, words, values in DOORS for value in values]


def _main(args: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    """quantkit's console script in this process: its parser, its one-line errors, its exit code
    (the subprocess tests of tests/integration/test_bad_input.py run it as users do)."""
    import signal
    import sys

    from quantkit.cli import main

    monkeypatch.setattr(sys, "argv", ["quantkit", *args])
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as end:
            main()
    finally:
        for s, handler in handlers.items():  # main() installs its own
            signal.signal(s, handler)
    out = capsys.readouterr()
    return end.value.code, out.out, out.err


def _the_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err
    return errors[0]


@pytest.mark.parametrize("args, words, value", NUMBER_CASES)
def test_every_door_refuses_every_spelling_of_a_bad_number(tmp_path, monkeypatch, capsys, args, words, value):
    monkeypatch.setenv("QUANTKIT_HOME", str(tmp_path / "home"))
    code, _, err = _main([a.replace("{}", value) for a in args], capsys, monkeypatch)
    line = _the_error_line(err)
    assert code == 2, line
    assert all(w in line for w in words), (words, line)
    assert "does not exist" not in line and "nothing stored" not in line  # refused before any other check


@pytest.mark.parametrize("args", [
    ["bench", MISSING, "--rate", "0.1,2.5,100000"], ["bench", MISSING, "-c", "1,100000"],
    ["bench", MISSING, "--seed", "4294967295"], ["tune", MISSING, *SLO, "--space", "max-num-seqs=8,default"],
    ["bench", MISSING, "--slo", "ttft_p95=250ms,tpot_p95=86400"], ["card", MISSING, "--gate", "arc_easy=0.95"],
])
def test_the_edges_of_each_range_are_accepted(tmp_path, monkeypatch, capsys, args):
    monkeypatch.setenv("QUANTKIT_HOME", str(tmp_path / "home"))
    code, _, err = _main(args, capsys, monkeypatch)
    line = _the_error_line(err)
    assert code == 2 and any(w in line for w in ("does not exist", "is not a folder")), line  # past the numbers


def test_a_minimal_rate_is_a_floor():
    from quantkit import numbers

    assert numbers.MIN_RATE == 0.1  # the user guide states it; scripts/check_docs.py checks that
    with pytest.raises(UsageError, match=r"^bad --rate value '1e-300': Input should be greater than or equal to 0.1"):
        numbers.parse_list("2,1e-300", numbers.Rate, "--rate")
    assert numbers.parse_list("0.1, 2", numbers.Rate, "--rate") == [0.1, 2.0]


# Recipe fields: the same kinds, file:line, before any server starts (not after vLLM started)
RECIPE_FIELDS = [
    ("bench: {{concurrency: [{}]}}", ["0", "-1", ".nan", "99999999999999999999"]),
    ("bench: {{input_len: {}}}", ["0", "-1", ".inf", "99999999999999999999"]),
    ("bench: {{output_len: {}}}", ["-1", "0", ".nan"]),
    ("bench: {{num_prompts: {}}}", ["0", "99999999999999999999"]),
    ("bench: {{warmup: {}}}", ["-1", "99999999999999999999"]),
    ("bench: {{seed: {}}}", ["-1", "99999999999999999999", ".nan"]),
    ("eval: {{limit: {}}}", ["0", "99999999999999999999"]),
    ("eval: {{num_concurrent: {}}}", ["0", "99999999999999999999"]),
    ("capacity: {{start: {}}}", [".nan", ".inf", "1.0e-300", "0"]),
    ("capacity: {{max: {}}}", [".inf", "-.inf", "1.0e309", "99999999999999999999"]),
    ("capacity: {{waves: {}}}", [".nan", ".inf"]),
    ("capacity: {{window: {{max_s: {}}}}}", [".inf", "1.0e300"]),
    ("bandwidth_gbs: {}", [".nan", ".inf", "-5", "0"]),
    ("gates: {{min_recovery: {}}}", [".nan", ".inf", "-1"]),
    ("gates: {{tasks: {{arc_easy: {}}}}}", [".nan", "-.inf", "-1"]),
    ("serve: {{max_num_seqs: {}}}", ["0", "99999999999999999999"]),
    ("serve: {{gpu_memory_utilization: {}}}", [".nan", ".inf"]),
    ("executor: {{num_cpus: {}}}", [".nan", ".inf"]),
]


@pytest.mark.parametrize("template, value", [pytest.param(t, v, id=f"{t.split(':')[0]}:{t}={v}")
                                             for t, values in RECIPE_FIELDS for v in values])
def test_a_recipe_number_is_refused_with_its_line(tmp_path, template, value):
    path = tmp_path / "run.yaml"
    path.write_text("kind: run\nname: t\nmodel: smollm2-135m\n" + template.format(value) + "\n")
    with pytest.raises(UsageError) as err:
        run_recipe.load_run(path)
    assert err.value.one_line().startswith(f"{path}:4: "), err.value.one_line()


def test_an_empty_bench_concurrency_is_refused_not_skipped(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("kind: run\nname: t\nmodel: smollm2-135m\nbench: {concurrency: []}\n")
    with pytest.raises(UsageError, match=r"run.yaml:4: bench.concurrency: .*empty list measures nothing.*bench: null"):
        run_recipe.load_run(path)
    path.write_text("kind: run\nname: t\nmodel: smollm2-135m\nbench: null\n")
    assert run_recipe.load_run(path).bench is None  # the way to run no bench


# ----------------------------------------------------------------------------------------------
# 7. JSON a user hands quantkit: bounded depth on every read path (config.json, runs import,
#    a JSONL dataset or calibration file, an eval baseline, a safetensors index)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _config_reads(tmp_path: Path, depth: int):
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "x": ' + _nested(depth) + "}")
    return lambda: models.local_folder(folder)


def _checkpoint_check(tmp_path: Path, depth: int):
    from quantkit.checkpoint import check_causal_lm

    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "x": ' + _nested(depth) + "}")
    return lambda: check_causal_lm(folder, weights=False)


def _import(tmp_path: Path, depth: int):
    from quantkit.store import Store
    from quantkit.store.imports import import_result

    path = tmp_path / "r.json"
    path.write_text('{"kind": "quantkit.bench", "points": ' + _nested(depth) + "}")

    def run():
        with Store(tmp_path / "r.db") as store:
            import_result(store, path)
    return run


def _jsonl(tmp_path: Path, depth: int):
    from quantkit.files import read_jsonl

    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "hi"}\n{"prompt": ' + _nested(depth) + "}\n")
    return lambda: read_jsonl(path)


def _calibration_json(tmp_path: Path, depth: int):
    from quantkit.quantize import calibration
    from quantkit.quantize.recipe import Calibration

    path = tmp_path / "calib.json"
    path.write_text(_nested(depth))
    return lambda: calibration.load(Calibration(dataset=str(path)))


def _baseline(tmp_path: Path, depth: int):
    from quantkit.evals.results import EvalRun

    path = tmp_path / "baseline.json"
    path.write_text('{"kind": "quantkit.eval", "tasks": ' + _nested(depth) + "}")
    return lambda: EvalRun.read(path)


def _index(tmp_path: Path, depth: int):
    from quantkit.checkpoint import validate

    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    header = b'{"__metadata__": {}}'
    (folder / "model-00001-of-00001.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {}, "metadata": ' + _nested(depth) + "}")
    return lambda: validate(folder)


READERS = {"config.json": _config_reads, "check_causal_lm": _checkpoint_check, "runs import": _import,
           "jsonl line": _jsonl, "calibration .json": _calibration_json, "eval baseline": _baseline,
           "safetensors index": _index}


@pytest.mark.parametrize("depth", [65, 200, 500, 990, 100_000])
@pytest.mark.parametrize("reader", list(READERS))
def test_json_nested_too_deeply_is_one_line_on_every_read_path(tmp_path, reader, depth):
    read = READERS[reader](tmp_path, depth)
    with pytest.raises(UsageError) as err:
        read()
    line = err.value.one_line()
    assert "nests deeper than" in line and "\n" not in line, line


@pytest.mark.parametrize("reader", ["config.json", "check_causal_lm", "jsonl line"])
def test_json_of_ordinary_depth_still_reads(tmp_path, reader):
    READERS[reader](tmp_path, 8)()  # a real config or result nests under ten levels


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_result_file_holding_nan_is_not_json(tmp_path, constant):
    from quantkit.store import Store
    from quantkit.store.imports import import_result

    path = tmp_path / "r.json"
    path.write_text('{"kind": "quantkit.bench", "points": [{"rate": ' + constant + "}]}")
    with Store(tmp_path / "r.db") as store, pytest.raises(UsageError, match=f"not valid JSON \\({constant} is not a JSON number"):
        import_result(store, path)


# ----------------------------------------------------------------------------------------------
# 8. --url: a port out of range is bad input, named without the URL's credentials


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:0", "http://127.0.0.1:65536/v1",
                                 "https://host:-1", "http://host:http", "http://[::1]:70000",
                                 "http://user:s3cret@127.0.0.1:99999/v1", "http://127.0.0.1:1e3"])
def test_a_url_port_out_of_range_is_one_usage_line(tmp_path, url, no_keys):
    checkpoint = _config_only_model(tmp_path / "m")
    t0 = time.monotonic()
    with pytest.raises(UsageError) as err:
        open_server(checkpoint, url)
    assert time.monotonic() - t0 < 2  # refused, not a connection attempt
    line = err.value.one_line()
    assert "a port is a number from 1 to 65535" in line and "s3cret" not in line, line


# ----------------------------------------------------------------------------------------------
# 9. Output paths, checked before any work: a file where a folder is wanted, and the reverse


@pytest.mark.parametrize("args, words", [
    (["compare", "--model", "m", "-o", "{file}"], ["--output", "is a file, not a folder"]),
    (["compare", "--model", "m", "-o", "{file}/sub"], ["--output", "is a file, so no folder can be made under it"]),
    (["run", "{recipe}", "-o", "{file}"], ["--report-dir", "is a file, not a folder"]),
    (["eval", "{model}", "--tasks", "arc_easy", "-o", "{file}"], ["--output", "is a file, not a folder"]),
    (["card", "{model}", "-o", "{folder}"], ["--output", "is a folder, not a file", "README.md"]),
    (["card", "{model}", "-o", "{file}/card.md"], ["--output", "is a file, so no folder can be made under it"]),
    (["card", "{model}", "-o", "{folder}/" + "x" * 256], ["--output", "longer than 255 bytes"]),
    (["compare", "--model", "m", "-o", "{folder}/" + "é" * 128], ["--output", "longer than 255 bytes"]),
])
def test_an_output_of_the_wrong_kind_is_refused_before_work(tmp_path, monkeypatch, capsys, args, words):
    monkeypatch.setenv("QUANTKIT_HOME", str(tmp_path / "home"))
    model = _config_only_model(tmp_path / "model")
    (tmp_path / "file").write_text("keep me")
    (tmp_path / "folder").mkdir()
    (tmp_path / "run.yaml").write_text(f"kind: run\nname: t\nmodel: {model}\nmethods: []\n")
    paths = {"file": tmp_path / "file", "folder": tmp_path / "folder", "model": model, "recipe": tmp_path / "run.yaml"}
    code, _, err = _main([a.format(**paths) for a in args], capsys, monkeypatch)
    line = _the_error_line(err)
    assert code == 2 and all(w in line for w in words), line
    assert ".tmp" not in line  # never an internal temporary name
    assert (tmp_path / "file").read_text() == "keep me" and list((tmp_path / "folder").iterdir()) == []


# ----------------------------------------------------------------------------------------------
# 10. Temporary names fit the filesystem, and a killed one is found wherever it was made


@pytest.mark.parametrize("length", [200, 240, 250, 255])
@pytest.mark.parametrize("letter", ["x", "é"])
def test_a_long_valid_name_is_written_atomically(tmp_path, length, letter):
    from quantkit.files import NAME_MAX, atomic_write_text, temp_folder

    name = (letter * length).encode("utf-8")[:length].decode("utf-8", errors="ignore")
    assert len(name.encode("utf-8")) <= NAME_MAX
    atomic_write_text(tmp_path / name, "card\n")
    assert (tmp_path / name).read_text() == "card\n" and [p.name for p in tmp_path.iterdir()] == [name]
    with temp_folder(tmp_path / (name + "-dir")[-NAME_MAX:]) as tmp:
        assert tmp.is_dir() and len(tmp.name.encode("utf-8")) <= NAME_MAX and tmp.name.startswith(".")
    assert not tmp.exists()


def test_a_killed_temporary_folder_is_listed_wherever_it_was_made(tmp_path, monkeypatch):
    import os
    import signal
    import subprocess
    import sys

    from quantkit import housekeeping
    from quantkit.files import ledger_entries

    monkeypatch.setenv("QUANTKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("QUANTKIT_MODELS_DIR", str(tmp_path / "models"))
    elsewhere = tmp_path / "elsewhere"
    code = ("import sys, time; from pathlib import Path; from quantkit.files import temp_folder\n"
            "with temp_folder(Path(sys.argv[1])) as tmp:\n"
            "    (tmp / 'model.safetensors').write_bytes(b'0' * 1000); print(tmp, flush=True); time.sleep(600)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(elsewhere / "x")], stdout=subprocess.PIPE, text=True,
                             env={**os.environ})
    tmp = Path(child.stdout.readline().strip())
    assert tmp.parent == elsewhere and tmp.name.startswith(".x.tmp-")
    assert housekeeping.leftovers() == []  # a live process's folder is in use, not left over
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert housekeeping.leftovers() == [tmp]  # outside the models folder, found through the ledger
    assert str(tmp) in housekeeping.leftovers_line(housekeeping.leftovers())
    import shutil

    shutil.rmtree(tmp)  # the user removes it, as the line says
    assert housekeeping.leftovers() == [] and ledger_entries() == []  # and the ledger forgets it


@pytest.mark.parametrize("config, port, warned", [
    (None, None, False),
    (ServeConfig(), None, False),
    (ServeConfig(enforce_eager=True), None, False),  # eval's and fidelity's own default, not the user's
    (ServeConfig(enforce_eager=True, max_num_seqs=4), None, True),
    (ServeConfig(), 8123, True),
])
def test_url_warns_only_of_serving_options_the_user_set(monkeypatch, tmp_path, no_keys, config, port, warned):
    from quantkit.serve import server as server_module

    said = []
    monkeypatch.setattr(server_module, "warn", said.append)
    checkpoint = _config_only_model(tmp_path / "smollm2-135m")
    with HostileServer(model="smollm2-135m") as other:
        server_module.open_server(checkpoint, other.url, config, port=port, defaults={"enforce_eager": True})
    assert bool(said) == warned, said
