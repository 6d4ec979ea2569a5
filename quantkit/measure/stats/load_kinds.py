"""A bench point's kind of load (the `profile` every stored point carries): what the point held
fixed, one registry entry each.

Not the capacity search's load profile (profiles.py: poisson, concurrency, burst), which says how a
search sends its load: a profile's points are all of one kind, its `axis` (a Poisson search's are
`rate` points; a closed loop's and a burst's, `concurrency` points). Stored points keep the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoadKind:
    name: str  # as stored on a point: "concurrency" or "rate"
    integer: bool  # loads are whole numbers: c and c+1 bracket
    open_loop: bool  # arrivals do not wait for answers: requests may queue without bound, in-flight is measured
    # how a point's load prints, by where it is shown ({load}: the point's value of this kind)
    short: str  # the CLI's bench table
    label: str  # a report row
    where: str  # where a capacity search stopped (a cell's blocker)
    phrase: str  # the model card's point table
    sentence: str  # the model card's operating point

    def load_of(self, point: Any) -> Any:
        """The point's load (a point model, or a stored point's dict): its concurrency or its rate."""
        return point.get(self.name) if isinstance(point, dict) else getattr(point, self.name)

    def text(self, point: Any, style: str) -> str:
        """The point's load as `style` (one of the formats above) prints it."""
        return getattr(self, style).format(load=self.load_of(point))


KINDS: dict[str, LoadKind] = {
    "concurrency": LoadKind("concurrency", integer=True, open_loop=False, short="c={load}", label="c={load}",
                            where="c={load}", phrase="concurrency {load}", sentence="concurrency {load}"),
    "rate": LoadKind("rate", integer=False, open_loop=True, short="{load:g}/s", label="rate={load:g}/s",
                     where="{load} req/s", phrase="rate {load}/s", sentence="{load} requests/s"),
}


def kind(name: str | None) -> LoadKind:
    """The kind named `name`; a point of any other name reads as a rate point, as it always has."""
    return KINDS.get(name or "", KINDS["rate"])
