"""Growing items until a gate is decided: the seeded order, the goal from the items-needed
estimate, and the growth phase of `quantkit run` (its rounds, records and resume) with a scorer
whose per-item truth is known in place of a served model (the real scoring is
tests/integration/test_paired.py)."""

from __future__ import annotations

import random
from contextlib import contextmanager
from pathlib import Path

import pytest

from quantkit.evals import gates, grow, results
from quantkit.evals.gates import GrowSettings

SPLIT, LIMIT = 2000, 100


def test_item_order_is_the_first_limit_then_a_seeded_permutation():
    order = grow.item_order(SPLIT, LIMIT, 1234, "arc_easy")
    assert order[:LIMIT] == list(range(LIMIT)) and sorted(order) == list(range(SPLIT))
    assert order[LIMIT:] != list(range(LIMIT, SPLIT))
    assert order == grow.item_order(SPLIT, LIMIT, 1234, "arc_easy")  # reproducible
    assert order != grow.item_order(SPLIT, LIMIT, 1235, "arc_easy")
    assert order != grow.item_order(SPLIT, LIMIT, 1234, "piqa")  # each subtask its own order
    assert grow.item_order(50, LIMIT, 1, "x") == list(range(50))


def test_blocks_for_rounds_up_to_whole_blocks():
    assert [grow.blocks_for(n, 100, 100) for n in (50, 100, 101, 200, 201)] == [0, 0, 1, 1, 2]


# ----------------------------------------------------------------------------------------------
# A known truth: the baseline gets 60% of the items right, the variant loses every 9th of those


def truth(variant: str, doc: int) -> int:
    right = random.Random(f"b{doc}").random() < 0.6
    if variant == "baseline":
        return int(right)
    return int(right and doc % 9 != 0)


def scored(variant: str, docs: list[int], task="arc_easy", limit=LIMIT, growth=None) -> results.TaskResult:
    docs = sorted(docs)
    values = [truth(variant, d) for d in docs]
    mean = sum(values) / len(values)
    return results.TaskResult(
        task=task, version="1.0", n_shot=0, limit=limit, n_samples=len(docs), n_available=SPLIT,
        output_type="multiple_choice", chat_template=False, add_bos_token=False,
        data=results.DataInfo(source="offline", template="stock:x.yaml"), primary_metric="acc,none",
        metrics={"acc,none": results.Metric(value=mean, stderr=(mean * (1 - mean) / (len(docs) - 1)) ** 0.5)},
        items=results.ItemScores(ids=[str(d) for d in docs], prompts=[f"{d:08x}" for d in docs],
                                 values={"acc,none": values}),
        growth=growth, wall_time_s=1.0)


def eval_run(variant: str, docs: list[int], growth=None) -> results.EvalRun:
    return results.EvalRun(created_at="2026-12-01T00:00:00+00:00", model_dir=f"/m/{variant}", checkpoint={}, server={},
                           protocol={}, data_dir=None, versions={}, tasks=[scored(variant, docs, growth=growth)],
                           results_file=f"/r/{variant}.json")


def test_targets_follow_the_estimate_in_whole_blocks_and_stop_at_the_cap():
    base, quant = eval_run("baseline", list(range(LIMIT))), eval_run("gptq", list(range(LIMIT)))
    report = gates.compare_to_baseline(quant, base, {"min_recovery": 0.93}, raise_on_fail=False)
    (gate,) = report.gates
    assert gate.verdict == "inconclusive"
    more = gate.more_items["arc_easy"]
    goal = grow.targets([report], [base, quant], GrowSettings(max_items=5000))
    assert goal == {"arc_easy": LIMIT + grow.blocks_for(LIMIT + more, LIMIT, LIMIT) * LIMIT}
    assert grow.targets([report], [base, quant], GrowSettings(max_items=250)) == {"arc_easy": 200}  # whole blocks under the cap
    assert grow.targets([report], [base, quant], GrowSettings(max_items=150)) == {}  # no whole block fits
    assert grow.targets([report], [base, quant], GrowSettings(max_items=5000, step=7))["arc_easy"] % 7 == LIMIT % 7
    decided = gates.compare_to_baseline(quant, base, {"min_recovery": 0.5}, raise_on_fail=False)
    assert grow.targets([decided], [base, quant], GrowSettings(max_items=5000)) == {}


def test_order_of_follows_a_result_that_grew_already():
    grown = scored("baseline", list(range(200)), growth=results.Growth(seed=7, step=50, blocks=2))
    assert grow.order_of([scored("gptq", list(range(LIMIT))), grown], GrowSettings(max_items=500, seed=1)) == (7, 50)
    assert grow.order_of([scored("gptq", list(range(LIMIT)))], GrowSettings(max_items=500, seed=1)) == (1, LIMIT)
    assert grow.per_leaf_items(grown) == 200


# ----------------------------------------------------------------------------------------------
# The growth phase of `quantkit run`, with a known scorer in place of vLLM + lm-eval


def fake_grow(server, plan, previous, goal, orders):
    """What evals.grow.grow_result does, scoring from `truth`: the stored items plus the next blocks."""
    run = previous.model_copy(deep=True)
    variant = Path(plan).name
    for i, task in enumerate(run.tasks):
        seed, step = orders[task.task]
        docs = grow.item_order(SPLIT, LIMIT, seed, task.task)[:goal[task.task]]
        blocks = grow.blocks_for(goal[task.task], LIMIT, step)
        run.tasks[i] = scored(variant, docs, growth=results.Growth(seed=seed, step=step, blocks=blocks))
    run.results_file = f"/r/{variant}-{len(docs)}.json"
    return run


@pytest.fixture
def phase(tmp_path, monkeypatch):
    from quantkit.pipeline import grow as pipeline_grow
    from quantkit.pipeline.stages import Lane, RunContext, RunSummary
    from quantkit.pipeline.recipe import MethodEntry, RunRecipe
    from quantkit.store import Store, run_key

    @contextmanager
    def no_server(folder, serve):
        yield None

    monkeypatch.setattr("quantkit.evals.grow.grow_result", fake_grow)
    monkeypatch.setattr("quantkit.evals.run.prepare_eval", lambda folder, *a, **k: str(folder))
    monkeypatch.setattr("quantkit.serve.server.VLLMServer", no_server)
    monkeypatch.setattr(pipeline_grow, "checkpoint_dir", lambda ctx, entry: tmp_path / entry.label())

    made = []

    def make(gate: float, max_items: int, rounds: int = 3):
        made.append(1)
        plan = RunRecipe(name="t", model="m", methods=[MethodEntry(method="gptq")],
                         eval={"tasks": "arc_easy", "limit": LIMIT, "grow": {"max_items": max_items, "max_rounds": rounds}},
                         gates={"min_recovery": gate})
        model = type("M", (), {"name": "m", "path": tmp_path / "baseline"})()
        ctx = RunContext(plan=plan, model=model, force=False, vllm="0.32.0")
        store = Store(tmp_path / f"results-{len(made)}.db")
        for variant in ("baseline", "gptq"):
            rid = store.begin(run_key("eval", v=variant), "eval", "m", variant, {"checkpoint": str(tmp_path / variant)})
            store.finish(rid, eval_run(variant, list(range(LIMIT))).model_dump(mode="json"))
        return ctx, [Lane("baseline", None), Lane("gptq", plan.methods[0])], store, RunSummary(recipe="t", model="m")

    return make


def _verdict(store) -> tuple[str, int]:
    evals = {r.variant: r for r in store.records(kind="eval", status="done")}
    report = gates.compare_to_baseline(results.EvalRun.model_validate(evals["gptq"].result),
                                       results.EvalRun.model_validate(evals["baseline"].result),
                                       {"min_recovery": 0.93}, raise_on_fail=False)
    return report.verdict, report.tasks[0].n_items


def test_growth_phase_grows_baseline_then_variant_until_decided_and_resumes(phase):
    from quantkit.pipeline.grow import grow_stage

    ctx, lanes, store, summary = phase(0.93, 5000)
    assert _verdict(store) == ("inconclusive", LIMIT)
    grow_stage(ctx, lanes, store, summary)
    verdict, items = _verdict(store)
    assert verdict in ("pass", "fail") and items > LIMIT
    grown = [o for o in summary.outcomes if o.kind == "eval+"]
    assert [o.variant for o in grown][:2] == ["baseline", "gptq"] and all(o.status == "done" for o in grown)
    newest = {r.variant: r for r in store.records(kind="eval", status="done")}
    assert newest["gptq"].params["grown_from"] and newest["gptq"].params["goal"] == {"arc_easy": items}
    assert newest["gptq"].params["checkpoint"].endswith("gptq")  # readers find it by its folder, as before
    # a second run finds every gate decided: nothing more is scored
    before = len(store.records())
    grow_stage(ctx, lanes, store, summary)
    assert len(store.records()) == before


def test_growth_phase_stops_at_the_cap_and_the_gate_stays_inconclusive(phase):
    from quantkit.pipeline.grow import grow_stage

    ctx, lanes, store, summary = phase(0.93, 300)
    grow_stage(ctx, lanes, store, summary)
    assert _verdict(store) == ("inconclusive", 300)
    assert [o.variant for o in summary.outcomes if o.kind == "eval+"] == ["baseline", "gptq"]


def test_growth_phase_does_nothing_without_grow_or_when_decided(phase):
    from quantkit.pipeline.grow import grow_stage

    ctx, lanes, store, summary = phase(0.5, 5000)
    grow_stage(ctx, lanes, store, summary)
    assert summary.outcomes == [] and len(store.records()) == 2
    ctx, lanes, store, summary = phase(0.93, 5000)
    ctx.plan.eval.grow = None
    grow_stage(ctx, lanes, store, summary)
    assert summary.outcomes == []
