"""The environment quantkit gives one lm-eval call (pure logic: no server, no lm-eval run)."""

from __future__ import annotations

import os

from quantkit.evals.run import _lm_eval_env


def test_lm_eval_runs_its_bootstrap_in_process_and_gets_the_key_then_the_environment_is_back(monkeypatch):
    """lm-eval's bootstrap pool, forked from a process whose OpenMP threads had run a conversion,
    hung the demo's eval for 575 s: DISABLE_MULTIPROC keeps the bootstrap in this process."""
    monkeypatch.delenv("DISABLE_MULTIPROC", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "the-users-own")
    with _lm_eval_env("the-servers-key"):
        assert os.environ["DISABLE_MULTIPROC"] == "1" and os.environ["OPENAI_API_KEY"] == "the-servers-key"
    assert "DISABLE_MULTIPROC" not in os.environ and os.environ["OPENAI_API_KEY"] == "the-users-own"
    with _lm_eval_env(None):
        assert os.environ["OPENAI_API_KEY"] == "the-users-own"  # no key given: the user's stays
