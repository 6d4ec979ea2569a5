"""Does quantkit's load generator agree with vLLM's own benchmark on the same server and workload?

One vLLM server; then, for each concurrency of `--concurrency` (e.g. 1,4,16,64,256,512),
interleaved `--repeats` times (A B B A), `vllm bench serve` (run from the vLLM environment) and
`quantkit bench --url` with the same random workload (input/output length, ignore_eos, number of
prompts, concurrency). Prints output tok/s, median TPOT, TTFT and ITL of both and the ratios
quantkit / vLLM (goal 0.90-1.10 on the CPU, 0.95-1.05 on a GPU), and whether quantkit flagged a
point client-limited. Interleaving spreads drift from other load on the machine over both tools.

`--simultaneous` runs quantkit's load generator (in this process) at the moment vLLM's main run
starts, each tool at --concurrency: the server batches both loads together, so both tools measure
the same server state even when other work on a shared CPU comes and goes.

    .venv/bin/python benchmarks/bench_agreement.py [MODEL_DIR] [--concurrency 1,4,16,64,256,512]
        [--num-prompts N (default 4 x C, 2 x C above 16, C above 64)] [--input-len 32] [--output-len 32]

A script, not a test: its figures go in the issue note.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from quantkit import models
from quantkit.serve.config import ServeConfig
from quantkit.serve.env import serve_env, vllm_command
from quantkit.serve.server import VLLMServer


KEYS = ("output_tok_s", "tpot_ms", "ttft_ms", "itl_ms")


def vllm_bench(server: VLLMServer, model_dir: Path, args, out_dir: Path, index: int, alongside=None) -> dict:
    """Run `vllm bench serve`; with `alongside`, call it as soon as vLLM's main run starts (both
    tools then load the server together and see the same server state)."""
    name = f"vllm-{index}.json"
    cmd = [
        *vllm_command(), "bench", "serve", "--backend", "vllm", "--base-url", server.url,
        "--model", str(model_dir), "--served-model-name", server.model_name, "--tokenizer", str(model_dir),
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len), "--ignore-eos", "--num-prompts", str(args.num_prompts),
        "--max-concurrency", str(args.concurrency), "--request-rate", "inf", "--seed", str(index),
        "--num-warmups", "2", "--disable-tqdm",
        "--save-result", "--result-dir", str(out_dir), "--result-filename", name,
    ]
    import psutil

    proc = subprocess.Popen(cmd, env=serve_env({"PYTHONUNBUFFERED": "1"}), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output, other = [], None
    cpu = {}  # the client's own CPU through its main run (not its seconds of imports before it)

    def cpu_now() -> float | None:
        try:
            times = psutil.Process(proc.pid).cpu_times()
            return times.user + times.system
        except psutil.Error:
            return None

    for line in proc.stdout:
        output.append(line)
        if line.startswith("Starting main benchmark run"):
            cpu["start"] = cpu_now()
            if alongside is not None and other is None:
                other = alongside()
        elif "Serving Benchmark Result" in line:
            cpu["end"] = cpu_now()
    proc.wait()
    if proc.returncode != 0:
        sys.exit("vllm bench serve failed:\n" + "".join(output)[-4000:])
    data = json.loads((out_dir / name).read_text())
    result = {"output_tok_s": data["output_throughput"], "tpot_ms": data["median_tpot_ms"],
              "ttft_ms": data["median_ttft_ms"], "itl_ms": data["median_itl_ms"], "completed": data["completed"]}
    if cpu.get("start") is not None and cpu.get("end") is not None and data.get("total_output_tokens"):
        result["client_cpu_us_per_token"] = (cpu["end"] - cpu["start"]) * 1e6 / data["total_output_tokens"]
    return result if alongside is None else (result, other)


def quantkit_inline(server: VLLMServer, model_dir: Path, args, index: int):
    """quantkit's load generator in this process, prompts built beforehand: it starts in
    milliseconds when called (the CLI would spend seconds importing transformers first)."""
    from quantkit.measure.loadgen.generator import Target, run_point
    from quantkit.measure.loadgen.workload import PromptSource

    prompts = PromptSource(model_dir, args.input_len, seed=100 + index).prompts(args.num_prompts, 0)
    target = Target(api_url=server.api_url, model=server.model_name)

    def go() -> dict:
        p = run_point(target, prompts, args.output_len, concurrency=args.concurrency)
        return {"output_tok_s": p.output_tok_s, "tpot_ms": p.tpot.p50 * 1000, "ttft_ms": p.ttft.p50 * 1000,
                "itl_ms": p.itl.p50 * 1000, "completed": p.successes, "client_limited": p.client_limited_reason}

    return go


def quantkit_bench(server: VLLMServer, model_dir: Path, args, out_dir: Path, index: int) -> dict:
    cmd = [
        sys.executable, "-m", "quantkit", "bench", str(model_dir), "--url", server.url,
        "-c", str(args.concurrency), "-n", str(args.num_prompts), "--input-len", str(args.input_len),
        "--output-len", str(args.output_len), "--warmup", "2", "--seed", str(100 + index),
        "--results-dir", str(out_dir), "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"quantkit bench failed:\n{done.stderr[-3000:]}")
    (point,) = json.loads(done.stdout)["points"]
    return {"output_tok_s": point["output_tok_s"], "tpot_ms": point["tpot"]["p50"] * 1000,
            "ttft_ms": point["ttft"]["p50"] * 1000, "itl_ms": point["itl"]["p50"] * 1000,
            "completed": point["successes"], "client_limited": point.get("client_limited_reason"),
            "client_cpu_us_per_token": (point.get("client") or {}).get("cpu_us_per_token")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?", help="checkpoint (default: the built-in smollm2-135m)")
    parser.add_argument("--concurrency", default="4", help="comma-separated, e.g. 1,4,16,64,256,512")
    parser.add_argument("--num-prompts", type=int, default=None,
                        help="requests per run (default 4 x C, min 16; 2 x C above 16; C above 64)")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--simultaneous", action="store_true",
                        help="run both tools at the same time (each at --concurrency) instead of one after the "
                             "other: on a busy shared CPU both then see the same server state")
    parser.add_argument("--compiled", action="store_true", help="torch.compile (slower start) instead of --enforce-eager")
    parser.add_argument("--json", help="also write every run's figures to this JSON file")
    args = parser.parse_args()
    model_dir = Path(args.model_dir).absolute() if args.model_dir else models.resolve("smollm2-135m").path
    loads = [int(x) for x in args.concurrency.split(",") if x.strip()]
    fixed_prompts = args.num_prompts

    table = []
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, VLLMServer(model_dir, ServeConfig(enforce_eager=not args.compiled)) as server:
        out = Path(tmp)
        for c in loads:
            args.concurrency = c
            # four waves at low concurrency; fewer where a 2-core vLLM-CPU would take many minutes
            args.num_prompts = fixed_prompts or max(16, (1 if c > 64 else 2 if c > 16 else 4) * c)
            rows = {"vllm bench serve": [], "quantkit bench": []}
            for i in range(args.repeats):
                seed = 1000 * c + i
                if args.simultaneous:
                    v, q = vllm_bench(server, model_dir, args, out, seed,
                                      alongside=quantkit_inline(server, model_dir, args, seed))
                    rows["vllm bench serve"].append(v)
                    rows["quantkit bench"].append(q)
                elif i % 2 == 0:  # A B B A
                    rows["vllm bench serve"].append(vllm_bench(server, model_dir, args, out, seed))
                    rows["quantkit bench"].append(quantkit_bench(server, model_dir, args, out, seed))
                else:
                    rows["quantkit bench"].append(quantkit_bench(server, model_dir, args, out, seed))
                    rows["vllm bench serve"].append(vllm_bench(server, model_dir, args, out, seed))
                print(f"c={c} repeat {i + 1}: vllm {rows['vllm bench serve'][-1]}  quantkit {rows['quantkit bench'][-1]}"
                      f"  load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
            table.append((c, args.num_prompts, rows))
        info = server.info

    print(f"model {model_dir.name}, vLLM {info.vllm_version}, {'compiled' if args.compiled else 'eager'}, "
          f"server ready in {info.startup_s:.1f} s; workload: {args.input_len} in / {args.output_len} out, "
          f"ignore_eos; median of {args.repeats} " + ("simultaneous runs (the server saw both loads at once)"
                                                      if args.simultaneous else "runs alternated A B B A")
          + f"; load average {load_start:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'C':>4} {'reqs':>5} {'tool':17} {'output tok/s':>13} {'TPOT p50 ms':>12} {'TTFT p50 ms':>12} "
          f"{'ITL p50 ms':>11} {'us CPU/token':>12}  notes")
    all_ok = True
    for c, n, rows in table:
        med = {tool: {k: statistics.median(r[k] for r in runs) for k in KEYS} for tool, runs in rows.items()}
        for tool, m in med.items():
            note = ""
            if tool == "quantkit bench":
                limited = [r["client_limited"] for r in rows[tool] if r.get("client_limited")]
                note = f"client-limited: {limited[0]}" if limited else ""
            cpus = [r["client_cpu_us_per_token"] for r in rows[tool] if r.get("client_cpu_us_per_token")]
            cpu = f"{statistics.median(cpus):12.1f}" if cpus else f"{'-':>12}"
            print(f"{c:>4} {n:>5} {tool:17} {m['output_tok_s']:13.2f} {m['tpot_ms']:12.2f} {m['ttft_ms']:12.2f} "
                  f"{m['itl_ms']:11.2f} {cpu}  {note}")
        # Ratios per interleaved pair (the two runs of a pair saw about the same load from the rest
        # of the machine), then their median: sturdier than a ratio of medians on a busy CPU.
        pairs = [{k: q[k] / v[k] for k in KEYS if v[k]} for v, q in zip(rows["vllm bench serve"], rows["quantkit bench"])]
        ratios = {k: statistics.median(r[k] for r in pairs) for k in pairs[0]}
        ok = all(0.90 <= ratios[k] <= 1.10 for k in ("output_tok_s", "tpot_ms", "ttft_ms"))
        all_ok = all_ok and ok
        print(f"{c:>4} {n:>5} {'ratio q/v median':17} {ratios['output_tok_s']:13.3f} {ratios['tpot_ms']:12.3f} "
              f"{ratios['ttft_ms']:12.3f} {ratios.get('itl_ms', float('nan')):11.3f}  "
              + ("within 0.90-1.10" if ok else "OUTSIDE 0.90-1.10"))
    print("agreement within 0.90-1.10 (tok/s, TPOT, TTFT) at every concurrency: " + ("yes" if all_ok else "NO"))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": model_dir.name, "vllm": info.vllm_version,
                                               "input_len": args.input_len, "output_len": args.output_len,
                                               "compiled": args.compiled, "points": [
                                                   {"concurrency": c, "num_prompts": n, "runs": rows}
                                                   for c, n, rows in table]}, indent=2))


if __name__ == "__main__":
    main()
