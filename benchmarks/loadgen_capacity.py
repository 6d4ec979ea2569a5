"""Is quantkit's load generator ever the bottleneck? Truth vs quantkit vs `vllm bench serve`.

The cadence fixture (tests/fixtures/openai_stream.py) streams every request at a fixed TTFT and
time per token, so the true output tok/s, TTFT, ITL and TPOT of each concurrency point are known.
For each concurrency (default 1, 4, 16, 64, 256, 512, 1024; 4 x C requests each) this runs
quantkit's client (`run_point`, in this process, its workers automatic or --workers) and
`vllm bench serve` (from the vLLM environment, `--backend openai`, random dataset, ignore_eos) on
the same fixture, alternated A B B A over --repeats, and prints the medians beside the truth:
output tok/s, TTFT / ITL / TPOT medians, and each client's CPU per streamed token (quantkit: its
own ClientStats over the measured window; vLLM: its process CPU from "Starting main benchmark
run" to its result banner, read from /proc). The fixture watches itself: a point where more than
2% of its writes were over 5 ms late is marked "fixture saturated", its truth no longer holds,
and the last concurrency it sustained is named.

    .venv/bin/python benchmarks/loadgen_capacity.py [--concurrency 1,64,256] [--output-len 128]
        [--tpot 0.02] [--ttft 0.05] [--repeats 2] [--fixture-processes N] [--workers N]
        [--no-vllm] [--tokenizer DIR] [--json OUT.json]

On a machine without the vLLM environment (or with --no-vllm) only truth and quantkit are shown.
On a GPU host without quantkit installed: `PYTHONPATH=. QUANTKIT_VLLM=$(which python3) python3
benchmarks/loadgen_capacity.py --tokenizer DIR` (needs pydantic and aiohttp; uvloop/orjson used
when present); the fixture processes default to a quarter of the cores, quantkit's workers to half.
A script, not a test: its figures go in the issue note.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(1, str(REPO))  # runnable from a bare checkout too (the GPU host has no quantkit install)

from fixtures.openai_stream import StreamFixture, late_share  # noqa: E402
from quantkit.measure.loadgen.generator import Target, max_workers, run_point, warmup  # noqa: E402
from quantkit.measure.loadgen.workload import Prompt  # noqa: E402

SATURATED_SHARE = 0.02  # of the fixture's writes more than 5 ms late


def cpu_ticks(pid: int) -> float:
    """utime + stime of a process, seconds (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vllm_cmd() -> list[str] | None:
    try:
        from quantkit.serve.server import vllm_command

        return vllm_command()
    except Exception:  # no vLLM environment here
        return None


def run_vllm(cmd: list[str], fx: StreamFixture, tokenizer: Path, c: int, n: int, args, out: Path, tag: str) -> dict:
    name = f"vllm-{tag}.json"
    argv = [*cmd, "bench", "serve", "--backend", "openai", "--base-url", fx.url, "--model", "fixture",
            "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", str(args.input_len),
            "--random-output-len", str(args.output_len), "--ignore-eos", "--num-prompts", str(n),
            "--max-concurrency", str(c), "--request-rate", "inf", "--num-warmups", "0", "--disable-tqdm",
            "--seed", tag.split("-")[-1], "--save-result", "--result-dir", str(out), "--result-filename", name]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, cpu0, cpu1, before = [], None, None, None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Starting main benchmark run"):
            before, cpu0 = fx.stats(0.0), cpu_ticks(proc.pid)
        elif "Serving Benchmark Result" in line and cpu1 is None:
            cpu1 = cpu_ticks(proc.pid)
    proc.wait()
    if proc.returncode != 0 or cpu0 is None:
        sys.exit("vllm bench serve failed:\n" + "".join(lines)[-3000:])
    data = json.loads((out / name).read_text())
    tokens = data["total_output_tokens"]
    cpu = (cpu1 if cpu1 is not None else cpu0) - cpu0
    return {"output_tok_s": data["output_throughput"], "ttft_ms": data["median_ttft_ms"],
            "itl_ms": data["median_itl_ms"], "tpot_ms": data["median_tpot_ms"],
            "cpu_us_per_token": 1e6 * cpu / max(tokens, 1), "cores": cpu / max(data["duration"], 1e-9),
            "failed": data.get("failed", 0), "fixture": late_share(before, fx.stats()), "limited": False}


def run_quantkit(fx: StreamFixture, c: int, n: int, args, seed: int) -> dict:
    rng = random.Random(seed)
    prompts = [Prompt(token_ids=[rng.randrange(100, 30000) for _ in range(args.input_len)]) for _ in range(n)]
    target = Target(api_url=fx.api_url, model="fixture")
    warmup(target, prompts[:1], 4)
    before = fx.stats(0.0)
    p = run_point(target, prompts, args.output_len, concurrency=c, workers=args.workers)
    client = p.client
    return {"output_tok_s": p.output_tok_s, "ttft_ms": p.ttft.p50 * 1000, "itl_ms": p.itl.p50 * 1000,
            "tpot_ms": p.tpot.p50 * 1000, "cpu_us_per_token": client.cpu_us_per_token, "cores": client.cores,
            "failed": p.failures, "fixture": late_share(before, fx.stats()), "limited": p.client_limited,
            "limited_reason": p.client_limited_reason, "workers": client.workers, "attempts": client.attempts,
            "lag_p99_ms": client.loop_lag_p99_ms}


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,4,16,64,256,512,1024")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--ttft", type=float, default=0.05)
    parser.add_argument("--tpot", type=float, default=0.02)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--requests-per-stream", type=int, default=4, help="requests = this x concurrency (min 8)")
    parser.add_argument("--fixture-processes", type=int, default=None,
                        help="fixture server processes (default: a quarter of the cores, at least 1)")
    parser.add_argument("--workers", type=int, default=None, help="quantkit client workers (default: automatic)")
    parser.add_argument("--no-vllm", action="store_true", help="skip vllm bench serve")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="tokenizer folder for vllm bench serve (default: the demo model in QUANTKIT_HOME)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's figures here")
    args = parser.parse_args()
    loads = [int(x) for x in args.concurrency.split(",") if x.strip()]
    cpus = len(os.sched_getaffinity(0))
    processes = args.fixture_processes or max(1, cpus // 4)
    cmd = None if args.no_vllm else vllm_cmd()
    tokenizer = args.tokenizer
    if cmd is not None and tokenizer is None:
        from quantkit import models

        tokenizer = models.resolve("smollm2-135m").path
    tools = ["quantkit"] + (["vllm"] if cmd else [])
    results: dict[int, dict] = {}
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, StreamFixture(ttft=args.ttft, tpot=args.tpot, processes=processes) as fx:
        for c in loads:
            n = max(8, args.requests_per_stream * c)
            runs: dict[str, list[dict]] = {t: [] for t in tools}
            for r in range(args.repeats):
                for tool in (tools if r % 2 == 0 else tools[::-1]):  # A B B A
                    if tool == "quantkit":
                        runs[tool].append(run_quantkit(fx, c, n, args, seed=1000 * c + r))
                    else:
                        runs[tool].append(run_vllm(cmd, fx, tokenizer, c, n, args, Path(tmp), f"{c}-{r}"))
                    last = runs[tool][-1]
                    print(f"c={c} {tool} run {r + 1}: {last['output_tok_s']:.0f} tok/s, ITL p50 {last['itl_ms']:.2f} ms, "
                          f"{last['cpu_us_per_token']:.1f} us CPU/token, fixture late>5ms "
                          f"{last['fixture']['late_5ms_share']:.1%}", file=sys.stderr, flush=True)
            results[c] = {"truth": fx.truth(c, n, args.output_len), "runs": runs}
    load_end = os.getloadavg()[0]
    report(results, tools, args, processes, cpus, load_start, load_end)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "cpus": cpus,
                                         "fixture_processes": processes, "load": [load_start, load_end],
                                         "results": results}, indent=1))


def report(results: dict, tools: list[str], args, processes: int, cpus: int, load_start: float, load_end: float) -> None:
    print(f"fixture: TTFT {args.ttft * 1000:g} ms, {args.tpot * 1000:g} ms/token, {args.output_len} tokens per "
          f"request, {processes} process(es); {args.requests_per_stream} x C requests per point; median of "
          f"{args.repeats} runs per tool, alternated A B B A; {cpus} CPUs, quantkit up to {max_workers()} workers; "
          f"load average {load_start:.1f} -> {load_end:.1f}")
    head = f"{'C':>5} {'truth tok/s':>11} {'quantkit':>16}"
    if "vllm" in tools:
        head += f" {'vllm bench':>16} {'q/v':>6}"
    head += f" {'TTFT p50 ms t/q' + ('/v' if 'vllm' in tools else ''):>20} {'ITL p50 ms t/q' + ('/v' if 'vllm' in tools else ''):>19}"
    head += f" {'TPOT p50 ms t/q' + ('/v' if 'vllm' in tools else ''):>19} {'us CPU/token q' + ('/v' if 'vllm' in tools else ''):>17}"
    head += f" {'cores q' + ('/v' if 'vllm' in tools else ''):>10} {'fixture':>10}  notes"
    print(head)
    sustained, unbroken = None, True
    for c, res in results.items():
        truth, runs = res["truth"], res["runs"]
        q = runs["quantkit"]
        qt = median(q, "output_tok_s")
        row = f"{c:>5} {truth['output_tok_s']:>11.0f} {qt:>8.0f} ({qt / truth['output_tok_s']:.3f})"
        v = runs.get("vllm")
        if v:
            vt = median(v, "output_tok_s")
            row += f" {vt:>8.0f} ({vt / truth['output_tok_s']:.3f}) {qt / vt:>6.3f}"

        def trio(key: str, true_ms: float, width: int) -> str:
            parts = [f"{true_ms:.1f}", f"{median(q, key):.1f}"] + ([f"{median(v, key):.1f}"] if v else [])
            return f"{'/'.join(parts):>{width}}"

        row += " " + trio("ttft_ms", truth["ttft_s"] * 1000, 20) + " " + trio("itl_ms", truth["itl_s"] * 1000, 19)
        row += " " + trio("tpot_ms", truth["tpot_s"] * 1000, 19)
        cpu = f"{median(q, 'cpu_us_per_token'):.1f}" + (f"/{median(v, 'cpu_us_per_token'):.1f}" if v else "")
        cores = f"{median(q, 'cores'):.2f}" + (f"/{median(v, 'cores'):.2f}" if v else "")
        late = max(r["fixture"]["late_5ms_share"] for tool_runs in runs.values() for r in tool_runs)
        saturated = late > SATURATED_SHARE
        unbroken = unbroken and not saturated
        if unbroken:
            sustained = c
        notes = [f"quantkit workers {max(r['workers'] for r in q)}"]
        if any(r["attempts"] > 1 for r in q):
            notes.append(f"retried ({max(r['attempts'] for r in q)} attempts)")
        if any(r["limited"] for r in q):
            notes.append("quantkit client-limited: " + next(r["limited_reason"] for r in q if r["limited"]))
        if any(r["failed"] for tool_runs in runs.values() for r in tool_runs):
            notes.append("failures")
        row += f" {cpu:>17} {cores:>10} {('SATURATED' if saturated else 'ok') + f' {late:.1%}':>10}  " + "; ".join(notes)
        print(row)
    print(f"the fixture kept its cadence (<= {SATURATED_SHARE:.0%} of writes over 5 ms late) up to "
          + (f"C={sustained}" if sustained else "no concurrency measured") + " on this machine; "
          "'fixture' is the largest share of late writes in any run of the point")


if __name__ == "__main__":
    main()
