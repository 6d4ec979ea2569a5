"""Calibration data: where it comes from and how it becomes token ids.

`dataset` in a recipe (or `--calib`) is one of:
- `c4`: allenai/c4 (en, train) online; `$QUANTKIT_DATA_DIR/c4/en_train_first1000.jsonl` when the
  offline data dir is set (the same shard GPTQ samples from);
- a local `.jsonl` / `.json` / `.txt` / `.parquet` file;
- a Hub dataset id (`org/name`, or `org/name:split`).

Records with a `text` field (or the recipe's `text_field`) are used as plain text; records with a
`messages` list (role/content) are conversational and get the model's chat template applied.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import settings
from ..errors import UsageError
from ..safeload import read_json
from .recipe import Calibration

C4_OFFLINE = Path("c4") / "en_train_first1000.jsonl"
TEXT_FIELDS = ("text", "content", "document", "sentence", "question")


@dataclass
class CalibrationSet:
    source: str  # what the recipe asked for
    resolved: str  # the file path or Hub id actually read
    records: list[Any]  # str (plain text) or list of chat messages
    conversational: bool

    def describe(self) -> dict[str, Any]:
        return {"dataset": self.source, "resolved": self.resolved, "conversational": self.conversational}


def load(calib: Calibration) -> CalibrationSet:
    source = calib.dataset
    path = Path(source).expanduser()
    if source == "c4":
        data = settings.data_dir()
        if data is not None:
            path = data / C4_OFFLINE
            if not path.is_file():
                raise UsageError(f"calibration file {path} is missing from QUANTKIT_DATA_DIR={data}")
            rows = _read_file(path)
            resolved = str(path)
        else:
            rows = _read_hub("allenai/c4", "train", config="en", limit=max(4 * calib.num_samples, 256))
            resolved = "allenai/c4:en:train"
    elif path.suffix.lower() in (".jsonl", ".json", ".txt", ".parquet") or path.exists():
        if not path.is_file():
            raise UsageError(f"calibration file {path} does not exist")
        rows = _read_file(path)
        resolved = str(path.resolve())
    elif source.count("/") == 1 or ":" in source:
        repo, _, split = source.partition(":")
        rows = _read_hub(repo, split or calib.split, limit=max(4 * calib.num_samples, 256))
        resolved = f"{repo}:{split or calib.split}"
    else:
        raise UsageError(
            f"calibration dataset '{source}' is not 'c4', a .jsonl/.txt/.parquet file or a Hub id (org/name)"
        )
    records, conversational = _extract(rows, calib.text_field, resolved)
    rng = random.Random(calib.seed)
    rng.shuffle(records)
    return CalibrationSet(source, resolved, records, conversational)


def _read_file(path: Path) -> list[Any]:
    try:
        suffix = path.suffix.lower()
        if suffix == ".txt":
            text = path.read_text(encoding="utf-8")
            # paragraphs (blank-line separated) are the samples of a plain text file
            return [p.strip() for p in text.split("\n\n") if p.strip()]
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        if suffix == ".json":
            data = read_json(path, "a calibration file", "give a list of texts or records")
            return data if isinstance(data, list) else [data]
        from ..files import read_jsonl

        return read_jsonl(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read calibration file {path}: {exc}") from None
    except UsageError:
        raise
    except Exception as exc:  # pyarrow's errors have no common base worth naming
        raise UsageError(f"cannot read calibration file {path}: {type(exc).__name__}: {exc}") from None


def _read_hub(repo: str, split: str, config: str | None = None, limit: int = 256) -> list[Any]:
    if settings.offline():
        raise UsageError(
            f"calibration set '{repo}' needs the Hub, which is offline here; set QUANTKIT_DATA_DIR or pass a local file"
        )
    try:
        from datasets import load_dataset

        ds = load_dataset(repo, config, split=split, streaming=True)
        return [row for _, row in zip(range(limit), ds)]
    except Exception as exc:
        raise UsageError(f"cannot load calibration set '{repo}' ({split}): {' '.join(str(exc).split())[:200]}") from None


def _extract(rows: list[Any], text_field: str | None, source: str) -> tuple[list[Any], bool]:
    if not rows:
        raise UsageError(f"calibration set {source} is empty")
    first = rows[0]
    if isinstance(first, str):
        return [r for r in rows if r.strip()], False
    if not isinstance(first, dict):
        raise UsageError(f"calibration set {source}: records must be text or JSON objects")
    if text_field is None and isinstance(first.get("messages"), list):
        return [r["messages"] for r in rows if r.get("messages")], True
    field = text_field or next((f for f in TEXT_FIELDS if f in first), None)
    if field is None or field not in first:
        raise UsageError(
            f"calibration set {source} has no text field (fields: {', '.join(first)}); name one with text_field"
        )
    return [str(r[field]) for r in rows if str(r.get(field, "")).strip()], False


def tokenize(calib_set: CalibrationSet, tokenizer, num_samples: int, seq_len: int) -> list[dict[str, list[int]]]:
    """The first `num_samples` records as token ids, each truncated to `seq_len` tokens.

    Short records are kept (a calibration sample need not fill seq_len); empty ones are skipped.
    """
    samples = []
    for record in calib_set.records:
        if calib_set.conversational:
            text = tokenizer.apply_chat_template(record, tokenize=False)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tokenizer(record, add_special_tokens=True)["input_ids"]
        ids = ids[:seq_len]
        if len(ids) < 2:
            continue
        samples.append({"input_ids": ids, "attention_mask": [1] * len(ids)})
        if len(samples) == num_samples:
            break
    if len(samples) < num_samples:
        raise UsageError(
            f"calibration set {calib_set.resolved} has only {len(samples)} usable samples; "
            f"lower --num-samples (asked for {num_samples})"
        )
    return samples
