"""`quantkit fidelity`'s refusals: one line, exit 2, before a tokenizer, a store or a server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from quantkit.cli import app


@pytest.mark.parametrize("args, says", [
    (["--k", "30"], "bad --k: "),
    (["--min-top1", "2"], "bad --min-top1: "),
    (["--max-delta-nll", "-1"], "bad --max-delta-nll: "),
    (["--sources", "wikitext2,pile"], "unknown fidelity text source 'pile'"),
    (["--sources", "task:nope"], "unknown task 'nope'"),
    (["--sources", " , "], "--sources names no text"),
])
def test_the_command_refuses_bad_settings_in_one_line_before_reading_anything(tmp_path, args, says):
    result = CliRunner().invoke(app, ["fidelity", str(tmp_path / "v"), "--baseline", str(tmp_path / "b"), *args])
    assert result.exit_code == 2 and says in result.output and len(result.output.strip().splitlines()) == 1


def test_the_command_refuses_a_missing_folder_and_the_baseline_as_its_own_variant(tmp_path):
    missing = CliRunner().invoke(app, ["fidelity", str(tmp_path / "v"), "--baseline", str(tmp_path)])
    assert missing.exit_code == 2 and "is not a checkpoint folder" in missing.output
    same = CliRunner().invoke(app, ["fidelity", str(tmp_path), "--baseline", str(tmp_path)])
    assert same.exit_code == 2 and "the variant and the baseline are the same folder" in same.output
