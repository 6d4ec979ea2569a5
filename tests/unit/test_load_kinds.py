"""The two registries of load: a point's kind (load_kinds.py) and the capacity search's profile
(profiles.py); the rest of quantkit asks their entries, never the names."""

from types import SimpleNamespace

from quantkit.measure.stats import load_kinds
from quantkit.measure.capacity import profiles


def test_every_profile_has_a_known_axis():
    for profile in profiles.PROFILES.values():
        assert profile.kind is load_kinds.KINDS[profile.axis]
    assert profiles.get("burst").kind.integer and not profiles.get("poisson").kind.integer
    assert profiles.get("poisson").kind.open_loop and not profiles.get("concurrency").kind.open_loop


def test_find_and_aliases():
    assert profiles.canonical("rate") == "poisson" and profiles.find("rate") is profiles.PROFILES["poisson"]
    assert profiles.find("someday") is None and profiles.find(None) is None
    assert [p.workload_text for p in profiles.PROFILES.values()] == [
        "", ", concurrency profile", ", burst profile (c prompts at once: not a steady state)"]


def test_a_points_load_prints_as_before():
    c = SimpleNamespace(profile="concurrency", concurrency=8, rate=None)
    r = SimpleNamespace(profile="rate", concurrency=None, rate=28.0)
    assert [load_kinds.kind(c.profile).text(c, s) for s in ("short", "label", "where", "phrase", "sentence")] == [
        "c=8", "c=8", "c=8", "concurrency 8", "concurrency 8"]
    assert [load_kinds.kind(r.profile).text(r, s) for s in ("short", "label", "where", "phrase", "sentence")] == [
        "28/s", "rate=28/s", "28.0 req/s", "rate 28.0/s", "28.0 requests/s"]
    assert load_kinds.kind("rate").load_of({"profile": "rate", "rate": 3.0}) == 3.0
    assert load_kinds.kind(None) is load_kinds.KINDS["rate"]  # as `concurrency if .. else rate` read it
