"""quantkit's steady-state Poisson points against `vllm bench serve --request-rate`, rate by rate, one server.

Issue 30, item 1. For each offered rate of `--rates`, on ONE vLLM server (started here, or given by
`--url`), the two clients one after the other, alternating which goes first (rate 1: quantkit then
vLLM; rate 2: vLLM then quantkit; ...), the same workload (random tokens, `--input-len` in /
`--output-len` out, ignore_eos, a fresh seed per point so no prompt hits the prefix cache twice):

- quantkit: its own steady-state Poisson point, `run_capacity` with the search confined to that one
  rate (start = max = the rate): a time window opened after `--warmup` s of arrivals, closed at the
  cap (`--duration` - `--warmup` s later: min_s = max_s), judged at the machine's confidence, with
  its verdict (pass / fail / undecided / saturated) and its client_limited flag;
- vLLM: `vllm bench serve --request-rate R --num-prompts R x duration --save-detailed`, the requests
  sent in the first `--warmup` s dropped (by their send times where the result has them, else by
  arrival order), TPOT per request as vLLM defines it ((E2E - TTFT) / (tokens - 1)).

Both arrive for the same time (quantkit's window, stretched the way quantkit stretches it when a rate
is too low for the requests a pass needs, sets the length of vLLM's arrivals too). Each point starts
on an idle server (/metrics: nothing running or waiting). Per rate and client: achieved rate (the
window's completions over its span, the same formula for both: quantkit.measure.stats.window.figures),
TTFT and TPOT p50/p95, requests measured, the SLO by point estimate (binding margin
max(stat / limit) <= 1) and quantkit's verdict. Per client: the capacity where the binding margin
crosses 1, log-log between the two bracketing rates, and the highest rate met; the ratio
quantkit / vLLM (target: within 5%), and per rate the p95 ratios (target: within 10%).

    .venv/bin/python benchmarks/steady_agreement.py [MODEL_DIR] --rates 2,3,4 [--url URL]
        [--slo ttft_p95=2,tpot_p95=150ms] [--input-len 32] [--output-len 16] [--duration 15]
        [--warmup 5] [--eager] [--serve-arg k=v ...] [--max-model-len N|default]
        [--label NAME] [--json OUT.json] [--samples OUT-samples.json] [--deadline EPOCH]

Without MODEL_DIR: the demo model (smollm2-135m). The JSON is rewritten after every point, so an
interrupted run keeps what it measured. A script, not a test: its figures go in the issue note.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

from quantkit import models
from quantkit.machine import has_gpu
from quantkit.measure.capacity import profiles
from quantkit.measure.stats import samples
from quantkit.measure.capacity.live import CapacitySettings, run_capacity
from quantkit.measure.stats.confidence import requests_needed
from quantkit.measure.observe.metrics import parse as parse_metrics
from quantkit.measure.stats.point import RequestResult, WindowSettings, percentile
from quantkit.measure.stats.slo import Slo, parse_slo
from quantkit.measure.stats.window import figures, in_flight_series, saturation
from quantkit.serve.config import ServeConfig
from quantkit.serve.env import serve_env, vllm_command
from quantkit.serve.server import RemoteServer, VLLMServer

CAPACITY_TARGET = 0.05  # |quantkit / vLLM - 1| for the capacities
P95_TARGET = 0.10  # ... for each rate's TTFT and TPOT p95


def log(msg: str) -> None:
    print(f"{datetime.now():%H:%M:%S} {msg}", flush=True)


# --------------------------------------------------------------------------------------------
# Shared figures


def stat(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def margins(slo: Slo, ttft_p: dict, tpot_p: dict) -> dict[str, float | None]:
    """value / limit per SLO term (only ttft/tpot percentile terms are read here), and the binding one."""
    out: dict[str, float | None] = {}
    for t in slo.terms:
        src = {"ttft": ttft_p, "tpot": tpot_p}.get(t.metric)
        value = src.get(t.stat) if src else None
        out[t.key] = None if value is None else value / t.limit_s
    known = [v for v in out.values() if v is not None]
    out["binding"] = max(known) if known and len(known) == len(slo.terms) else None
    return out


def wait_idle(url: str, timeout: float = 90.0) -> float:
    """Seconds until /metrics shows nothing running or waiting (or the timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            s = parse_metrics(httpx.get(url + "/metrics", timeout=5.0).text)
            if s.gauges.get("running", 0) + s.gauges.get("waiting", 0) == 0:
                return time.monotonic() - t0
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(1.0)
    log(f"  server not idle after {timeout:g} s; measuring anyway")
    return time.monotonic() - t0


# --------------------------------------------------------------------------------------------
# quantkit: one steady-state Poisson point through run_capacity


def quantkit_point(server, model_dir: Path, slo: Slo, rate: float, window: WindowSettings, args, seed: int,
                   out_dir: Path, keep: dict) -> dict:
    settings = CapacitySettings(profile="poisson", start=rate, max=rate, input_len=args.input_len,
                                output_len=args.output_len, seed=seed, window=window)
    packed: list[str] = []
    t0 = time.monotonic()
    result = run_capacity(server, model_dir, slo, settings, out_dir=out_dir,
                          on_point=lambda p: packed.append(p.samples or ""), label=f"quantkit {rate:g}")
    wall = time.monotonic() - t0
    p = result.points[0]
    w = p.window
    ttft = {"p50": p.ttft.p50, "p95": p.ttft.p95} if p.ttft else {}
    tpot = {"p50": p.tpot.p50, "p95": p.tpot.p95} if p.tpot else {}
    if packed and packed[0]:
        keep[f"quantkit-{rate:g}"] = packed[0]
    c = p.client
    return {
        "client": "quantkit", "rate": rate, "seed": seed, "wall_s": round(wall, 1),
        "offered_req_s": w.offered_req_s if w else None, "achieved_req_s": w.achieved_req_s if w else p.req_s,
        "ttft_p50": ttft.get("p50"), "ttft_p95": ttft.get("p95"), "tpot_p50": tpot.get("p50"),
        "tpot_p95": tpot.get("p95"), "e2e_p50": p.e2e.p50 if p.e2e else None,
        "output_tok_s": p.output_tok_s, "n": w.measured if w else p.successes, "failures": p.failures,
        "margins": margins(slo, ttft, tpot),
        "verdict": w.verdict if w else None, "verdict_reasons": (w.reasons if w else [])[:3],
        "slo_met_verdict": bool(p.slo_met), "client_limited": p.client_limited,
        "client_limited_reason": p.client_limited_reason,
        "client_stats": c.model_dump(mode="json") if c else None,
        "window": w.model_dump(mode="json", exclude={"reasons"}) if w else None,
        "mean_prompt_tokens": p.prompt_tokens / p.successes if p.successes else None,
        "search": result.search.reason if result.search else None, "summary": result.summary(),
        "server_metrics": {k: v for k, v in (p.server_metrics or {}).items()
                           if k in ("running", "waiting", "kv_usage", "deltas", "prefix_cache_hit_rate",
                                    "tokens_per_step")},
    }


# --------------------------------------------------------------------------------------------
# vLLM: `vllm bench serve --request-rate`


def vllm_point(server, model_dir: Path, slo: Slo, rate: float, span_s: float, args, seed: int, out_dir: Path,
               keep: dict) -> dict:
    n = max(20, round(rate * span_s))
    name = f"vllm-{args.label}-{rate:g}.json"
    cmd = [*vllm_command(), "bench", "serve", "--backend", "vllm", "--base-url", server.url,
           "--model", str(model_dir), "--served-model-name", server.model_name, "--tokenizer", str(model_dir),
           "--dataset-name", "random", "--random-input-len", str(args.input_len),
           "--random-output-len", str(args.output_len), "--ignore-eos", "--num-prompts", str(n),
           "--request-rate", f"{rate:g}", "--seed", str(seed), "--disable-tqdm",
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
           "--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename", name]
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=serve_env({"PYTHONUNBUFFERED": "1"}), capture_output=True, text=True)
    wall = time.monotonic() - t0
    (out_dir / f"{name[:-5]}.log").write_text(done.stdout[-20000:] + "\n--- stderr\n" + done.stderr[-20000:])
    if done.returncode:
        raise RuntimeError(f"vllm bench serve failed (rc {done.returncode}):\n" + (done.stdout + done.stderr)[-3000:])
    data = json.loads((out_dir / name).read_text())
    data.pop("generated_texts", None)  # large, and never needed
    # the file kept without the texts and the gaps (megabytes; `--samples` keeps each request's ITL summary)
    (out_dir / name).write_text(json.dumps({k: v for k, v in data.items() if k != "itls"}))
    ttfts, itls = data["ttfts"], data["itls"]
    outs = data.get("output_lens") or [args.output_len] * len(ttfts)
    ins = data.get("input_lens") or []
    errors = data.get("errors") or [""] * len(ttfts)
    starts = data.get("start_times")
    lats = data.get("latencies")
    have_times = bool(starts) and len(starts) == len(ttfts)
    base = min(starts) if have_times else 0.0
    results: list[RequestResult] = []
    for i, ttft in enumerate(ttfts):
        ok = not errors[i] and outs[i] > 0
        itl = itls[i] or []
        e2e = lats[i] if lats else (ttft + sum(itl) if ok else None)
        tpot = (e2e - ttft) / (outs[i] - 1) if ok and outs[i] > 1 and e2e is not None else None
        results.append(RequestResult(
            ok=ok, error=errors[i] or None, index=i,
            start_s=(starts[i] - base) if have_times else i / rate,  # no send times: arrival order at the mean gap
            ttft=ttft if ok else None, itl=itl, tpot=tpot, e2e=e2e if ok else None,
            prompt_tokens=ins[i] if ins else None, completion_tokens=outs[i]))
    if have_times:
        measured = [r for r in results if r.start_s >= args.warmup]
    else:
        measured = results[int(rate * args.warmup):]
    good = [r for r in measured if r.ok]
    ttft = {"p50": stat([r.ttft for r in good], 50), "p95": stat([r.ttft for r in good], 95)}
    tpot_v = [r.tpot for r in good if r.tpot is not None]
    tpot = {"p50": stat(tpot_v, 50), "p95": stat(tpot_v, 95)}
    fig = figures(results, measured) if have_times else {}
    # sustained or not by quantkit's own rule (requests in flight growing between the window's
    # halves), applied to vLLM's client's send and end times: the check does not rest on quantkit's timing
    saturated = None
    if have_times and measured:
        t0, t1 = measured[0].start_s, measured[-1].start_s
        ends = [r.start_s + r.e2e if r.ok and r.e2e is not None else math.inf for r in measured]
        saturated, _ = saturation(in_flight_series([r.start_s for r in measured], ends, t0, t1),
                                  len(measured), t1 - t0)
    keep[f"vllm-{rate:g}"] = samples.encode(results, {r.index for r in measured}, args.warmup)
    margin = margins(slo, ttft, tpot)
    binding = margin.get("binding")  # None: a bound without a figure, which meets nothing
    own = {k: data.get(k) for k in ("duration", "completed", "failed", "request_throughput", "output_throughput",
                                    "p50_ttft_ms", "p95_ttft_ms", "p50_tpot_ms", "p95_tpot_ms", "p95_itl_ms",
                                    "p99_itl_ms", "max_concurrent_requests")}
    return {
        "client": "vllm", "rate": rate, "seed": seed, "wall_s": round(wall, 1), "num_prompts": n,
        "offered_req_s": fig.get("offered_req_s"),
        "achieved_req_s": fig.get("achieved_req_s", data.get("request_throughput")),
        "achieved_from": "window" if fig else "vllm request_throughput (whole run: no send times)",
        "ttft_p50": ttft["p50"], "ttft_p95": ttft["p95"], "tpot_p50": tpot["p50"], "tpot_p95": tpot["p95"],
        "e2e_p50": stat([r.e2e for r in good if r.e2e is not None], 50),
        "output_tok_s": fig.get("output_tok_s"), "in_flight_mean": fig.get("in_flight_mean"),
        "n": len(good), "failures": sum(1 for r in results if not r.ok), "dropped_warmup": len(results) - len(measured),
        "send_times": have_times, "span_s": (results[-1].start_s if have_times else None),
        "mean_prompt_tokens": (sum(ins) / len(ins)) if ins else None,
        "margins": margin, "vllm_own": own, "saturated": saturated,
        "verdict": "saturated" if saturated else "pass" if binding is not None and binding <= 1 else "fail",
        "_results": results,  # for the same-span figures below; not written
    }


def same_span(v: dict, q: dict, slo: Slo) -> dict | None:
    """vLLM's requests sent within quantkit's window span (its start and end send times), for a like-for-like
    look at the tail: vLLM keeps its last arrivals, which decode while the load drains."""
    w = q.get("window") or {}
    res = v.get("_results")
    if not res or not v.get("send_times") or not w.get("end_s"):
        return None
    sel = [r for r in res if r.ok and w["start_s"] <= r.start_s <= w["end_s"]]
    if len(sel) < 10:
        return None
    ttft = {"p50": stat([r.ttft for r in sel], 50), "p95": stat([r.ttft for r in sel], 95)}
    tp = [r.tpot for r in sel if r.tpot is not None]
    tpot = {"p50": stat(tp, 50), "p95": stat(tp, 95)}
    return {"n": len(sel), "ttft_p95": ttft["p95"], "tpot_p95": tpot["p95"], "ttft_p50": ttft["p50"],
            "tpot_p50": tpot["p50"], "margins": margins(slo, ttft, tpot)}


# --------------------------------------------------------------------------------------------
# Capacity from the points


def capacity(points: list[dict]) -> dict:
    """Where the binding margin crosses 1, log-log between the two rates that bracket it (the lowest
    break above the highest contiguous met rate); the highest rate met too."""
    pts = sorted((p["rate"], p["margins"]["binding"]) for p in points if p and p["margins"].get("binding"))
    met = [r for r, m in pts if m <= 1.0]
    out: dict = {"highest_met": max(met) if met else None, "capacity": None, "how": None, "bracket": None}
    for (r1, m1), (r2, m2) in zip(pts, pts[1:]):
        if m1 <= 1.0 < m2:
            x = math.log(r1) + (0 - math.log(m1)) * (math.log(r2) - math.log(r1)) / (math.log(m2) - math.log(m1))
            out.update(capacity=math.exp(x), how="interpolated", bracket=[r1, r2])
            return out
    # no bracket: no capacity; an extrapolation from the two rates nearest the crossing is kept
    # apart, and only where it lands within 25% of the rates measured
    out["how"] = ("not bracketed: met at every rate" if pts and all(m <= 1 for _, m in pts) else
                  "not bracketed: broke at every rate" if pts else "no points")
    if len(pts) >= 2:
        (r1, m1), (r2, m2) = pts[-2:] if pts[-1][1] <= 1.0 else pts[:2]
        if m2 > m1 > 0:
            x = math.exp(math.log(r1) - math.log(m1) * (math.log(r2) - math.log(r1)) / (math.log(m2) - math.log(m1)))
            if pts[0][0] / 1.25 <= x <= pts[-1][0] * 1.25:
                out["extrapolated"] = x
    return out


def ratio(a, b):
    return a / b if a is not None and b else None


def summarize(run: dict) -> None:
    pairs = run["points"]
    caps = {c: capacity([p.get(c) for p in pairs]) for c in ("quantkit", "vllm")}
    caps["ratio"] = ratio(caps["quantkit"]["capacity"], caps["vllm"]["capacity"])
    caps["highest_met_ratio"] = ratio(caps["quantkit"]["highest_met"], caps["vllm"]["highest_met"])
    caps["within_target"] = caps["ratio"] is not None and abs(caps["ratio"] - 1) <= CAPACITY_TARGET
    run["capacity"] = caps
    for p in pairs:
        q, v = p.get("quantkit"), p.get("vllm")
        if not q or not v:
            continue
        r = {k: ratio(q.get(k), v.get(k)) for k in ("ttft_p95", "tpot_p95", "ttft_p50", "tpot_p50", "achieved_req_s")}
        r["p95_within_target"] = all(x is not None and abs(x - 1) <= P95_TARGET for x in (r["ttft_p95"], r["tpot_p95"]))
        p["ratios"] = r


def ms(x):
    return "-" if x is None else f"{1000 * x:.1f}"


def table(run: dict) -> str:
    slo = run["slo"]
    lines = [f"{run['label']}: SLO {slo}; {run['workload']['input_len']} in / {run['workload']['output_len']} out; "
             f"{run['settings']['duration_s']:g} s of arrivals per point, first {run['settings']['warmup_s']:g} s dropped",
             f"{'rate':>6} {'client':<8} {'first':<5} {'offered':>7} {'achieved':>8} {'n':>5} {'TTFT p50':>8} {'p95':>7} "
             f"{'TPOT p50':>8} {'p95':>6} {'margin':>6}  SLO   verdict / flags"]
    for p in run["points"]:
        for c in ("quantkit", "vllm"):
            x = p.get(c)
            if not x:
                continue
            m = x["margins"].get("binding")
            flags = ""
            if c == "quantkit":
                flags = f"{x['verdict']}" + (" CLIENT-LIMITED" if x["client_limited"] else "")
            elif x.get("verdict"):
                flags = x["verdict"]
            lines.append(f"{p['rate']:>6g} {c:<8} {'yes' if p['order'][0] == c else '':<5} "
                         f"{(x['offered_req_s'] or 0):>7.2f} {(x['achieved_req_s'] or 0):>8.2f} {x['n']:>5} {ms(x['ttft_p50']):>8} {ms(x['ttft_p95']):>7} "
                         f"{ms(x['tpot_p50']):>8} {ms(x['tpot_p95']):>6} {m if m is None else round(m, 3)!s:>6}  "
                         f"{'met' if m is not None and m <= 1 else 'broke':<5} {flags}")
        if p.get("ratios"):
            r = p["ratios"]
            lines.append(f"{'':>6} ratio qk/vllm: TTFT p95 {r['ttft_p95']:.3f}, TPOT p95 {r['tpot_p95']:.3f}, "
                         f"achieved {r['achieved_req_s']:.3f} -> {'within' if r['p95_within_target'] else 'OUTSIDE'} 10%")
    c = run.get("capacity") or {}
    for k in ("quantkit", "vllm"):
        x = c.get(k) or {}
        cap = x.get("capacity")
        lines.append(f"capacity {k}: {'-' if cap is None else f'{cap:.2f}'} req/s ({x.get('how')}, bracket "
                     f"{x.get('bracket')}), highest met {x.get('highest_met')}")
    if c.get("ratio") is not None:
        lines.append(f"capacity ratio quantkit/vllm {c['ratio']:.3f} -> {'within' if c['within_target'] else 'OUTSIDE'} 5%")
    return "\n".join(lines)


def write(run: dict, path: Path | None, keep: dict, samples_path: Path | None) -> None:
    if path:
        clean = json.loads(json.dumps(run, default=lambda o: None))  # drops the per-request objects
        for p in clean["points"]:
            for c in ("quantkit", "vllm"):
                if p.get(c):
                    p[c].pop("_results", None)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(clean, indent=1))
        tmp.replace(path)
    if samples_path:
        samples_path.write_text(json.dumps({"format": "quantkit.measure.stats.samples (decode() gives the rows back)",
                                            "points": keep}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", nargs="?", default=None)
    ap.add_argument("--url", default=None, help="a running server (else one is started here)")
    ap.add_argument("--rates", required=True, help="offered Poisson rates, req/s, in the order run: 2,3,4")
    ap.add_argument("--slo", default="ttft_p95=2,tpot_p95=150ms")
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--duration", type=float, default=15.0, help="seconds of arrivals per point (warm-up included)")
    ap.add_argument("--warmup", type=float, default=5.0, help="first seconds of arrivals left out (both clients)")
    ap.add_argument("--first", choices=("quantkit", "vllm"), default="quantkit", help="who goes first at rate 1")
    ap.add_argument("--clients", default="quantkit,vllm",
                    help="which clients measure each rate: 'vllm' alone checks a bracket quantkit already measured")
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--max-model-len", default="2048", help="N, or 'default' for vLLM's own")
    ap.add_argument("--serve-arg", action="append", default=[])
    ap.add_argument("--startup-timeout", type=float, default=900.0)
    ap.add_argument("--label", default="run")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--samples", type=Path, default=None, help="every request of every point (packed)")
    ap.add_argument("--results-dir", type=Path, default=None, help="vLLM's result files, quantkit's capacity files")
    ap.add_argument("--deadline", type=float, default=None, help="epoch s: skip a rate that cannot finish by then")
    ap.add_argument("--seed", type=int, default=1000)
    args = ap.parse_args()
    clients = {c.strip() for c in args.clients.split(",") if c.strip()}
    if not clients or clients - {"quantkit", "vllm"}:  # before a server is started for nothing
        sys.exit(f"error: --clients {args.clients!r}: name quantkit, vllm or both")
    model_dir = Path(args.model_dir).expanduser().absolute() if args.model_dir else models.resolve("smollm2-135m").path
    slo = parse_slo(args.slo)
    rates = [float(x) for x in args.rates.split(",") if x.strip()]
    base = profiles.default_window(gpu=has_gpu())
    window = WindowSettings(warmup_s=args.warmup, min_s=args.duration - args.warmup, max_s=args.duration - args.warmup,
                            min_requests=base.min_requests, confidence=base.confidence)
    needed = requests_needed(slo, window.confidence)
    out_dir = args.results_dir or Path(tempfile.mkdtemp(prefix="steady-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    mml = None if args.max_model_len == "default" else int(args.max_model_len)
    config = ServeConfig.from_options(args.serve_arg, defaults={"max_model_len": mml, "enforce_eager": args.eager})
    if mml is None:
        config = config.model_copy(update={"max_model_len": None})
    keep: dict[str, str] = {}
    run: dict = {
        "kind": "quantkit.steady-agreement", "schema_version": 1,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "label": args.label,
        "model_dir": str(model_dir), "slo": str(slo),
        "workload": {"input_len": args.input_len, "output_len": args.output_len, "ignore_eos": True,
                     "dataset": "random tokens"},
        "settings": {"duration_s": args.duration, "warmup_s": args.warmup, "window": window.model_dump(),
                     "requests_needed": needed, "rates": rates, "first": args.first},
        "argv": sys.argv, "points": [],
    }
    t_start = time.monotonic()
    if args.url:
        server_cm = RemoteServer(args.url, checkpoint=model_dir)
    else:
        server_cm = VLLMServer(model_dir, config, startup_timeout=args.startup_timeout,
                               log_path=out_dir / f"serve-{args.label}.log")
    log(f"{args.label}: server {'at ' + args.url if args.url else 'starting: vllm serve ' + ' '.join(config.to_args())}")
    with server_cm as server:
        info = server.info.model_dump(mode="json") if server.info else {}
        run["server"] = {k: info.get(k) for k in ("url", "model_name", "vllm_version", "args", "serve_config",
                                                    "startup_s", "kv_cache_tokens", "max_concurrency",
                                                    "quant_lines", "weights_gib", "remote") if k in info}
        log(f"{args.label}: server ready ({info.get('startup_s')} s); KV cache {info.get('kv_cache_tokens')} tokens")
        write(run, args.json, keep, args.samples)
        order = [c for c in (["quantkit", "vllm"] if args.first == "quantkit" else ["vllm", "quantkit"]) if c in clients]
        for i, rate in enumerate(rates):
            w = profiles.stretched(window, needed, rate)
            span = w.warmup_s + w.max_s
            est = len(order) * span + 60 + (w.max_s / 3)
            if args.deadline and time.time() + est > args.deadline:
                log(f"{args.label} {rate:g} req/s: skipped ({args.deadline - time.time():.0f} s to the deadline, needs ~{est:.0f})")
                run.setdefault("skipped", []).append(rate)
                continue
            pair: dict = {"rate": rate, "order": list(order), "span_s": span,
                          "stretched": w.max_s != window.max_s}
            run["points"].append(pair)
            for client in order:
                idle = wait_idle(server.url)
                seed = args.seed + 10 * i + (0 if client == "quantkit" else 5)
                log(f"{args.label} {rate:g} req/s: {client} (idle after {idle:.0f} s; {span:g} s of arrivals)")
                if client == "quantkit":
                    pair["quantkit"] = quantkit_point(server, model_dir, slo, rate, window, args, seed, out_dir, keep)
                else:
                    pair["vllm"] = vllm_point(server, model_dir, slo, rate, span, args, seed, out_dir, keep)
                x = pair[client]
                log(f"  {client}: achieved {x['achieved_req_s'] or 0:.2f} req/s, TTFT p95 {ms(x['ttft_p95'])} ms, "
                    f"TPOT p95 {ms(x['tpot_p95'])} ms, n={x['n']}, margin {x['margins'].get('binding')}"
                    + (f", {x['verdict']}{' client-limited' if x['client_limited'] else ''}" if client == "quantkit" else "")
                    + f" ({x['wall_s']:.0f} s)")
                summarize(run)
                write(run, args.json, keep, args.samples)
            if pair.get("quantkit") and pair.get("vllm"):
                pair["vllm_same_span"] = same_span(pair["vllm"], pair["quantkit"], slo)
            order.reverse()
    summarize(run)
    run["wall_s"] = round(time.monotonic() - t_start, 1)
    write(run, args.json, keep, args.samples)
    print()
    print(table(run))


if __name__ == "__main__":
    main()
