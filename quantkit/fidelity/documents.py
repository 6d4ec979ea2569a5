"""The texts fidelity is measured on: offline documents as fixed-length windows of token ids.

Sources, under QUANTKIT_DATA_DIR (see its README):
- `wikitext2`: the WikiText-2 test split as its 62 pages (`wikitext2/test_document_level.jsonl`,
  what lm-eval's `wikitext` task reads); no quantizer calibrates on it.
- `c4`: `c4/en_train_first1000.jsonl`, the first 1,000 documents of C4 en train. It is also the
  offline calibration pool (quantize/calibration.py shuffles it with the recipe's seed and reads
  the first num_samples), and C4's validation split is not stored there: a held-out slice is the
  pool less what a calibration read, passed as `exclude` (the first num_samples records of
  `quantize.calibration.load(calib).records`; the caller, a layer above, reads them).

Each document is tokenized whole with the model's tokenizer (no special tokens), cut into
consecutive windows of `length` tokens (a shorter tail is dropped: every window scores the same
number of positions), and each window gets the model's prefix token in front (BOS, else EOS, as
lm-eval's rolling log-likelihood does), so the first text token is scored too. A window keeps its
document's id: documents, not windows, are the bootstrap's unit (intervals.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .. import settings
from ..errors import UsageError
from ..files import read_jsonl

SOURCES = {  # name -> (file under QUANTKIT_DATA_DIR, text field)
    "wikitext2": (Path("wikitext2") / "test_document_level.jsonl", "page"),
    "c4": (Path("c4") / "en_train_first1000.jsonl", "text"),
}


@dataclass(frozen=True)
class Window:
    source: str
    document: str  # "SOURCE/INDEX": the row of the source file
    start: int  # offset of the window's first text token in its document
    token_ids: list[int]  # the prefix token, then `length` text tokens

    @property
    def scored(self) -> int:
        """Positions that predict a text token: every token after the prefix."""
        return len(self.token_ids) - 1


def load_texts(source: str, data_dir: Path | None = None) -> list[str]:
    """A source's documents in file order; a missing data dir or file is a usage error."""
    rows = read_jsonl(source_path(source, data_dir))
    field = SOURCES[source][1]
    return [str(row.get(field, "")) if isinstance(row, dict) else "" for row in rows]


def source_path(source: str, data_dir: Path | None = None) -> Path:
    """The offline file a source's documents are read from; a usage error when it is not there
    (a run recipe checks it before any work: pipeline/checks.py)."""
    if source not in SOURCES:
        raise UsageError(f"unknown fidelity text source '{source}'; choices: {', '.join(SOURCES)}")
    data_dir = data_dir or settings.data_dir()
    if data_dir is None:
        raise UsageError(f"the fidelity text '{source}' is read offline: set QUANTKIT_DATA_DIR to the data folder")
    path = Path(data_dir) / SOURCES[source][0]
    if not path.is_file():
        raise UsageError(f"{path} is missing from QUANTKIT_DATA_DIR={data_dir}; the '{source}' texts are read from it")
    return path


def prefix_token(tokenizer) -> int | None:
    """The token each window starts with: BOS, else EOS (lm-eval's prefix token), else none."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def windows(texts: Iterable[str], tokenizer, source: str, length: int, *, limit: int | None = None,
            per_document: int | None = None, exclude: set[str] = frozenset()) -> list[Window]:
    """Every document's consecutive `length`-token windows, in order: at most `per_document` of
    each (more documents for the same positions: narrower intervals) and `limit` in all;
    documents in `exclude` (e.g. what a calibration read) are skipped."""
    if length < 1:
        raise UsageError(f"a fidelity window must hold at least 1 token (got {length})")
    prefix = prefix_token(tokenizer)
    out: list[Window] = []
    for index, text in enumerate(texts):
        if not text.strip() or text in exclude:
            continue
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        starts = range(0, len(ids) - length + 1, length)
        for start in starts[:per_document]:
            chunk = ids[start:start + length]
            out.append(Window(source, f"{source}/{index}", start, ([prefix] if prefix is not None else []) + chunk))
            if limit is not None and len(out) >= limit:
                return out
    return out
