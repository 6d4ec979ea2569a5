"""`quantkit --help` starts in about half a second because building the typer app imports only typer,
rich and the pydantic settings its options are made from; each command imports its machinery when it
runs (cli/__init__.py). One top-level import of the pipeline, the search or the report would undo that
silently (1.2 s before ab77870 on 2 cores), so this names what building the app must not load."""

from __future__ import annotations

import json
import subprocess
import sys

# each of these took 0.1-0.5 s to import on a 2-core AVX2 EPYC, or pulls in one that does
HEAVY = ["numpy", "httpx", "aiohttp", "torch", "transformers", "lm_eval", "llmcompressor", "huggingface_hub",
         "matplotlib", "ray", "optuna", "quantkit.pipeline", "quantkit.measure.capacity.live",
         "quantkit.measure.capacity.search", "quantkit.report.build", "quantkit.report.render",
         "quantkit.report.records", "quantkit.serve.server", "quantkit.quantize", "quantkit.checkpoint",
         "quantkit.models", "quantkit.fidelity"]


SCRIPT = """
import json, runpy, sys
sys.argv = ["quantkit", "--help"]
try:
    runpy.run_module("quantkit", run_name="__main__")  # what `python -m quantkit --help` runs
except SystemExit:
    pass
print(json.dumps([m for m in HEAVY if m in sys.modules]), file=sys.stderr)
"""


def test_quantkit_help_imports_none_of_the_commands_machinery():
    code = f"HEAVY = {HEAVY!r}\n{SCRIPT}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "Usage" in out.stdout, out.stderr[-2000:]
    loaded = json.loads(out.stderr.strip().splitlines()[-1])
    assert loaded == [], "imported by `quantkit --help`: move the import into the command that needs it"
