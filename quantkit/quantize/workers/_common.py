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


ERROR_MARKER = "QUANTKIT_ERROR "  # quantkit reports the text after it as the one-line reason


def fail(message):
    """End the worker with a reason quantkit shows as it is (one line, exit code 3)."""
    print(ERROR_MARKER + " ".join(str(message).split()), file=sys.stderr, flush=True)
    sys.exit(3)


def note(message):
    """A line quantkit relays to the user's progress output."""
    print("quantkit: " + message, file=sys.stderr, flush=True)


def carry_options(options, fields, renames, backend):
    """Recipe options are written for llm-compressor: keep those the backend also has (renamed)."""
    kept = {}
    for key, value in (options or {}).items():
        name = renames.get(key, key)
        if name in fields:
            kept[name] = value
        else:
            note(f"ignoring recipe option {key!r}: {backend} has no such setting")
    return kept


def fix_quantization_config(folder, drop=(), set_values=None):
    """Rewrite config.json's (and quantize_config.json's) quantization_config in place."""
    import os

    for name, nested in (("config.json", True), ("quantize_config.json", False)):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        with open(path) as fh:
            data = json.load(fh)
        qc = data.get("quantization_config") if nested else data
        if not isinstance(qc, dict):
            continue
        for key in drop:
            qc.pop(key, None)
        qc.update(set_values or {})
        with open(path, "w") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")


def finish(started, *packages):
    """The last stdout line is the result quantkit reads."""
    import platform

    # the same fields an llm-compressor record has: the python beside the packages
    found = {**versions(*packages), "python": platform.python_version()}
    print(json.dumps({"quantize_time_s": time.monotonic() - started, "versions": found}))
