"""`quantkit bundle`: both environments' wheels, packed for a machine with no network.

A bundle is a folder:

    manifest.json          the Python and platform it is for, the accelerator, every wheel (file,
                           name, version, sha256, the environments that install it), what was left
                           out and why, and the chunks
    install.sh             run on the target (quantkit/bundle_install.sh): verifies, assembles,
                           installs each environment, runs `quantkit doctor`
    wheels/                the wheels; requirements-main.txt, requirements-vllm.txt: the exact
                           pins each environment installs (pip --no-index --no-deps)

With `chunk_mb`, wheels/ and the requirements go into one uncompressed tar (wheels are zip files
already) cut into parts of at most that many MB, each in a folder of its own (chunk-00, ...) with
copies of manifest.json and install.sh: each folder can travel alone (a transfer limit per
command), and `bash chunk-NN/install.sh` on the target keeps its part outside the checkout until
all have arrived.

Packages the target already has are left out (`exclude` patterns, `host_has` a `pip freeze` of the
target): on a GPU image with torch and its CUDA libraries, most of the bytes. The environments
install with --no-deps (the lock files are complete lists), so what is left out is what the
target's own Python supplies.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from . import __version__, settings
from .errors import SetupError, UsageError

ENVS = ("main", "vllm")
# the lock files each environment installs, by accelerator (scripts/setup.sh reads the same ones)
LOCKS = {"cuda": {"main": "requirements/main-cuda.txt", "vllm": "requirements/vllm-cuda.txt"},
         "cpu": {"main": "requirements/main.txt", "vllm": "requirements/vllm-cpu.txt"}}
DEFAULT_PYTHON = "3.12"
DEFAULT_PLATFORM = "manylinux_2_31_x86_64"  # glibc 2.31 or newer (scripts/lock_cuda.sh says why)
MB = 1_000_000
TAR_NAME = "bundle.tar"


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    version: str

    @property
    def line(self) -> str:
        return f"{self.name}=={self.version}"


def read_pins(path: Path) -> list[Pin]:
    """The `name==version` lines of a lock file (comments and blank lines skipped)."""
    pins = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise UsageError(f"{path}:{number}: {raw.strip()!r} is not `name==version`; bundle packs exact pins "
                             "(a lock file such as requirements/main-cuda.txt)")
        pins.append(Pin(name.strip(), version.strip()))
    return pins


@dataclass
class HostHas:
    """What the target already has: name patterns (any version) and `name==version` pins of a
    `pip freeze` of it (a bare name there: any version)."""

    patterns: list[str] = field(default_factory=list)
    pinned: dict[str, set[str]] = field(default_factory=dict)
    source: str = ""

    @classmethod
    def of(cls, exclude: list[str], freeze: Path | None) -> "HostHas":
        host = cls(patterns=[normalize(p) for p in exclude if p.strip()])
        if freeze is not None:
            if not freeze.is_file():
                raise UsageError(f"--host-has {freeze}: no such file; give a `pip freeze` of the target machine")
            host.source = str(freeze)
            for raw in freeze.read_text().splitlines():
                line = raw.split("#", 1)[0].strip()
                if not line or line.startswith("-") or " @ " in line:
                    continue
                name, _, version = line.partition("==")
                host.pinned.setdefault(normalize(name), set()).add(version.strip().split("+", 1)[0] if version else "*")
        return host

    def reason(self, pin: Pin) -> str | None:
        """Why `pin` is left out of the bundle, or None to pack it."""
        name = normalize(pin.name)
        for pattern in self.patterns:
            if fnmatch.fnmatchcase(name, pattern):
                return f"--exclude {pattern}"
        versions = self.pinned.get(name, set())
        if "*" in versions or pin.version.split("+", 1)[0] in versions:
            return f"the target has it ({self.source})"
        return None


def platform_tags(platform: str) -> list[str]:
    """Every tag a host of `platform` accepts, as pip's --platform wants them one by one:
    manylinux_2_31_x86_64 -> manylinux_2_5 ... _2_31, the legacy manylinux aliases, linux."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not match:
        return [platform]
    top, arch = int(match[1]), match[2]
    tags = [f"manylinux_2_{n}_{arch}" for n in range(top, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{alias}_{arch}" for n, alias in legacy.items() if n <= top]
    return tags + [f"linux_{arch}"]


def _pip(args: list[str], what: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if proc.returncode != 0 and what:
        tail = " ".join(proc.stderr.strip().splitlines()[-2:])[:400]
        raise SetupError(f"{what} failed: {tail}")
    return proc


def _wheel_pin(path: Path) -> Pin:
    name, version = path.name.split("-")[:2]
    return Pin(name, version)


def download(pins: list[Pin], dest: Path, python: str, platform: str, pip_index: list[str]) -> None:
    """The wheels of `pins` for `python` on `platform` into `dest`. A package the index has only as
    source (lm-eval's rouge_score, sqlitedict, word2number) is built here, and must come out pure
    Python: anything else would be built for this machine, not the target."""
    dest.mkdir(parents=True, exist_ok=True)
    target = ["--python-version", python, "--implementation", "cp", "--only-binary=:all:", "--no-deps"]
    for tag in platform_tags(platform):
        target += ["--platform", tag]
    todo = list(pins)
    while todo:
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as req:
            req.write("\n".join(p.line for p in todo) + "\n")
            req.flush()
            proc = _pip(["download", "-q", "-d", str(dest), *target, *pip_index, "-r", req.name], "")
        if proc.returncode == 0:
            return
        missing = re.search(r"No matching distribution found for ([A-Za-z0-9_.\-]+)", proc.stderr)
        if not missing:
            raise SetupError("pip download failed: " + " ".join(proc.stderr.strip().splitlines()[-2:])[:400])
        pin = next((p for p in todo if normalize(p.name) == normalize(missing[1].split("==")[0])), None)
        if pin is None:
            raise SetupError(f"pip download failed on {missing[1]}")
        todo.remove(pin)
        with tempfile.TemporaryDirectory() as built:
            _pip(["wheel", "-q", "--no-deps", "-w", built, *pip_index, pin.line],
                 f"{pin.line} has no wheel for Python {python} on {platform}, and building one")
            for wheel in Path(built).glob("*.whl"):
                if not wheel.name.endswith("-none-any.whl"):
                    raise SetupError(f"{pin.line} has no wheel for Python {python} on {platform} and is not pure "
                                     "Python: it cannot be built here for the target")
                shutil.move(str(wheel), dest / wheel.name)


def quantkit_wheel(dest: Path) -> Path:
    """quantkit itself, built from this checkout."""
    with tempfile.TemporaryDirectory() as built:
        _pip(["wheel", "-q", "--no-deps", "-w", built, str(settings.REPO_ROOT)], "building quantkit's wheel")
        wheel = next(Path(built).glob("quantkit-*.whl"))
        return Path(shutil.move(str(wheel), dest / wheel.name))


def _shown(path: Path) -> str:
    """A lock file's path as the manifest names it: relative to the checkout where it lies there."""
    try:
        return str(path.resolve().relative_to(settings.REPO_ROOT))
    except ValueError:
        return str(path)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Chunks:
    """A file-like sink that cuts what is written into files of at most `size` bytes."""

    def __init__(self, out: Path, size: int):
        self.out, self.size, self.files = out, size, []
        self._file = None
        self._left = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if self._left == 0:
                self._roll()
            n = min(self._left, len(view))
            self._file.write(view[:n])
            self._left -= n
            view = view[n:]
        return len(data)

    def _roll(self) -> None:
        self.close()
        index = len(self.files)
        folder = self.out / f"chunk-{index:02d}"
        folder.mkdir()
        path = folder / f"{TAR_NAME}.{index:02d}"
        self.files.append(path)
        self._file = path.open("wb")
        self._left = self.size

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def build(out: Path, *, accel: str = "cuda", python: str = DEFAULT_PYTHON, platform: str = DEFAULT_PLATFORM,
          chunk_mb: float | None = None, exclude: list[str] | None = None, host_has: Path | None = None,
          requirements: dict[str, Path] | None = None, with_quantkit: bool = True,
          pip_index: list[str] | None = None) -> dict:
    """Pack the environments' wheels into `out` (emptied first); returns the manifest."""
    if accel not in LOCKS:
        raise UsageError(f"--accel {accel}: use cuda or cpu")
    if not re.fullmatch(r"3\.\d+", python):
        raise UsageError(f"--python {python}: give a Python release as MAJOR.MINOR, e.g. 3.12")
    if chunk_mb is not None and chunk_mb * MB < 1024:
        raise UsageError(f"--chunk-mb {chunk_mb:g}: give a size of at least 0.001 MB (1 kB)")
    locks = {env: settings.REPO_ROOT / rel for env, rel in LOCKS[accel].items()}
    locks.update(requirements or {})
    unknown = set(locks) - set(ENVS)
    if unknown:
        raise UsageError(f"--requirements {', '.join(sorted(unknown))}: the environments are {', '.join(ENVS)}")
    for env, path in locks.items():
        if not path.is_file():
            raise UsageError(f"--requirements {env}={path}: no such file")
    host = HostHas.of(exclude or [], host_has)
    if out.exists() and any(out.iterdir()):
        if not (out / "manifest.json").is_file():
            raise UsageError(f"{out} is a folder that is not a bundle and not empty; name a new or empty folder")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _pack(out, locks, host, accel=accel, python=python, platform=platform, chunk_mb=chunk_mb,
                     with_quantkit=with_quantkit, pip_index=pip_index or [])
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # half a bundle would pass for one
        raise


def _pack(out: Path, locks: dict[str, Path], host: HostHas, *, accel: str, python: str, platform: str,
          chunk_mb: float | None, with_quantkit: bool, pip_index: list[str]) -> dict:
    staging = out / "payload" if chunk_mb else out
    wheels_dir = staging / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    packed: dict[str, list[Pin]] = {}
    left_out = []
    for env, path in locks.items():
        pins = read_pins(path)
        packed[env] = []
        for pin in pins:
            why = host.reason(pin)
            if why:
                left_out.append({"name": pin.name, "version": pin.version, "env": env, "why": why})
            else:
                packed[env].append(pin)
    for env in locks:  # one pip call per environment: pip refuses two versions of a name in one
        download(packed[env], wheels_dir, python, platform, pip_index)
    if with_quantkit:
        packed["main"].append(_wheel_pin(quantkit_wheel(wheels_dir)))

    by_pin: dict[tuple[str, str], dict] = {}
    for wheel in sorted(wheels_dir.glob("*.whl")):
        pin = _wheel_pin(wheel)
        by_pin[(normalize(pin.name), pin.version)] = {"file": wheel.name, "name": normalize(pin.name),
                                                      "version": pin.version, "sha256": sha256(wheel),
                                                      "bytes": wheel.stat().st_size, "envs": []}
    for env in locks:
        lines = []
        for pin in packed[env]:
            entry = by_pin.get((normalize(pin.name), pin.version))
            if entry is None:
                raise SetupError(f"pip brought no wheel of {pin.line} for {env}; see pip's output above")
            entry["envs"].append(env)
            lines.append(f"{entry['name']}=={pin.version}")
        (staging / f"requirements-{env}.txt").write_text("\n".join(lines) + "\n")

    manifest = {"format": 1, "quantkit": __version__, "python": python, "platform": platform, "accel": accel,
                "envs": sorted(locks), "locks": {env: _shown(p) for env, p in locks.items()},
                "wheels": list(by_pin.values()), "left_out": left_out,
                "bytes": sum(w["bytes"] for w in by_pin.values()), "chunks": []}
    installer = resources.files("quantkit").joinpath("bundle_install.sh").read_text()
    if chunk_mb:
        sink = _Chunks(out, int(chunk_mb * MB))
        with tarfile.open(fileobj=sink, mode="w|") as tar:
            for item in sorted(staging.iterdir()):
                tar.add(item, arcname=item.name)
        sink.close()
        shutil.rmtree(staging)
        manifest["chunks"] = [{"file": p.name, "folder": p.parent.name, "sha256": sha256(p), "bytes": p.stat().st_size}
                              for p in sink.files]
    text = json.dumps(manifest, indent=1) + "\n"
    for folder in [out] + [out / c["folder"] for c in manifest["chunks"]]:
        (folder / "manifest.json").write_text(text)
        (folder / "install.sh").write_text(installer)
        (folder / "install.sh").chmod(0o755)
    return manifest
