"""Shared by the worker scripts; standard library only (runs in a backend's own environment)."""

import json
import sys
import time
from importlib import metadata


def read_spec():
    with open(sys.argv[1]) as fh:
        return json.load(fh)


def read_calibration(spec):
    if not spec.get("calibration"):
        return []
    with open(spec["calibration"]) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def versions(*names):
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def finish(started, *packages):
    """The last stdout line is the result quantkit reads."""
    print(json.dumps({"quantize_time_s": time.monotonic() - started, "versions": versions(*packages)}))
