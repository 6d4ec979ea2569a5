"""Results from outside `quantkit run`: standalone commands and imported files.

`quantkit run` records every stage itself. A standalone `quantkit bench` / `eval` / `tune` records
its result through `standalone(...)`, under the model and variant names `quantkit run` would have
used for that folder, with a run key of its own (each standalone run is one record).

`quantkit runs import` stores a result file made elsewhere (another machine, a quantkit whose
store was not kept): the file is validated against its schema, nothing is recomputed, and
importing the same file twice is a no-op (the run key is the file's content hash).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel

from ..checkpoint import CheckpointInfo, describe, fingerprint, method_of
from ..errors import UsageError
from ..files import PLAIN_NAME_RULE, is_plain_name
from ..labels import BASELINE
from ..safeload import loads_json
from .db import Store, run_key
from .kinds import IMPORTABLE_RESULTS, POINT_KINDS, RESULT_SCHEMAS, stage_kind
from .protocol import StageHandle


def _load(path: Path) -> tuple[str, dict[str, Any], bytes]:
    if not path.is_file():
        raise UsageError(f"{path} does not exist; give the JSON a `quantkit bench --json` or `quantkit eval` wrote")
    raw = path.read_bytes()
    if not raw.strip():
        raise UsageError(f"{path} is empty (the run that should have written it failed?)")
    # bad JSON, a NaN (not JSON), or nesting no result has: one line, before anything walks it
    data = loads_json(raw, str(path), "a quantkit result file", "give a bench or eval result file", strict=True)
    kind = IMPORTABLE_RESULTS.get(data.get("kind") if isinstance(data, dict) else None)
    if kind is None:
        raise UsageError(f"{path} is not a quantkit bench, eval or capacity result "
                         f"(kind must be one of {', '.join(IMPORTABLE_RESULTS)})")
    Model = RESULT_SCHEMAS.load(data["kind"])
    try:
        Model.model_validate(data)
    except Exception as exc:  # pydantic's message is many lines; the first error says enough
        first = str(exc).splitlines()[1:3]
        raise UsageError(f"{path} does not match the {kind} result schema: {' '.join(s.strip() for s in first)}") from None
    return kind, data, raw


def default_names(data: dict[str, Any]) -> tuple[str, str]:
    """(model, variant) as `quantkit run` would have stored them: a checkpoint quantkit wrote is
    named `<model>-<method>-<hash8>` and is the variant `<method>`; an unquantized one is the
    baseline; one quantized elsewhere keeps its folder name and is named after its quantization."""
    folder = Path(data.get("model_dir") or "")
    name = data.get("model_name") or folder.name
    method = method_of(CheckpointInfo.model_validate(data.get("checkpoint") or {}))
    if method is None:
        return name, BASELINE
    m = re.fullmatch(rf"(.+)-{re.escape(method)}-[0-9a-f]{{8}}", name)
    return (m.group(1) if m else name), method


def import_result(store: Store, path: Path, model: str | None = None, variant: str | None = None) -> dict[str, Any]:
    for option, given in (("--model", model), ("--variant", variant)):
        if given is not None and not is_plain_name(given):
            raise UsageError(f"{option} {given!r} is not a plain name: {PLAIN_NAME_RULE}")
    kind, data, raw = _load(path)
    guessed_model, guessed_variant = default_names(data)
    # a name the file gives (its model_name, its folder) is the file's word: checked as a given one
    for option, given, guessed in (("--model", model, guessed_model), ("--variant", variant, guessed_variant)):
        if given is None and not is_plain_name(guessed):
            raise UsageError(f"{path} names its {option[2:]} {guessed!r}, which is not a plain name ({PLAIN_NAME_RULE}); "
                             f"give one with {option} NAME")
    model, variant = model or guessed_model, variant or guessed_variant
    key = run_key(kind, imported=hashlib.sha256(raw).hexdigest())
    existing = store.done(key)
    if existing is not None:
        return {"file": str(path), "kind": kind, "model": existing.model, "variant": existing.variant,
                "run_key": key, "imported": False, "note": "already in the store"}
    server = data.get("server") or {}
    params = {"checkpoint": data.get("model_dir"), "imported_from": str(path.resolve()),
              "serve": server.get("serve_config"), "hardware": data.get("hardware")}
    record_id = store.begin(key, kind, model, variant, params)
    for point in data.get("points", []) if kind in POINT_KINDS else []:
        store.add_point(record_id, point)
    if data.get("complete") is False:  # an export written while its run went on, that never finished
        store.fail(record_id, "the run had not finished when this file was written (complete: false)",
                   status="interrupted", result=data)
    else:
        store.finish(record_id, data, str(path.resolve()))
    return {"file": str(path), "kind": kind, "model": model, "variant": variant, "run_key": key, "imported": True,
            **({"note": "unfinished: stored as interrupted"} if data.get("complete") is False else {})}


@contextmanager
def standalone(store: Store, kind: str, model_dir: Path, serve: BaseModel, settings: BaseModel | dict[str, Any],
               **own: Any) -> Iterator[StageHandle]:
    """The record of a standalone command's run on `model_dir` (see RecordStore.stage), its params
    in the shape a `quantkit run` stage of the kind writes (`StageKind.params`)."""
    model_dir = Path(model_dir).expanduser().resolve()
    model, variant = default_names({"model_dir": str(model_dir), "checkpoint": describe(model_dir)})
    key = run_key(kind, standalone=uuid.uuid4().hex)
    params = stage_kind(kind).params(model_dir, fingerprint(model_dir), serve, settings, standalone=True, **own)
    with store.stage(key, kind, model, variant, params) as rec:
        yield rec
