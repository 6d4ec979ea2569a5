"""The built-in demo (`quantkit demo`, `make demo`): which run recipe fits this CPU, and how long it
takes here.

- `demo` (recipes/runs/demo.yaml): CPUs that compute bf16 natively (AVX-512 BF16, AMX, Arm bf16),
  and every GPU machine: bf16 vs W8A8-INT8 vs GPTQ W4A16. On AVX-512 BF16 without AMX its GPTQ
  lane is left out (`leave_out`): vLLM-CPU's 4-bit kernel serves there at ~0.4x bf16, so its
  capacity windows, at under 1 req/s, alone took the demo past 20 minutes; the report says so.
- `demo-fp32` (recipes/runs/demo-fp32.yaml): CPUs that would emulate bf16 (AVX2, AVX-512 without
  BF16, Arm without bf16): served in float32, GPTQ left out (no AVX2 kernel for 4-bit weights in
  vLLM-CPU), 50 items per quick-suite task. Its header says why each setting differs.

The expected time is each recipe's wall time measured on its reference machine (a fresh store,
the environments built), scaled by how fast one core of this machine multiplies SmolLM2-shaped
matrices in the dtype the demo serves in against the same probe there: the demo's conversions,
prefills and decodes are such matmuls. One core, because a two-thread probe on 2 busy cores read
16-42 GFLOP/s where one thread read 100 (threads wait for each other); more cores than the
reference's 2 shorten the demo less than in proportion, so it is not scaled by them. A faster
core does not shorten it below the recipe's fastest measured run (`floor_s`): the capacity
windows are seconds of traffic, not work (a faster server is offered more requests in the same
windows), and the server starts and waits stay. It is an estimate, said as one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .machine import CpuIsa, cpu_isa, has_gpu


@dataclass(frozen=True)
class DemoProfile:
    recipe: str  # a built-in run recipe's name
    why: str
    dtype: str  # what its variants are served in on such a CPU
    reference_s: float  # `quantkit demo` with a fresh store, on the reference machine
    reference_gflops: float  # probe_gflops(dtype) on that machine, the same day
    reference: str  # the reference machine
    floor_s: float = 0.0  # the recipe's fastest measured run: no faster core goes below it
    leave_out: tuple[str, ...] = ()  # the recipe's lanes not run on such a CPU ...
    left_out_because: str = ""  # ... and why

    @property
    def says(self) -> str:
        """Why this recipe, and what it leaves out: the demo's first console line."""
        return self.why + (f"; {', '.join(self.leave_out)} left out: {self.left_out_because}" if self.leave_out else "")

    def lanes(self, labels: list[str]) -> list[str] | None:
        """The recipe's lanes to run (`quantkit run --only`), or None for all of them."""
        return [x for x in labels if x not in self.leave_out] if self.leave_out else None


# Measured 2026-12-05 on a 2-core AMD EPYC with AVX-512 BF16, a fresh store each: natively (1,221 s;
# probe bf16 187-193 GFLOP/s), and imitating AVX2 (QUANTKIT_CPU_ISA=avx2: vLLM-CPU's _C_AVX2
# kernels, ATen and oneDNN held to AVX2; 738 s; probe float32 82-89 GFLOP/s). On 12-06 a real
# 2-core AVX2 EPYC (no AVX-512) took 935 s (probe float32 71 GFLOP/s; the estimate from the
# imitation said 15 min): float32 reference. Serving is partly
# memory-bound where the probe is not: on the AVX2 machine of issue 38 the probe read 11 GFLOP/s
# (~8x below the imitation) while SmolLM2 served float32 ~1.5x slower, so on a CPU whose matmuls
# are slow the estimate errs long.
# demo.yaml since 12-07 (fidelity stage included, the quick suite at 50 items, fidelity at 8 windows):
# 1,054 s on a 2-core AVX-512 BF16 EPYC (Zen 4) with both conversions read back from the models
# folder, plus their 74 s (int8 41 s, GPTQ 33 s) in that machine's run of the same morning (at 100
# items and 16 windows, 1,387 s): 1,128 s with a fresh store; probe bf16 162-171 GFLOP/s.
# On 12-07 evening a 2-core Intel Xeon with AMX (probe bf16 455 GFLOP/s, 2.7x the EPYC's) took
# 1,106 s with a fresh store, not the ~7 min that scaling by the probe predicted: its capacities
# were higher (bf16 3.44 req/s against 2.28), so its searches took as many windows of the same
# seconds (the baseline's 7 points, 291 s). That run is the native recipe's floor. demo-fp32's
# floor is its fastest run, the AVX2 imitation's 738 s.
NATIVE_BF16 = DemoProfile("demo", "the CPU computes bf16 natively", "bfloat16",
                          reference_s=1128.0, reference_gflops=167.0,
                          reference="2-core AMD EPYC, AVX-512 BF16", floor_s=1106.0)
# GPTQ W4A16 on a 2-core AVX-512 BF16 EPYC (Zen 4, no AMX): 0.90 req/s against bf16's 2.28 (12-07
# morning), 0.84 (undecided) against 1.79 (12-07 night), where the AMX Xeon served it at 4.00 against
# 3.44. At under 1 req/s each window must stretch to 75-120 s to hold the 59 requests a p95 pass
# needs: the lane (conversion, server, search, quick suite, fidelity) cost 7-8 minutes of the 20.
# Without it, 12-07 night on a fresh clone of that Zen 4: 773 s after a 177-s set-up (probe bf16
# 193-195 GFLOP/s), the reference and the floor.
NATIVE_NO_AMX = DemoProfile("demo", "the CPU computes bf16 natively", "bfloat16", reference_s=773.0,
                            reference_gflops=194.0, reference="2-core AMD EPYC, AVX-512 BF16, no AMX", floor_s=773.0,
                            leave_out=("gptq",), left_out_because="without AMX vLLM-CPU serves GPTQ's 4-bit weights "
                            "at ~0.4x bf16 (0.90 against 2.28 req/s), too slow to measure within the demo's 20 minutes")
FLOAT32 = DemoProfile("demo-fp32", "the CPU would emulate bf16: served in float32, GPTQ and fidelity left out",
                      "float32", reference_s=935.0, reference_gflops=71.0,
                      reference="2-core AMD EPYC with AVX2 (no AVX-512)", floor_s=738.0)


def profile_for(isa: CpuIsa | None = None) -> DemoProfile:
    """The demo recipe for this machine: demo on a GPU or a native-bf16 CPU (without its GPTQ lane
    on AVX-512 BF16 without AMX), demo-fp32 elsewhere."""
    if has_gpu():
        return NATIVE_BF16
    isa = isa or cpu_isa()
    if isa.name == "avx512_bf16":
        return NATIVE_NO_AMX
    return NATIVE_BF16 if isa.native_bf16 else FLOAT32


# SmolLM2-135M's MLP up-projection for a batch of 64 tokens: the demo's typical matmul
PROBE_SHAPE = (64, 576, 1536)


def probe_gflops(dtype: str, seconds: float = 1.0) -> float:
    """GFLOP/s of PROBE_SHAPE matmuls in `dtype` on one core, best of three runs of about
    `seconds` / 3 each (after a warm-up)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _best_gflops(torch, dtype, seconds)
    finally:
        torch.set_num_threads(threads)


def _best_gflops(torch, dtype: str, seconds: float) -> float:
    m, k, n = PROBE_SHAPE
    kind = getattr(torch, dtype)
    a, b = torch.randn(m, k).to(kind), torch.randn(k, n).to(kind)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(3):
        reps, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds / 3:
            a @ b
            reps += 1
        best = max(best, 2.0 * m * k * n * reps / elapsed / 1e9)
    return best


def expected_s(profile: DemoProfile, gflops: float) -> float | None:
    """The demo's expected wall time here (set-up excluded), or None without a reference: the
    reference's time scaled by the probe, but not below the recipe's floor."""
    if not profile.reference_s or not profile.reference_gflops or gflops <= 0:
        return None
    return max(profile.floor_s, profile.reference_s * profile.reference_gflops / gflops)
