"""`quantkit runs import`: put a standalone `quantkit bench` / `quantkit eval` result into the store.

`quantkit run` records every stage itself; a bench or eval run on its own (another machine, other
serving flags such as tensor parallelism) writes only its JSON file. Importing that file makes it a
stored record that `quantkit compare` reports beside the rest. The file is validated against its
schema, nothing is recomputed, and importing the same file twice is a no-op (the run key is the
file's content hash).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from .errors import UsageError
from .store import Store, run_key

KINDS = {"quantkit.bench": "bench", "quantkit.eval": "eval"}


def _load(path: Path) -> tuple[str, dict[str, Any], bytes]:
    if not path.is_file():
        raise UsageError(f"{path} does not exist; give the JSON a `quantkit bench --json` or `quantkit eval` wrote")
    raw = path.read_bytes()
    if not raw.strip():
        raise UsageError(f"{path} is empty (the run that should have written it failed?)")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not JSON ({exc.msg} at line {exc.lineno}); give a bench or eval result file") from None
    kind = KINDS.get(data.get("kind") if isinstance(data, dict) else None)
    if kind is None:
        raise UsageError(f"{path} is not a quantkit bench or eval result (kind must be one of {', '.join(KINDS)})")
    if kind == "bench":
        from .bench import BenchRun as Model
    else:
        from .evals_core import EvalRun as Model
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
    from .compare import checkpoint_method

    folder = Path(data.get("model_dir") or "")
    name = data.get("model_name") or folder.name
    method = checkpoint_method(data.get("checkpoint"))
    if method is None:
        return name, "baseline"
    m = re.fullmatch(rf"(.+)-{re.escape(method)}-[0-9a-f]{{8}}", name)
    return (m.group(1) if m else name), method


def import_result(store: Store, path: Path, model: str | None = None, variant: str | None = None) -> dict[str, Any]:
    kind, data, raw = _load(path)
    guessed_model, guessed_variant = default_names(data)
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
    for point in data.get("points", []) if kind == "bench" else []:
        store.add_point(record_id, point)
    store.finish(record_id, data, str(path.resolve()))
    return {"file": str(path), "kind": kind, "model": model, "variant": variant, "run_key": key, "imported": True}
