"""The result store (SQLite) and the records that reach it from outside `quantkit run`."""

from .db import KINDS, MIGRATIONS, Record, StageHandle, Store, StoreError, default_path, now, run_key
from .imports import default_names, import_result, standalone

__all__ = ["KINDS", "MIGRATIONS", "Record", "StageHandle", "Store", "StoreError", "default_path", "default_names",
           "import_result", "now", "run_key", "standalone"]
