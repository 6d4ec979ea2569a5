"""The host-side and batching levers (issue 43): ServeConfig fields and the `vllm serve` flags they
become, the flag table by vLLM release (serve/flag_support.py) with the version faked, and the
tuner's space: its choices per backend, `--space` parsing and what it refuses without a server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from quantkit.cli import app
from quantkit.errors import UsageError
from quantkit.measure.tune import study as tune
from quantkit.serve import flag_support
from quantkit.serve.config import ServeConfig, serve_command

LEVERS = ["api_server_count", "stream_interval", "async_scheduling", "max_cudagraph_capture_size", "optimization_level"]


def test_levers_are_fields_unset_by_default_and_render_as_vllm_flags():
    assert set(flag_support.SUPPORT) == set(LEVERS)
    assert all(getattr(ServeConfig(), k) is None for k in LEVERS)
    assert ServeConfig().to_args() == ["--max-model-len", "2048"]  # unset: vLLM's default, not passed
    config = ServeConfig.from_options(["async-scheduling=off", "optimization-level=1"], api_server_count=2,
                                      stream_interval=4, max_cudagraph_capture_size=256)
    assert config.to_args()[2:] == ["--api-server-count", "2", "--stream-interval", "4", "--no-async-scheduling",
                                    "--max-cudagraph-capture-size", "256", "--optimization-level", "1"]
    assert ServeConfig(async_scheduling=True).to_args()[-1] == "--async-scheduling"
    assert serve_command("m", ServeConfig(optimization_level=0)) == "vllm serve m --max-model-len 2048 --optimization-level 0"
    assert config.changed() == {"api_server_count": 2, "stream_interval": 4, "async_scheduling": False,
                                "max_cudagraph_capture_size": 256, "optimization_level": 1}


@pytest.mark.parametrize("arg, says", [
    ("api-server-count=0", "api-server-count: Input should be greater than or equal to 1"),
    ("stream-interval=0", "stream-interval: Input should be greater than or equal to 1"),
    ("max-cudagraph-capture-size=0", "max-cudagraph-capture-size: Input should be greater than or equal to 1"),
    ("optimization-level=4", "optimization-level: Input should be less than or equal to 3"),
    ("optimization-level=-1", "optimization-level: Input should be greater than or equal to 0"),
    ("async-scheduling=maybe", "expected on/off"),
])
def test_bad_lever_values_are_one_line_usage_errors(arg, says):
    with pytest.raises(UsageError, match=says):
        ServeConfig.from_options([arg])


def test_the_commands_take_the_levers_as_flags():
    """The flags exist on every serving command, their help the field's description; a bad value is
    exit 2 before anything starts."""
    result = CliRunner().invoke(app, ["serve", "x", "--help"], env={"COLUMNS": "200"})
    for flag in ("--api-server-count", "--stream-interval", "--async-scheduling", "--max-cudagraph-capture-size",
                 "--optimization-level"):
        assert flag in result.stdout
    bad = CliRunner().invoke(app, ["bench", "/nonexistent", "--optimization-level", "7"])
    assert bad.exit_code == 2 and "optimization-level" in bad.output


@pytest.mark.parametrize("version", ["0.26.0", "0.32.0+cpu", "0.26.1.dev4+gabc", "1.0.0"])
def test_the_releases_read_take_every_lever_on_a_gpu(version):
    config = ServeConfig(api_server_count=4, stream_interval=16, async_scheduling=True, max_cudagraph_capture_size=1024,
                         optimization_level=3)
    assert flag_support.refusal(config, gpu=True, vllm=version) is None


def test_an_older_vllm_is_refused_the_flags_quantkit_has_not_read_in_it():
    reason = flag_support.refusal(ServeConfig(stream_interval=4), gpu=True, vllm="0.25.2")
    assert reason == ("--stream-interval: quantkit knows this flag from vLLM 0.26.0 on, and the vLLM in use is 0.25.2; "
                      "leave it out, or serve with vLLM 0.26.0 or later (QUANTKIT_VLLM names its python)")
    assert flag_support.refusal(ServeConfig(async_scheduling=False), gpu=True, vllm="0.11.0").startswith(
        "--no-async-scheduling: quantkit knows")
    # a version that names no release (a `vllm` executable, no environment): vLLM itself will say
    for unknown in ("unknown", "none", None):
        assert flag_support.refusal(ServeConfig(stream_interval=4), gpu=True, vllm=unknown) is None
    assert flag_support.release("0.32.0+cpu") == (0, 32, 0) and flag_support.release("0.9") == (0, 9, 0)


def test_vllm_cpu_is_refused_what_it_ignores_and_takes_the_rest():
    cpu = dict(gpu=False, vllm="0.32.0+cpu")
    assert flag_support.refusal(ServeConfig(max_cudagraph_capture_size=256), **cpu) == (
        "--max-cudagraph-capture-size changes nothing here: vLLM-CPU captures no CUDA graphs (it empties their "
        "sizes); leave it out, or serve on a GPU")
    assert "turns async scheduling off" in flag_support.refusal(ServeConfig(async_scheduling=True), **cpu)
    # off is what vLLM-CPU does; the host-side levers and the -O level work there
    ok = ServeConfig(async_scheduling=False, api_server_count=2, stream_interval=4, optimization_level=0)
    assert flag_support.refusal(ok, **cpu) is None


def test_check_asks_the_version_only_when_a_lever_is_set(monkeypatch):
    asked = []
    monkeypatch.setattr("quantkit.serve.env.installed_vllm_version", lambda: asked.append(1) or "0.25.0")
    flag_support.check(ServeConfig(max_num_seqs=8), gpu=True)
    assert not asked  # no python start for a configuration without one
    with pytest.raises(UsageError, match="vLLM in use is 0.25.0"):
        flag_support.check(ServeConfig(api_server_count=2), gpu=True)
    assert asked == [1]


def test_the_server_refuses_before_vllm_starts(monkeypatch, tmp_path):
    """VLLMServer.start: the refusal comes before any process (no port taken, no Popen)."""
    from quantkit.serve import server as server_mod

    monkeypatch.setattr(server_mod.checkpoint, "validate", lambda *a, **k: None)
    monkeypatch.setattr(server_mod, "supported_architectures", lambda: None)
    monkeypatch.setattr(server_mod, "has_gpu", lambda: False)
    monkeypatch.setattr(server_mod, "check_servable", lambda *a, **k: None)
    monkeypatch.setattr("quantkit.serve.env.installed_vllm_version", lambda: "0.32.0+cpu")
    monkeypatch.setattr(server_mod.subprocess, "Popen", lambda *a, **k: pytest.fail("vLLM was started"))
    with pytest.raises(UsageError, match="vLLM-CPU turns async scheduling off"):
        server_mod.VLLMServer(tmp_path, ServeConfig(async_scheduling=True)).start()


# --------------------------------------------------------------------------------------------
# The tuner's space


def test_the_gpu_space_holds_every_lever_and_the_cpu_space_the_host_side_ones():
    gpu = tune.resolve_space(tune.TuneSettings(), gpus=1, vllm="0.26.0")
    assert gpu["stream_interval"] == [None, 4, 16] and gpu["api_server_count"] == [None, 2, 4]
    assert gpu["async_scheduling"] == [None, False] and gpu["max_cudagraph_capture_size"] == [None, 256, 1024]
    assert gpu["optimization_level"] == [None, 1]
    cpu = tune.resolve_space(tune.TuneSettings(), gpus=0, vllm="0.32.0+cpu")
    assert cpu["stream_interval"] == [None, 4, 16] and cpu["api_server_count"] == [None, 2]
    assert not {"async_scheduling", "max_cudagraph_capture_size", "optimization_level"} & set(cpu)
    # a vLLM without the flags: the default space leaves them out (quietly; it adapts as to the ISA)
    old = tune.resolve_space(tune.TuneSettings(), gpus=1, vllm="0.20.0")
    assert not set(flag_support.SUPPORT) & set(old) and "max_num_seqs" in old


def test_space_parsing_takes_the_levers():
    assert tune.parse_space(["async-scheduling=default,on,off", "optimization-level=0,3", "stream-interval=1,8",
                             "api-server-count=default,2", "max-cudagraph-capture-size=512"]) == {
        "async_scheduling": [None, True, False], "optimization_level": [0, 3], "stream_interval": [1, 8],
        "api_server_count": [None, 2], "max_cudagraph_capture_size": [512]}
    with pytest.raises(UsageError, match="bad tune choice optimization-level=5: .*less than or equal to 3"):
        tune.parse_space(["optimization-level=5"])
    with pytest.raises(UsageError, match="bad tune choice stream-interval=0: .*greater than or equal to 1"):
        tune.parse_space(["stream-interval=0"])


def test_a_space_or_base_the_vllm_in_use_cannot_take_is_refused_before_any_trial():
    on_cpu = tune.TuneSettings(space={"max_cudagraph_capture_size": [None, 256]})
    with pytest.raises(UsageError, match="tune space max-cudagraph-capture-size: --max-cudagraph-capture-size changes "
                                         "nothing here: vLLM-CPU captures no CUDA graphs"):
        tune.resolve_space(on_cpu, gpus=0, vllm="0.32.0+cpu")
    assert tune.resolve_space(on_cpu, gpus=1, vllm="0.26.0")["max_cudagraph_capture_size"] == [None, 256]
    with pytest.raises(UsageError, match="quantkit knows this flag from vLLM 0.26.0 on"):
        tune.resolve_space(tune.TuneSettings(space={"stream_interval": [None, 4]}), gpus=1, vllm="0.24.0")
    assert tune.resolve_space(tune.TuneSettings(space={"async_scheduling": [None, False]}), gpus=0,
                              vllm="0.32.0+cpu")["async_scheduling"] == [None, False]  # off: what vLLM-CPU does
    with pytest.raises(UsageError, match="vLLM-CPU turns async scheduling off"):
        tune.resolve_space(tune.TuneSettings(), gpus=0, vllm="0.32.0+cpu", base=ServeConfig(async_scheduling=True))


def test_a_capture_size_without_cuda_graphs_is_not_started():
    assert tune.invalid(ServeConfig(max_cudagraph_capture_size=256, enforce_eager=True), gpus=1) == (
        "max-cudagraph-capture-size 256 with --enforce-eager, which captures no CUDA graph: the same server as without it")
    assert "with -O0" in tune.invalid(ServeConfig(max_cudagraph_capture_size=256, optimization_level=0), gpus=1)
    assert tune.invalid(ServeConfig(max_cudagraph_capture_size=256, optimization_level=1), gpus=1) is None
    assert tune.invalid(ServeConfig(optimization_level=0, api_server_count=4, stream_interval=16), gpus=1) is None
