"""Issues 31 and 39, secrets: a secret-bearing serving flag reaches vLLM as given and is masked wherever
it is stored or shown (records, result files, the `vllm serve` line, labels, reports); so is a
secret key inside a flag's JSON value, and a URL's user:password (tests/integration/test_url_credentials.py
runs `bench --url` with one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantkit.errors import UsageError
from quantkit.serve.config import (KNOBS, MASK, ServeConfig, args_of, is_secret, knob_type, mask_args, mask_secrets,
                                   mask_text, serve_command)
from quantkit.store import Store, run_key

SECRET = "hf_S3cr3tValue0123456789abcdefXYZ"

# How users spell secret-bearing flags: vLLM's own, the Hub's, a cloud's, in any case and separator.
SECRET_FLAGS = ["api-key", "--api-key", "api_key", "API-KEY", "apikey", "hf-token", "hf_token", "HF-TOKEN",
                "--HF_TOKEN", "token", "access-token", "auth-token", "password", "db-password", "ssl-keyfile-password",
                "client-secret", "secret", "aws_credentials", "credentials", "google-credential",
                "secret-access-key", "openai-api-key", "x-api-keys", "authorization", "passphrase",
                # issue 39: the usual spellings of the rule's words (pem, private, auth, creds, pwd), anywhere in a name
                "my-private-pem", "private-key", "privatekey", "tls-pem", "pem", "client-cert-pem", "auth",
                "basic-auth", "auth-header", "oauth", "x-authorization-header", "authentication-info", "db-pwd",
                "creds", "aws-creds", "sasl-password-file-contents", "auth-token-value", "--My_Private_PEM"]
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


# -- issue 39: what is no secret: quantkit's knobs, vLLM's flags, the keys of vLLM's JSON configs -----------

DATA = Path(__file__).parent / "data"


def _listed(name: str) -> list[str]:
    return [line.strip() for line in (DATA / name).read_text().splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("knob", KNOBS)
def test_no_serving_knob_is_a_secret(knob):
    assert not is_secret(knob) and not is_secret(knob.replace("_", "-"))
    value = {bool: "on", float: "0.5", int: "2"}.get(knob_type(knob), "auto")  # 2: in every int knob's range (-O: 0..3)
    config = ServeConfig.from_options([f"{knob.replace('_', '-')}={value}"])
    assert MASK not in serve_command("/m", config) and MASK not in config.label()


def test_of_vllms_flags_only_its_secrets_are_masked():
    """Every flag of `vllm serve` (vLLM 0.32.0): a count, a path or a switch is shown as given."""
    flags = _listed("vllm_serve_flags.txt")
    assert len(flags) > 300 and "--max-num-batched-tokens" in flags
    assert {f for f in flags if is_secret(f.lstrip("-"))} == {"--api-key", "--hf-token", "--allow-credentials"}
    argv = [x for f in flags for x in (f, "4096")]
    assert mask_args(argv).count(MASK) == 3


def test_the_keys_of_vllms_json_configs_are_no_secrets_but_its_token():
    keys = _listed("vllm_config_keys.txt")
    assert len(keys) > 300 and "long_prefill_token_threshold" in keys and "kv_connector_extra_config" in keys
    assert {k for k in keys if is_secret(k)} == {"hf_token"}
    config = {k: 1 for k in keys if k != "hf_token"}
    assert mask_text(json.dumps(config)) == json.dumps(config)


# -- issue 39: a secret inside a flag's JSON value ----------------------------------------------------------

# (flag, JSON value holding SECRET) as vLLM takes them: a connector's token, nested, camelCase, a whole
# object or list under a secret key, a Python-repr-like quoting, escaped quotes
JSON_SECRETS = [
    ("kv-transfer-config", {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both", "auth_token": SECRET}),
    ("kv-transfer-config", {"kv_connector": "NixlConnector", "kv_connector_extra_config": {"password": SECRET, "port": 5}}),
    ("kv-transfer-config", {"kv_connector_extra_config": {"remote_url": "redis://h:6379", "apiKey": SECRET}}),
    ("kv-transfer-config", {"kv_connector_extra_config": {"credentials": {"id": "AKIA0", "key": SECRET}}}),
    ("speculative-config", {"method": "eagle", "model": "org/draft", "hf_token": SECRET, "num_speculative_tokens": 3}),
    ("hf-overrides", {"auth": [SECRET, "x"], "rope_theta": 10000}),
    ("model-loader-extra-config", {"s3": {"secretAccessKey": SECRET, "region": "eu"}}),
    ("model-loader-extra-config", {"private_key_pem": f"-----BEGIN KEY-----{SECRET}"}),
    ("additional-config", {"client_secret": f'a"b\\"{SECRET}'}),
    ("additional-config", {"my-private-pem": SECRET, "Authorization": f"Bearer {SECRET}"}),
]


@pytest.mark.parametrize("flag, value", JSON_SECRETS)
def test_a_secret_in_a_flags_json_value_reaches_vllm_and_nothing_else(flag, value, tmp_path):
    text = json.dumps(value)
    config = ServeConfig.from_options([f"{flag}={text}", "max-num-seqs=8"])
    assert text in config.to_args()  # vLLM is started with the value as given
    argv = ["vllm", "serve", "/m", *config.to_args()]
    shown = {"json dump": json.dumps(config.model_dump(mode="json")), "changed": json.dumps(config.changed()),
             "label": config.label(), "serve line": serve_command("/models/m", config),
             "masked args": " ".join(config.to_args(mask=True)), "args_of": " ".join(args_of(config.model_dump())),
             "argv": json.dumps(mask_args(argv)), "text": mask_text(" ".join(argv)),
             "error": mask_text(f"vLLM exited: bad value for --{flag} {text}"),
             "record": json.dumps(mask_secrets({"server": {"args": argv, "serve_config": config.model_dump()}}))}
    for where, out in shown.items():
        assert SECRET not in out and MASK in out, (where, out)
    masked = json.loads(config.changed()[flag])  # still JSON, its other keys as they were
    plain = {k: v for k, v in value.items() if not is_secret(k) and not isinstance(v, dict)}
    assert {k: masked[k] for k in plain} == plain
    with Store(tmp_path / "r.db") as store:
        rid = store.begin(run_key("bench", x=1), "bench", "m", "v", {"serve": config.model_dump()})
        store.fail(rid, f"vLLM exited: unrecognized arguments: --{flag} {text}")
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert SECRET.encode() not in raw


# -- issue 39: a URL's credentials -----------------------------------------------------------------------

# (URL holding SECRET, what remains of it): user:password, a token as the user, a password with an
# '@' or percent-escapes, https and ports, a secret query parameter
URL_SECRETS = [
    (f"http://user:{SECRET}@10.0.0.5:8000/v1", "http://10.0.0.5:8000/v1"),
    (f"https://user:{SECRET}@llm.example.com/v1", "https://llm.example.com/v1"),
    (f"http://{SECRET}@localhost:8000", "http://localhost:8000"),
    (f"http://:{SECRET}@localhost:8000/v1/models", "http://localhost:8000/v1/models"),
    (f"http://admin:p%40{SECRET}%3A@host:1/v1", "http://host:1/v1"),
    (f"http://admin:pa@{SECRET}@host:1/v1", "http://host:1/v1"),
    (f"HTTP://u:{SECRET}@[::1]:8000/v1", "HTTP://[::1]:8000/v1"),
    (f"http://host:8000/v1?api_key={SECRET}", f"http://host:8000/v1?api_key={MASK}"),
    (f"http://host/v1?model=m&token={SECRET}&x=1", f"http://host/v1?model=m&token={MASK}&x=1"),
]


@pytest.mark.parametrize("url, shown", URL_SECRETS)
def test_a_urls_credentials_are_never_shown_or_stored(url, shown, tmp_path):
    from quantkit.serve.server import ServerInfo

    assert mask_text(url) == shown
    for text in (f"cannot reach {url}/models: ConnectError", f"the server at {url} refused the API key",
                 f"'{url}'", f"<code>{url}</code>", f"--url {url}"):
        assert SECRET not in mask_text(text) and shown in mask_text(text), text
    info = ServerInfo(url=url, model_name="m", remote=True)
    assert SECRET not in info.model_dump_json()
    with Store(tmp_path / "r.db") as store:
        rid = store.begin(run_key("bench", u=1), "bench", "m", "v", {"url": url, "serve": None})
        store.fail(rid, f"cannot reach {url}/models: ConnectError")
        assert store.get(run_key("bench", u=1)).params["url"] == shown
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert SECRET.encode() not in raw


def test_a_url_without_credentials_is_left_as_it_is():
    for text in ("http://127.0.0.1:8000/v1", "see https://docs.vllm.ai/en/latest/?x=1#y", "user@host:/path",
                 "mailto:a@b.c", "kv_cache_tokens=93184 http://h:1/v1?model=a&n=2"):
        assert mask_text(text) == text
