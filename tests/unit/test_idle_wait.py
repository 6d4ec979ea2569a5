"""The interrupt tests' wait for a server's progress judges its deadline on a fresh scrape: a
process paused past the deadline must not fail a server from the count it read before the pause."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fixtures import idle


class PausedClock:
    """A clock that jumps `pause_s` forward right after scrape number `at`, as a process not run by
    a busy machine sees it; the server finishes `per_scrape` requests between two scrapes."""

    def __init__(self, at: int, pause_s: float, per_scrape: float, served_in_pause: float):
        self.now, self.scrapes, self.at, self.pause_s = 0.0, 0, at, pause_s
        self.finished, self.per_scrape, self.served_in_pause = 0.0, per_scrape, served_in_pause

    def scrape(self, url):
        self.scrapes += 1
        metrics = SimpleNamespace(counters={"requests_finished": self.finished}, gauges={})
        self.finished += self.per_scrape
        if self.scrapes == self.at:  # paused after reading: wakes holding a stale count
            self.now += self.pause_s
            self.finished += self.served_in_pause
        return metrics

    def sleep(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    def make(**kwargs) -> PausedClock:
        c = PausedClock(**kwargs)
        monkeypatch.setattr(idle, "_scrape", c.scrape)
        monkeypatch.setattr(idle.time, "monotonic", lambda: c.now)
        monkeypatch.setattr(idle.time, "sleep", c.sleep)
        return c
    return make


def test_a_pause_past_the_deadline_is_judged_on_a_fresh_scrape(clock):
    c = clock(at=27, pause_s=118.0, per_scrape=1.0, served_in_pause=1500.0)  # wakes at 120.6 s
    how = idle.wait_served("http://server", 0.0, 60, timeout=120.0)
    assert c.scrapes == 28 and "at most 118.1 s between two" in how  # one more scrape, not a failure


def test_a_server_that_serves_nothing_still_fails_at_the_deadline(clock):
    clock(at=27, pause_s=115.0, per_scrape=0.0, served_in_pause=0.0)
    with pytest.raises(AssertionError, match=r"not finished 60 requests within 120 s .*at most 115.1 s between two"):
        idle.wait_served("http://server", 0.0, 60, timeout=120.0)
