"""The fidelity gate: pass, fail or inconclusive, on the figures' paired bootstrap intervals.

Two gates, each decided by its interval as the accuracy gates are (evals/gates.py): a maximum
ΔNLL passes when the interval's upper bound is at most the threshold, fails when its lower bound
is above it, and is inconclusive when the interval straddles it; a minimum top-1 agreement the
other way round. Both are exact figures (the actual token's log-probability, the argmax: listed
on both sides), so no top-k approximation enters a verdict; the KL figures are reported beside.

Defaults, and where they come from:

- `max_delta_nll` = 0.05 nats per token (perplexity up by e^0.05 - 1 = 5.1%). ΔNLL is what
  llama.cpp's `perplexity --kl-divergence` prints as "Mean ln(PPL(Q)/PPL(base))". Published
  figures on WikiText-2 (salamandra-2b-instruct's quantization table, made with it): Q8_0 0.0002,
  Q6_K 0.001, Q5_K_M 0.006, Q4_K_M 0.031 (the usual "good 4-bit" choice), Q3_K_M 0.092, IQ2_M
  0.34. 0.05 passes the 4- to 8-bit quantizations practice accepts and fails 3-bit and below. On
  the demo (SmolLM2-135M, 64 windows x 256 tokens), int8 measured 0.0099 [0.006, 0.014] (pass)
  and GPTQ 0.406 [0.372, 0.443] (fail).
- `min_top1` = 0.85 (the baseline's and the variant's argmax agree at 85% of positions). No
  published threshold was found: llama.cpp reports "Same top p" without a limit, and NVIDIA Model
  Optimizer's check (issue 44) names top-1 mismatch without one. Agreement depends on the model's
  entropy (a small model's near-ties flip more), so the default is set from the demo's measured
  figures: int8 0.915 (pass), GPTQ 0.671 (fail); 0.85 sits between, below int8 by several
  interval widths (about ±0.01 at 64 windows) so a sound 8-bit conversion is not held up by it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from ..errors import GateFailed, GateInconclusive
from ..evals.gates import Verdict, overall_verdict
from ..evals.paired import Estimate

DEFAULT_MAX_DELTA_NLL = 0.05
DEFAULT_MIN_TOP1 = 0.85


class FidelityGates(BaseModel):
    """`--max-delta-nll` and `--min-top1` (None: that gate is off)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_delta_nll: float | None = Field(DEFAULT_MAX_DELTA_NLL, gt=0, description="nats per token, on ΔNLL's upper bound")
    min_top1: float | None = Field(DEFAULT_MIN_TOP1, gt=0, le=1, description="on top-1 agreement's lower bound")


# gate name -> (the figure it reads, which way it passes)
GATE_FIGURES: dict[str, tuple[str, Literal["max", "min"]]] = {
    "max_delta_nll": ("delta_nll", "max"),
    "min_top1": ("top1_agreement", "min"),
}


class FidelityVerdict(BaseModel):
    gate: str  # a key of GATE_FIGURES
    figure: str
    threshold: float
    value: float
    low: float | None = None
    high: float | None = None
    verdict: Verdict

    @computed_field
    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def describe(self) -> str:
        """`delta_nll 0.0099 [0.0060, 0.0140] <= 0.05: pass`."""
        interval = " (no interval)" if self.low is None or self.high is None else f" [{self.low:.4f}, {self.high:.4f}]"
        good, bad = ("<=", ">") if GATE_FIGURES[self.gate][1] == "max" else (">=", "<")
        sign = {"pass": good, "fail": bad, "inconclusive": "straddles"}[self.verdict]
        return f"{self.figure} {self.value:.4f}{interval} {sign} {self.threshold:g}: {self.verdict}"


def verdict(gate: str, threshold: float, estimate: Estimate) -> FidelityVerdict:
    """One gate on one figure: decided only when the whole interval is on one side; a figure
    without an interval (one document) is inconclusive, never passed on its point value."""
    figure, direction = GATE_FIGURES[gate]
    low, high = estimate.low, estimate.high
    if low is None or high is None:
        outcome = "inconclusive"
    elif direction == "max":
        outcome = "pass" if high <= threshold else "fail" if low > threshold else "inconclusive"
    else:
        outcome = "pass" if low >= threshold else "fail" if high < threshold else "inconclusive"
    return FidelityVerdict(gate=gate, figure=figure, threshold=threshold, value=float(estimate.value), low=low,
                           high=high, verdict=outcome)


def verdicts(gates: FidelityGates, figures: dict[str, Estimate]) -> list[FidelityVerdict]:
    return [verdict(gate, threshold, figures[GATE_FIGURES[gate][0]])
            for gate, threshold in gates.model_dump().items() if threshold is not None]


def decide(gates: FidelityGates | None, figures: dict[str, Estimate]) -> tuple[list[FidelityVerdict], Verdict | None]:
    """Each gate's verdict on its figure's interval and the one over them all (None: no gate): a
    result summarized now (run.py) and a stored one judged again under other gates (report)."""
    checked = verdicts(gates, figures) if gates is not None else []
    return checked, overall_verdict([v.verdict for v in checked])


def failure_message(results: list[FidelityVerdict]) -> str | None:
    """One line, as evals/gates.gate_failure_message's: the failed gates, else the undecided
    ones; None when every gate passed (or none was set)."""
    failed = [v for v in results if v.verdict == "fail"]
    undecided = [v for v in results if v.verdict == "inconclusive"]
    if failed:
        return "fidelity gate failed: " + "; ".join(v.describe() for v in failed)
    if undecided:
        return ("fidelity gate inconclusive: " + "; ".join(v.describe() for v in undecided)
                + " (more windows narrow the interval: --windows N)")
    return None


def gates_text(gates: FidelityGates | None) -> str:
    """The gates in words: `ΔNLL <= 0.05, top-1 agreement >= 0.85`."""
    words = {"max_delta_nll": "ΔNLL <= {:g}", "min_top1": "top-1 agreement >= {:g}"}
    return ", ".join(words[k].format(v) for k, v in (gates.model_dump() if gates else {}).items() if v is not None)


def raise_for_verdicts(results: list[FidelityVerdict]) -> None:
    """Exit as the accuracy gates do: 3 when a gate failed, 4 when one is undecided."""
    message = failure_message(results)
    if message is not None:
        raise (GateFailed if any(v.verdict == "fail" for v in results) else GateInconclusive)(message)
