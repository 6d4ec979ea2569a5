"""`quantkit card` end to end: the card written locally from the store, with the real huggingface_hub
ModelCard reading it back (the world of test_push.py: tests/push_world.py). No marker: no vLLM, no
quantizer; well under a minute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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

    from quantkit.measure.capacity.live import CapacitySettings
    from quantkit.measure.tune.study import Trial, TuneResult, TuneSettings
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


# -- issue 39: a file where the card goes that quantkit did not write ----------------------------------------

# what may sit there: a README written by hand, an empty one, another tool's card, a binary file, one
# that names quantkit without being its card
FOREIGN = {"hand-written": b"# My model\n\nNotes I wrote by hand.\n", "empty": b"",
           "another tool's card": b"---\nlicense: apache-2.0\ntags: [vllm]\n---\n\n# tiny\n", "binary": bytes(range(256)),
           "names quantkit": b"Quantized with quantkit; card written by hand.\n"}


@pytest.mark.parametrize("where", ["README.md", "-o notes.md"])
@pytest.mark.parametrize("kind", FOREIGN)
def test_card_replaces_a_file_it_did_not_write_only_with_force_and_keeps_it(world, monkeypatch, kind, where):
    from quantkit import hub
    from quantkit.errors import UsageError

    monkeypatch.setenv("QUANTKIT_HOME", str(world["home"]))
    store_runs(world["home"], world["ckpt"], world["baseline"])
    out = world["ckpt"] / "README.md" if where == "README.md" else world["tmp"] / "notes.md"
    output = None if where == "README.md" else out
    out.write_bytes(FOREIGN[kind])
    with pytest.raises(UsageError, match="is not a card quantkit wrote; pass --force"):
        hub.card(world["ckpt"], output)
    assert out.read_bytes() == FOREIGN[kind] and sorted(p.name for p in out.parent.glob(f"{out.name}.*")) == []
    result = hub.card(world["ckpt"], output, force=True)
    backup = Path(result["backup"])
    assert backup.parent == out.parent and backup.name.startswith(f"{out.name}.") and backup.name.endswith(".bak")
    assert backup.read_bytes() == FOREIGN[kind]  # the user's file, whole
    assert "Card written by quantkit" in out.read_text()
    again = hub.card(world["ckpt"], output)  # quantkit's own card: rewritten from the store, no --force, no backup
    assert again["backup"] is None and len(list(out.parent.glob(f"{out.name}.*.bak"))) == 1
    from quantkit.hub import _commit_files

    assert not [name for name, _ in _commit_files(world["ckpt"]) if name.startswith("README.md")]  # never uploaded


def test_card_command_refuses_to_overwrite_a_hand_written_readme(world):
    store_runs(world["home"], world["ckpt"], world["baseline"])
    readme = world["ckpt"] / "README.md"
    readme.write_text("# My model\n\nNotes I wrote by hand.\n")
    refused = quantkit(world, "card", world["ckpt"])
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is not a card quantkit wrote; pass --force" in lines[0], refused.stderr
    assert readme.read_text() == "# My model\n\nNotes I wrote by hand.\n"
    forced = quantkit(world, "card", world["ckpt"], "--force")
    assert forced.returncode == 0, forced.stderr
    (backup,) = world["ckpt"].glob("README.md.*.bak")
    assert backup.read_text() == "# My model\n\nNotes I wrote by hand.\n" and str(backup) in forced.stdout.replace("\n", "")
