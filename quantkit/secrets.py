"""What a secret is, and how it reads wherever it is shown or stored: MASK.

Four shapes carry one:
- a serving flag whose name says it holds a secret (`--api-key X`, `--hf-token=X`): its value;
- a key inside a flag's JSON value (`--kv-transfer-config '{"auth_token": "X"}'`), read by the
  same rule on the key: its value, whole when it is an object or a list;
- the user:password of a URL (`--url http://user:pw@host/v1`): cut from the URL, and a query
  parameter whose name says it holds one (`?token=X`): its value. A request still carries them:
  only what is shown or stored loses them.
A name is read as words (split on '-', '_', '.', spaces and camelCase, any case): a word that names
a secret wherever it sits (password, secret, credential, auth, pem, private, ...), or a last word
that does (`hf-token`, `api-key`, `apikey`). A token *count* (`max-num-batched-tokens`,
`long-prefill-token-threshold`) and a key *file* (`ssl-keyfile`) are no secret.

A leaf module: the store (store/lines.py), the exports, the report, the card, the Hub upload and
every error line and result quantkit prints (console.py) mask through these functions.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

# words that name a secret wherever they sit in a name (a word ending so counts: `dbpassword`)
_SECRET_WORDS = ("password", "passwd", "passphrase", "pwd", "secret", "secrets", "credential", "credentials",
                 "creds", "pem", "private", "auth", "authn", "authz")
_AUTH_PREFIXES = ("authoriz", "authentic")  # authorization, authenticator, authentication-header
_SECRET_ENDINGS = ("token", "key", "keys")  # of the last word: `hf-token`, `apikey`, `access-keys`

# `--name value` or `--name=value` inside text (a command line, an error message); a value may be quoted
# (markup around it, `<code>` or a backtick, is not part of the value)
_FLAG_IN_TEXT = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)(=|[ \t]+)(?!--)('[^'\n]*'|\"[^\"\n]*\"|[^\s'\"<>`]+)")
# a quoted key and its colon, as JSON and Python's repr write a mapping: `"auth_token": `
_KEY_IN_TEXT = re.compile(r"""(["'])([^"'\n]{1,200}?)\1\s*:\s*""")
# a URL's user:password@ (up to the last '@' before its path: a password may hold an '@')
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#'\"<>`]*@")
# a URL's query parameter `?name=value` / `&name=value`
_QUERY_PARAM = re.compile(r"(?<=[?&])([\w.-]+)=([^&#\s'\"<>`]*)")


def words(name: str) -> list[str]:
    """A name's words, lower case: `authToken` -> [auth, token]; `--HF_TOKEN` -> [hf, token]."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", str(name).strip())
    return [w for w in re.split(r"[-_.\s]+", spaced.lower()) if w]


def is_secret(name: str) -> bool:
    """Whether a serving flag or a key (with or without dashes, any case and separator) holds a secret."""
    parts = words(name)
    if not parts:
        return False
    return (any(w.endswith(_SECRET_WORDS) or w.startswith(_AUTH_PREFIXES) for w in parts)
            or parts[-1].endswith(_SECRET_ENDINGS))


def strip_url_credentials(text: str) -> str:
    """`text` with every URL's user:password@ cut and its secret query parameters masked."""
    text = _URL_USERINFO.sub(r"\1", text)
    if "?" in text:
        text = _QUERY_PARAM.sub(lambda m: f"{m.group(1)}={MASK}" if is_secret(m.group(1)) else m.group(0), text)
    return text


def mask_args(args: list[str]) -> list[str]:
    """An argv with every secret flag's value masked (`--api-key X`, `--api-key=X`), and every
    other argument masked as text (a JSON value's secret keys, a URL's credentials)."""
    out, hide_next = [], False
    for arg in args:
        text = str(arg)
        if hide_next and not text.startswith("--"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        name, sep, _value = text.partition("=")
        if text.startswith("-") and is_secret(name.lstrip("-")):
            if sep:
                out.append(f"{name}={MASK}")
            else:
                out.append(text)
                hide_next = True
            continue
        out.append(mask_text(text))
    return out


def mask_text(text: str) -> str:
    """Text (a `vllm serve` line, an error, a flag's JSON value) with every secret masked: a secret
    flag's value, a secret key's value in a mapping written inside it, a URL's credentials."""
    def hide(m: re.Match) -> str:
        if not is_secret(m.group(1).lstrip("-")):
            return m.group(0)
        quote = m.group(3)[0] if m.group(3)[0] in "'\"" else ""  # a quoted value stays quoted: '***' is no glob
        return f"{m.group(1)}{m.group(2)}{quote}{MASK}{quote}"

    text = _FLAG_IN_TEXT.sub(hide, text)
    if ":" in text:
        text = strip_url_credentials(_mask_keyed(text))
    return text


def mask_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """A flag -> value mapping with the secret flags' values masked (a bare flag stays bare), and
    every other value masked as text (`kv-transfer-config`'s JSON)."""
    return {k: (MASK if v is not None and is_secret(k) else mask_text(v) if isinstance(v, str) else v)
            for k, v in flags.items()}


def mask_secrets(value: Any) -> Any:
    """Any JSON-like value with the secrets in it masked, wherever they sit: the `extra` mapping of
    a stored ServeConfig, a `changed()` mapping, an argv list, a command line, a URL. A record's own
    fields (`run_key`, `kv_cache_tokens`) are not flags and are never masked by their names."""
    if isinstance(value, dict):
        return {k: (mask_flags(v) if k == "extra" and isinstance(v, dict) else mask_secrets(v)) for k, v in value.items()}
    if isinstance(value, list):
        items = [mask_secrets(v) for v in value]
        return mask_args(items) if all(isinstance(v, str) for v in items) else items
    if isinstance(value, str):
        return mask_text(value)
    return value


def _mask_keyed(text: str) -> str:
    """Every `"secret_key": value` of a mapping written in `text` (JSON, Python's repr) with its
    value masked: a string, a scalar, or a whole object or list."""
    out, pos = [], 0
    while (m := _KEY_IN_TEXT.search(text, pos)) is not None:
        if not is_secret(m.group(2)):
            out.append(text[pos:m.end()])
            pos = m.end()
            continue
        end = _value_end(text, m.end())
        quote = m.group(1)
        out.append(text[pos:m.end()] + (f"{quote}{MASK}{quote}" if end > m.end() else ""))
        pos = max(end, m.end())
    out.append(text[pos:])
    return "".join(out)


def _value_end(text: str, start: int) -> int:
    """Where the value that starts at `start` ends: past a quoted string (escapes read), past the
    bracket that closes an object or a list (strings inside read), or at the scalar's end."""
    if start >= len(text):
        return start
    first = text[start]
    if first in "\"'":
        i = start + 1
        while i < len(text) and text[i] != first:
            i += 2 if text[i] == "\\" else 1
        return min(i + 1, len(text))
    if first in "{[":
        depth, i, quote = 0, start, None
        while i < len(text):
            c = text[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return len(text)
    m = re.compile(r"[^\s,}\]]*").match(text, start)
    return m.end() if m else start
