"""`fidelity.run.measure` with servers whose answers are known: an interrupted run keeps the
windows it finished, the next one serves only the rest, a larger one only the new ones, and one
whose windows are all stored serves and writes nothing.

The servers are fakes (their truth: the baseline puts log-probability -1.0 on the actual token,
the variant -1.25, both list one other token); the windows, tokenizer, fingerprints and store are
real."""

from __future__ import annotations

import contextlib
import json
import shutil

import pytest

from quantkit.fidelity import run as fidelity_run
from quantkit.fidelity.client import WindowLogprobs
from quantkit.fidelity.gate import FidelityGates
from quantkit.fidelity.result import FidelitySettings, window_id
from quantkit.store import Store

OTHER = 0  # a token id no window's next token is compared with: the one other listed token


@pytest.fixture
def variant_dir(smollm2_dir, tmp_path):
    """The demo model's files under another config.json: another fingerprint, the same tokenizer."""
    folder = tmp_path / "smollm2-135m-w4a16-rtn"
    folder.mkdir()
    for item in smollm2_dir.iterdir():
        if item.is_file() and item.name not in ("config.json", "quantkit.json"):
            (folder / item.name).symlink_to(item)
    config = json.loads((smollm2_dir / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "fake_variant": True}))
    return folder


@pytest.fixture
def served(monkeypatch, tmp_path):
    """Fake servers; `calls` lists (role, window ids) of every request batch; `fail_after` makes
    the variant's nth batch a Ctrl-C."""
    monkeypatch.setenv("QUANTKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(fidelity_run, "CHUNK", 2)
    state = {"calls": [], "fail_after": None}

    @contextlib.contextmanager
    def open_server(folder, url, config):
        yield "variant" if folder.name.endswith("rtn") else "baseline"

    def prompt_logprobs(server, windows, k, concurrency):
        state["calls"].append((server, [window_id(w) for w in windows]))
        if server == "variant" and state["fail_after"] is not None:
            if sum(role == "variant" for role, _ in state["calls"]) > state["fail_after"]:
                raise KeyboardInterrupt
        actual = -1.0 if server == "baseline" else -1.25
        return [WindowLogprobs(w, [{t: actual, OTHER: -3.0} if t != OTHER else {t: actual} for t in w.token_ids[1:]])
                for w in windows]

    monkeypatch.setattr(fidelity_run, "open_server", open_server)
    monkeypatch.setattr(fidelity_run, "prompt_logprobs", prompt_logprobs)
    monkeypatch.setattr("quantkit.serve.env.installed_vllm_version", lambda: "0.32.0")  # no subprocess
    return state


def test_an_interrupted_run_is_resumed_a_larger_one_extended_and_a_stored_one_re_rendered(
        served, smollm2_dir, variant_dir, data_dir):
    def measure(n):
        served["calls"].clear()
        return fidelity_run.measure(variant_dir, smollm2_dir, settings=FidelitySettings(windows=n, window_len=32),
                                     gates=FidelityGates())

    served["fail_after"] = 1  # the variant's second chunk of 2 windows is interrupted
    with pytest.raises(KeyboardInterrupt):
        measure(4)
    served["fail_after"] = None
    result = measure(4)
    assert served["calls"] == [("baseline", served["calls"][0][1]), ("variant", served["calls"][0][1])]
    assert len(served["calls"][0][1]) == 2  # only the 2 windows the interrupted run did not store
    assert (result.windows, result.reused_windows, result.scored_windows) == (4, 2, 2)
    assert result.figures["delta_nll"].value == pytest.approx(0.25)
    assert result.figures["top1_agreement"].value == 1.0 and result.verdict == "fail"  # 0.25 > 0.05

    larger = measure(6)
    assert [len(ids) for _, ids in served["calls"]] == [2, 2] and larger.reused_windows == 4
    assert larger.run_key == result.run_key

    again = measure(6)
    assert served["calls"] == [] and again.reused_windows == 6 and again.figures == larger.figures
    with Store() as store:
        records = store.records(kind="fidelity", keys=[result.run_key])
        assert [r.status for r in records] == ["interrupted", "done"]  # the 4-window done one replaced
        assert len(store.points(records[-1].id)) == 6
