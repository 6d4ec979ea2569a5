"""A checkpoint folder and its store records, as `quantkit run` leaves them: the world of the
push and card tests (tests/integration/test_push.py, test_card.py), with the loopback Hub and the
client helpers both use. Pure bookkeeping: no vLLM, no quantizer."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hub_server import Hub

TASKS = {  # task -> (baseline, quantized) primary metric values, each over ITEMS items
    "arc_easy": (0.62, 0.60),
    "hellaswag": (0.41, 0.40),
}
ITEMS = 500
REPO_ROOT = Path(__file__).resolve().parents[1]


def make_checkpoint(folder: Path) -> Path:
    from safetensors.numpy import save_file

    from quantkit.checkpoint import ConvertRecord, SourceModel

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    # ~1.2 MB of weights: enough to be a real LFS upload, small enough to be quick
    save_file({"model.layers.0.mlp.down_proj.weight_packed": rng.integers(0, 2**31, (576, 256), dtype=np.int32),
               "model.layers.0.mlp.down_proj.weight_scale": rng.standard_normal((576, 24)).astype(np.float16),
               "model.embed_tokens.weight": rng.standard_normal((512, 576)).astype(np.float16)},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    qc = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                           "group_size": 64}}}, "ignore": ["lm_head"]}
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                    "hidden_size": 576, "quantization_config": qc}, indent=2))
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}}))
    (folder / "generation_config.json").write_text('{"bos_token_id": 1, "eos_token_id": 2}\n')
    # llm-compressor's recipe.yaml and a config naming where the source came from: local paths
    # (under the checkout and the home directory) that must not reach the Hub
    (folder / "recipe.yaml").write_text(f"default_stage:\n  dataset: {Path.home() / 'data' / 'calib.jsonl'}\n"
                                        f"  output_dir: {REPO_ROOT / 'models' / folder.name}\n")
    # quantkit's own result folders: they stay local
    (folder / "quantkit-bench").mkdir()
    (folder / "quantkit-bench" / "bench-20261129T160739Z.json").write_text('{"kind": "quantkit.bench"}\n')
    (folder / "quantkit-eval").mkdir()
    (folder / "quantkit-eval" / "20261129T163116Z.json").write_text('{"kind": "quantkit.eval"}\n')
    record = ConvertRecord(
        method="gptq", backend="llmcompressor", scheme="W4A16", group_size=64, recipe_name="gptq",
        recipe_hash="c2d2bce737cb6507",
        recipe={"name": "gptq", "method": "gptq", "backend": "llmcompressor", "scheme": "W4A16", "group_size": 128,
                "ignore": ["lm_head"], "calibration": {"dataset": "c4", "num_samples": 32, "seq_len": 256, "seed": 0},
                "options": {"dampening_frac": 0.01}},
        source=SourceModel(ref="smollm2-135m", kind="builtin", path=str(Path.home() / ".cache/quantkit/models/smollm2-135m"),
                           fingerprint="sha256:6261cd2d6273cc08"),
        calibration={"dataset": "c4", "num_samples": 32, "seq_len": 256, "tokens": 8192, "seed": 0,
                     "resolved": str(REPO_ROOT / "data" / "c4" / "c4-validation.jsonl")},
        quantization_config=qc,
        versions={"quantkit": "0.1.0", "llmcompressor": "0.14.0.1", "compressed-tensors": "0.19.0"},
        hardware={"machine": "x86_64", "cpu": "Intel(R) Xeon(R) Processor", "cpu_count": 2},
        wall_time_s=1140.2, size_bytes=63921291, output_dir=str(folder),
        notes=["group size 128 does not divide 576: used 64"],
    )
    record.write(folder)
    return folder


def item_scores(baseline: float, value: float) -> list[int]:
    """Per-item scores of `value` on ITEMS items as a quantized model of a `baseline` model scores
    them: the baseline's right answers, minus losses (or plus gains) at the front."""
    right, kept = round(baseline * ITEMS), round(value * ITEMS)
    return [1] * min(kept, right) + [0] * (right - min(kept, right)) + [1] * max(0, kept - right) + [0] * (ITEMS - max(kept, right))


def eval_run(folder: Path, which: int, method: str, scores: dict[str, float] | None = None):
    from quantkit.evals.results import DataInfo, EvalRun, ItemScores, Metric, TaskResult

    tasks = []
    for name, values in TASKS.items():
        value = (scores or {}).get(name, values[which])
        items = item_scores(values[0], value)
        stderr = (value * (1 - value) / (ITEMS - 1)) ** 0.5
        tasks.append(TaskResult(
            task=name, suite="quick", version="1.0", n_shot=0, limit=ITEMS, n_samples=ITEMS, n_available=2376,
            output_type="multiple_choice", chat_template=False, add_bos_token=False,
            data=DataInfo(source="offline", template=f"stock:{name}.yaml"), primary_metric="acc_norm,none",
            metrics={"acc_norm,none": Metric(value=value, stderr=stderr), "acc,none": Metric(value=value - 0.01, stderr=stderr)},
            items=ItemScores(ids=[str(i) for i in range(ITEMS)], prompts=[f"{i:08x}" for i in range(ITEMS)],
                             values={"acc_norm,none": items}),
            samples_file=str(folder / "quantkit-eval" / "20261129T163116Z" / f"samples_{name}.jsonl"),
            wall_time_s=45.7))
    return EvalRun(created_at="2026-11-29T16:33:07+00:00", model_dir=str(folder), checkpoint={"method": method},
                   server={"vllm_version": "0.32.0"}, protocol={"backend": "lm-eval local-completions"},
                   data_dir="/work/shared/data", versions={"quantkit": "0.1.0", "lm_eval": "0.4.9"}, tasks=tasks)


def bench_run(folder: Path, tok_s: list[float]):
    from quantkit.measure.capacity.bench import BenchRun
    from quantkit.serve.config import ServeConfig
    from quantkit.serve.server import ServerInfo
    from quantkit.measure.stats.point import BenchPoint, Stats

    def stats(mean):
        return Stats(n=8, mean=mean, p50=mean, p90=mean * 1.2, p95=mean * 1.3, p99=mean * 1.5, min=mean / 2, max=mean * 2)

    points = [BenchPoint(profile="concurrency", concurrency=c, input_len=128, output_len=64, num_requests=4 * c,
                         started_at="2026-11-29T16:08:57+00:00", duration_s=40.1, successes=4 * c, failures=0,
                         prompt_tokens=512 * c, completion_tokens=256 * c, output_tok_s=t, total_tok_s=3 * t,
                         req_s=t / 64, ttft=stats(0.157 * c), itl=stats(0.0771), tpot=stats(0.0771), e2e=stats(5.0))
              for c, t in zip((1, 16), tok_s)]
    serve = ServeConfig(enforce_eager=True)
    server = ServerInfo(url="http://127.0.0.1:40449", model_name=folder.name, vllm_version="0.32.0",
                        serve_config=serve.model_dump(), quant_lines=["Using CPUWNA16LinearKernel for CompressedTensorsWNA16"])
    return BenchRun(model_dir=str(folder), server=server, workload={"input_len": 128, "output_len": 64},
                    hardware={"machine": "x86_64", "cpu": "Intel(R) Xeon(R) Processor", "cpu_count": 2},
                    points=points, complete=True)


def store_runs(home: Path, ckpt: Path, baseline_dir: Path, *, evals: bool = True, baseline: bool = True,
               bench: bool = True, quant_scores: dict[str, float] | None = None,
               recipe_gates: dict | None = None) -> None:
    """Records as `quantkit run` writes them: convert, bench, eval per variant."""
    from quantkit.checkpoint import ConvertRecord
    from quantkit.store import Store, run_key

    def stage(store, kind, variant, params, result, path=None):
        rid = store.begin(run_key(kind, variant=variant, **params), kind, "smollm2-135m", variant, params)
        store.finish(rid, result, path)

    with Store(home / "results.db") as store:
        if baseline:
            stage(store, "bench", "baseline", {"checkpoint": str(baseline_dir)}, bench_run(baseline_dir, [22.0, 87.0]).model_dump(mode="json", exclude={"path"}))
            if evals:
                stage(store, "eval", "baseline", {"checkpoint": str(baseline_dir)}, eval_run(baseline_dir, 0, "baseline").model_dump(mode="json"))
        stage(store, "convert", "gptq", {"recipe": {"method": "gptq"}}, ConvertRecord.read(ckpt).model_dump(mode="json"),
              str(ckpt / "quantkit.json"))
        if bench:
            stage(store, "bench", "gptq", {"checkpoint": str(ckpt)}, bench_run(ckpt, [17.0, 72.0]).model_dump(mode="json", exclude={"path"}))
        if evals:
            run = eval_run(ckpt, 1, "gptq", quant_scores)
            params = {"checkpoint": str(ckpt)}
            if recipe_gates is not None:  # `quantkit run` stores its recipe's gates with the eval
                params["gates"] = {"min_recovery": None, "min_task_recovery": None, "tasks": {}, **recipe_gates}
            stage(store, "eval", "gptq", params, run.model_dump(mode="json"))


# ----------------------------------------------------------------------------------------------
# Fixtures and the subprocess runner


# ----------------------------------------------------------------------------------------------
# The Hub on loopback and the client, in subprocesses (HF_ENDPOINT is read at import)

TOKEN = "hf_quantkitTestToken0123456789abcdefXYZ"
ORG_REPO = "quantkit-tests/tiny-gptq"


@pytest.fixture
def hub():
    server = Hub(tokens={TOKEN})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def world(tmp_path, hub):
    """A checkpoint, a baseline folder, a store with their runs, and an environment for the client."""
    ckpt = make_checkpoint(tmp_path / "models" / "smollm2-135m-gptq")
    baseline_dir = tmp_path / "models" / "smollm2-135m"
    baseline_dir.mkdir()
    home = tmp_path / "qk-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(QUANTKIT_HOME=str(home), HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf-home"), HF_TOKEN=TOKEN,
               HF_HUB_DISABLE_XET="1", HF_HUB_OFFLINE="0", HF_HUB_DISABLE_PROGRESS_BARS="1",
               HF_HUB_DISABLE_TELEMETRY="1", NO_COLOR="1", COLUMNS="300")
    return {"ckpt": ckpt, "baseline": baseline_dir, "home": home, "env": env, "tmp": tmp_path, "hub": hub}


def quantkit(world, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "quantkit", *map(str, args)], cwd=REPO_ROOT, capture_output=True,
                          text=True, env={**world["env"], **(env or {})}, timeout=120)
    # the token never appears in anything quantkit says, whatever happened
    assert TOKEN not in proc.stdout and TOKEN not in proc.stderr
    return proc


def download(world, repo: str = ORG_REPO, revision: str = "main") -> Path:
    """snapshot_download with the real client, in a subprocess (HF_ENDPOINT is read at import)."""
    out = world["tmp"] / f"download-{revision.replace('/', '_')}-{len(list(world['tmp'].glob('download-*')))}"
    code = ("import sys; from huggingface_hub import snapshot_download; "
            "print(snapshot_download(sys.argv[1], revision=sys.argv[2], local_dir=sys.argv[3]))")
    proc = subprocess.run([sys.executable, "-c", code, repo, revision, str(out)], capture_output=True, text=True,
                          env=world["env"], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".cache" not in p.relative_to(folder).parts}


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]
