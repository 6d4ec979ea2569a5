"""`quantkit compare --accuracy-from P`: accuracy gates from another model's evals of the same methods.

A model with random weights has real speed and no accuracy. Its variants that were not evaluated
take recovery and gate verdicts from P's evals of the variant of the same name, against P's own
baseline (computed as `variant_of` computes a model's own), and carry `accuracy_from = P`. P's
per-task scores are not copied: they are not this model's. The decision says the accuracy is a proxy.
"""

from __future__ import annotations

from ..errors import UsageError
from ..evals.gates import recovery_of
from ..labels import BASELINE
from ..store import Store
from .build import Variant


def borrow_accuracy(store: Store, model: str, proxy: str, variants: list[Variant], gates: dict | None) -> list[str]:
    """Fill recovery and `accuracy_from` of VARIANTS (MODEL's, in place) from PROXY's evals; the
    report's notes on what was not borrowed. UsageError when PROXY cannot serve as one."""
    if proxy == model:
        raise UsageError(f"--accuracy-from {proxy} names the model being compared; name another model "
                         "that was evaluated with the same methods")
    stored = store.models()
    if proxy not in stored:
        raise UsageError(f"--accuracy-from {proxy}: nothing stored for that model; the store has: {', '.join(stored)}")
    evals = {r.variant: r.result for r in store.records(model=proxy, kind="eval", status="done")}  # newest last
    baseline_eval = evals.get(BASELINE)
    if baseline_eval is None:
        raise UsageError(f"--accuracy-from {proxy}: it has no finished baseline eval to measure recovery against; "
                         f"run its baseline eval first (quantkit run RECIPE --only baseline)")
    kept, missing, notes = [], [], []
    for v in variants:
        if v.eval is not None:  # a measurement of this checkpoint beats a proxy
            kept.append(v.name)
        elif v.baseline:
            v.accuracy_from = proxy
        elif v.name in evals:
            try:
                v.recovery = recovery_of(evals[v.name], baseline_eval, gates)
                v.accuracy_from = proxy
            except UsageError as exc:
                notes.append(f"{v.name}: {proxy}'s recovery could not be computed: {exc.message}")
        else:
            missing.append(v.name)
    if missing:
        notes.append(f"{proxy} has no finished eval of {', '.join(missing)}: no accuracy, so the decision "
                     f"cannot recommend {'it' if len(missing) == 1 else 'them'}")
    if kept:
        notes.append(f"{', '.join(kept)} kept {'its' if len(kept) == 1 else 'their'} own eval: {proxy}'s was not used")
    return notes
