"""`CapacitySettings`: how capacity is searched, on its own so that the command line builds its
options (cli/capacity_options.py) without importing the search (live.py, which re-exports it)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from pydantic import BaseModel, Field, field_validator

from ...errors import UsageError
from ...numbers import Count, CountOrZero, Rate, Seconds, Seed, Tokens
from ..stats import tiers
from ..stats.point import WindowSettings
from . import profiles


class CapacitySettings(BaseModel):
    """How capacity is searched (CLI options of `bench --capacity`, a run recipe's `capacity:`).

    `profile`: poisson (default; `rate` is its old name), concurrency (a staggered closed loop) or
    burst (waves of prompts sent at once), see profiles.py. `window`: a steady-state point's warm-up,
    minimum and maximum duration, minimum requests and confidence (None: the machine's defaults,
    profiles.GPU_WINDOW / CPU_WINDOW). `waves`, `min_requests` and `max_requests` size a burst's
    points (`max_requests` caps every profile's); `duration_s` is left from the whole-point rate
    profile and no longer used."""

    model_config = {"extra": "forbid", "allow_inf_nan": False}

    # the fields stored run keys were made with (store.keyed): `span` came later, and a field added
    # after it joins a key only once set, so the stores written before it keep their keys (and resume)
    KEY_FIELDS: ClassVar[frozenset[str]] = frozenset({
        "profile", "tolerance", "start", "max", "input_len", "output_len", "waves", "duration_s", "min_requests",
        "max_requests", "seed", "warmup", "interval_s", "early_stop", "window"})

    profile: profiles.Name = "poisson"
    tolerance: float = Field(0.10, gt=0, lt=4)
    # a load: streams, or requests/s (a Poisson rate at least numbers.MIN_RATE, whose points end)
    start: Rate = 1  # lowest load
    max: Rate = 1024  # highest load
    input_len: Tokens = 128
    output_len: Tokens = 64
    waves: float = Field(3.0, gt=0, le=1000)  # burst: requests per point = waves x concurrency
    duration_s: Seconds = 20.0  # unused since steady-state windows (kept: stored settings name it)
    min_requests: Count = 16
    max_requests: Count | None = None
    seed: Seed = 0
    warmup: CountOrZero = 2
    interval_s: Seconds = 1.0  # /metrics scrape interval
    early_stop: bool = True
    window: WindowSettings | None = None
    # more SLOs (tier names of tiers.py, or SLO strings) the ladder should bracket as well: after the
    # search under the main SLO, each gets the points it lacks, so one ladder answers all of them
    span: list[str] = Field(default_factory=list)

    @field_validator("profile", mode="before")
    @classmethod
    def _alias(cls, value: Any) -> Any:
        return profiles.ALIASES.get(value, value) if isinstance(value, str) else value

    @field_validator("span")
    @classmethod
    def _known_slos(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                tiers.resolve(item)
            except UsageError as exc:
                raise ValueError(exc.message) from None
        return value

    @property
    def axis(self) -> str:
        return profiles.get(self.profile).axis

    def requests(self, load: float) -> int:
        """A burst point's requests (steady-state points run for a time: profiles.Profile.plan)."""
        n = max(self.min_requests, math.ceil(self.waves * load))
        return min(n, self.max_requests) if self.max_requests else n
