"""The suite's own layout. tests/ has no __init__.py packages, so pytest imports every test module
by its basename: two files with one name in unit/ and integration/ stop collection of the whole
suite ("import file mismatch"), which a run of one folder never shows."""
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_test_modules_share_a_basename():
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
    assert len(seen) > 50  # the walk found the suite
