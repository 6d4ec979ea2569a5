"""The CLI's `--json` output and the reports re-rendered from the committed stores are byte-identical
to their pins (tests/fixtures/pins.py says what is pinned and how to re-pin a change meant to alter
them): a refactor that changes what a user reads fails here, with the outputs it changed."""

from __future__ import annotations

import json

from fixtures.pins import PINS, outputs


def test_outputs_match_their_pins(tmp_path):
    pinned = json.loads(PINS.read_text())
    now = outputs(tmp_path)
    assert now.keys() == pinned.keys(), sorted(now.keys() ^ pinned.keys())
    changed = sorted(name for name in pinned if now[name] != pinned[name])
    assert not changed, f"{len(changed)} of {len(pinned)} outputs changed: {changed}"
