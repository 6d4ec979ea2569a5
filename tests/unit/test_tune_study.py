"""The tuner's bookkeeping with a fake trial runner (no server): the budget counts servers, every
trial is a store record, a second call continues the study from the store, rejected and invalid
configurations are recorded and skipped."""

from __future__ import annotations

import pytest

from quantkit.measure.tune import study as tune
from quantkit.measure.capacity.live import CapacitySettings
from quantkit.measure.stats.slo import parse_slo
from quantkit.serve.config import ServeConfig
from quantkit.store import Store

SLO = parse_slo("ttft_p95=1,tpot_p95=0.1")


def goodput(params):
    """A landscape with one best point: max-num-seqs 16 with a 512-token budget."""
    seqs = params.get("max_num_seqs") or 128
    budget = params.get("max_num_batched_tokens") or 2048
    return round(2.0 + 1.0 / (1 + abs(seqs - 16) / 8) + 0.5 / (1 + abs(budget - 512) / 256), 4)


@pytest.fixture
def fake(monkeypatch):
    calls = []

    def run_trial(model_dir, config, slo, settings, capacity, prompts, should_prune, **kw):
        params = {k: getattr(config, k) for k in ("max_num_seqs", "max_num_batched_tokens")}
        calls.append(params)
        if config.max_num_seqs == 3:
            return {"state": "rejected", "error": "vLLM could not serve it: bad value", "points": 0, "startup_s": None,
                    "seconds": 1.0}
        value = goodput(params)
        probe = value * 0.9
        if should_prune(probe):
            return {"state": "pruned", "probe": probe, "points": 3, "startup_s": 1.0, "seconds": 2.0}
        return {"state": "complete", "probe": probe, "value": value, "points": 7, "startup_s": 1.0, "seconds": 3.0,
                "capacity": {"load": 8, "req_s": value, "output_tok_s": 64 * value, "goodput_req_s": value,
                             "point_index": 0},
                "capacity_load": 8.0, "bound": None}

    monkeypatch.setattr(tune, "run_trial", run_trial)
    monkeypatch.setattr(tune, "PromptSource", lambda *a, **k: None)
    monkeypatch.setattr(tune, "_gpu_count", lambda: 0)
    return calls


def study(store, tmp_path, budget, space=None, sampler="tpe"):
    settings = tune.TuneSettings(budget=budget, sampler=sampler, knobs=["max_num_seqs", "max_num_batched_tokens"],
                                 space=space or {"max_num_seqs": [None, 3, 8, 16, 32],
                                                 "max_num_batched_tokens": [None, 256, 512, 1024]})
    space_ = tune.resolve_space(settings, gpus=0)
    return tune.tune_study(store, model="m", variant="v", model_dir=tmp_path, slo=SLO, capacity=CapacitySettings(),
                           settings=settings, base=ServeConfig(enforce_eager=True), study="study-1", space=space_)


def test_budget_store_records_and_resume(fake, tmp_path):
    with Store(tmp_path / "r.db") as store:
        first = study(store, tmp_path, 5)
        assert first.server_starts == 5 == len(fake) and first.complete
        assert first.trials[0].label == "defaults" and first.defaults is first.trials[0]  # the base goes first
        assert len(store.records(kind="trial", status="done")) == len(first.trials)
        assert first.best.value == max(t.value for t in first.trials if t.state == "complete" and t.value)
        assert first.gain == pytest.approx(first.best.value / first.defaults.value)
        assert first.best.command.startswith("vllm serve ") and "--enforce-eager" in first.best.command
        again = study(store, tmp_path, 5)  # the same study, the same budget: nothing left to spend
        assert len(fake) == 5 and again.server_starts == 5 and all(t.reused for t in again.trials)
        more = study(store, tmp_path, 8)  # a larger budget continues it
        assert more.server_starts == 8 and len(fake) == 8
        assert len({t.run_key for t in more.trials}) == len(more.trials)  # no configuration twice


def test_rejected_and_invalid_configurations(fake, tmp_path):
    space = {"max_num_seqs": [None, 3], "max_num_batched_tokens": [None, 256], "enable_chunked_prefill": [None, False]}
    settings = tune.TuneSettings(budget=8, sampler="grid", space=space,
                                 knobs=["max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"])
    with Store(tmp_path / "r.db") as store:
        result = tune.tune_study(store, model="m", variant="v", model_dir=tmp_path, slo=SLO,
                                 capacity=CapacitySettings(), settings=settings, base=ServeConfig(), study="s2",
                                 space=tune.resolve_space(settings, gpus=0))
    assert len(result.trials) == 8 and result.complete  # the whole grid
    invalid = [t for t in result.trials if t.error and t.error.startswith("not started")]
    assert len(invalid) == 2  # 256-token budget without chunked prefill < max-model-len 2048: never started
    rejected = [t for t in result.trials if t.state == "rejected" and not t.error.startswith("not started")]
    assert rejected and all(t.params["max_num_seqs"] == 3 for t in rejected)
    assert result.server_starts == 6 == len(fake)  # the invalid ones cost no server


def test_space_merging_and_errors(fake_cpu):
    fake_cpu("avx512_bf16")  # its space holds the FP8 KV cache (an AVX2 CPU's does not: test_cpu_isa)
    s = tune.resolve_space(tune.TuneSettings(space={"max-num-seqs": ["8", "default"], "block_size": []}), gpus=0)
    assert s["max_num_seqs"] == [8, None] and "block_size" not in s and "kv_cache_dtype" in s
    gpu = tune.resolve_space(tune.TuneSettings(), gpus=4)
    assert gpu["tensor_parallel_size"] == [None, 2, 4] and "gpu_memory_utilization" in gpu
    assert tune.parse_space(["kv-cache-dtype=auto,fp8"]) == {"kv_cache_dtype": [None, "fp8"]}
    from quantkit.errors import UsageError

    with pytest.raises(UsageError, match="unknown tune knob"):
        tune.parse_space(["max-num-seq=8"])
    with pytest.raises(UsageError, match="empty"):
        tune.resolve_space(tune.TuneSettings(knobs=["max_num_seqs"], space={"max_num_seqs": []}), gpus=0)
    assert tune.invalid(ServeConfig(tensor_parallel_size=2), gpus=1) == "needs 2 GPUs, this machine has 1"


def test_a_base_configuration_without_a_trusted_capacity_gives_no_gain_and_says_why(fake, tmp_path, monkeypatch):
    """The base trial's first point was client-limited (2 cores): value 0 for Optuna, but it is not
    an SLO failure, and the gain against it is left out with the reason."""
    inner = tune.run_trial

    def run_trial(model_dir, config, slo, settings, capacity, prompts, should_prune, **kw):
        if config.max_num_seqs is None and config.max_num_batched_tokens is None:
            return {"state": "complete", "value": 0.0, "points": 1, "startup_s": 1.0, "seconds": 2.0,
                    "error": "no trusted capacity: the point at concurrency 1 was limited by "
                             "quantkit's client, not the server, so it decides nothing"}
        return inner(model_dir, config, slo, settings, capacity, prompts, should_prune, **kw)

    monkeypatch.setattr(tune, "run_trial", run_trial)
    with Store(tmp_path / "r.db") as store:
        result = study(store, tmp_path, 3, space={"max_num_seqs": [None, 8, 16]}, sampler="grid")
    assert result.defaults is not None and result.defaults.value == 0.0
    assert result.best is not None and result.best.value > 0 and result.gain is None
    assert "no trusted capacity" in result.best_reason
    assert tune.summarize_study(tmp_path, "s", SLO, result.settings, CapacitySettings(), result.space,
                                ServeConfig(), [result.defaults], 1, 1.0).best_reason.startswith(
        "no configuration has a trusted capacity")


def test_a_search_stopped_by_the_client_says_so_whether_probe_or_full_search():
    """run_trial names an untrusted search "no trusted capacity" for the probe and for the full search
    (which starts at the probe's capacity and can meet a client-limited point there: CI, 2 cores),
    and nothing for a search whose SLO simply failed at the lowest load."""
    from quantkit.measure.capacity.live import CapacityResult
    from quantkit.measure.capacity.search import CapacitySearch

    def result(reason):
        search = CapacitySearch(capacity=None, ceiling=2.0, reason=reason, tolerance=0.1, lo=2.0, hi=8.0, steps=[])
        return CapacityResult(model_dir="m", slo="ttft_p95=1", settings=CapacitySettings(profile="burst", start=2), search=search)

    assert tune._untrusted_error(result("untrusted")).startswith("no trusted capacity: the point at c=2 (burst)")
    assert tune._untrusted_error(result("below_min")) is None


@pytest.mark.parametrize("prune", [True, False])
def test_a_trial_probes_only_where_pruning_may_stop_it(monkeypatch, tmp_path, prune):
    """run_trial's searches, a fake server and fake searches: with pruning, a probe at the coarse
    tolerance, then the full search from the probe's capacity without warm-up; without it, the full
    search alone, from where the settings start, with their warm-up."""
    from types import SimpleNamespace

    from quantkit.measure.capacity.search import CapacitySearch
    from quantkit.serve import server as server_module

    class FakeServer:
        info = SimpleNamespace(startup_s=1.0)

        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    searches = []

    def run_capacity(server, model_dir, slo, settings, *, prompts, start=None, label="", on_point=None):
        searches.append((settings.tolerance, settings.warmup, start, label))
        capacity = SimpleNamespace(load=12.0, goodput_req_s=11.5, req_s=11.8)
        search = CapacitySearch(capacity=12.0, ceiling=13.0, reason="bracketed", tolerance=settings.tolerance, lo=1, hi=64,
                                steps=[])
        return SimpleNamespace(points_spent=3, capacity=capacity, bound=None, search=search)

    monkeypatch.setattr(server_module, "VLLMServer", FakeServer)
    monkeypatch.setattr(tune, "run_capacity", run_capacity)
    settings = tune.TuneSettings(prune=prune)
    out = tune.run_trial(tmp_path, ServeConfig(), SLO, settings, CapacitySettings(start=8, warmup=2), None,
                         should_prune=lambda value: False, label_="fp8 defaults")
    full = (0.1, 0 if prune else 2, 12.0 if prune else None, "fp8 defaults")
    assert searches == ([(0.5, 2, None, "fp8 defaults probe"), full] if prune else [full])
    assert out["value"] == 11.5 and out["points"] == (6 if prune else 3) and out["verdict"] == "capacity"
    assert (out.get("probe") is None) != prune
