"""The user guide's prose that names what the code holds: each statement checked against the code.

A test reads no docs/ (tests/ holds its own data), so these checks run here instead: `make
check-docs`, and .ci/run before the tests. One line per problem, what is wrong and where; exit 1.

usage: python scripts/check_docs.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's quantkit, whatever the environment installed
GUIDE = ROOT / "docs" / "GUIDE.md"


def data_free_list(guide: str) -> list[str]:
    """The guide's "Data-free methods (...)" names every method that needs no calibration data."""
    from quantkit.methods import METHODS

    data_free = sorted(m.name for m in METHODS if not m.calibrated)
    found = re.search(r"Data-free methods \(([^)]*)\)", guide)
    if not found:
        return [f"docs/GUIDE.md: no 'Data-free methods (...)' list; write one naming {', '.join(data_free)}"]
    listed = sorted(n.strip() for n in found.group(1).split(","))
    if listed != data_free:
        return [f"docs/GUIDE.md: 'Data-free methods ({found.group(1)})' should name {', '.join(data_free)} "
                "(quantkit/methods.py's entries without calibration)"]
    return []


def rate_floor(guide: str) -> list[str]:
    """The guide states the lowest `--rate` quantkit accepts."""
    from quantkit.numbers import MIN_RATE

    floor = f"{MIN_RATE:g} req/s"
    if floor not in guide:
        return [f"docs/GUIDE.md: does not state --rate's floor, {floor} (quantkit/numbers.py MIN_RATE)"]
    return []


CHECKS = (data_free_list, rate_floor)


def main() -> int:
    guide = GUIDE.read_text()
    problems = [line for check in CHECKS for line in check(guide)]
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
