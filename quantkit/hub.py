"""`quantkit push` / `quantkit card`: a model card of stored measurements, and the upload to the Hub.

What counts as validated (the push gate)
----------------------------------------
The gates are, in this order: those given to `push` on the command line (`--min-recovery`,
`--min-task-recovery`, `--gate TASK=MIN`); else the `gates:` of the recipe whose `quantkit run`
stored the checkpoint's eval (they travel with the eval record); else a mean recovery of 0.95. A
checkpoint folder DIR is found in the store by its records: a convert record whose
result.output_dir is DIR, or bench/eval records whose params.checkpoint is DIR (paths compared
after resolving). For each stage the newest finished record decides: a newer failed eval is not
hidden by an older success (stricter than `quantkit compare`, which shows the newest success,
because a publish gate should not rest on a result the latest attempt could not repeat). DIR is
validated when
  1. its newest eval record is `done`,
  2. that eval started after the newest conversion of DIR finished (a re-conversion rewrites the
     weights in the same folder, so an older eval measured other weights), and
  3. for a quantized checkpoint (any variant but the model's `baseline`): the model's baseline
     has a `done` eval on the same protocol and items, and the recovery (quantized / baseline,
     evals/gates.py) passes every gate by its 95% paired interval. A gate whose interval holds
     the threshold is inconclusive: not validated (push exits 4, a failed gate 3). A stored
     fidelity run of DIR (`quantkit fidelity`, or a run recipe's `fidelity:` stage) adds its gates
     (ΔNLL, top-1 agreement against the baseline, fidelity/gate.py) to those, read the same way;
     one that started before the newest conversion of DIR finished measured other weights.
A quantized checkpoint without a stored baseline eval is NOT validated: its gates cannot be
checked, and a card saying "validated" would then claim something nobody measured. A benchmark is
not required (the gates are about accuracy); a missing one is shown as missing in the card.
`push` refuses anything else with GateFailed (exit 3, one line). `--force` pushes anyway and the
card says at the top, in plain words, that the checkpoint was not validated and why.

The card
--------
`report/card.py` writes it from the same evidence (report/gather.py: `evidence_for`). `quantkit card`
writes it to README.md beside the checkpoint (or `-o`); a file there that is not a card quantkit
wrote (a hand-written README) is replaced only with `--force`, after a copy README.md.<time>.bak
(which `push` does not upload).

The upload
----------
create_repo(exist_ok=True), then ONE create_commit with every file (quantkit's own result folders
quantkit-bench/ and quantkit-eval/ stay local: their numbers are in the card, and they carry
local paths, server logs and per-item samples; quantkit.json is included). create_commit is
used rather than upload_folder because, with hf_xet installed, upload_folder may split a folder
into several commits; a single commit is atomic: an upload that dies before it leaves the repo
as it was. Files whose remote hash equals the local one are skipped by the client, and a commit
with nothing left is not made; `push` reports "nothing changed" then.
A repo (revision) that already holds files this checkpoint does not have is refused: old shards
and their index beside the new weights load as a mix of both, and an old generation_config.json
(vLLM's sampling defaults), tokenizer files or custom code are read with the new weights. With
`--force` those files are deleted in the same commit (CommitOperationDelete), so the repo holds
exactly the new checkpoint (and the Hub's own .gitattributes).
No uploaded file names a folder of this machine: quantkit.json, the card and every other text file
(configs, recipe.yaml, tokenizer files) go up with the checkout, the home directory, QUANTKIT_HOME,
the data and models folders and the checkpoint itself written as `<checkout>`, `~`,
`$QUANTKIT_HOME`, `$QUANTKIT_DATA_DIR`, `$QUANTKIT_MODELS_DIR` and `.`; in quantkit's own files
(quantkit.json, the card) any other absolute path is cut to `<local>/<its last part>`. The local
files stay as they are (the commit carries the cleaned bytes).
The token comes from huggingface_hub's usual sources (HF_TOKEN, the stored login); quantkit
never prints, logs or stores it, and scrubs it from any error text it passes on.
"""


from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from . import __version__, settings
from .errors import BackendError, GateFailed, GateInconclusive, SetupError, UsageError
from .files import atomic_write_text, unique_path
from .evals.gates import gate_failure_message, gates_text, overall_verdict
from .fidelity import gate as fidelity_gate
from .labels import BASELINE
from .report.card import CARD_MARK, build_card
from .report import records
from .report.gather import Evidence, evidence_for, variant_of
from .store import Store

DEFAULT_MIN_RECOVERY = 0.95
# Text files whose local paths are rewritten on the way up (binary weights are never touched).
TEXT_SUFFIXES = (".json", ".yaml", ".yml", ".txt", ".md", ".jinja", ".py")
SCRUB_MAX_BYTES = 64 << 20
OWN_FILES = {"quantkit.json", "README.md"}  # quantkit wrote these: any absolute path in them is local
# An absolute path that does not continue a word, a URL, or a placeholder ("$QUANTKIT_HOME/x").
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~$<>-])/(?:[\w.+@-]+/)*[\w.+@-]+")
PATH_CHAR = r"[\w.+@-]"
# quantkit's result folders: their numbers are in the card; the files hold local paths and logs
LOCAL_ONLY_DIRS = {"quantkit-bench", "quantkit-eval", ".cache", ".git"}
BACKUP_SUFFIX = ".bak"  # `card --force`'s copy of the file it replaced: README.md.<time>.bak
# Files the Hub keeps of its own in every repo: a push never deletes them
HUB_FILES = {".gitattributes"}


def gather_evidence(store: Store, checkpoint: Path, gates: dict[str, Any] | None) -> Evidence:
    """What the store holds for CHECKPOINT and the verdict. `gates` None: the recipe's gates stored
    with the eval, else mean recovery >= DEFAULT_MIN_RECOVERY."""
    ev = evidence_for(store, checkpoint)
    if gates is None:
        eval_rec = ev.stages.get("eval")
        if stored := records.gates_of(eval_rec) if eval_rec is not None else None:
            gates, ev.gates_source = stored, "of the recipe that ran the eval"
        else:
            gates, ev.gates_source = {"min_recovery": DEFAULT_MIN_RECOVERY}, "by default"
    ev.gates = {k: v for k, v in gates.items() if v}
    _decide(store, ev)
    return ev


def _decide(store: Store, ev: Evidence) -> None:
    gate_text = gates_text(ev.gates)
    if not ev.stages:
        ev.reason = f"no stored runs for {ev.checkpoint} (quantkit run stores them)"
        return
    eval_rec = ev.stages.get("eval")
    if eval_rec is None:
        ev.reason = f"no stored eval for {ev.checkpoint}"
        return
    if eval_rec.status != "done":
        ev.reason = f"its latest eval is {eval_rec.status}: {eval_rec.error or 'no reason stored'}"
        return
    convert = ev.stages.get("convert")
    if convert is not None and convert.status == "done" and convert.finished_at and eval_rec.started_at < convert.finished_at:
        ev.reason = (f"its eval ({eval_rec.started_at}) predates the latest conversion of this folder "
                     f"({convert.finished_at}): the weights were rewritten since; evaluate them again")
        return
    if ev.variant == BASELINE:
        ev.validated, ev.reason = True, "the unquantized baseline: evaluated (no recovery gate applies)"
        return
    if ev.baseline_eval is None:
        ev.reason = f"no stored baseline eval for model '{ev.model}', so recovery gates ({gate_text}) cannot be checked"
        return
    stages = {k: r for k, r in ev.stages.items()}
    v = variant_of(store, ev.variant, stages, ev.baseline_eval.result, ev.gates or None)
    if v.recovery is None:
        ev.reason = f"recovery against the baseline cannot be computed: {v.error or 'unknown reason'}"
        return
    ev.recovery = report = v.recovery
    # a stored fidelity record's gates count as the recovery gates do (its verdicts were decided
    # on its intervals when it was stored); one older than the weights measured other weights
    fidelity = ev.stages.get("fidelity")
    if fidelity is not None and fidelity.status == "done" and convert is not None and convert.status == "done" \
            and convert.finished_at and fidelity.started_at < convert.finished_at:
        ev.reason = (f"its fidelity run ({fidelity.started_at}) predates the latest conversion of this folder "
                     f"({convert.finished_at}): the weights were rewritten since; score them again")
        return
    ev.fidelity = v.fidelity
    fidelity_verdicts = list(v.fidelity.verdicts or []) if v.fidelity is not None else []
    if not report.gates and not fidelity_verdicts:
        ev.reason = "no gate was given (--min-recovery / --min-task-recovery / --gate)"
        return
    ev.verdict = overall_verdict([g.verdict for g in report.gates] + [f.verdict for f in fidelity_verdicts])
    if ev.verdict != "pass":  # a failed gate, or an inconclusive one: neither vouches for the weights
        accuracy = gate_failure_message(report) if report.verdict not in (None, "pass") else None
        ev.reason = "; ".join(m for m in (accuracy, fidelity_gate.failure_message(fidelity_verdicts)) if m)
        return
    ev.validated = True
    passed = ", ".join(t for t in (gate_text, fidelity_gate.gates_text(v.fidelity.gates) if fidelity_verdicts else "") if t)
    ev.reason = f"passed {passed}, each by its 95% interval"



# ----------------------------------------------------------------------------------------------
# No local path goes up


def local_roots(checkpoint: Path) -> list[tuple[str, str]]:
    """(folder, placeholder) for every folder of this machine an uploaded file may name, the
    longest first (a checkpoint inside the models folder is `.`, not `$QUANTKIT_MODELS_DIR/x`)."""
    import quantkit

    data = os.environ.get("QUANTKIT_DATA_DIR")  # named even when it is not a folder any more
    named = [(checkpoint, "."), (settings.home(), "$QUANTKIT_HOME"), (Path(data) if data else None, "$QUANTKIT_DATA_DIR"),
             (settings.models_dir(), "$QUANTKIT_MODELS_DIR"), (Path(quantkit.__file__).parents[1], "<checkout>"),
             (Path.cwd(), "<cwd>"), (Path.home(), "~")]
    roots: dict[str, str] = {}
    for folder, token in named:
        if folder is None:
            continue
        for form in (Path(folder).expanduser().absolute(), Path(folder).expanduser().resolve()):
            text = str(form).rstrip("/")
            if text.count("/") >= 1 and text not in ("", "/"):
                roots.setdefault(text, token)
    return sorted(roots.items(), key=lambda kv: -len(kv[0]))


def scrub_paths(text: str, roots: list[tuple[str, str]], own: bool = False) -> str:
    """`text` with the local roots replaced by placeholders; `own` (a file quantkit wrote) also
    cuts any other absolute path to its last part."""
    for root, token in roots:
        text = re.sub(re.escape(root) + f"(?!{PATH_CHAR})", lambda _m, t=token: t, text)
    if own:
        text = ABSOLUTE_PATH.sub(lambda m: "<local>/" + m.group(0).rsplit("/", 1)[-1], text)
    return text


def upload_bytes(name: str, path: Path, roots: list[tuple[str, str]]) -> bytes | None:
    """The cleaned bytes to upload for a text file that names local paths; None: the file as it is."""
    if not name.endswith(TEXT_SUFFIXES) or path.stat().st_size > SCRUB_MAX_BYTES:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    clean = scrub_paths(text, roots, own=name in OWN_FILES)
    return None if clean == text else clean.encode("utf-8")


# ----------------------------------------------------------------------------------------------
# Commands


def _checkpoint(model_dir: str | Path) -> Path:
    path = Path(model_dir).expanduser()
    if not path.is_dir():
        raise UsageError(f"{path} is not a folder")
    if not (path / "config.json").is_file():
        raise UsageError(f"{path} is not a model checkpoint folder (no config.json)")
    return path.resolve()


def card(model_dir: str | Path, output: str | Path | None = None, *, repo: str | None = None,
         base_model: str | None = None, gates: dict[str, Any] | None = None, force: bool = False) -> dict[str, Any]:
    """Write the card for review; it says whether the checkpoint would pass `push`'s gates. A file
    there that is not a card quantkit wrote (a hand-written README.md) is replaced only with
    `force`, and kept beside it first (`README.md.<time>.bak`)."""
    path = _checkpoint(model_dir)
    out = Path(output) if output else path / "README.md"
    foreign = _foreign_file(out)
    if foreign and not force:
        raise UsageError(f"{out} exists and is not a card quantkit wrote; pass --force to replace it (it is kept "
                         f"as {out.name}.<time>{BACKUP_SUFFIX}), or write the card elsewhere with -o")
    with Store() as store:
        ev = gather_evidence(store, path, gates)
        model_card = build_card(store, ev, repo, base_model=base_model)
    backup = None
    if foreign:
        backup = unique_path(out.parent, f"{out.name}.", BACKUP_SUFFIX)
        shutil.copy2(out, backup)
    # atomic: a full disk leaves the old card (or none), never an empty README.md
    atomic_write_text(out, _masked(scrub_paths(str(model_card), local_roots(path), own=True)))
    return {"path": str(out), "validated": ev.validated, "reason": ev.reason, "model": ev.model, "variant": ev.variant,
            "backup": str(backup) if backup else None}


def _foreign_file(out: Path) -> bool:
    """Whether `out` is a file quantkit did not write as a card (its provenance line says so)."""
    if not out.is_file():
        return False
    try:
        with open(out, "rb") as fh:
            return CARD_MARK.encode() not in fh.read(SCRUB_MAX_BYTES)
    except OSError:
        return True


def _commit_files(checkpoint: Path) -> list[tuple[str, Path]]:
    files = []
    for p in sorted(checkpoint.rglob("*")):
        rel = p.relative_to(checkpoint)
        if not p.is_file() or rel.parts[0] in LOCAL_ONLY_DIRS or rel.as_posix() == "README.md":
            continue
        if p.name.startswith("README.md.") and p.name.endswith(BACKUP_SUFFIX):
            continue  # the hand-written README `quantkit card --force` kept: the user's, not the checkpoint's
        if p.name.endswith((".tmp", ".lock")) or p.name.startswith(".~"):
            continue  # a half-written file of a running process
        files.append((rel.as_posix(), p))
    return files


def push(model_dir: str | Path, repo: str, *, private: bool = False, revision: str | None = None,
         create_pr: bool = False, commit_message: str | None = None, force: bool = False,
         base_model: str | None = None, gates: dict[str, Any] | None = None) -> dict[str, Any]:
    path = _checkpoint(model_dir)
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo or ""):
        raise UsageError(f"--repo must be ORG/NAME (got '{repo}')")
    with Store() as store:
        ev = gather_evidence(store, path, gates)
        if not ev.validated and not force:
            refusal = GateInconclusive if ev.verdict == "inconclusive" else GateFailed
            raise refusal(f"not pushing {path.name}: not validated ({ev.reason}); --force pushes it with a card that says so")
        model_card = build_card(store, ev, repo, base_model=base_model, forced=not ev.validated)
    files = _commit_files(path)
    if not any(name.endswith((".safetensors", ".bin")) for name, _ in files):
        raise UsageError(f"{path} has no weight files to push")

    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise SetupError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (a token with write access)")
    try:
        readme = _masked(scrub_paths(str(model_card), local_roots(path), own=True)).encode()
        result = _upload(path, repo, files, readme, token=token, private=private, force=force,
                         revision=revision, create_pr=create_pr,
                         commit_message=commit_message or f"quantkit {__version__}: {ev.convert.method if ev.convert else path.name} checkpoint with measured model card")
    except BaseException as exc:  # noqa: BLE001 - mapped to one line below, re-raised otherwise
        mapped = _map_error(exc, repo, token)
        if mapped is None:
            raise
        raise mapped from None
    return {**result, "validated": ev.validated, "reason": ev.reason, "files": len(files) + 1,
            "bytes": sum(p.stat().st_size for _, p in files)}


def _upload(path: Path, repo: str, files: list[tuple[str, Path]], readme: bytes, *, token: str, private: bool,
            revision: str | None, create_pr: bool, commit_message: str, force: bool = False) -> dict[str, Any]:
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
    from huggingface_hub.errors import RevisionNotFoundError

    from .console import info

    api = HfApi(token=token)
    url = api.create_repo(repo, private=True if private else None, exist_ok=True, repo_type="model")
    if revision and revision != "main" and not create_pr:
        api.create_branch(repo, branch=revision, exist_ok=True)
    target = revision or "main"
    try:
        head = api.repo_info(repo, revision=target).sha
    except RevisionNotFoundError:
        head = None
    roots = local_roots(path)
    ops = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=upload_bytes(name, p, roots) or str(p))
           for name, p in files]
    ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=readme))
    stale = _stale_files(api, repo, target, {name for name, _ in files} | {"README.md"}) if head else []
    if stale and not force:
        shown = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
        raise UsageError(f"{repo} ({target}) holds files that {path.name} does not have ({shown}): they would stay "
                         "beside the new checkpoint and be read with it; pass --force to delete them in the same "
                         "commit, or push to a new --repo or --revision")
    ops += [CommitOperationDelete(path_in_repo=name) for name in stale]
    info(f"pushing {len(files) + 1} files of {path.name} to {repo} ({target}) in one commit"
         + (f", deleting {len(stale)} old checkpoint file(s)" if stale else ""))
    commit = api.create_commit(repo, ops, commit_message=commit_message, revision=revision, create_pr=create_pr)
    # The client drops files whose remote hash equals the local one and, when none is left,
    # makes no commit and returns the branch head: the head did not move, nothing changed.
    changed = commit.oid != head if not create_pr else bool(commit.pr_url)
    return {"repo": repo, "url": str(url), "revision": target, "commit": commit.oid, "changed": changed,
            "commit_url": commit.commit_url if changed else None, "pr_url": commit.pr_url, "deleted": stale}


def _stale_files(api, repo: str, revision: str, new: set[str]) -> list[str]:
    """The repo's files that the new commit does not write (the Hub's own .gitattributes aside):
    not only old weights, their index and quantization configs, but a generation_config.json
    (vLLM takes its sampling defaults from it), tokenizer files, custom code. Left there, a loader
    reads them with the new checkpoint: the repo must hold exactly the new one."""
    return sorted(n for n in api.list_repo_files(repo, revision=revision) if n not in new and n not in HUB_FILES)


def _masked(text: str) -> str:
    from .secrets import mask_text

    return mask_text(text)


def _scrub(text: str, token: str | None) -> str:
    text = " ".join(str(text).split())
    if token:
        text = text.replace(token, "***")
    return re.sub(r"hf_[A-Za-z0-9]{8,}", "***", text)


def _map_error(exc: BaseException, repo: str, token: str | None) -> Exception | None:
    import httpx
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        code = exc.response.status_code
        if code in (401, 403):
            return BackendError(
                f"the Hub refused the token (HTTP {code}): it is invalid, expired, or has no write access to "
                f"'{repo.split('/')[0]}'; set HF_TOKEN or run `hf auth login` with a write token")
        server = exc.server_message or ""
        return BackendError(f"the Hub answered HTTP {code} for {exc.response.request.method} "
                            f"{exc.response.request.url.path}: {_scrub(server, token)[:300] or 'no message'}; "
                            "nothing was published")
    transport = (httpx.TransportError, ConnectionError, TimeoutError)
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, transport):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return BackendError(
            f"network error while pushing to {repo} ({type(cause).__name__}: {_scrub(str(cause), token)[:200]}): "
            "the commit did not complete, so nothing was published; it is safe to re-run")
    if isinstance(exc, ValueError) and "metadata" in str(exc):
        return BackendError(f"the Hub rejected the card's metadata: {_scrub(str(exc), token)[:300]}")
    return None
