"""Issue 31, left-overs: a card write that fails keeps the old card, the models folder's left-over
temporary files are named (with the command that removes them), export names never collide."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from push_world import make_checkpoint, store_runs

REPO = Path(__file__).resolve().parents[2]


def test_a_card_write_on_a_full_disk_keeps_the_old_card(tmp_path, monkeypatch):
    from quantkit import hub

    home = tmp_path / "home"
    home.mkdir()
    ckpt = make_checkpoint(tmp_path / "models" / "smollm2-135m-gptq")
    baseline = tmp_path / "models" / "smollm2-135m"
    baseline.mkdir()
    monkeypatch.setenv("QUANTKIT_HOME", str(home))
    store_runs(home, ckpt, baseline)
    readme = ckpt / "README.md"
    reviewed = "the card the user reviewed\nCard written by quantkit 0.1.0 from its result store.\n"  # quantkit's: replaced
    readme.write_text(reviewed)

    real_open = io.open

    class HalfWritten:
        """A file on a disk that fills up half way through the card."""

        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            if "vllm serve" in (data if isinstance(data, str) else data.decode("utf-8", "replace")):
                self.fh.write(data[: len(data) // 2])
                self.fh.flush()
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.fh.write(data)

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    def full_disk_open(file, mode="r", *args, **kwargs):
        fh = real_open(file, mode, *args, **kwargs)
        return HalfWritten(fh) if any(m in mode for m in "wax") else fh

    monkeypatch.setattr(io, "open", full_disk_open)
    with pytest.raises(OSError, match="No space left"):
        hub.card(ckpt)
    monkeypatch.setattr(io, "open", real_open)
    assert readme.read_text() == reviewed  # not 0 bytes, not half a card
    assert not [p.name for p in ckpt.iterdir() if p.name.endswith(".tmp")]


def _leftovers(models: Path) -> list[Path]:
    ckpt = models / "m-fp8"
    (ckpt / "quantkit-bench").mkdir(parents=True)
    (ckpt / "quantkit.json").write_text("{}")
    paths = [models / ".m-int8.tmp-k3j4h5g6", models / ".m-fp8.old-4000000", ckpt / ".quantkit.json.a1b2c3d4.tmp",
             ckpt / "quantkit-bench" / ".bench-20261201T000000Z.json.zz99yy88.tmp"]
    paths[0].mkdir()
    (paths[0] / "model.safetensors").write_bytes(b"\0" * 10)  # a SIGKILL during save
    paths[1].mkdir()
    for p in paths[2:]:
        p.write_text("{")
    return paths


def test_left_over_temporary_files_are_named_with_their_remedy(tmp_path, monkeypatch):
    from quantkit import doctor, housekeeping

    models = tmp_path / "models"
    monkeypatch.setenv("QUANTKIT_MODELS_DIR", str(models))
    expected = _leftovers(models)
    (models / ".m-gptq.old-{}".format(os.getpid())).mkdir()  # being deleted by a live process: not listed
    assert set(housekeeping.leftovers()) == set(expected)
    status, detail = doctor._leftovers()
    assert status == "warn" and "rm -rf" in detail and all(str(p) in detail for p in expected)

    env = {**os.environ, "QUANTKIT_HOME": str(tmp_path / "home"), "QUANTKIT_MODELS_DIR": str(models),
           "NO_COLOR": "1", "COLUMNS": "400"}
    proc = subprocess.run([sys.executable, "-m", "quantkit", "models", "ls", "--json"], cwd=REPO, capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())
    assert "left-over temporary" in said and "rm -rf" in said
    assert all(str(p) in said for p in expected), said
    assert [row["path"] for row in json.loads(proc.stdout)] == [str((models / "m-fp8").resolve())]


def test_unique_export_names_never_collide(tmp_path):
    from quantkit.files import unique_path

    got: list[Path] = []
    lock = threading.Lock()

    def take():
        path = unique_path(tmp_path / "quantkit-bench", "bench-", ".json", stamp="20261201T000000Z")
        with lock:
            got.append(path)

    threads = [threading.Thread(target=take) for _ in range(20)]  # twenty benches in the same second
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 20 and all(p.exists() for p in got)
    assert tmp_path / "quantkit-bench" / "bench-20261201T000000Z.json" in got
    assert tmp_path / "quantkit-bench" / "bench-20261201T000000Z-2.json" in got
