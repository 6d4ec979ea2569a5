"""The decision: which variant to deploy, with which vLLM flags, and what it gives under the SLO.

Inputs are the report's rows, each with its capacity on vLLM's defaults and, when tuned, after
tuning (`CapacityCell`, built from the stored capacity / tune records by `capacity_cell`). Rules:
- a candidate is a (variant, configuration) pair with a capacity under the SLO;
- it is eligible when its accuracy gate passed (`pass`), it is the reference (the baseline), or no
  gate is set (`no gates`, said in the note); where no variant was evaluated at all, accuracy
  does not decide and the note says so; a gate taken from another model's evals of the same
  method (`accuracy_from`, a proxy) decides like an own one, and the note says so;
- the recommendation is the eligible candidate with the highest goodput at capacity (requests/s
  meeting the SLO). Goodputs within the search's tolerance of the highest are a tie (the
  measurement cannot tell them apart): the higher recovery wins, then the configuration with fewer
  flags (defaults before tuned), then the smaller checkpoint;
- its ratio is its goodput over the baseline's on vLLM's defaults under the same SLO;
- when no candidate meets the SLO, or none that meets it passes the gates, there is no
  recommendation: the decision names the closest configuration and what blocks it.
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..measure.stats import load_kinds
from ..measure.capacity import profiles
from ..measure.observe.bounds import has_host_figures
from ..measure.stats.slo import Slo
from .dumps import written_when_set

ELIGIBLE_GATES = ("pass", "reference", "no gates")


class CapacityCell(BaseModel):
    """One configuration's capacity under the SLO, as the report shows it."""

    config: Literal["defaults", "tuned"]
    slo: Slo | None = None  # None only for a result stored without one
    profile: str = "concurrency"
    load: float | None = None  # None: the SLO failed at the lowest load
    reason: str | None = None  # the search's: bracketed | max_reached | below_min | untrusted
    req_s: float | None = None
    output_tok_s: float | None = None
    goodput_req_s: float | None = None
    in_flight: float | None = None  # the concurrency, or the mean requests in flight at a rate (Little's law)
    tolerance: float = 0.10
    points: int = 0
    bound: str | None = None
    bound_evidence: str | None = None
    knob: str | None = None
    # the bound's readings (bounds.CapacityBound.figures) where they include the server's CPU (host.py)
    bound_figures: dict[str, float] | None = None
    serve_args: list[str] = Field(default_factory=list)
    command: str | None = None
    label: str = "defaults"
    trials: int | None = None  # tuned: trials and servers behind it
    servers: int | None = None
    blocker: str | None = None  # below_min: what the lowest load broke
    ceiling: float | None = None  # the lowest load that broke the SLO above `load`
    edge: float | None = None  # the nearest load above `load` that did not pass (the ceiling, or an undecided one)

    _dump = written_when_set("bound_figures")  # a bound read without the host's figures: as before them

    @property
    def coarse(self) -> bool:
        """The bracket is wider than the tolerance (a ladder re-derived under another SLO may be)."""
        edge = self.edge if self.edge is not None else self.ceiling
        if self.load is None or edge is None:
            return False
        profile = profiles.find(self.profile)
        integer = profile is not None and profile.kind.integer  # whole concurrencies: c and c+1 is a bracket
        return edge > self.load * (1 + self.tolerance) + 1e-9 and not (integer and edge - self.load <= 1)

    @property
    def goodput(self) -> float:
        value = self.goodput_req_s if self.goodput_req_s is not None else self.req_s
        return float(value) if self.load is not None and value is not None else 0.0

    @property
    def steady(self) -> bool:
        """Measured as steady-state windows: not a burst (a profile the registry does not know counts as one)."""
        profile = profiles.find(self.profile)
        return profile is None or profile.steady

    def load_text(self) -> str:
        if self.load is None:
            return "none"
        profile = profiles.find(self.profile)
        value = f"{self.load:g}" + (f"-{self.ceiling:g}" if self.coarse else "")  # a bracket wider than the tolerance
        unit = profile.unit.format(load=value) if profile is not None else value
        return unit + ("+" if self.reason == "max_reached" else "")


def ratio_held(best: CapacityCell, baseline: CapacityCell | None) -> str | None:
    """How the winner's ratio to the baseline is bounded: "" (both bracketed), "at least ", "at most ",
    or None (both ladders held their top loads, so neither capacity, nor the ratio, is bounded above)."""
    if best is baseline:
        return ""  # the baseline against itself: 1.00 x, whatever its ladder
    open_best = best.reason == "max_reached"
    open_base = baseline is not None and baseline.reason == "max_reached"
    if open_best and open_base:
        return None
    return "at least " if open_best else "at most " if open_base else ""


def _versus(ratio: float, best: CapacityCell, baseline: CapacityCell | None) -> str:
    """The winner against the baseline, as far as their ladders bound it: a capacity whose ladder held
    its top load is a lower bound, so the ratio is one too (or an upper bound, or none at all)."""
    held = ratio_held(best, baseline)
    if held is None:
        return (f"a ratio the ladders do not bound ({ratio:.2f} x at their tops; both held them: "
                "measure higher loads, e.g. --capacity-max)")
    why = {"at least ": " (its ladder held its top)", "at most ": " (the baseline's ladder held its top)"}.get(held, "")
    return f"{held}{ratio:.2f} x the baseline on vLLM defaults{why}"


def _profile(settings: Any, default: str) -> str:
    # a profile stored before profiles had names (or settings not stored) was a burst
    return settings.profile if settings is not None and "profile" in settings.model_fields_set else default


def capacity_cell(result: Any, *, config: Literal["defaults", "tuned"] = "defaults",
                  command: str | None = None, label: str = "defaults") -> CapacityCell | None:
    """A stored CapacityResult (measure/capacity/live.py, or its tolerant form: records.py) as a cell;
    None when there is none."""
    if result is None or not result.model_fields_set:
        return None
    settings, cap, bound, search, server = result.settings, result.capacity, result.bound, result.search, result.server
    points = result.points or []
    from ..serve.config import args_of

    serve_config = server.serve_config if server is not None else None
    load = cap.load if cap is not None else None
    cell = CapacityCell(
        config=config, slo=result.slo, profile=_profile(settings, "burst"),
        load=load, reason=search.reason if search is not None else None,
        ceiling=search.ceiling if search is not None and cap is not None else None,
        edge=_edge(load, search),
        req_s=cap.req_s if cap is not None else None, output_tok_s=cap.output_tok_s if cap is not None else None,
        goodput_req_s=_goodput(cap, points), in_flight=cap.concurrency if cap is not None else None,
        tolerance=float((settings.tolerance if settings else None) or 0.10),
        points=int(result.points_spent or len(points)),
        bound=bound.kind if bound else None, bound_evidence=bound.evidence if bound else None,
        knob=bound.knob if bound else None, bound_figures=_host_figures(bound),
        serve_args=args_of(serve_config), label=label,
        command=command or (shlex.join(["vllm", "serve", result.model_dir, *args_of(serve_config)])
                            if result.model_dir else None))
    if cell.load is None:
        if points and cell.reason == "untrusted":  # the search stopped at the point it could not trust
            last = points[-1]
            cell.blocker = (f"at {_where(last)}: quantkit's client limited the point, so it decides nothing ("
                            + (last.client_limited_reason or "client-limited") + ")")
        elif points:
            violations = points[0].slo_violations or []
            cell.blocker = f"at {_where(points[0])}: " + ("; ".join(violations) or "the SLO failed")
        elif result.error:
            cell.blocker = result.error
    return cell


def _host_figures(bound: Any) -> dict[str, float] | None:
    figures = bound.figures if bound is not None else None
    return dict(figures) if has_host_figures(figures) else None


def _goodput(cap: Any, points: list[Any]) -> float | None:
    """Goodput at capacity; at a Poisson capacity the offered rate x attainment, as capacity/live.py now
    stores it, also for records stored before (their figure was the window's own, noisy count)."""
    from ..measure.capacity.live import goodput_at

    if cap is None:
        return None
    i = cap.point_index
    point = points[i] if isinstance(i, int) and 0 <= i < len(points) else None
    if point is None:
        return goodput_at(None, None, cap.goodput_req_s, windowed=False)
    return goodput_at(point.rate, point.slo_attainment, cap.goodput_req_s, windowed=bool(point.window))


def _edge(load: float | None, search: Any) -> float | None:
    if load is None or search is None:
        return None
    above = [x for x in [*(search.undecided or []), search.ceiling] if x is not None and x > load]
    return min(above, default=None)


def _where(point: Any) -> str:
    profile = profiles.find(point.load_profile)  # a burst's points are concurrency points: "c=8 (burst)"
    return load_kinds.kind(point.profile).text(point, "where") + (profile.suffix if profile is not None else "")


def tuned_cell(tune: Any, slo: Slo | None, profile: str = "concurrency",
               tolerance: float = 0.10) -> CapacityCell | None:
    """The best trial of a stored TuneResult, as read (records.Tune), as a cell."""
    if tune is None or tune.best is None:
        return None
    best = tune.best
    cap = best.capacity if best.capacity is not None and best.capacity.model_fields_set else None
    bound = best.bound
    settings = tune.capacity
    from ..secrets import mask_text

    command = mask_text(best.command) if best.command else None  # a store written before masking
    flags = (command or "").split()[3:]
    return CapacityCell(
        config="tuned", slo=tune.slo or slo, profile=_profile(settings, profile),
        load=cap.load if cap else best.capacity_load, reason="bracketed", req_s=cap.req_s if cap else None,
        output_tok_s=cap.output_tok_s if cap else None, goodput_req_s=best.value,
        in_flight=cap.concurrency if cap else None,
        tolerance=float((settings.tolerance if settings else None) or tolerance), points=int(best.points or 0),
        bound=bound.kind if bound else None, bound_evidence=bound.evidence if bound else None,
        knob=bound.knob if bound else None, bound_figures=_host_figures(bound), serve_args=flags,
        command=command, label=best.label or "tuned", trials=len(tune.trials or []),
        servers=tune.server_starts)


class Candidate(BaseModel):
    variant: str
    method: str
    cell: CapacityCell
    recovery: float | None = None
    recovery_stderr: float | None = None
    gate: str | None = None
    gate_detail: list[str] = Field(default_factory=list)
    accuracy_from: str | None = None  # recovery and gate are this model's (a proxy), not the checkpoint's
    size_bytes: int | None = None
    eligible: bool = False
    why_not: str | None = None


class Decision(BaseModel):
    status: Literal["recommended", "none_meets_slo", "none_passes_gates", "no_capacity"]
    slo: Slo | None = None
    summary: str
    recommended: Candidate | None = None
    ratio_vs_baseline: float | None = None  # goodput at capacity / the baseline's on vLLM defaults
    baseline: CapacityCell | None = None
    closest: Candidate | None = None  # when nothing is recommended: the nearest, and what blocks it
    blocker: str | None = None
    candidates: list[Candidate] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _served_as(method: str, serve_args: list[str]) -> str:
    """The baseline's label is its checkpoint's dtype; on a CPU without native bf16 it served in
    float32 (hardware_fit.serving_dtype), and the recommendation says so beside the command."""
    if method == "bf16" and "--dtype" in serve_args[:-1]:
        served = serve_args[serve_args.index("--dtype") + 1]
        if served not in ("bfloat16", "bf16", "auto"):
            return f"bf16 checkpoint served in {served}"
    return method


def _tie_key(band: list[Candidate]):
    # the baseline's recovery is 1.0 by definition: it does not out-rank a variant that passed its gate
    # (as accurate as the gate can tell), so it ranks with the best of them and flags, then size, decide
    passed = [c.recovery for c in band if c.gate == "pass" and c.recovery is not None]

    def key(c: Candidate) -> tuple:
        recovery = max(passed) if c.gate == "reference" and passed else c.recovery
        return (-(recovery if recovery is not None else -1.0), c.cell.config != "defaults", len(c.cell.serve_args),
                c.size_bytes or 0, c.variant)
    return key


def decide(rows: list[Any]) -> Decision:
    """The decision over report rows (report.build.Row: name, method, gate, recovery, capacity, ...)."""
    candidates: list[Candidate] = []
    evaluated = any(r.gate is not None for r in rows)
    notes: list[str] = []
    baseline_cell = None
    for r in rows:
        if r.status == "failed":
            continue
        for cell in (r.capacity, r.capacity_tuned):
            if cell is None:
                continue
            if cell.config == "tuned" and cell.label == "defaults" and r.capacity is not None:
                continue  # the tuner kept vLLM's defaults: the defaults cell's configuration, not a rival of it
            c = Candidate(variant=r.name, method=r.method, cell=cell, recovery=r.recovery,
                          recovery_stderr=r.recovery_stderr, gate=r.gate, gate_detail=r.gate_detail,
                          accuracy_from=r.accuracy_from, size_bytes=r.size_bytes)
            if r.baseline and cell.config == "defaults":
                baseline_cell = cell
            if cell.load is None and cell.reason == "untrusted":
                c.why_not = f"no trusted capacity ({cell.blocker})"
            elif cell.load is None:
                c.why_not = f"does not meet the SLO ({cell.blocker or 'even at the lowest load'})"
            elif not evaluated or r.gate in ELIGIBLE_GATES:
                c.eligible = True
            else:
                failed = [d.removesuffix(" (failed)") for d in r.gate_detail if d.endswith("(failed)")]
                c.why_not = f"accuracy gate {r.gate or 'not evaluated'}" + (f": {'; '.join(failed)}" if failed else "")
            candidates.append(c)
    slo = next((c.cell.slo for c in candidates if c.cell.slo), None)
    if not candidates:
        return Decision(status="no_capacity", slo=slo, summary="no capacity under an SLO was measured (set slo: in the "
                        "run recipe, or run `quantkit bench DIR --slo ... --capacity`)")
    if not evaluated:
        notes.append("no variant was evaluated for accuracy: the recommendation weighs capacity alone")
    elif any(c.gate == "no gates" for c in candidates if c.eligible):
        notes.append("no accuracy gate is set: every evaluated variant counts as passing")
    notes += _proxy_notes(candidates)
    slos = {c.cell.slo for c in candidates}
    if len(slos) > 1:
        notes.append(f"capacities were measured under different SLOs ({'; '.join(sorted(map(str, slos)))}): not comparable")
    eligible = [c for c in candidates if c.eligible]
    meeting = [c for c in candidates if c.cell.load is not None]
    base_goodput = baseline_cell.goodput if baseline_cell is not None else 0.0
    if eligible:
        top = max(c.cell.goodput for c in eligible)
        band = [c for c in eligible if c.cell.goodput >= top / (1 + max(c.cell.tolerance for c in eligible))]
        best = min(band, key=_tie_key(band))
        ratio = best.cell.goodput / base_goodput if base_goodput > 0 else None
        versus = (_versus(ratio, best.cell, baseline_cell) if ratio is not None else
                  "the baseline on vLLM defaults has no trusted capacity (quantkit's client was limited)"
                  if baseline_cell is not None and baseline_cell.reason == "untrusted" else
                  "the baseline on vLLM defaults has no capacity under this SLO" if baseline_cell is not None else
                  "no baseline measured under this SLO")
        flags = (f"vLLM's defaults ({' '.join(best.cell.serve_args)})" if best.cell.config == "defaults"
                 and best.cell.serve_args else " ".join(best.cell.serve_args) or "vLLM's defaults")
        rec = "" if best.recovery is None else f", recovery {best.recovery:.3f}" + (
            f" ± {best.recovery_stderr:.3f}" if best.recovery_stderr is not None else "") + from_proxy(best)
        summary = (f"deploy {best.variant} ({_served_as(best.method, best.cell.serve_args)}) {'on' if flags.startswith('vLLM') else 'with'} {flags}: {best.cell.goodput:.2f} requests/s "
                   f"within {best.cell.slo} at {best.cell.load_text()}, {versus}{rec}"
                   + (f"; bound: {best.cell.bound}" if best.cell.bound else ""))
        if len(band) > 1:
            rivals = ", ".join(f"{c.variant} ({c.cell.label}) {c.cell.goodput:.2f}" for c in band if c is not best)
            summary += (f"; a tie within the search tolerance with {rivals} requests/s: "
                        "a gate passed (or the higher recovery), then fewer flags, then the smaller checkpoint decided")
            notes.append(f"{len(band)} configurations are within the search tolerance of the highest goodput: "
                         f"{best.variant} and {rivals}; the capacities do not separate them")
        return Decision(status="recommended", slo=best.cell.slo, summary=summary, recommended=best, ratio_vs_baseline=ratio,
                        baseline=baseline_cell, candidates=candidates, notes=notes)
    if meeting:  # the SLO is met, but not by a variant that passes the gates
        closest = max(meeting, key=lambda c: (c.recovery or 0, c.cell.goodput))
        return Decision(status="none_passes_gates", slo=slo, closest=closest, blocker=closest.why_not,
                        baseline=baseline_cell, candidates=candidates, notes=notes,
                        summary=(f"no variant that meets the SLO passes the accuracy gates; the closest is "
                                 f"{closest.variant} ({closest.cell.label}): {closest.why_not}"))
    if all(c.cell.reason == "untrusted" for c in candidates):  # nothing was measured that decides
        first = candidates[0]
        return Decision(status="none_meets_slo", slo=slo, closest=first, blocker=first.cell.blocker,
                        baseline=baseline_cell, candidates=candidates, notes=notes,
                        summary=f"no variant has a trusted capacity under {slo}; {first.variant}: {first.cell.blocker}")
    closest = min(candidates, key=lambda c: _lowest_margin(c.cell))
    blocker = closest.cell.blocker or "the SLO fails at the lowest load"
    if closest.cell.bound:
        blocker += f"; bound: {closest.cell.bound} ({closest.cell.knob})"
    return Decision(status="none_meets_slo", slo=slo, closest=closest, blocker=blocker, baseline=baseline_cell,
                    candidates=candidates, notes=notes,
                    summary=f"nothing meets the SLO {slo}; the closest is {closest.variant} ({closest.cell.label}): {blocker}")


def from_proxy(row: Any) -> str:
    """` (from P)` after a recovery that is another model's evals (a report Row or a Candidate)."""
    return f" (from {row.accuracy_from})" if row.accuracy_from else ""


def _proxy_notes(candidates: list[Candidate]) -> list[str]:
    """Say where accuracy came from another model's evals (`quantkit compare --accuracy-from`)."""
    notes = []
    for proxy in sorted({c.accuracy_from for c in candidates if c.accuracy_from}):
        names = list(dict.fromkeys(c.variant for c in candidates if c.accuracy_from == proxy and c.gate != "reference"))
        if names:
            notes.append(f"accuracy: {', '.join(names)} {'was' if len(names) == 1 else 'were'} not evaluated on these "
                         f"checkpoints; recovery and gates are {proxy}'s, for the same methods (its own conversions, "
                         "a proxy, not a measurement of these checkpoints)")
        else:
            notes.append(f"accuracy: only the baseline's reference comes from {proxy}'s evals; {proxy} evaluated "
                         "none of the other variants here, so none of them is eligible")
    return notes


def _lowest_margin(cell: CapacityCell) -> float:
    """How far the lowest load is from the SLO, read from its blocker (`tpot_p95 0.21s > 0.1s`)."""
    import re

    worst = 0.0
    for value, limit in re.findall(r"([0-9.]+)s > ([0-9.]+)s", cell.blocker or ""):
        try:
            worst = max(worst, float(value) / float(limit))
        except (ValueError, ZeroDivisionError):
            pass
    return worst or float("inf")
