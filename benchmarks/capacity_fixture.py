"""quantkit's capacity search against a continuous-batching engine whose capacity is known.

The engine (tests/fixtures/engine_sim.py: a decode batch whose steps slow as it grows, a prefill
budget per step) runs in real time behind an OpenAI-compatible API (engine_server.py). Its truths
come from simulating the same engine in virtual time, hundreds of seconds per load with the warm-up
dropped, without any of quantkit's code. For each profile this prints the truth, quantkit's
capacity bracket, their ratio and the time the search took:
- poisson: the highest Poisson rate whose steady state meets the SLO;
- concurrency: the highest closed-loop concurrency (streams staggered over one request) that does;
- burst: the highest wave size of prompts sent at once (two waves) that does: not a steady state,
  and quantkit must say `burst`.

    .venv/bin/python benchmarks/capacity_fixture.py [--profiles poisson,concurrency,burst] [--min-s 25]

A script, not a test (tests/integration/test_capacity_fixture.py checks the poisson and burst cases).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))

SLO = "ttft_p95=0.5,tpot_p95=25ms"
INPUT, OUTPUT = 256, 64


class FixedPrompts:
    """Prompts of exactly INPUT token ids (the engine counts them; their values do not matter)."""

    def prompts(self, n: int, stream: int):
        from quantkit.measure.loadgen.workload import Prompt

        return [Prompt(token_ids=[5 + (stream * 131 + i) % 997] * INPUT) for i in range(n)]


def truths(spec) -> dict[str, float]:
    import engine_sim as sim

    ttft, tpot = 0.5, 0.025
    return {"poisson": sim.truth_poisson(spec, INPUT, OUTPUT, ttft, tpot),
            "concurrency": sim.truth_concurrency(spec, INPUT, OUTPUT, ttft, tpot,
                                                 ramp_s=sim.request_s(spec, INPUT, OUTPUT)),
            "burst": sim.truth_burst(spec, INPUT, OUTPUT, ttft, tpot)}


def measure(profile: str, spec, min_s: float, max_s: float, tolerance: float):
    from engine_server import EngineServer

    from quantkit.measure.capacity.live import CapacitySettings, run_capacity
    from quantkit.measure.stats.point import WindowSettings
    from quantkit.measure.stats.slo import parse_slo
    from quantkit.serve.server import RemoteServer

    settings = CapacitySettings(profile=profile, input_len=INPUT, output_len=OUTPUT, tolerance=tolerance,
                                waves=2, min_requests=1,
                                window=WindowSettings(warmup_s=3, min_s=min_s, max_s=max_s, min_requests=100))
    with EngineServer(spec) as fixture, tempfile.TemporaryDirectory() as out:
        t0 = time.monotonic()
        result = run_capacity(RemoteServer(fixture.url), Path(out), parse_slo(SLO), settings,
                              prompts=FixedPrompts(), out_dir=Path(out))
        return result, time.monotonic() - t0, fixture.stats()


def main() -> None:
    from engine_sim import EngineSpec

    parser = argparse.ArgumentParser()
    parser.add_argument("--profiles", default="poisson,concurrency,burst")
    parser.add_argument("--min-s", type=float, default=25.0)
    parser.add_argument("--max-s", type=float, default=50.0)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    spec = EngineSpec()
    t0 = time.monotonic()
    truth = truths(spec)
    print(f"truths by simulation ({time.monotonic() - t0:.0f} s): " + ", ".join(f"{k} {v:.4g}" for k, v in truth.items()))
    rows = []
    for profile in args.profiles.split(","):
        result, took, stats = measure(profile, spec, args.min_s, args.max_s, args.tolerance)
        cap = result.capacity.load if result.capacity else None
        ceiling = result.search.ceiling if result.search else None
        ratio = cap / truth[profile] if cap else None
        rows.append((profile, truth[profile], cap, ceiling, ratio, took, result.points_spent, stats["late_steps"],
                     result.summary()))
    print(f"\nSLO {SLO}, {INPUT} in / {OUTPUT} out; window {args.min_s:g}-{args.max_s:g} s, tolerance {args.tolerance:g}")
    print(f"{'profile':<12} {'truth':>8} {'quantkit':>9} {'fails at':>9} {'ratio':>6} {'search s':>9} {'points':>6}  late steps")
    for profile, t, cap, ceiling, ratio, took, points, late, _ in rows:
        print(f"{profile:<12} {t:>8.4g} {cap if cap else '-':>9} {ceiling if ceiling else '-':>9} "
              f"{f'{ratio:.3f}' if ratio else '-':>6} {took:>9.0f} {points:>6}  {late}")
    for row in rows:
        print(f"  {row[0]}: {row[-1]}")


if __name__ == "__main__":
    main()
