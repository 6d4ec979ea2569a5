"""Load profiles of the capacity search: one registry entry each (GuideLLM's ProfileFactory, reduced).

- `poisson` (default): open-loop Poisson arrivals at a rate, MLPerf Inference's Server scenario.
  Each point is a steady-state window (window.py); capacity is in offered requests/s, with the
  concurrency it produced (Little's law: the client's mean number of requests in flight) beside it.
- `concurrency`: a closed loop of C streams, each sending its next request when the last one
  finished. The streams start at seeded times spread over about one request's duration (GuideLLM's
  `rampup`), so they neither start nor finish in lock step; each point is a steady-state window.
- `burst`: waves of C prompts sent at once, `waves x C` requests per point, statistics over the whole
  point: how fast the server prefills C simultaneous prompts, not what it sustains. Kept for
  comparison with records measured that way (quantkit's capacity before steady-state windows), and
  labelled `burst` wherever it appears.

Each entry says what the rest of quantkit asks of a profile: its points' kind of load (`axis`, a
load_kinds.LoadKind: whole concurrencies or rates, open loop or closed), whether it is a steady
state, how a load of it reads, how it is described. Adding a profile is one entry here.

A profile turns a load into a `PointPlan`: how many prompts to prepare, the point's concurrency or
rate, its streams' ramp and its window settings (None for a burst).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

from ...numbers import MAX_SECONDS
from ..stats.load_kinds import KINDS, LoadKind
from ..stats.point import WindowSettings


class Sizing(Protocol):
    """What a plan reads of the capacity settings (capacity.CapacitySettings has it)."""

    waves: float
    min_requests: int
    max_requests: int | None

Name = Literal["poisson", "concurrency", "burst"]
ALIASES = {"rate": "poisson"}  # the name of the Poisson profile before it became the default
MAX_PROMPTS = 50_000  # prompts one point may prepare (a closed loop's need is estimated from an idle request)

# Window defaults by machine: long enough on a GPU for vLLM to reach its steady batch (hundreds of
# requests run at once there; MLPerf's server run is 600 s, far more than a search of ten points
# can spend), short enough on 2 CPU cores that the demo's three searches stay within minutes.
GPU_WINDOW = WindowSettings(warmup_s=10.0, min_s=30.0, max_s=90.0, min_requests=200)
CPU_WINDOW = WindowSettings(warmup_s=4.0, min_s=15.0, max_s=45.0, min_requests=50)
# A low load sends few requests in `max_s`: its window may stretch (up to this many times max_s)
# until it can hold the requests a pass needs, with this margin for requests over the bound
STRETCH_MAX = 4.0
STRETCH_MARGIN = 1.5
# ... and past that cap as far as the requests a pass needs, with this margin for a Poisson count
# (1.25 x 59: fewer than 59 arrive 4% of the time). Below that a window can never decide a pass, and
# the search walked down from one undecided pass to the next (12-07, a 2-core Zen 4: the demo's GPTQ
# at 0.60, 0.52, 0.45, 0.39 req/s, each a 100-s window of 42-49 requests with none over the SLO)
STRETCH_NEEDED = 1.25


@dataclass(frozen=True)
class PointPlan:
    requests: int
    concurrency: int | None
    rate: float | None
    ramp_s: float
    window: WindowSettings | None


@dataclass(frozen=True)
class Profile:
    name: str
    axis: Literal["rate", "concurrency"]
    steady: bool  # measured as a steady-state window
    unit: str  # how a load of this profile reads: "{load} req/s offered", "c={load}"
    describe: str
    sent_as: str  # how the model card says the load was sent
    suffix: str = ""  # after a point's load wherever a point of this profile is named: " (burst)"
    workload: str | None = None  # after a workload's lengths (None: ", NAME profile")

    @property
    def kind(self) -> LoadKind:
        """Its points' kind of load (load_kinds.py)."""
        return KINDS[self.axis]

    @property
    def workload_text(self) -> str:
        return f", {self.name} profile" if self.workload is None else self.workload

    def label(self, load: float) -> str:
        return self.unit.format(load=f"{load:g}")

    def plan(self, load: float, settings: Sizing, window: WindowSettings, request_s: float,
             needed: int = 0) -> PointPlan:
        """The point at `load`; `request_s` is one request's duration on the idle server (warm-up);
        `needed`, the requests a pass needs (confidence.requests_needed): a window too short to
        hold them at this load is stretched, as far as STRETCH_MAX x its cap."""
        if not self.steady:  # burst: waves of `load` prompts
            n = max(settings.min_requests, math.ceil(settings.waves * load))
            n = min(n, settings.max_requests) if settings.max_requests else n
            return PointPlan(n, int(load), None, 0.0, None)
        # requests per second the point sends: its rate, or C streams of (at least) idle requests
        per_s = float(load) if self.kind.open_loop else int(load) / max(request_s, 1e-3)
        window = stretched(window, needed, per_s)
        horizon = window.warmup_s + window.max_s + max(window.max_s / 3, 1.5 * request_s) + 2.0
        if self.kind.open_loop:
            n = math.ceil(load * horizon) + 8
            return PointPlan(min(n, settings.max_requests or n), None, float(load), 0.0, window)
        # a closed loop of C streams sends at most C requests per idle request duration
        per_stream = math.ceil(horizon / max(request_s, 1e-3)) + 1
        n = min(MAX_PROMPTS, int(load) * per_stream)
        n = min(n, settings.max_requests) if settings.max_requests else n
        return PointPlan(n, int(load), None, request_s, window)


PROFILES: dict[str, Profile] = {
    "poisson": Profile("poisson", "rate", True, "{load} req/s offered",
                       "open-loop Poisson arrivals (MLPerf Server), steady-state windows",
                       sent_as="open-loop Poisson arrivals", workload=""),
    "concurrency": Profile("concurrency", "concurrency", True, "c={load}",
                           "closed loop of C streams with a staggered start, steady-state windows",
                           sent_as="a closed loop of staggered streams"),
    "burst": Profile("burst", "concurrency", False, "c={load} (burst)",
                     "waves of C prompts sent at once: a prefill burst, not a steady state",
                     sent_as="waves of C prompts sent at once", suffix=" (burst)",
                     workload=", burst profile (c prompts at once: not a steady state)"),
}


def stretched(window: WindowSettings, needed: int, per_s: float) -> WindowSettings:
    """`window`, its cap raised so that `needed` requests (with a margin) fit in it at `per_s`: as far
    as STRETCH_MAX x the cap for the margin, further for the requests alone (never past
    numbers.MAX_SECONDS: the stored window stays one WindowSettings accepts)."""
    holds_s = needed / max(per_s, 1e-9)  # the time `needed` requests take to arrive
    span = STRETCH_MARGIN * holds_s
    if span <= window.max_s:
        return window
    cap = max(STRETCH_MAX * window.max_s, STRETCH_NEEDED * holds_s)
    return window.model_copy(update={"max_s": round(min(span, cap, MAX_SECONDS), 1)})


def canonical(name: str) -> str:
    """A profile's name as the registry has it (an alias, `rate`, is the profile it became)."""
    return ALIASES.get(name, name)


def get(name: str) -> Profile:
    return PROFILES[canonical(name)]


def find(name: str | None) -> Profile | None:
    """The profile `name` names, or None for a name the registry does not know (a stored record's)."""
    return PROFILES.get(canonical(name)) if isinstance(name, str) else None


def default_window(gpu: bool) -> WindowSettings:
    return (GPU_WINDOW if gpu else CPU_WINDOW).model_copy()
