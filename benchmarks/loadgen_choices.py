"""Which HTTP client, SSE parsing and event loop should quantkit's load generator use? Measured.

Runs one concurrency point against the cadence fixture (tests/fixtures/openai_stream.py) with each
variant of the client's hot path, one process each, and prints the client's CPU per streamed token
(process CPU time / tokens) and the ITL and TTFT medians beside the fixture's truth. Variants:
  httpx-json       httpx AsyncClient, aiter_lines, json.loads per chunk (quantkit before issue 13)
  aiohttp-vllm     aiohttp, iter_any, vLLM bench's StreamedResponseHandler, json.loads per chunk
  aiohttp-scan     aiohttp, iter_any, bytes scanning (JSON parsed only for usage/error chunks)
  aiohttp-json     aiohttp, iter_any, split on blank lines, json.loads on every chunk
  aiohttp-orjson   aiohttp, iter_any, split on blank lines, orjson.loads on every chunk
  ... each also on uvloop (suffix +uvloop).

    .venv/bin/python benchmarks/loadgen_choices.py [--concurrency 128] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
sys.path.insert(0, "/tmp/loadgen-choices")

VARIANTS = ["httpx-json", "aiohttp-vllm", "aiohttp-json", "aiohttp-orjson", "aiohttp-scan"]


def body(output_len: int) -> bytes:
    return json.dumps({"model": "fixture", "prompt": list(range(128)), "max_tokens": output_len,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}).encode()


async def run_httpx(url, c, n, output_len):
    import httpx

    sem = asyncio.Semaphore(c)
    ttfts, itls, tokens = [], [], 0
    data = body(output_len)
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=c + 4)) as client:
        async def one():
            nonlocal tokens
            async with sem:
                start = last = time.perf_counter()
                first = True
                async with client.stream("POST", url, content=data, headers={"Content-Type": "application/json"}) as r:
                    async for line in r.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == "[DONE]":
                            break
                        d = json.loads(payload)
                        if d.get("choices"):
                            now = time.perf_counter()
                            (ttfts.append(now - start) if first else itls.append(now - last))
                            first, last = False, now
                        if u := d.get("usage"):
                            tokens += u["completion_tokens"]
        await asyncio.gather(*(one() for _ in range(n)))
    return ttfts, itls, tokens


async def run_aiohttp(url, c, n, output_len, mode):
    import aiohttp

    sem = asyncio.Semaphore(c)
    ttfts, itls, tokens = [], [], 0
    data = body(output_len)
    loads = json.loads
    if mode == "orjson":
        import orjson

        loads = orjson.loads
    if mode == "vllm":
        from vllm_handler import StreamedResponseHandler
    connector = aiohttp.TCPConnector(limit=c + 4)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def one():
            nonlocal tokens
            async with sem:
                start = last = time.perf_counter()
                first = True
                async with session.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
                    if mode == "vllm":
                        handler = StreamedResponseHandler()
                        async for chunk in r.content.iter_any():
                            chunk = chunk.strip()
                            if not chunk:
                                continue
                            for m in handler.add_chunk(chunk):
                                p = m.removeprefix("data: ")
                                if p == "[DONE]":
                                    continue
                                d = json.loads(p)
                                if d.get("choices"):
                                    now = time.perf_counter()
                                    (ttfts.append(now - start) if first else itls.append(now - last))
                                    first, last = False, now
                                elif u := d.get("usage"):
                                    tokens += u["completion_tokens"]
                        return
                    rest = b""
                    async for chunk in r.content.iter_any():
                        now = time.perf_counter()
                        events = (rest + chunk).split(b"\n\n")
                        rest = events.pop()
                        for ev in events:
                            if mode == "scan":
                                if b'"choices":[{' in ev:
                                    (ttfts.append(now - start) if first else itls.append(now - last))
                                    first, last = False, now
                                    if b'"usage":null' in ev:
                                        continue
                                if b'"usage":{' in ev:
                                    tokens += json.loads(ev[6:])["usage"]["completion_tokens"]
                            else:
                                if ev == b"data: [DONE]":
                                    continue
                                d = loads(ev[6:])
                                if d.get("choices"):
                                    (ttfts.append(now - start) if first else itls.append(now - last))
                                    first, last = False, now
                                if u := d.get("usage"):
                                    tokens += u["completion_tokens"]
        await asyncio.gather(*(one() for _ in range(n)))
    return ttfts, itls, tokens


def child(variant: str, url: str, c: int, n: int, output_len: int) -> None:
    name, _, loop = variant.partition("+")
    if name == "aiohttp-vllm":
        # vLLM bench's own SSE handler, imported before the clock starts (vllm itself is too heavy
        # to import here: the class is copied out of the installed file by the parent)
        import vllm_handler  # noqa: F401
    coro = run_httpx(url, c, n, output_len) if name == "httpx-json" else run_aiohttp(url, c, n, output_len, name.split("-")[1])
    cpu0, t0 = time.process_time(), time.perf_counter()
    if loop == "uvloop":
        import uvloop

        ttfts, itls, tokens = uvloop.run(coro)
    else:
        ttfts, itls, tokens = asyncio.run(coro)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    print(json.dumps({"cpu_us_per_token": 1e6 * cpu / tokens, "cores": cpu / wall, "tok_s": tokens / wall,
                      "ttft_p50_ms": 1000 * statistics.median(ttfts), "itl_p50_ms": 1000 * statistics.median(itls)}))


VLLM_FILE = REPO / ".venv-vllm/lib/python3.11/site-packages/vllm/benchmarks/lib/endpoint_request_func.py"
HANDLER_DIR = Path("/tmp/loadgen-choices")


def write_vllm_handler() -> None:
    """vLLM's StreamedResponseHandler class, cut verbatim from the installed vLLM, as a module."""
    text = VLLM_FILE.read_text()
    start = text.index("class StreamedResponseHandler")
    end = text.index("@dataclass", start)
    HANDLER_DIR.mkdir(exist_ok=True)
    (HANDLER_DIR / "vllm_handler.py").write_text("import codecs\nimport json\n\n\n" + text[start:end])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--tpot", type=float, default=0.02)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = 4 * args.concurrency
    if args.child:
        child(args.child[0], args.child[1], args.concurrency, n, args.output_len)
        return
    from openai_stream import StreamFixture

    write_vllm_handler()

    variants = [v + loop for v in VARIANTS for loop in ("", "+uvloop")]
    rows: dict[str, list[dict]] = {v: [] for v in variants}
    with StreamFixture(ttft=0.05, tpot=args.tpot) as fx:
        truth = fx.truth(args.concurrency, n, args.output_len)
        for r in range(args.repeats):
            order = variants if r % 2 == 0 else variants[::-1]  # A B B A
            for v in order:
                out = subprocess.run([sys.executable, __file__, "--concurrency", str(args.concurrency),
                                      "--output-len", str(args.output_len), "--child", v, fx.api_url + "/completions"],
                                     capture_output=True, text=True)
                if out.returncode:
                    sys.exit(out.stderr[-2000:])
                rows[v].append(json.loads(out.stdout))
    print(f"concurrency {args.concurrency}, {n} requests x {args.output_len} tokens, fixture TTFT 50 ms, "
          f"{args.tpot * 1000:g} ms/token (truth {truth['output_tok_s']:.0f} tok/s); median of {args.repeats}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'variant':24} {'CPU us/token':>13} {'client cores':>13} {'tok/s':>8} {'TTFT p50 ms':>12} {'ITL p50 ms':>11}")
    for v, runs in rows.items():
        m = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
        print(f"{v:24} {m['cpu_us_per_token']:13.1f} {m['cores']:13.2f} {m['tok_s']:8.0f} {m['ttft_p50_ms']:12.1f} "
              f"{m['itl_p50_ms']:11.2f}")


if __name__ == "__main__":
    main()
