"""The wheel's package list (pyproject.toml names each package: recipes/ and evals/ ship as data
packages under other names) holds every code package: a sub-package left out of it is missing
from an installed quantkit (a bundle's wheel, PyPI) while an editable checkout still imports it."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_code_package_ships_in_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "quantkit").rglob("__init__.py")}
    assert found and not found - listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert not {p for p in listed if p.startswith("quantkit.") and p not in found} - {"quantkit.recipes", "quantkit.eval_tasks"}
