"""Issue 31, secrets: a secret-bearing serving flag reaches vLLM as given and is masked wherever it
is stored or shown (records, result files, the `vllm serve` line, labels, reports)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantkit.errors import UsageError
from quantkit.serve.config import MASK, ServeConfig, args_of, is_secret, mask_args, mask_secrets, mask_text, serve_command
from quantkit.store import Store, run_key

SECRET = "hf_S3cr3tValue0123456789abcdefXYZ"

# How users spell secret-bearing flags: vLLM's own, the Hub's, a cloud's, in any case and separator.
SECRET_FLAGS = ["api-key", "--api-key", "api_key", "API-KEY", "apikey", "hf-token", "hf_token", "HF-TOKEN",
                "--HF_TOKEN", "token", "access-token", "auth-token", "password", "db-password", "ssl-keyfile-password",
                "client-secret", "secret", "aws_credentials", "credentials", "google-credential",
                "secret-access-key", "openai-api-key", "x-api-keys", "authorization", "passphrase"]
# Flags that only look like one: token counts, a tokenizer, a key *file* path, a cache dtype.
PLAIN_FLAGS = ["max-num-batched-tokens", "long-prefill-token-threshold", "tokenizer", "tokenizer-mode",
               "ssl-keyfile", "kv-cache-dtype", "max-num-seqs", "enable-prefix-caching", "max-logprobs",
               "return-tokens-as-token-ids", "max-seq-len-to-capture", "seed"]


@pytest.mark.parametrize("flag", SECRET_FLAGS)
def test_a_secret_flag_reaches_vllm_and_nothing_else(flag):
    if flag != flag.lower():  # vllm serve's flags are lower case: refused, and the refusal hides the value
        with pytest.raises(UsageError) as refused:
            ServeConfig.from_options([f"{flag}={SECRET}"])
        assert SECRET not in refused.value.one_line()
        flag = flag.lower()
    config = ServeConfig.from_options([f"{flag}={SECRET}", "max-num-seqs=8"])
    assert SECRET in config.to_args()  # what the server is started with
    shown = [json.dumps(config.model_dump(mode="json")), json.dumps(config.changed()), config.label(),
             serve_command("/models/m", config), " ".join(config.to_args(mask=True)),
             " ".join(args_of(config.model_dump(mode="json"))), " ".join(args_of(config.model_dump()))]
    for text in shown:
        assert SECRET not in text and MASK in text, text
    assert config.model_dump()["extra"]  # a Python dump keeps it, to build a trial's config from
    assert SECRET in json.dumps(config.model_dump())


@pytest.mark.parametrize("flag", SECRET_FLAGS)
def test_every_shape_of_a_secret_is_masked(flag):
    name = flag.lstrip("-")
    assert is_secret(name), name
    argv = ["vllm", "serve", "/m", f"--{name}", SECRET, "--port", "8000", f"--{name}={SECRET}"]
    assert SECRET not in " ".join(mask_args(argv)) and "8000" in mask_args(argv)
    for text in (f"vllm serve /m --{name} {SECRET} --port 8000", f"vllm serve /m --{name}='{SECRET}'",
                 f"error: unrecognized arguments: --{name} {SECRET}", f"<code>--{name} {SECRET}</code>",
                 f"`vllm serve m --{name} {SECRET}`"):
        masked = mask_text(text)
        assert SECRET not in masked, masked
    assert masked.endswith("`") and "--port 8000" in mask_text(f"--{name} {SECRET} --port 8000")
    record = {"run_key": "abc", "serve": {"extra": {name: SECRET}}, "server": {"args": argv},
              "command": f"vllm serve /m --{name} {SECRET}"}
    assert SECRET not in json.dumps(mask_secrets(record))


@pytest.mark.parametrize("flag", PLAIN_FLAGS)
def test_flags_that_only_look_secret_are_shown(flag):
    assert not is_secret(flag)
    config = ServeConfig.from_options([f"{flag}=4096"]) if flag.replace("-", "_") not in ("max_num_seqs", "max_num_batched_tokens") else None
    if config is not None:
        assert "4096" in serve_command("/m", config) and "4096" in config.label()
    record = {"run_key": "0123abcd", "kv_cache_tokens": 93184, "args": [f"--{flag}", "4096"]}
    assert mask_secrets(record) == record


def test_the_store_never_holds_the_secret(tmp_path):
    """Records as `quantkit run` and the standalone commands write them: the serve config dumped
    (Python and JSON modes), the server's full argv and a trial's `vllm serve` line."""
    config = ServeConfig.from_options([f"hf-token={SECRET}", f"api-key={SECRET}"])
    argv = ["vllm", "serve", "/m", "--port", "1", *config.to_args()]
    path = tmp_path / "r.db"
    with Store(path) as store:
        key = run_key("bench", x=1)
        with store.stage(key, "bench", "m", "v", {"serve": config.model_dump(), "url": None}) as rec:
            rec.add_point({"concurrency": 1, "args": argv})
            rec.finish({"server": {"args": argv, "serve_config": config.model_dump()},
                        "command": " ".join(argv), "config": config.changed()})
        failed = store.begin(run_key("bench", x=2), "bench", "m", "v", {"serve": config.model_dump()})
        store.fail(failed, f"vLLM exited: unrecognized arguments: --hf-token {SECRET}")
        record = store.done(key)
        assert record.params["serve"]["extra"] == {"hf-token": MASK, "api-key": MASK}
        assert record.result["server"]["args"][-3:] == [MASK, "--api-key", MASK]
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("r.db"))
    assert SECRET.encode() not in raw


def test_reports_mask_a_store_written_before_masking(tmp_path):
    """An older store holds the value in full: the report files still show only the mask."""
    from quantkit import report as R
    from quantkit.report.render import write_report

    serve_config = {"max_model_len": 2048, "extra": {"hf-token": SECRET}}
    bench = {"kind": "quantkit.bench", "model_dir": "/m", "model_name": "m", "checkpoint": {"method": "none"},
             "server": {"url": "http://127.0.0.1:1", "model_name": "m", "vllm_version": "0.32.0",
                        "args": ["vllm", "serve", "/m", "--hf-token", SECRET], "serve_config": serve_config},
             "workload": {"input_len": 8, "output_len": 8}, "points": [], "complete": True}
    report = R.build_report([R.Variant(name="baseline", method="bf16", model_dir="/m", bench=bench)], title="t",
                            recipe_hash="x", environment={"device": "cpu", "vllm": "0.32.0", "quantkit": "0"})
    paths = write_report(report, tmp_path / "out")
    for kind in ("md", "html", "json"):
        assert SECRET not in Path(paths[kind]).read_text(), kind
