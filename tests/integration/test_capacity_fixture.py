"""Capacity against a truth quantkit did not tune to: a continuous-batching engine on loopback
(tests/fixtures/engine_server.py) whose capacity under the SLO comes from simulating the same engine
in virtual time for hundreds of seconds (engine_sim.py), not from quantkit's code.

- poisson (the default profile): quantkit's steady-state capacity lands within 10% of the
  simulated steady state, with a bracket, window verdicts and every request kept;
- burst: the same search over waves of prompts sent at once is labelled `burst` everywhere and
  lands near the simulated burst truth, which is far below the steady state's concurrency.
benchmarks/capacity_fixture.py prints the three profiles' figures (concurrency too).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))

import engine_sim as sim  # noqa: E402
from engine_server import EngineServer  # noqa: E402

from quantkit.measure.capacity.live import CapacitySettings, run_capacity  # noqa: E402
from quantkit.measure.capacity.ladder import rederive  # noqa: E402
from quantkit.measure.stats.point import WindowSettings  # noqa: E402
from quantkit.measure.stats.samples import decode  # noqa: E402
from quantkit.measure.stats.slo import parse_slo  # noqa: E402
from quantkit.measure.loadgen.workload import Prompt  # noqa: E402
from quantkit.serve.server import RemoteServer  # noqa: E402

INPUT, OUTPUT = 256, 64
SLO = "ttft_p95=0.5,tpot_p95=25ms"
SPAN = "ttft_p95=0.5,tpot_p95=18ms"  # a tighter tier the same ladder must answer: truth 28.9 req/s against 34.0


class FixedPrompts:
    def prompts(self, n, stream):
        return [Prompt(token_ids=[5 + (stream * 131 + i) % 997] * INPUT) for i in range(n)]


@pytest.fixture(scope="module")
def spec():
    return sim.EngineSpec()


@pytest.fixture(scope="module")
def span_truth(spec) -> float:
    """SPAN's simulated steady-state capacity (engine_sim, not quantkit; ~2 s to simulate)."""
    return sim.truth_poisson(spec, INPUT, OUTPUT, 0.5, 0.018)


def search(spec, tmp_path, profile, points=None, span=(), slo=SLO, top=1024, **window):
    settings = CapacitySettings(profile=profile, input_len=INPUT, output_len=OUTPUT, tolerance=0.05, waves=2,
                                min_requests=1, window=WindowSettings(**window) if window else None, span=list(span),
                                max=top)
    with EngineServer(spec) as fixture:
        return run_capacity(RemoteServer(fixture.url), tmp_path, parse_slo(slo), settings, prompts=FixedPrompts(),
                            out_dir=tmp_path, on_point=points.append if points is not None else None)


STEADY = dict(warmup_s=3, min_s=20, max_s=40, min_requests=100)


def steady_top(spec) -> float:
    """The steady searches' highest load: a quarter above the rate the engine can complete at all
    (engine_sim.peak_rate, 41.2 req/s), so the search still grows into a saturated load and narrows
    down from it, without the 4x growth's points far past the peak (145 and 72.5 req/s: ~70 s)."""
    return round(1.25 * sim.peak_rate(spec, INPUT, OUTPUT), 1)


@pytest.fixture(scope="module")
def spanned(spec, tmp_path_factory):
    """One Poisson search under SLO whose ladder also spans SPAN: (result, the store's points)."""
    stored = []
    result = search(spec, tmp_path_factory.mktemp("spanned"), "poisson", stored, span=[SPAN], top=steady_top(spec),
                    **STEADY)
    return result, stored


# make test-slow: ~250 s of real-time windows (and the span's few points), and they cannot be shorter:
# 10-20 s windows read 37.8 req/s against the truth's 34.0 (+11%), the queue near capacity grows slower
# than that. make test checks the steady-state capacity on vLLM-CPU (test_capacity.py) and the burst here.
@pytest.mark.slow
def test_poisson_capacity_is_the_simulated_steady_state_within_10_percent(spec, spanned, span_truth):
    truth = sim.truth_poisson(spec, INPUT, OUTPUT, 0.5, 0.025)
    result, stored = spanned
    cap = result.capacity
    # on 2 shared cores the client can be kept waiting at any point: the search then stops there,
    # marked, with the capacity standing on the trusted points before it (as test_capacity.py)
    assert cap is not None and result.search.reason in ("bracketed", "untrusted"), result.summary()
    assert 0.9 * truth <= cap.load <= 1.1 * truth, f"{result.summary()} against a truth of {truth:.1f} req/s"
    assert cap.profile == "poisson" and (result.search.reason != "bracketed" or result.search.ceiling is not None)
    if result.search.reason == "untrusted":
        assert result.points[-1].client_limited and not result.search.steps[-1].trusted
    # Little's law beside the rate: the mean in flight at capacity is rate x E2E
    capacity_point = result.points[cap.point_index]
    assert cap.concurrency == pytest.approx(capacity_point.req_s * capacity_point.e2e.mean, rel=0.25)
    # the capacity point passed at its confidence, over a window that left warm-up and cool-down out
    w = capacity_point.window
    assert w.verdict == "pass" and w.measured >= 100 and w.warmup_excluded > 0 and w.end_s - w.start_s >= 20
    assert capacity_point.num_requests == w.measured
    if result.search.ceiling is not None:
        assert result.search.ceiling > cap.load
        ceiling = next(p for p in result.points if p.rate == result.search.ceiling and not p.client_limited)
        # at the truth itself the data may not decide: the bracket then ends on an undecided load, said so
        assert ceiling.window.verdict in ("fail", "saturated", "undecided")
        if ceiling.window.verdict == "undecided":
            assert result.search.ceiling in result.search.undecided
            assert result.search.reason != "bracketed" or "undecided at" in result.summary()
    # every request of every point is kept (in what the store is given), window flags with it
    assert all(p.samples for p in stored) and not any(p.samples for p in result.points)
    rows = decode(stored[cap.point_index].samples)
    assert sum(1 for _, where in rows if where == "window") == w.measured
    assert any(where == "warmup" for _, where in rows)
    # one ladder, two SLOs: judged again from the stored requests, the main SLO gives the search's own
    # capacity, and the spanned tier its simulated truth (computed by engine_sim, not by quantkit)
    points = [p.model_dump(mode="json") for p in stored]
    assert rederive(result, points, parse_slo(SLO)).result.capacity.load == cap.load
    tight = rederive(result, points, parse_slo(SPAN))
    assert tight.coverage == "bracketed" or tight.steps[-1].state == "untrusted", tight.note
    assert 0.9 * span_truth <= tight.result.capacity.load <= 1.1 * span_truth, \
        f"{tight.result.summary()} against a truth of {span_truth:.1f} req/s"
    assert result.spans[str(parse_slo(SPAN))]["capacity"] == tight.result.capacity.load


def test_burst_is_labelled_and_measures_the_prefill_burst(spec, tmp_path):
    truth = sim.truth_burst(spec, INPUT, OUTPUT, 0.5, 0.025)
    steady = sim.truth_concurrency(spec, INPUT, OUTPUT, 0.5, 0.025, ramp_s=sim.request_s(spec, INPUT, OUTPUT))
    assert truth < 0.85 * steady  # the fixture tells a burst from a steady state
    result = search(spec, tmp_path, "burst")
    if result.search.reason == "untrusted":  # 2 shared cores kept the client waiting: said, so once more
        assert result.points[-1].client_limited
        result = search(spec, tmp_path, "burst")
    assert result.capacity is not None and result.capacity.profile == "burst"
    assert abs(result.capacity.load - truth) <= 0.1 * truth, f"{result.summary()} against a burst truth of {truth}"
    assert "(burst)" in result.summary()
    assert all(p.load_profile == "burst" and p.window is None for p in result.points)


# make test-slow: one more search (~150 s), under SPAN alone, on a fresh fixture
@pytest.mark.slow
def test_a_capacity_re_derived_from_the_ladder_agrees_with_a_fresh_search(spec, spanned, span_truth, tmp_path):
    result, stored = spanned
    derived = rederive(result, [p.model_dump(mode="json") for p in stored], parse_slo(SPAN))
    fresh = search(spec, tmp_path, "poisson", slo=SPAN, top=steady_top(spec), **STEADY)
    assert fresh.capacity is not None and derived.result.capacity is not None, (fresh.summary(), derived.note)
    # Each search is held to 10% of the simulated truth (the test above), and so is this one. Their
    # brackets, set in nominal rates, must overlap once widened by that same 10%, not by one 5% step:
    # a point's realized Poisson rate strays from its nominal one by ~1/sqrt(600 requests) and more
    # (12-04: a pass at 31 nominal offered 29.53, a fail at 31.85 offered 33.04), and two independent
    # searches each carry that noise at their boundary.
    assert 0.9 * span_truth <= fresh.capacity.load <= 1.1 * span_truth, \
        f"fresh {fresh.summary()} against a truth of {span_truth:.1f} req/s"
    band = 1.1
    d_lo, f_lo = derived.result.capacity.load, fresh.capacity.load
    d_hi = derived.result.search.ceiling or d_lo * (1 + result.settings.tolerance)
    f_hi = fresh.search.ceiling or f_lo * (1 + result.settings.tolerance)
    assert d_lo <= f_hi * band and f_lo <= d_hi * band, f"re-derived {derived.result.summary()}; fresh {fresh.summary()}"
