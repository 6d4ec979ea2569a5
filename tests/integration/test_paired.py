"""Paired recovery and growing on real lm-eval samples: SmolLM2-135M (bf16, on the session's shared
server) and its quantized conversion (the session's `quantized_checkpoint`: W4A16 round-to-nearest,
or W8A8-INT8 on an AVX2 CPU; on the session's `quantized_server`, which test_fidelity_command
serves its variant from too), scored on the same arc_easy items, then grown
by one seeded block on both.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fixtures.idle import wait_idle

pytestmark = pytest.mark.integration

TASK, LIMIT, STEP, SEED = "arc_easy", 30, 10, 1234


def _evaluate(server, folder: Path, out: Path):
    """Score LIMIT items, then grow the result by one block, on one server."""
    from quantkit.evals.grow import grow_result
    from quantkit.evals.run import prepare_eval, run_eval

    first = run_eval(server, prepare_eval(folder, TASK, limit=LIMIT, output_dir=out / "first"))
    grown = grow_result(server, prepare_eval(folder, TASK, limit=LIMIT, output_dir=out / "grown"), first,
                        {TASK: LIMIT + STEP}, {TASK: (SEED, STEP)})
    return first, grown


@pytest.fixture(scope="module")
def runs(smollm2_dir, bf16_server, quantized_checkpoint, quantized_server, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("paired")
    wait_idle(bf16_server)  # the session's bf16 server, and its quantized one
    base_first, base_grown = _evaluate(bf16_server, smollm2_dir, out / "bf16")
    wait_idle(quantized_server)
    quant_first, quant_grown = _evaluate(quantized_server, quantized_checkpoint, out / "quantized")
    return {"base": base_first, "base_grown": base_grown, "quant": quant_first, "quant_grown": quant_grown}


def test_item_scores_reach_the_record_and_match_the_samples(runs):
    (task,) = runs["quant"].tasks
    assert task.items is not None and task.items.ids == [str(i) for i in range(LIMIT)]
    rows = {json.loads(line)["doc_id"]: json.loads(line) for line in Path(task.samples_file).read_text().splitlines()}
    for i, doc in enumerate(task.items.ids):
        row = rows[int(doc)]
        assert task.items.values["acc_norm,none"][i] == row["acc_norm"]
        assert task.items.prompts[i] == row["prompt_hash"][:8]
    # what the record holds is enough: the samples file is not read again
    assert task.metrics["acc_norm,none"].value == pytest.approx(sum(task.items.values["acc_norm,none"]) / LIMIT)


def test_paired_interval_is_narrower_than_the_independent_one(runs):
    from quantkit.evals.gates import compare_to_baseline

    report = compare_to_baseline(runs["quant"], runs["base"], {"min_recovery": 0.5}, raise_on_fail=False)
    (row,) = report.tasks
    assert row.method == "paired delta" and row.n_items == LIMIT
    paired_width = row.recovery_high - row.recovery_low
    independent_width = row.independent_high - row.independent_low
    print(f"\nrecovery {row.recovery:.4f}: paired [{row.recovery_low:.4f}, {row.recovery_high:.4f}] "
          f"width {paired_width:.4f}; independent width {independent_width:.4f}")
    q, b = runs["quant"].tasks[0].items.values["acc_norm,none"], runs["base"].tasks[0].items.values["acc_norm,none"]
    if q == b:  # INT8 on an AVX2 CPU (12-06) scored every item as its baseline: zero variance, so the
        # interval is paired.py's floor (half a discordant pair each way), not a point that passes any gate
        floor = math.sqrt(1 / (LIMIT * (LIMIT + 1))) / (sum(b) / LIMIT)
        assert row.recovery_stderr == pytest.approx(floor)
    assert 0 < paired_width < independent_width
    # the per-item outcomes of the two checkpoints are correlated: that is what narrows it
    qm, bm = sum(q) / len(q), sum(b) / len(b)
    cov = sum((x - qm) * (y - bm) for x, y in zip(q, b)) / (len(q) - 1)
    assert cov > 0


def test_growing_scores_only_the_next_seeded_block_and_keeps_the_stored_items(runs, smollm2_dir):
    from quantkit.evals.grow import item_order

    for first, grown in ((runs["base"], runs["base_grown"]), (runs["quant"], runs["quant_grown"])):
        (a,), (g,) = first.tasks, grown.tasks
        split = a.n_available
        expected = item_order(split, LIMIT, SEED, TASK)[:LIMIT + STEP]
        assert sorted(int(i) for i in g.items.ids) == sorted(expected)
        assert g.n_samples == LIMIT + STEP and g.growth.blocks == 1 and g.growth.seed == SEED
        # the stored items are carried over, not re-scored: the new samples file holds only the block
        new_rows = [json.loads(line) for line in Path(g.samples_file).read_text().splitlines()]
        assert sorted(r["doc_id"] for r in new_rows) == sorted(expected[LIMIT:])
        old = dict(zip(a.items.ids, a.items.values["acc_norm,none"]))
        for doc, value in zip(g.items.ids, g.items.values["acc_norm,none"]):
            if doc in old:
                assert value == old[doc]
        # the grown metrics are lm-eval's aggregation over all items
        values = g.items.values["acc_norm,none"]
        mean = sum(values) / len(values)
        assert g.metrics["acc_norm,none"].value == pytest.approx(mean)
        assert g.metrics["acc_norm,none"].stderr == pytest.approx(math.sqrt(mean * (1 - mean) / (len(values) - 1)))


def test_grown_results_pair_and_a_grown_baseline_still_pairs_with_an_ungrown_variant(runs):
    from quantkit.evals.gates import compare_to_baseline

    grown = compare_to_baseline(runs["quant_grown"], runs["base_grown"], raise_on_fail=False)
    assert grown.tasks[0].n_items == LIMIT + STEP
    small = compare_to_baseline(runs["quant"], runs["base_grown"], raise_on_fail=False)
    assert small.tasks[0].n_items == LIMIT
    assert small.tasks[0].recovery == pytest.approx(compare_to_baseline(runs["quant"], runs["base"]).tasks[0].recovery)
    print(f"\nat {LIMIT} items: paired stderr {small.tasks[0].recovery_stderr:.4f}; "
          f"at {LIMIT + STEP}: {grown.tasks[0].recovery_stderr:.4f}")
