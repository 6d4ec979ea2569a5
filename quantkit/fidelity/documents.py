"""The texts fidelity is measured on: offline documents as fixed-length windows of token ids.

Sources, under QUANTKIT_DATA_DIR (see its README):
- `wikitext2`: the WikiText-2 test split as its 62 pages (`wikitext2/test_document_level.jsonl`,
  what lm-eval's `wikitext` task reads); no quantizer calibrates on it.
- `c4`: `c4/en_train_first1000.jsonl`, the first 1,000 documents of C4 en train. It is also the
  offline calibration pool (quantize/calibration.py shuffles it with the recipe's seed and reads
  the first num_samples), and C4's validation split is not stored there: a held-out slice is the
  pool less what a calibration read, passed as `exclude` (the first num_samples records of
  `quantize.calibration.load(calib).records`; the caller, a layer above, reads them).

- `task:NAME`: the prompts of quantkit's evaluation task NAME (evals/tasks.yaml), as lm-eval builds
  them for its evaluation documents (zero-shot, the task's own template): each document's context
  followed by its gold continuation (a multiple-choice task's correct choice, a generation task's
  reference answer). What the accuracy gates score, token by token; no quantizer calibrates on it.
  A prompt is shorter than a window: each is one window of its own length (its last `length`
  tokens when longer), so these windows differ in length; the figures are per-token means either way.

Each document is tokenized whole with the model's tokenizer (no special tokens), cut into
consecutive windows of `length` tokens (a shorter tail is dropped: every window scores the same
number of positions), and each window gets the model's prefix token in front (BOS, else EOS, as
lm-eval's rolling log-likelihood does), so the first text token is scored too. A window keeps its
document's id: documents, not windows, are the bootstrap's unit (intervals.py).
"""

from __future__ import annotations

import tempfile
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


TASK_PREFIX = "task:"


def is_task(source: str) -> bool:
    return source.startswith(TASK_PREFIX)


def load_texts(source: str, data_dir: Path | None = None, limit: int | None = None) -> list[str]:
    """A source's documents in file order (a task's: its first `limit` only, as lm-eval renders
    each one: the whole of HellaSwag takes ~40 s); a missing data dir or file is a usage error."""
    if is_task(source):
        return task_prompts(source.removeprefix(TASK_PREFIX), data_dir, limit)
    rows = read_jsonl(source_path(source, data_dir))
    field = SOURCES[source][1]
    return [str(row.get(field, "")) if isinstance(row, dict) else "" for row in rows]


def source_path(source: str, data_dir: Path | None = None) -> Path:
    """The offline file a source's documents are read from; a usage error when it is not there
    (a run recipe checks it before any work: pipeline/checks.py). A task source: the folder of
    its generated task config, once its data files were found."""
    if is_task(source):
        folder = _offline_dir(source, data_dir)
        with tempfile.TemporaryDirectory() as tmp:
            _task_setup(source.removeprefix(TASK_PREFIX), folder, Path(tmp))
        return folder
    if source not in SOURCES:
        raise UsageError(f"unknown fidelity text source '{source}'; choices: {', '.join(SOURCES)}, "
                         f"or {TASK_PREFIX}TASK (an evaluation task, e.g. {TASK_PREFIX}arc_easy)")
    data_dir = _offline_dir(source, data_dir)
    path = Path(data_dir) / SOURCES[source][0]
    if not path.is_file():
        raise UsageError(f"{path} is missing from QUANTKIT_DATA_DIR={data_dir}; the '{source}' texts are read from it")
    return path


def _offline_dir(source: str, data_dir: Path | None) -> Path:
    data_dir = data_dir or settings.data_dir()
    if data_dir is None:
        raise UsageError(f"the fidelity text '{source}' is read offline: set QUANTKIT_DATA_DIR to the data folder")
    return Path(data_dir)


def _task_setup(name: str, data_dir: Path, config_dir: Path):
    from ..evals import tasks as eval_tasks

    specs = eval_tasks.resolve([name], num_fewshot=0)  # an unknown task: one line naming the known ones
    if any(eval_tasks.registry()[spec.name].is_group for spec in specs) or len(specs) != 1:
        raise UsageError(f"fidelity reads the prompts of one task, not the group or suite '{name}': name a task "
                         f"such as {TASK_PREFIX}arc_easy")
    return specs[0], eval_tasks.prepare_tasks(specs, data_dir, config_dir)


def task_prompts(name: str, data_dir: Path | None = None, limit: int | None = None) -> list[str]:
    """Task NAME's first `limit` evaluation documents as lm-eval renders them (zero-shot):
    context + gold continuation, one text per document, in the task's document order."""
    from ..evals import tasks as eval_tasks

    source = TASK_PREFIX + name
    with tempfile.TemporaryDirectory() as tmp:
        spec, setup = _task_setup(name, _offline_dir(source, data_dir), Path(tmp))
        task = eval_tasks.task_manager(setup).load([spec.name])["tasks"][spec.name]
        task.set_config(key="num_fewshot", value=0)
        task.build_all_requests(limit=limit, rank=0, world_size=1)
    texts: dict[int, str] = {}
    for inst in task.instances:
        target = task.doc_to_target(inst.doc)
        if task.OUTPUT_TYPE == "multiple_choice":
            if isinstance(target, list):  # several right answers: the first
                target = target[0]
            choices = task.doc_to_choice(inst.doc)
            gold = target if isinstance(target, int) else choices.index(target) if target in choices else None
            if inst.idx == gold:
                context, continuation = inst.arguments
                texts[inst.doc_id] = context + continuation
        elif task.OUTPUT_TYPE == "generate_until":
            texts[inst.doc_id] = inst.arguments[0] + task.config.target_delimiter + str(target)
        else:  # loglikelihood(_rolling): the text is the argument
            texts[inst.doc_id] = "".join(a for a in inst.arguments if isinstance(a, str))
    return [texts[i] for i in sorted(texts)]


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
        if is_task(source):  # a prompt: one window, its last `length` tokens (where the answer is)
            spans = [(max(0, len(ids) - length), len(ids))] if len(ids) >= 2 else []
        else:
            spans = [(start, start + length) for start in range(0, len(ids) - length + 1, length)]
        for start, end in spans[:per_document]:
            chunk = ids[start:end]
            out.append(Window(source, f"{source}/{index}", start, ([prefix] if prefix is not None else []) + chunk))
            if limit is not None and len(out) >= limit:
                return out
    return out
