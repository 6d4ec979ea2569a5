"""Benchmark: the run matrix with the local executor against the Ray executor with two lanes.

The matrix is the integration tests' tiny one (baseline + w4a16-rtn on a 2-layer random model with
SmolLM2's shape and tokenizer; one load point; 8 arc_easy items), run whole as
`quantkit.pipeline.run` in a fresh process per run, each with a fresh store, in the order given
(default A B B A: local, ray, ray, local). Printed: each run's wall time (the whole process, and the
pipeline alone), the median per executor and their ratio; for the Ray runs, the time to start the
local Ray instance and Ray's overhead per lane task (submitted -> result back, less the time the
task body ran on its worker: scheduling, worker process start and imports, result transfer);
and, on a warm local instance, the round trip of a no-op task and of a store-actor call (what each
bench point pays to reach the driver's store).

On 2 CPU cores two lanes share the cores, so expect no speed-up; the GPU proof is its own issue.
The Ray runs use an auth token file of their own (RAY_AUTH_MODE=token), so they leave ~/.ray alone.

usage: .venv/bin/python benchmarks/ray_overhead.py [--order ABBA]
Needs QUANTKIT_DATA_DIR (arc_easy offline) and the built-in demo model (for its tokenizer).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPE = """kind: run
name: ray-overhead
model: {model}
baseline: true
methods:
  - method: w4a16-rtn
serve: {{enforce_eager: true, max_model_len: 512}}
bench: {{concurrency: [1], input_len: 16, output_len: 8, num_prompts: 4, warmup: 1}}
eval: {{tasks: arc_easy, limit: 8}}
"""


def tiny_model(out: Path) -> Path:
    """The 2-layer random Llama of tests/conftest.py (SmolLM2's shape and tokenizer)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from quantkit import models

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    AutoTokenizer.from_pretrained(models.resolve("smollm2-135m").path).save_pretrained(out)
    return out


def child(kind: str, recipe: str) -> None:
    """One matrix in this process; prints its figures as JSON on the last line of stdout."""
    from quantkit import pipeline
    from quantkit.console import OutputMode
    from quantkit.pipeline.ray_executor import RayExecutor
    from quantkit.pipeline.recipe import ExecutorSettings

    executor = RayExecutor(ExecutorSettings(kind="ray"), OutputMode(quiet=True)) if kind == "ray" else "local"
    t0 = time.monotonic()
    summary = pipeline.run(recipe, executor=executor, report_dir=Path(os.environ["QUANTKIT_HOME"]) / "report")
    wall = time.monotonic() - t0
    bad = [o for o in summary.outcomes if o.status != "done"]
    if bad:
        sys.exit(f"{kind}: stages did not finish: {[o.model_dump() for o in bad]}")
    figures = {"pipeline_s": wall}
    if kind == "ray":
        lanes = executor.timings["lanes"]
        figures["connect_s"] = executor.timings["connect_s"]
        figures["task_overhead_s"] = {k: v["returned"] - v["submitted"] - v["work_s"] for k, v in lanes.items()}
    print(json.dumps(figures))


def round_trips(n: int = 200) -> None:
    """No-op task and actor-call round trips on a warm local instance (ms), as JSON."""
    import ray

    ray.init(address="local", include_dashboard=False, log_to_driver=False)

    @ray.remote(num_cpus=0)
    def noop():
        return None

    @ray.remote(num_cpus=0)
    class Echo:
        def call(self, x):
            return x

    echo = Echo.remote()
    point = {"concurrency": 1, "output_tok_s": 20.0, "requests": [{"ttft": 0.1, "e2e": 0.5}] * 16}
    ray.get([noop.remote() for _ in range(10)] + [echo.call.remote(point)])  # warm workers
    t = time.perf_counter()
    for _ in range(n):
        ray.get(noop.remote())
    task_ms = (time.perf_counter() - t) / n * 1e3
    t = time.perf_counter()
    for _ in range(n):
        ray.get(echo.call.remote(point))
    actor_ms = (time.perf_counter() - t) / n * 1e3
    ray.shutdown()
    print(json.dumps({"noop_task_ms": task_ms, "actor_call_ms": actor_ms}))


def run_child(args: list[str], env: dict) -> tuple[float, dict]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"failed: {args}\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--order", default="ABBA", help="A = local executor, B = Ray with two lanes")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "RECIPE"), help=argparse.SUPPRESS)
    parser.add_argument("--round-trips", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    if args.round_trips:
        return round_trips()

    from quantkit import settings

    if settings.data_dir() is None:
        sys.exit("set QUANTKIT_DATA_DIR (../shared/data) for the offline arc_easy items")
    work = Path(tempfile.mkdtemp(prefix="qk-ray-bench-", dir="/tmp"))
    try:
        recipe = work / "matrix.yaml"
        recipe.write_text(RECIPE.format(model=tiny_model(work / "tiny")))
        (work / "token").write_text(secrets.token_hex(32))
        base = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(work / "token"),
                "RAY_USAGE_STATS_ENABLED": "0", "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
        base.pop("RAY_ADDRESS", None)
        results: dict[str, list[tuple[float, dict]]] = {"local": [], "ray": []}
        for i, letter in enumerate(args.order):
            kind = {"A": "local", "B": "ray"}[letter]
            home = work / f"home-{i}-{kind}"
            env = {**base, "QUANTKIT_HOME": str(home), "QUANTKIT_MODELS_DIR": str(home / "models")}
            load = os.getloadavg()[0]
            wall, figures = run_child(["--child", kind, str(recipe)], env)
            results[kind].append((wall, figures))
            extra = ""
            if kind == "ray":
                extra = (f"; Ray start {figures['connect_s']:.1f} s; overhead per lane task "
                         + ", ".join(f"{k} {v:.1f} s" for k, v in figures["task_overhead_s"].items()))
            print(f"run {i + 1} {kind:5s}: {wall:6.1f} s whole process, {figures['pipeline_s']:6.1f} s pipeline "
                  f"(load average {load:.1f} before){extra}", flush=True)
        _, trips = run_child(["--round-trips"], base)
        print()
        med = {k: statistics.median(w for w, _ in v) for k, v in results.items() if v}
        for kind, value in med.items():
            print(f"matrix wall time, {kind:5s}: median {value:.1f} s over {len(results[kind])} run(s)")
        if len(med) == 2:
            print(f"ray / local: {med['ray'] / med['local']:.2f} (two lanes on {os.cpu_count()} CPU cores)")
        overheads = [v for _, f in results["ray"] for v in f["task_overhead_s"].values()]
        if overheads:
            print(f"Ray overhead per lane task: median {statistics.median(overheads):.1f} s "
                  f"(min {min(overheads):.1f}, max {max(overheads):.1f}; worker start and imports included); "
                  f"local Ray start median {statistics.median(f['connect_s'] for _, f in results['ray']):.1f} s")
        print(f"warm round trips: no-op task {trips['noop_task_ms']:.2f} ms, store-actor call "
              f"{trips['actor_call_ms']:.2f} ms (paid once per bench point and record change)")
        print(f"load average now: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
