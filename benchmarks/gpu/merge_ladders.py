"""One store of the H200 ladders that device calls brought back, each record relabelled.

A machine that goes back mid-search leaves its capacity record `running` in the results.db the
last call copied out (points and their requests kept, no result). This copies such records into a
quantkit store under one model name and the variant label given, as `interrupted` with the
export JSON's result (the search state as the last point left it), so `quantkit compare` shows
their ladders and re-judges them under any SLO (`--slo`), and never calls them finished.

usage: python benchmarks/gpu/merge_ladders.py OUT_DB MODEL LABEL=RESULTS_DB:EXPORT_JSON [...]
"""

import json
import sqlite3
import sys
from pathlib import Path


def main() -> None:
    out, model, *specs = sys.argv[1:]
    from quantkit.store import Store

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Store(Path(out)).close()  # the schema, by quantkit's own migrations
    dst = sqlite3.connect(out)
    for spec in specs:
        label, paths = spec.split("=", 1)
        db, export = paths.split(":", 1)
        result = json.loads(Path(export).read_text())
        src = sqlite3.connect(db)
        src.row_factory = sqlite3.Row
        for row in src.execute("SELECT * FROM records WHERE kind = 'capacity'"):
            cur = dst.execute(
                "INSERT INTO records (run_key, kind, model, variant, status, params, result, result_path, error,"
                " recipe_hash, pid, started_at, finished_at, host, proc_start) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (row["run_key"], "capacity", model, label, "interrupted", row["params"], json.dumps(result),
                 None, "the GPU machine went back during the search", row["recipe_hash"], None, row["started_at"],
                 row["finished_at"] or result.get("created_at"), row["host"], row["proc_start"]))
            points = src.execute("SELECT idx, point FROM points WHERE record_id = ? ORDER BY idx", (row["id"],))
            dst.executemany("INSERT INTO points (record_id, idx, point) VALUES (?,?,?)",
                            [(cur.lastrowid, i, p) for i, p in points])
            print(f"{label}: {row['model']} / {row['variant']} -> {model} / {label}, {len(result['points'])} points")
    dst.commit()


if __name__ == "__main__":
    main()
