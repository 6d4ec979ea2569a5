"""The result store (SQLite) and the records that reach it from outside `quantkit run`."""

from .db import MIGRATIONS, Store, StoreError, default_path, keyed, now, run_key
from .imports import default_names, import_result, standalone
from .kinds import MEASURED_KINDS, REPORTED_KINDS, STAGE_KINDS, result_kind
from .protocol import Record, RecordStore, StageHandle, failure_line

__all__ = ["MEASURED_KINDS", "MIGRATIONS", "REPORTED_KINDS", "Record", "RecordStore", "STAGE_KINDS", "StageHandle",
           "Store", "StoreError", "default_path", "default_names", "failure_line", "keyed", "import_result", "now", "result_kind", "run_key", "standalone"]
