"""What a stored record is: the stage kinds, named in this one place.

A record's `kind` (a stage of `quantkit run`, or a standalone command's result) is one of
`STAGE_KINDS`. SQLite does not check it (migration m002 dropped the CHECK constraint, so a new
kind needs no table rebuild): `Store.begin` does, against this tuple. The report reads the
`REPORTED_KINDS` of each variant and compares the `MEASURED_KINDS` within one workload only. A
result file names its kind in its JSON `kind` field as `quantkit.<kind>` (`result_kind`);
`quantkit runs import` accepts the `IMPORTABLE_KINDS` (registry.RESULT_SCHEMAS validates each).
"""

from __future__ import annotations

# Every kind a record may have; only membership is checked, the order is stored nowhere.
STAGE_KINDS = ("convert", "bench", "eval", "tune", "capacity", "trial")
# The stages a report reads per variant, in the order it reads them; a tune's trials are read
# through its tune record, never on their own.
REPORTED_KINDS = ("convert", "bench", "eval", "capacity", "tune")
# Measured under a workload (prompt and output lengths, load profile, SLO): two records of
# different workloads are two results, never one mixed from whichever is newest.
MEASURED_KINDS = ("capacity", "tune")
# The stage kinds whose result files `quantkit runs import` stores.
IMPORTABLE_KINDS = ("bench", "eval", "capacity")

RESULT_KIND_PREFIX = "quantkit."


def result_kind(kind: str) -> str:
    """The JSON `kind` a result of this stage kind carries (`bench` -> `quantkit.bench`)."""
    return RESULT_KIND_PREFIX + kind


# A result file's JSON `kind` -> the stage kind it is stored as, for the importable ones.
IMPORTABLE_RESULTS = {result_kind(kind): kind for kind in IMPORTABLE_KINDS}
