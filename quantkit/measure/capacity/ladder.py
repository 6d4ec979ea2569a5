"""Capacity under any SLO from a stored ladder of steady-state points, without measuring again.

A capacity search leaves a ladder: one point per load it measured, each a steady-state window
whose every request is kept (samples.py). Under another SLO the same windows are judged again by
the rule a live point uses (confidence.judge at the point's confidence, `still_rising`, the
window's minimum of requests), and the capacity is the highest load that passes below the lowest
that fails. Nothing is re-measured, so what the ladder does not hold is said, with what to run:
- the SLO is looser than every point measured: the capacity is at least the top point (`above`);
- it is tighter than every point: the capacity lies below the lowest point (`below`);
- the pass and the failure are further apart than the search's tolerance (`coarse`), or no point
  decides (`undecided`).

What a point cannot tell under any SLO stays as it was: a saturated point (arrivals outpace service;
its percentiles grow with its length) fails every latency SLO, a client-limited one decides nothing.
A point the search cut short (its verdict decided early) holds fewer requests, so a looser SLO may
find it undecided. ITL terms are judged on each request's stored ITL p50/p95/max, not its every
gap: an approximation said in the result. A burst ladder has no windows to judge and is refused.
"""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ...errors import UsageError
from ..stats.point import OVERLOADED, BenchPoint
from ..stats.slo import Slo
from . import profiles
from .live import CapacityResult, finish
from .rejudge import Coverage, LadderStep, cover, judge_step, start_from  # noqa: F401 (ladder.X for callers)
from .search import CapacitySearch, CapacityStep

class Rederived(BaseModel):
    """A capacity re-derived from a ladder: the result (as a CapacityResult) and how well it is covered."""

    slo: Slo
    measured_under: Slo
    coverage: Coverage
    note: str | None = None  # what the ladder cannot tell, and what to run to cover it
    steps: list[LadderStep]
    result: CapacityResult


def rederive(result: CapacityResult | dict[str, Any], stored: list[dict[str, Any]], slo: Slo, *,
             model_dir: str | None = None) -> Rederived:
    """The capacity of `result`'s ladder under `slo`. `stored`: the store's points of its record,
    with their requests (`BenchPoint.samples`). A record that is no steady-state ladder (a burst, or
    one stored before ladders) raises UsageError saying why."""
    if isinstance(result, dict):
        try:
            result = CapacityResult.model_validate(result)
        except ValidationError:
            raise UsageError("this capacity record cannot be judged again (stored by an older quantkit, or abridged); "
                             "measure its ladder again: quantkit bench MODEL --capacity --slo ...") from None
    settings = result.settings
    profile = profiles.get(settings.profile)
    try:
        points = [BenchPoint.model_validate(p) for p in stored]
    except ValidationError:
        points = []  # abridged points: refused below, as a ladder without windows
    # a load measured again (live.contradictions) is judged on its latest point, as the live search read it
    points = list({p.x: p for p in points}.values())
    if not profile.steady or not points or any(p.window is None for p in points):
        raise UsageError(f"the capacity under {result.slo} was measured as bursts (c prompts sent at once), which have "
                         "no steady-state windows to judge again; measure a steady-state ladder first: quantkit bench "
                         "MODEL --capacity --capacity-profile poisson")
    window = result.window or profiles.default_window(gpu=False)
    steps = sorted((judge_step(p, slo, window) for p in points), key=lambda s: s.load)
    coverage, capacity, ceiling = cover(steps, settings.tolerance, profile.kind.integer)
    search = CapacitySearch(
        capacity=capacity, ceiling=ceiling, tolerance=settings.tolerance, lo=steps[0].load, hi=steps[-1].load,
        reason={"bracketed": "bracketed", "coarse": "bracketed", "above": "max_reached"}.get(
            coverage, "untrusted" if any(s.state == "untrusted" for s in steps) else "below_min"),
        steps=[CapacityStep(load=s.load, passed=s.state == "pass", margin=s.margin, trusted=s.state != "untrusted",
                            decided=s.state in ("pass", "fail", *OVERLOADED), state=s.state, more=s.more)
               for s in steps],
        undecided=[s.load for s in steps if s.state == "undecided"])
    by_load = {s.load: s for s in steps}
    judged = []
    for p in points:  # the points as the report reads them: this SLO's verdict, without the requests
        s = by_load[p.x]
        goodput = s.met / max(p.duration_s, 1e-9) if s.met is not None else None
        judged.append(p.model_copy(update={"samples": None, "slo": slo, "slo_met": s.state == "pass",
                                           "slo_violations": [] if s.state == "pass" else s.reasons,
                                           "slo_attainment": s.attainment, "goodput_req_s": goodput}))
    out = result.model_copy(update={"slo": slo, "points": judged, "capacity": None, "bound": None, "path": None})
    finish(out, search)
    note = _note(coverage, steps, capacity, ceiling, slo, profile, settings.tolerance,
                 model_dir or result.model_dir, out.open_text())
    if any(t.metric == "itl" for t in slo.terms):
        note = ((note + " ") if note else "") + ("ITL is judged on each request's stored ITL p50/p95/max, not its "
                                                 "every gap: an approximation.")
    out.derived_from, out.coverage_note = result.slo, note
    return Rederived(slo=slo, measured_under=result.slo, coverage=coverage, note=note, steps=steps, result=out)


def _note(coverage: Coverage, steps: list[LadderStep], capacity: float | None, ceiling: float | None, slo: Slo,
          profile: profiles.Profile, tolerance: float, model_dir: str, left_open: str | None) -> str | None:
    run = f"quantkit bench {shlex.quote(model_dir)} --capacity --slo {shlex.quote(str(slo))}"
    label = profile.label
    # the undecided load between the pass and the failure: it bounds the capacity from neither side
    gap = f": {left_open}" if left_open else ""
    if profile.name != "poisson":
        run += f" --capacity-profile {profile.name}"
    if coverage == "above":
        blocked = [s.load for s in steps if s.load > capacity and s.state in ("untrusted", "undecided")]
        why = (f" (above it, {label(blocked[0])} decides nothing: "
               f"{next(s for s in steps if s.load == blocked[0]).reasons[0]})" if blocked else "")
        return (f"the ladder does not cover {slo}: its highest point that decides, {label(capacity)}, still meets it{why}, "
                f"so the capacity is at least that; to bracket it: {run} --capacity-start {capacity:g}")
    if coverage == "below":
        low = steps[0].load
        return (f"the ladder does not cover {slo}: its lowest point, {label(low)}, already breaks it, so the capacity "
                f"lies below; to find it: {run} --capacity-start {_lower(low, profile):g} --capacity-max {low:g}")
    if coverage == "coarse":
        return (f"the ladder brackets the capacity under {slo} only to {label(capacity)}..{label(ceiling)}, wider than "
                f"the {tolerance:.0%} tolerance{gap}; to narrow it: {run} --capacity-start {capacity:g} "
                f"--capacity-max {ceiling:g}")
    if coverage == "undecided":
        below = f" below {label(ceiling)}" if ceiling is not None else ""
        return (f"no point of the ladder{below} decides {slo} at its confidence, too few requests in its windows "
                f"for the percentiles it asks{gap}; measure it, with windows long enough for them: {run}")
    return None


def _lower(load: float, profile: profiles.Profile) -> float:
    low = load / 4
    return max(1.0, float(round(low))) if profile.kind.integer else float(f"{low:.3g}")
