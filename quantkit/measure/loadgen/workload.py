"""What a load point sends: exact-length random prompts or dataset prompts, and arrival times.

- random: seeded prompts of exactly `input_len` tokens, sent as token-id lists so the server does
  not re-tokenize (lengths are exact). Each point gets fresh prompts (seed, point index): vLLM's
  prefix cache would otherwise serve a repeated prompt's prefill for free.
- dataset: prompts from a local JSONL file (field `prompt`, `text`, or chat `messages`).
- Poisson arrivals: seeded exponential inter-arrival times; a closed loop's staggered first sends.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ...errors import UsageError

class Prompt(BaseModel):
    token_ids: list[int] | None = None  # exact-length random prompts
    text: str | None = None  # dataset prompts (completions)
    messages: list[dict[str, Any]] | None = None  # dataset prompts (chat)


class PromptSource:
    """Builds the prompts of each point; the tokenizer is loaded once (transformers, main env)."""

    def __init__(self, tokenizer_dir: Path | None, input_len: int, seed: int = 0,
                 dataset: Path | None = None, api: str = "completions"):
        if input_len < 1:
            raise UsageError("--input-len must be at least 1")
        self.input_len = input_len
        self.seed = seed
        self.api = api
        self.dataset = Path(dataset) if dataset else None
        self._rows: list[dict[str, Any]] | None = None
        self._tokenizer = None
        self._allowed: list[int] | None = None
        if self.dataset is not None:
            self._rows = load_dataset(self.dataset)
        if self.dataset is None or api == "chat":
            if tokenizer_dir is None:
                raise UsageError("random prompts need the checkpoint's tokenizer: give the model folder")
            self._load_tokenizer(Path(tokenizer_dir))

    def _load_tokenizer(self, folder: Path) -> None:
        if not (folder / "tokenizer_config.json").exists() and not (folder / "tokenizer.json").exists():
            raise UsageError(f"{folder} has no tokenizer (tokenizer.json / tokenizer_config.json)")
        from ... import tokenizer

        self._tokenizer = tokenizer.load(folder)
        # Random ids exclude special tokens: a stray <|im_end|> mid-prompt is not a realistic input.
        self._allowed = [i for i in range(self._tokenizer.size) if i not in self._tokenizer.special_ids]

    def prompts(self, n: int, stream: int) -> list[Prompt]:
        """n prompts for point number `stream` (0, 1, ...); -1 is the warm-up stream."""
        rng = random.Random(f"{self.seed}:{stream}")
        if self._rows is not None:
            rows = [self._rows[rng.randrange(len(self._rows))] for _ in range(n)]
            return [self._from_row(row) for row in rows]
        out = []
        for _ in range(n):
            ids = [self._allowed[rng.randrange(len(self._allowed))] for _ in range(self.input_len)]
            if self.api == "chat":
                out.append(Prompt(messages=[{"role": "user", "content": self._tokenizer.decode(ids)}]))
            else:
                out.append(Prompt(token_ids=ids))
        return out

    def _from_row(self, row: dict[str, Any]) -> Prompt:
        if self.api == "chat":
            if "messages" in row:
                return Prompt(messages=row["messages"])
            return Prompt(messages=[{"role": "user", "content": _row_text(row)}])
        return Prompt(text=_row_text(row))


def _row_text(row: dict[str, Any]) -> str:
    for key in ("prompt", "text", "question", "input"):
        if isinstance(row.get(key), str):
            return row[key]
    if isinstance(row.get("messages"), list):
        return "\n".join(str(m.get("content", "")) for m in row["messages"])
    raise UsageError(f"dataset row has none of the fields prompt/text/question/input/messages: {str(row)[:120]}")


def load_dataset(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise UsageError(f"dataset {path} does not exist")
    from ...files import read_jsonl

    rows = read_jsonl(path)
    if bad := next((number for number, row in enumerate(rows, 1) if not isinstance(row, dict)), None):
        raise UsageError(f"{path}: row {bad} is not a JSON object; give one object per line")
    if not rows:
        raise UsageError(f"dataset {path} has no rows")
    _row_text(rows[0])  # fail now, not at the first request, if the fields are wrong
    return rows


def poisson_schedule(n: int, rate: float, seed: int = 0) -> list[float]:
    """Send offsets (seconds from the start) of n requests arriving as a Poisson process."""
    if rate <= 0:
        raise UsageError("a request rate must be positive")
    rng = random.Random(f"poisson:{seed}")
    t, out = 0.0, []
    for i in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def stagger(streams: int, ramp_s: float, seed: int) -> list[float]:
    """First-send times of a closed loop's streams: seeded, uniform over `ramp_s` (about one
    request's duration, GuideLLM's rampup), so the streams neither start nor finish in lock step."""
    rng = random.Random(f"stagger:{seed}")
    return sorted(rng.uniform(0.0, ramp_s) for _ in range(streams)) if ramp_s > 0 else [0.0] * streams


def fresh_prompts(prompts: list[Prompt], attempt: int) -> list[Prompt] | None:
    """Prompts for a re-run that vLLM's prefix cache has not seen (token ids rotated), or None."""
    if any(p.token_ids is None or len(p.token_ids) < 2 for p in prompts):
        return None
    return [Prompt(token_ids=p.token_ids[attempt % len(p.token_ids):] + p.token_ids[:attempt % len(p.token_ids)])
            for p in prompts]
