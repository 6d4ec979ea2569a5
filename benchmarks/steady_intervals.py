"""How sure the steady-state agreement is: 95% intervals for each client's p95 and for their ratio,
from the requests `steady_agreement.py --samples` kept, and a verdict per ratio against a target.

One run per client per rate leaves two kinds of noise: the p95 of N requests (order statistics),
and the run's own arrival bursts (a Poisson burst raises the TTFT of every request near it, so
nearby requests are not independent). A moving-block bootstrap over send time (blocks of `--block`
seconds, each client resampled on its own) covers both, within a run. It does not cover what
differs between runs of one client (a repeat would): the intervals are a lower bound on the noise.

Verdict per ratio quantkit / vLLM, target within +-`--target` (10%): pass when the whole interval
is inside [1 - t, 1 + t], fail when it lies wholly outside it, else inconclusive.

The two clients draw their own Poisson arrivals, so at one nominal rate they offer different loads
(on the H200, 2026-12-03: 29.99 against 32.31 req/s at "32"), and near capacity a p95 moves far
more than 10% with a few % of load. So the ratio is also given at equal realized load: quantkit's
p95 interpolated log-log, between its two points that bracket vLLM's realized offered rate (from
the run's JSON beside the samples file, `steady-X.json` for `steady-X-samples.json`).

usage: python benchmarks/steady_intervals.py SAMPLES.json [SAMPLES.json ...] [--block 3] [--target 0.1]
       [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from quantkit.measure.stats.point import percentile
from quantkit.measure.stats.samples import decode


def p95(values: list[float]) -> float:
    return percentile(values, 95)  # linear interpolation, as vllm bench serve takes it


def blocks(rows, metric: str, block_s: float) -> list[list[float]]:
    out: dict[int, list[float]] = {}
    for r in rows:
        v = getattr(r, metric)
        if r.ok and v is not None:
            out.setdefault(int(r.start_s // block_s), []).append(v)
    return [out[k] for k in sorted(out)]


def resample(bs: list[list[float]], rng: random.Random) -> list[float]:
    return [v for _ in bs for v in rng.choice(bs)]


def interval(values: list[float]) -> tuple[float, float]:
    s = sorted(values)
    return s[int(0.025 * (len(s) - 1))], s[int(0.975 * (len(s) - 1))]


def at_load(curve: list[tuple[float, float]], x: float) -> float | None:
    """The p95 at offered load x, log-log between the two points of `curve` that bracket it."""
    import math

    curve = sorted(curve)
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if x0 <= x <= x1 and x0 < x1 and y0 > 0 and y1 > 0:
            return math.exp(math.log(y0) + math.log(y1 / y0) * math.log(x / x0) / math.log(x1 / x0))
    return None


def realized(path: Path) -> dict[tuple[str, float], dict]:
    """(client, rate) -> that point's figures from the run's JSON beside the samples, if there."""
    run = path.with_name(path.name.replace("-samples", ""))
    if run == path or not run.exists():
        return {}
    out = {}
    for point in json.loads(run.read_text())["points"]:
        for client in ("quantkit", "vllm"):
            if point.get(client):
                out[(client, float(point["rate"]))] = point[client]
    return out


def analyse(path: Path, block_s: float, target: float, draws: int, seed: int) -> list[dict]:
    points = json.loads(path.read_text())["points"]
    figures = realized(path)
    rates = sorted({float(k.split("-", 1)[1]) for k in points})
    rng = random.Random(seed)
    out = []
    for rate in rates:
        q, v = points.get(f"quantkit-{rate:g}"), points.get(f"vllm-{rate:g}")
        if not q or not v:
            continue
        qw = [r for r, where in decode(q) if where == "window"]
        vw = [r for r, where in decode(v) if where == "window"]
        row = {"rate": rate, "n_quantkit": len(qw), "n_vllm": len(vw)}
        for metric in ("ttft", "tpot"):
            qb, vb = blocks(qw, metric, block_s), blocks(vw, metric, block_s)
            qs = [p95(resample(qb, rng)) for _ in range(draws)]
            vs = [p95(resample(vb, rng)) for _ in range(draws)]
            ratios = [a / b for a, b in zip(qs, vs)]
            lo, hi = interval(ratios)
            q95, v95 = p95([x for b in qb for x in b]), p95([x for b in vb for x in b])
            verdict = ("pass" if 1 - target <= lo and hi <= 1 + target else
                       "fail" if hi < 1 - target or lo > 1 + target else "inconclusive")
            row[metric] = {"quantkit_p95": q95, "quantkit_ci": interval(qs), "vllm_p95": v95, "vllm_ci": interval(vs),
                           "ratio": q95 / v95, "ratio_ci": (lo, hi), "verdict": verdict}
        out.append(row)
    for metric in ("ttft", "tpot"):  # quantkit's curve against its realized loads, read at vLLM's
        curve = [(f["offered_req_s"], f[f"{metric}_p95"]) for (c, _), f in figures.items()
                 if c == "quantkit" and f.get("offered_req_s") and f.get(f"{metric}_p95")]
        for row in out:
            v = figures.get(("vllm", row["rate"]))
            if not v or not v.get("offered_req_s"):
                continue
            q = at_load(curve, v["offered_req_s"])
            row[metric]["vllm_offered"] = v["offered_req_s"]
            row[metric]["quantkit_offered"] = (figures.get(("quantkit", row["rate"])) or {}).get("offered_req_s")
            row[metric]["ratio_equal_load"] = q / v[f"{metric}_p95"] if q else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("samples", nargs="+", type=Path)
    ap.add_argument("--block", type=float, default=3.0, help="seconds of send time per bootstrap block")
    ap.add_argument("--target", type=float, default=0.10)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    everything = {}
    for path in args.samples:
        rows = analyse(path, args.block, args.target, args.draws, args.seed)
        everything[path.name] = rows
        print(f"{path.name}: p95 ms [95% block-bootstrap interval, {args.block:g}-s blocks]; ratio quantkit/vLLM, "
              f"target +-{args.target:.0%}")
        for row in rows:
            for metric in ("ttft", "tpot"):
                m = row[metric]
                print(f"  {row['rate']:>5g} {metric}: quantkit {m['quantkit_p95'] * 1e3:7.1f} "
                      f"[{m['quantkit_ci'][0] * 1e3:.1f}, {m['quantkit_ci'][1] * 1e3:.1f}]  vLLM {m['vllm_p95'] * 1e3:7.1f} "
                      f"[{m['vllm_ci'][0] * 1e3:.1f}, {m['vllm_ci'][1] * 1e3:.1f}]  ratio {m['ratio']:.3f} "
                      f"[{m['ratio_ci'][0]:.3f}, {m['ratio_ci'][1]:.3f}] {m['verdict']}", end="")
                if m.get("vllm_offered"):
                    eq = m.get("ratio_equal_load")
                    print(f"; offered {m['quantkit_offered']:.2f} / {m['vllm_offered']:.2f} req/s, ratio at vLLM's load "
                          + (f"{eq:.3f}" if eq else "- (outside quantkit's range)"), end="")
                print()
    if args.json:
        args.json.write_text(json.dumps({"block_s": args.block, "target": args.target, "draws": args.draws,
                                         "results": everything}, indent=1))


if __name__ == "__main__":
    main()
