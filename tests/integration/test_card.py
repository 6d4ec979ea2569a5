"""`quantkit card` end to end: the card written locally from the store, with the real huggingface_hub
ModelCard reading it back (the world of test_push.py: tests/push_world.py). No marker: no vLLM, no
quantizer; well under a minute."""

from __future__ import annotations

import json

from push_world import ORG_REPO, hub, quantkit, store_runs, world  # noqa: F401


def test_card_command_writes_the_card_locally(world):
    from huggingface_hub import ModelCard

    store_runs(world["home"], world["ckpt"], world["baseline"], evals=False)
    out = world["tmp"] / "card.md"
    proc = quantkit(world, "card", world["ckpt"], "-o", out, "--repo", ORG_REPO, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["validated"] is False and "no stored eval" in result["reason"]
    card = ModelCard.load(out)
    assert card.data.eval_results is None  # nothing measured, nothing claimed
    assert "> **Not validated:** no stored eval" in card.text
    assert "| concurrency 1 | 4 (0) | 17.0 | 22.0 |" in card.text
    assert "c4: 32 samples x 256 tokens (8192 tokens), seed 0" in card.text
    assert "group_size: 128" in card.text  # the recipe YAML as asked for
    assert world["hub"].log == []


def test_card_serves_with_tuned_knobs_and_shows_missing_bench(world):
    from huggingface_hub import ModelCard

    from quantkit.measure.capacity import CapacitySettings
    from quantkit.measure.tune import Trial, TuneResult, TuneSettings
    from quantkit.serve.config import ServeConfig

    store_runs(world["home"], world["ckpt"], world["baseline"], bench=False)
    base = ServeConfig(enforce_eager=True)
    tuned = ServeConfig(enforce_eager=True, max_num_seqs=64, block_size=64)
    trials = [Trial(number=0, run_key="a", params={"max_num_seqs": None, "block_size": None}, config=base.changed(),
                    label="defaults", command="vllm serve x", state="complete", value=1.0),
              Trial(number=1, run_key="b", params={"max_num_seqs": 64, "block_size": 64}, config=tuned.changed(),
                    label="max-num-seqs=64 block-size=64", command="vllm serve x", state="complete", value=1.5)]
    tune = TuneResult(model_dir=str(world["ckpt"]), study="s", slo="ttft_p95=0.5", settings=TuneSettings(),
                      capacity=CapacitySettings(), space={"max_num_seqs": [None, 64], "block_size": [None, 64]},
                      base=base.changed(), trials=trials, best=trials[1], defaults=trials[0], gain=1.5,
                      best_reason="highest goodput at capacity under ttft_p95=0.5")
    from quantkit.store import Store, run_key

    with Store(world["home"] / "results.db") as store:  # tune results are store records
        older = {**tune.model_dump(mode="json"), "best": {**trials[0].model_dump(mode="json"),
                                                          "config": {"max_num_seqs": 8}}}
        for n, result in enumerate([older, tune.model_dump(mode="json")]):  # the newest one wins
            rid = store.begin(run_key("tune", n=n), "tune", "smollm2-135m", "gptq", {"checkpoint": str(world["ckpt"])})
            store.finish(rid, result)
    # an export file beside the checkpoint is not what the card reads
    (world["ckpt"] / "quantkit-bench" / "tune-20261130T000000Z.json").write_text(json.dumps(older))

    proc = quantkit(world, "card", world["ckpt"], "--repo", ORG_REPO)
    assert proc.returncode == 0, proc.stderr
    card = ModelCard.load(world["ckpt"] / "README.md")  # default: beside the checkpoint
    assert "vllm serve quantkit-tests/tiny-gptq --max-num-seqs 64 --block-size 64 --max-model-len 2048 --enforce-eager" in card.text
    assert "tuned by `quantkit tune` (max-num-seqs=64 block-size=64: highest goodput at capacity" in card.text
    assert "No benchmark is stored for this checkpoint: throughput and latency are missing." in card.text
    assert "- bench: missing" in card.text
    # accuracy is stored, so it is claimed: 2 scores, 2 recoveries and the mean recovery
    assert len(card.data.eval_results) == 5
    # and push leaves the local README aside: the card it uploads is built afresh from the store
    from quantkit.hub import _commit_files

    assert "README.md" not in [name for name, _ in _commit_files(world["ckpt"])]
