"""Issue 31, paths: `convert -o ... --force` replaces only a checkpoint quantkit wrote, never a
folder that holds the source, the working directory, home or /; a recipe's variant label never
puts a checkpoint outside the models folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.markdown import rendered, structure

from quantkit.errors import UsageError
from quantkit.quantize import _replace, check_output

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def desk(tmp_path, monkeypatch):
    """A working directory with a source model, the user's other files and a quantkit checkpoint."""
    home = tmp_path / "home"
    work = home / "work"
    src = work / "model"
    src.mkdir(parents=True)
    (src / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (src / "model.safetensors").write_bytes(b"\0" * 64)
    (work / "notes.txt").write_text("mine")
    (work / "data").mkdir()
    (work / "data" / "calib.jsonl").write_text("{}\n")
    done = work / "model-fp8"
    done.mkdir()
    (done / "quantkit.json").write_text("{}")
    os.symlink(work / "nowhere", work / "dangling")
    os.symlink(work / "loop-b", work / "loop-a")
    os.symlink(work / "loop-a", work / "loop-b")
    os.symlink(work, work / "here")
    os.symlink(src, work / "src-link")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    return {"home": home, "work": work, "src": src, "done": done}


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = os.readlink(p) if p.is_symlink() else (p.read_bytes() if p.is_file() else "dir")
    return out


# -o spellings that must never be written or replaced, with --force or without
HOSTILE_OUTPUTS = [".", "./", "..", "../..", "model/..", "./model/../.", "here", "here/.", "model", "./model/",
                   "src-link", "~", "~/", "/", "//", "/.", "dangling", "dangling/sub", "loop-a", "loop-b/x",
                   "notes.txt", "data", "data/calib.jsonl", "{work}", "{work}/model", "{home}", "{work}/../work"]


@pytest.mark.parametrize("spelling", HOSTILE_OUTPUTS)
@pytest.mark.parametrize("force", [True, False])
def test_no_spelling_of_a_protected_folder_is_an_output(desk, spelling, force):
    before = _snapshot(desk["home"])
    output = Path(spelling.format(work=desk["work"], home=desk["home"]))
    with pytest.raises(UsageError) as refused:
        check_output(output, desk["src"], force=force)
    line = refused.value.one_line()
    assert "\n" not in line and "-o" in line
    assert _snapshot(desk["home"]) == before


def test_what_may_be_written(desk):
    work = desk["work"]
    assert check_output(Path("new"), desk["src"], force=False) == work / "new"
    (work / "empty").mkdir()
    assert check_output(Path("empty"), desk["src"], force=False) == work / "empty"
    assert check_output(Path("model-fp8"), desk["src"], force=True) == work / "model-fp8"  # quantkit's own
    with pytest.raises(UsageError, match="already exists; pass --force"):
        check_output(Path("model-fp8"), desk["src"], force=False)
    assert check_output(Path("model/quantized"), desk["src"], force=False) == work / "model" / "quantized"


def test_replacing_leaves_nothing_old_behind(tmp_path):
    out, tmp = tmp_path / "out", tmp_path / ".out.tmp-1"
    out.write_text("an old file")  # -o FILE: the old thing goes, by unlink, not rmtree
    tmp.mkdir()
    (tmp / "quantkit.json").write_text("{}")
    _replace(tmp, out)
    assert (out / "quantkit.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_convert_dot_force_is_refused_and_deletes_nothing(desk, tmp_path):
    before = _snapshot(desk["home"])
    env = {**os.environ, "QUANTKIT_HOME": str(tmp_path / "qk"), "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "quantkit", "convert", "model", "--method", "fp8", "-o", ".",
                           "--force"], cwd=desk["work"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "writing there would replace it" in lines[0], proc.stderr
    assert _snapshot(desk["home"]) == before


# -- a variant's label ------------------------------------------------------------------------------

HOSTILE_LABELS = ["x/../../../escaped", "../up", "..", ".", ".hidden", "a/b", "a\\b", "/abs", "~/x", "a/",
                  "x\0y", "", " ", "tab\tname", "new\nline", "-flag", "a" * 101, "..\\..\\win", "%2e%2e/x", "é/x"]


@pytest.mark.parametrize("label", HOSTILE_LABELS)
def test_a_variant_label_must_be_a_plain_name(tmp_path, label):
    from quantkit.pipeline.recipe import load_run

    recipe = tmp_path / "run.yaml"
    recipe.write_text("kind: run\nname: t\nmodel: smollm2-135m\nmethods:\n  - method: fp8\n"
                      f"    name: {json.dumps(label)}\n")
    with pytest.raises(UsageError, match=rf"{recipe}:6: methods\.0\.name: .*not a plain name") as refused:
        load_run(recipe)
    assert "\n" not in str(refused.value)


def test_stages_refuse_a_folder_outside_the_models_folder(tmp_path, monkeypatch):
    """A RunRecipe built in code skips the YAML check: the path itself is refused."""
    from quantkit.pipeline import stages
    from quantkit.pipeline.recipe import MethodEntry

    monkeypatch.setenv("QUANTKIT_MODELS_DIR", str(tmp_path / "models"))
    ctx = type("Ctx", (), {"model": type("M", (), {"name": "m"})()})()
    entry = MethodEntry.model_construct(method="fp8", name="x/../../../escaped", checkpoint=None, recipe=None,
                                        num_samples=None, seq_len=None, calib=None, group_size=None, backend=None)
    with pytest.raises(UsageError, match="outside the models folder"):
        stages.checkpoint_dir(ctx, entry)
    fine = MethodEntry(method="fp8", name="fp8-dynamic")
    assert stages.checkpoint_dir(ctx, fine).parent == tmp_path / "models"


# -- issue 39: every label that reaches a report: runs import's names, a checkpoint: variant's --------------

# names that are paths, or markup a report would render (a tag, a link, emphasis, a table cell's end)
MARKUP_NAMES = ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "[x](javascript:alert(1))",
                "javascript:alert(1)", "x)](javascript:alert(1)", "**bold**", "`code`", "a b", "a|b",
                "![i](http://evil.example/x.png)", "&lt;b&gt;", "<https://evil.example>", "_em_", "~~gone~~"]
HOSTILE_NAMES = HOSTILE_LABELS + MARKUP_NAMES


def _bench_file(folder: Path, model_name: str = "smollm2-135m") -> Path:
    data = {"schema_version": 1, "kind": "quantkit.bench", "created_at": "2026-11-30T21:21:02+00:00",
            "model_dir": f"/tmp/qkmodels/{model_name}", "model_name": model_name, "checkpoint": {"method": "none"},
            "server": None, "workload": {"input_len": 8, "output_len": 8}, "hardware": {}, "points": [],
            "complete": True}
    path = folder / "bench.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("option", ["model", "variant"])
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_runs_import_takes_only_plain_names(tmp_path, option, name):
    from quantkit.store import Store, import_result

    with Store(tmp_path / "r.db") as store:
        with pytest.raises(UsageError) as refused:
            import_result(store, _bench_file(tmp_path), **{option: name})
        line = refused.value.one_line()
        assert f"--{option}" in line and "not a plain name" in line and "\n" not in line
        assert store.records() == []


@pytest.mark.parametrize("name", [n for n in HOSTILE_NAMES if n.strip()])
def test_runs_import_checks_the_name_a_file_gives_too(tmp_path, name):
    """A file names its model (`model_name`, its folder): the file's word is checked as a given one."""
    from quantkit.store import Store, import_result

    path = _bench_file(tmp_path, model_name=name)
    with Store(tmp_path / "r.db") as store:
        with pytest.raises(UsageError, match="not a plain name.*give one with --model NAME"):
            import_result(store, path)
        assert store.records() == []
        assert import_result(store, path, model="smollm2-135m")["imported"]  # a name given instead: taken


def test_runs_import_refuses_a_path_as_a_model_on_the_command_line(tmp_path):
    home = tmp_path / "qk"
    env = {**os.environ, "QUANTKIT_HOME": str(home), "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "quantkit", "runs", "import", "--model", "../../..",
                           str(_bench_file(tmp_path))], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--model '../../..' is not a plain name" in lines[0], proc.stderr
    from quantkit.store import Store

    with Store(home / "results.db") as store:
        assert store.records() == []


@pytest.mark.parametrize("name", ["../../..", "..", ".", "/etc/x", "a/../../b", "..\\..\\x", "x/y", "a\0b"])
def test_compare_never_writes_a_report_outside_reports(tmp_path, monkeypatch, name):
    """A store written before names were checked holds a model named as a path: its default report
    folder is refused, and nothing is written anywhere."""
    from quantkit.report.gather import compare
    from quantkit.store import Store, run_key

    tree = tmp_path / "tree"
    work = tree / "a" / "b" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    with Store(tmp_path / "r.db") as store:
        rid = store.begin(run_key("bench", n=name), "bench", name, "baseline", {"checkpoint": "/m"})
        store.fail(rid, "failed")
        with pytest.raises(UsageError, match="is a path, not a name.*give the report folder with -o"):
            compare(store, model=name)
    assert _snapshot(tree) == {"a": "dir", "a/b": "dir", "a/b/work": "dir"}
    assert not [p for p in tmp_path.rglob("report.md")]


@pytest.mark.parametrize("folder", ["<img src=x onerror=alert(1)>", "[x](javascript:alert(1))", "my model", "a|b",
                                    "..", ".hidden", "`x`", "/"])
def test_a_checkpoint_variant_is_labelled_by_a_plain_name(tmp_path, folder):
    from quantkit.pipeline.recipe import load_run

    recipe = tmp_path / "run.yaml"
    checkpoint = f"/models/{folder}" if folder != "/" else "/"
    recipe.write_text(f"kind: run\nname: t\nmodel: smollm2-135m\nmethods:\n  - checkpoint: {json.dumps(checkpoint)}\n")
    with pytest.raises(UsageError, match=rf"{recipe}:5: methods\.0: .*not a plain name: give this variant a name:"):
        load_run(recipe)
    recipe.write_text(f"kind: run\nname: t\nmodel: smollm2-135m\nmethods:\n  - checkpoint: {json.dumps(checkpoint)}\n"
                      "    name: external-awq\n")
    assert load_run(recipe).methods[0].label() == "external-awq"


# -- issue 39: what Markdown renders, escaped by the one function the report and the card share -----------

# text from a store written before names were checked, an error, a note, a kernel line
MARKUP_TEXTS = MARKUP_NAMES + ["a\\](javascript:x)", "[a]: javascript:alert(1)", "> quoted", "# heading",
                               "<!-- c -->", "&#60;script&#62;", "x\n\n<b>new paragraph</b>", "*a*b_c_", "```"]


@pytest.mark.parametrize("text", MARKUP_TEXTS)
def test_md_escape_renders_exactly_the_text(text):
    from markdown_it.common.utils import escapeHtml

    from quantkit.report.render import markdown_table, md_code, md_escape

    one_line = " ".join(text.split())
    assert rendered(md_escape(text)) == f"<p>{escapeHtml(one_line)}</p>\n"
    assert rendered(f"x {md_code(text)} y") == f"<p>x <code>{escapeHtml(one_line)}</code> y</p>\n"
    table = rendered("\n".join(markdown_table(["name", "code"], [[text, md_code(text)]])))
    assert f"<td>{escapeHtml(one_line)}</td>" in table and f"<td><code>{escapeHtml(one_line)}</code></td>" in table


def _report_markdown(tmp_path: Path, text: str) -> str:
    from quantkit import report as R
    from quantkit.report.render import write_report

    bench = {"kind": "quantkit.bench", "model_dir": "/m", "model_name": "m", "checkpoint": {"method": "none"},
             "server": {"url": "http://127.0.0.1:1", "model_name": "m", "vllm_version": "0.32.0", "quant_lines": [text],
                        "serve_config": {"extra": {"chat-template": text}}},
             "workload": {"input_len": 8, "output_len": 8}, "points": [], "complete": True}
    variants = [R.Variant(name="baseline", method="bf16", model_dir="/m", bench=bench),
                R.Variant(name=text, method=text, model_dir=f"/m/{text}", status="failed", error=text)]
    report = R.build_report(variants, title=f"quantkit report: {text}", recipe_hash="x",
                            environment={"device": text, "vllm": "0.32.0", "quantkit": "0"}, notes=[text])
    return Path(write_report(report, tmp_path)["md"]).read_text()


@pytest.mark.parametrize("text", MARKUP_TEXTS)
def test_a_report_renders_names_errors_and_notes_as_text(tmp_path, text):
    """A variant named so, failed with it as its error, with it as a note, a kernel line, a serving
    flag's value: the rendered report has exactly the elements it has with a plain word there (no
    tag, link, image, emphasis or block of the text's own), and shows the text."""
    from markdown_it.common.utils import escapeHtml

    plain = rendered(_report_markdown(tmp_path / "plain", "plainword"))
    html = rendered(_report_markdown(tmp_path / "hostile", text))
    assert structure(html) == structure(plain)
    assert escapeHtml(" ".join(text.split())) in html
