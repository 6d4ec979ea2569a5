"""`quantkit bundle` end to end on a tiny real bundle: two small pure-Python wheels (six for the main
environment, idna and tabulate, which has a console script, for vLLM's) packed in chunks of a few kB, then installed by the bundle's own
install.sh as on a machine with no network (pip --no-index), chunk by chunk; a corrupt chunk is
refused. The wheels come from pip (this machine's configured index, else the registry)."""

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from quantkit import bundle
from quantkit.errors import UsageError

PYTHON = "%d.%d" % sys.version_info[:2]
WANTED = {"six": "1.17.0", "idna": "3.20", "tabulate": "0.10.0"}


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheelhouse")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(folder),
                           *(f"{n}=={v}" for n, v in WANTED.items())], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"pip could not fetch six, idna and tabulate here: {proc.stderr.strip()[-200:]}")
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, wheelhouse) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("bundle")
    (work / "main.txt").write_text("# the main environment\nsix==1.17.0\n")
    (work / "vllm.txt").write_text("idna==3.20\nsix==1.17.0\ntabulate==0.10.0\n")
    out = work / "out"
    manifest = bundle.build(out, python=PYTHON, chunk_mb=0.02, with_quantkit=False,
                            requirements={"main": work / "main.txt", "vllm": work / "vllm.txt"},
                            pip_index=["--find-links", str(wheelhouse), "--no-index"])
    return out, manifest


def test_the_manifest_names_each_wheel_with_its_version_digest_and_environments(tiny, wheelhouse):
    out, manifest = tiny
    assert (manifest["python"], manifest["platform"], manifest["accel"]) == (PYTHON, "manylinux_2_31_x86_64", "cuda")
    by_name = {w["name"]: w for w in manifest["wheels"]}
    assert {n: w["version"] for n, w in by_name.items()} == WANTED
    for name, wheel in by_name.items():
        assert wheel["sha256"] == hashlib.sha256((wheelhouse / wheel["file"]).read_bytes()).hexdigest()
    assert by_name["six"]["envs"] == ["main", "vllm"] and by_name["idna"]["envs"] == by_name["tabulate"]["envs"] == ["vllm"]
    assert json.loads((out / "manifest.json").read_text()) == manifest


def test_every_chunk_folder_travels_alone_and_the_parts_reassemble(tiny, tmp_path):
    out, manifest = tiny
    chunks = manifest["chunks"]
    assert len(chunks) >= 3 and all(c["bytes"] <= 20_000 for c in chunks)
    for chunk in chunks:
        folder = out / chunk["folder"]
        assert sorted(p.name for p in folder.iterdir()) == sorted([chunk["file"], "install.sh", "manifest.json"])
        assert hashlib.sha256((folder / chunk["file"]).read_bytes()).hexdigest() == chunk["sha256"]
    whole = tmp_path / "whole.tar"
    whole.write_bytes(b"".join((out / c["folder"] / c["file"]).read_bytes() for c in chunks))
    with tarfile.open(whole) as tar:
        tar.extractall(tmp_path / "x")
    for wheel in manifest["wheels"]:
        assert hashlib.sha256((tmp_path / "x/wheels" / wheel["file"]).read_bytes()).hexdigest() == wheel["sha256"]
    assert (tmp_path / "x/requirements-vllm.txt").read_text() == "idna==3.20\nsix==1.17.0\ntabulate==0.10.0\n"


def install(folder: Path, stash: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "QUANTKIT_BUNDLE_DIR": str(stash), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(folder / "install.sh")], env=env, capture_output=True, text=True)


def test_install_sh_assembles_the_chunks_and_installs_each_environment_offline(tiny, tmp_path):
    out, manifest = tiny
    stash = tmp_path / "stash"
    procs = [install(out / c["folder"], stash) for c in manifest["chunks"]]
    assert all(p.returncode == 0 for p in procs), procs[-1].stderr
    n = len(manifest["chunks"])
    assert f"bundle chunks in {stash}/chunks: 1 of {n}" in procs[0].stdout
    last = procs[-1].stdout
    assert "installing the main environment" in last and "installing the vllm environment" in last
    assert (stash / "main/six.py").is_file() and not (stash / "main/idna").exists()
    assert (stash / "vllm/idna/__init__.py").is_file() and (stash / "vllm/six.py").is_file()
    assert (stash / "vllm/.quantkit-stamp").read_text().split()[1:] == ["bundle", "cuda"]
    # the environment's python is the target's, with its own folder first on the path
    probe = subprocess.run([str(stash / "vllm/bin/python"), "-c", "import idna; print(idna.__file__)"],
                           capture_output=True, text=True)
    assert probe.stdout.startswith(str(stash / "vllm/idna/"))
    # its console scripts too, run by the target's python with the folder on its path
    script = subprocess.run(["sh", "-c", f". {stash}/env.sh; PYTHONPATH={stash}/vllm {stash}/vllm/bin/tabulate --help"],
                            capture_output=True, text=True)
    assert script.returncode == 0 and "usage" in script.stdout.lower()
    assert f"QUANTKIT_VLLM={stash}/vllm/bin/python" in (stash / "env.sh").read_text()
    assert "quantkit is not in this bundle" in last  # built with_quantkit=False: no doctor to run
    again = install(out / manifest["chunks"][-1]["folder"], stash)  # a chunk sent twice: nothing redone
    assert again.returncode == 0 and "installing" not in again.stdout


def test_install_sh_refuses_a_corrupt_chunk_in_one_line(tiny, tmp_path):
    out, manifest = tiny
    chunk = manifest["chunks"][1]
    copy = tmp_path / chunk["folder"]
    copy.mkdir()
    for item in (out / chunk["folder"]).iterdir():
        copy.joinpath(item.name).write_bytes(item.read_bytes())
    part = copy / chunk["file"]
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    proc = install(copy, tmp_path / "stash")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: chunk {chunk['file']} is corrupt (its sha256 is not the manifest's): send it again\n"
    assert not (tmp_path / "stash/chunks" / chunk["file"]).exists()


def test_install_sh_refuses_another_python_in_one_line(tiny, tmp_path):
    out, manifest = tiny
    manifest = {**manifest, "python": "3.99"}
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "install.sh").write_text((out / "install.sh").read_text())
    proc = install(folder, tmp_path / "stash")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "bundle is for Python 3.99" in proc.stderr


def test_left_out_packages_are_named_with_the_reason(wheelhouse, tmp_path):
    (tmp_path / "main.txt").write_text("six==1.17.0\n")
    (tmp_path / "vllm.txt").write_text("idna==3.20\n")
    (tmp_path / "freeze.txt").write_text("six==1.17.0\nidna==3.1\n")  # the target's idna is another release
    manifest = bundle.build(tmp_path / "out", python=PYTHON, exclude=["nothing-*"], host_has=tmp_path / "freeze.txt",
                            with_quantkit=False, requirements={"main": tmp_path / "main.txt", "vllm": tmp_path / "vllm.txt"},
                            pip_index=["--find-links", str(wheelhouse), "--no-index"])
    assert [w["name"] for w in manifest["wheels"]] == ["idna"]
    assert manifest["left_out"] == [{"name": "six", "version": "1.17.0", "env": "main",
                                     "why": f"the target has it ({tmp_path / 'freeze.txt'})"}]
    assert (tmp_path / "out/requirements-main.txt").read_text() == "\n"  # nothing to install there
    assert (tmp_path / "out/wheels").is_dir() and not manifest["chunks"]


def test_host_has_matches_patterns_any_version_and_pins_exactly(tmp_path):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("torch==2.11.0+cu130\ntransformers  # any version there\n-e git+https://x/y#egg=z\n")
    host = bundle.HostHas.of(["nvidia-*", "Triton"], freeze)
    assert host.reason(bundle.Pin("nvidia_cublas", "13.1.0.3")) == "--exclude nvidia-*"
    assert host.reason(bundle.Pin("triton", "3.6.0")) == "--exclude triton"
    assert host.reason(bundle.Pin("torch", "2.11.0")) is not None
    assert host.reason(bundle.Pin("torch", "2.12.0")) is None
    assert host.reason(bundle.Pin("transformers", "5.25.0")) is not None
    assert host.reason(bundle.Pin("vllm", "0.26.0")) is None


def test_platform_tags_cover_every_older_glibc():
    tags = bundle.platform_tags("manylinux_2_31_x86_64")
    assert tags[0] == "manylinux_2_31_x86_64" and "manylinux_2_28_x86_64" in tags and "manylinux_2_5_x86_64" in tags
    assert "manylinux2014_x86_64" in tags and tags[-1] == "linux_x86_64" and "manylinux_2_32_x86_64" not in tags


@pytest.mark.parametrize("text, problem", [
    ("vllm>=0.26\n", "is not `name==version`"),
    ("==1.0\n", "is not `name==version`"),
])
def test_a_lock_file_of_other_than_exact_pins_is_refused(tmp_path, text, problem):
    (tmp_path / "r.txt").write_text(text)
    with pytest.raises(UsageError, match=problem):
        bundle.read_pins(tmp_path / "r.txt")


def test_the_command_refuses_bad_input_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cases = [(["--requirements", "main"], "give ENV=FILE"),
             (["--requirements", "gpu=x.txt"], "the environments are main, vllm"),
             (["--accel", "tpu"], "use cuda or cpu"),
             (["--python", "312"], "as MAJOR.MINOR"),
             (["--chunk-mb", "0"], "at least 0.001 MB")]
    for args, problem in cases:
        proc = subprocess.run([sys.executable, "-m", "quantkit", "bundle", str(tmp_path / "b"), *args],
                              env=env, capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and problem in proc.stderr, (args, proc.stderr)
    assert not (tmp_path / "b").exists()
