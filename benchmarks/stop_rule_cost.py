"""What one check of a windowed point's stop rule costs the load generator's event loop.

On one H200 (2026-12-03) every quantkit steady-state point's first attempt was called client-limited:
event-loop lag p99 77-100 ms while the client used 27-46% of a core, at 28-58 req/s x 256 tokens,
and each was measured again with 2 workers (a whole point of GPU time each). With one worker the
stop rule runs on the sending loop once a second, and it was handed every finished request
converted again from its raw reads (TTFT/ITL from 256 read times each): O(requests finished so far)
per check, growing all point long. This prints, for N finished requests of T tokens each:
- `full`: converting all N again (what one check did before),
- `incremental`: the conversion one check does now (the requests finished in the last second),
- `rule`: WindowStop itself (the verdict over the window, once past min_s),
and the loop's worst stall while checks run once a second: the old check (all N converted, the
rule on the loop: the reference, measured in the same run), the incremental conversion with the
rule still on the loop, and the check as `stop_watch` runs it now (the rule in a thread).

usage: python benchmarks/stop_rule_cost.py [--tokens 256] [--rate 40] [--sizes 500,1000,2000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from array import array

from quantkit.measure.loadgen.client import Raw
from quantkit.measure.loadgen.generator import Converted, to_result
from quantkit.measure.stats.slo import parse_slo
from quantkit.measure.loadgen.watchers import stop_watch
from quantkit.measure.stats.window import WindowSettings, WindowStop


def raws(n: int, tokens: int, rate: float, seed: int = 0) -> list[Raw]:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        ttft = rng.uniform(0.05, 0.4)
        gaps = [rng.uniform(0.01, 0.03) for _ in range(tokens - 1)]
        times = array("d", [t + ttft])
        for g in gaps:
            times.append(times[-1] + g)
        out.append(Raw(index=i, start=t, status_ok=True, read_times=times, read_chunks=array("i", [1] * tokens),
                       chunks=tokens, text_chunks=tokens, text_bytes=4 * tokens, first_choice=t + ttft,
                       prompt_tokens=512, completion_tokens=tokens, sent=True))
    return out


def ms(f, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


async def worst_stall(check, seconds: float = 3.0) -> float:
    """The loop's longest gap between 1-ms ticks while `check` runs once a second."""
    worst, stop = 0.0, asyncio.Event()

    async def ticker():
        nonlocal worst
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst, last = max(worst, now - last - 0.001), now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(seconds) if check is None else await check(seconds)
    stop.set()
    await task
    return worst * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rate", type=float, default=40.0)
    ap.add_argument("--sizes", default="500,1000,2000,5000")
    args = ap.parse_args()
    slo = parse_slo("ttft_p95=1,tpot_p95=50ms")
    settings = WindowSettings(warmup_s=5, min_s=5, max_s=600, min_requests=10_000)  # never decides: always runs
    print(f"{args.tokens} tokens per request, {args.rate:g} req/s; ms per stop-rule check")
    print(f"{'N':>6} {'full':>8} {'increm.':>8} {'rule':>8} | stall: {'old':>7} {'increm.':>8} {'now':>7} "
          f"{'old/now':>8}")
    for n in (int(s) for s in args.sizes.split(",")):
        done = raws(n, args.tokens, args.rate)
        t0 = done[0].start
        per_second = done[-int(args.rate):]
        full = ms(lambda: [to_result(r, t0) for r in done])
        incremental = ms(lambda: [to_result(r, t0) for r in per_second])
        results = [to_result(r, t0) for r in done]
        elapsed = results[-1].start_s + 1
        rule = ms(lambda: WindowStop(slo, settings)(results, elapsed))

        async def on_loop(seconds: float) -> None:  # the reference: the old check, on the loop
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                await asyncio.sleep(1.0)
                WindowStop(slo, settings)([to_result(r, t0) for r in done], elapsed)

        async def incremental_on_loop(seconds: float) -> None:
            end = time.perf_counter() + seconds
            converted = Converted(done, t0)
            converted()
            while time.perf_counter() < end:
                await asyncio.sleep(1.0)
                WindowStop(slo, settings)(converted(), elapsed)

        async def threaded(seconds: float) -> None:  # the check as stop_watch runs it now
            converted = Converted(done, t0)
            converted()  # the earlier checks' conversions, as in a running point
            halted: list[str] = []
            task = asyncio.create_task(stop_watch(lambda f, e: WindowStop(slo, settings)(f, elapsed),
                                                  converted, time.perf_counter(), lambda: None, halted))
            await asyncio.sleep(seconds)
            task.cancel()

        before = asyncio.run(worst_stall(on_loop))
        middle = asyncio.run(worst_stall(incremental_on_loop))
        after = asyncio.run(worst_stall(threaded))
        print(f"{n:>6} {full:>8.1f} {incremental:>8.1f} {rule:>8.1f} |        {before:>7.1f} {middle:>8.1f} "
              f"{after:>7.1f} {before / max(after, 1e-9):>8.1f}")


if __name__ == "__main__":
    main()
