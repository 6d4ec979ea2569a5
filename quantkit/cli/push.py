"""`quantkit push` and `quantkit card`: publish a validated checkpoint with a card of its stored results."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..console import run_command, stdout
from . import app
from .options import Json, Quiet, mode

MIN_RECOVERY = typer.Option(None, "--min-recovery", help="Gate: minimum mean recovery over accuracy tasks. Without any gate option: the gates of the recipe that ran the eval, else 0.95. 0 turns it off (a quantized checkpoint needs at least one gate to pass).")
MIN_TASK_RECOVERY = typer.Option(None, "--min-task-recovery", help="Gate: minimum recovery of every task.")
GATE = typer.Option([], "--gate", help="Gate on one task, TASK=MIN_RECOVERY (repeatable).")
BASE_MODEL = typer.Option(None, "--base-model", help="Hub id of the model it was made from (default: from quantkit.json when that is a Hub id or a built-in alias).")


def _gates(min_recovery: float | None, min_task_recovery: float | None, gate: list[str]) -> dict | None:
    """The gates given on the command line; None when no gate option was given (hub.py then
    takes the recipe's gates stored with the eval, else its default)."""
    from .eval import parse_gates

    if min_recovery is None and min_task_recovery is None and not gate:
        return None
    gates = parse_gates(min_recovery or None, min_task_recovery, gate)
    return gates.model_dump() if gates is not None else {}


def check_repo_id(repo: str) -> str:
    """`--repo` as the Hub will take it, checked here in a second (the Hub's own rules, through
    huggingface_hub's validator) instead of after the evidence is gathered, or as an HTTP 400
    from the upload; always ORG/NAME, since a bare NAME would land in whichever account the token
    belongs to."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    from ..errors import UsageError

    rules = ("of letters, digits, '-', '_' and '.' (no leading or trailing '-' or '.', no '--' or '..', "
             "no .git ending, a name of at most 96 characters)")
    if repo.count("/") != 1:
        raise UsageError(f"--repo must be ORG/NAME (got '{repo}'), {rules}")
    try:
        validate_repo_id(repo)
    except HFValidationError:
        raise UsageError(f"--repo '{repo}' is not a valid Hub repository id: use ORG/NAME {rules}") from None
    return repo


@app.command()
def push(
    model_dir: Path = typer.Argument(..., help="Checkpoint folder (its runs must be in the result store)."),
    repo: str = typer.Option(..., "--repo", help="Hub repository, ORG/NAME (created if missing)."),
    private: bool = typer.Option(False, "--private", help="Create the repository private."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Branch to commit to (created from main if missing)."),
    create_pr: bool = typer.Option(False, "--create-pr", help="Open a pull request instead of committing to the branch."),
    commit_message: Optional[str] = typer.Option(None, "--commit-message", help="Commit message."),
    force: bool = typer.Option(False, "--force", help="Push even if not validated (the card then says so), and delete the files the repo holds that this checkpoint does not have."),
    base_model: Optional[str] = BASE_MODEL,
    min_recovery: Optional[float] = MIN_RECOVERY,
    min_task_recovery: Optional[float] = MIN_TASK_RECOVERY,
    gate: List[str] = GATE,
    json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Upload DIR with a model card of its measured results, in one commit; refuses (exit 3) unless validated."""
    from .. import hub

    def body():
        check_repo_id(repo)
        return hub.push(model_dir, repo, private=private, revision=revision, create_pr=create_pr,
                        commit_message=commit_message, force=force, base_model=base_model,
                        gates=_gates(min_recovery, min_task_recovery, gate))

    def human(r):
        state = "validated" if r["validated"] else "NOT validated (--force)"
        if not r["changed"]:
            stdout.print(f"nothing changed: {r['repo']} ({r['revision']}) already has these files at {r['commit'][:12]}")
        elif r.get("pr_url"):
            stdout.print(f"opened {r['pr_url']} with {r['files']} files ({state})")
        else:
            stdout.print(f"pushed {r['files']} files to {r['url']} ({r['revision']} @ {r['commit'][:12]}, {state})")

    run_command(body, mode(json, quiet), human)


@app.command()
def card(
    model_dir: Path = typer.Argument(..., help="Checkpoint folder (its runs must be in the result store)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write the card (default DIR/README.md)."),
    repo: Optional[str] = typer.Option(None, "--repo", help="Hub repository the card will describe (names the model and the serve command)."),
    base_model: Optional[str] = BASE_MODEL,
    min_recovery: Optional[float] = MIN_RECOVERY,
    min_task_recovery: Optional[float] = MIN_TASK_RECOVERY,
    gate: List[str] = GATE,
    force: bool = typer.Option(False, "--force", help="Replace a file there that is not a card quantkit wrote (a hand-written README.md); it is kept as README.md.<time>.bak."),
    json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Write the model card `push` would upload, without pushing (to review it)."""
    from .. import hub
    from ..files import output_file

    def body():
        if repo is not None:
            check_repo_id(repo)
        if output is not None:  # a folder, or a file in no folder, before the evidence is gathered
            output_file(output, "--output")
        return hub.card(model_dir, output, repo=repo, base_model=base_model,
                        gates=_gates(min_recovery, min_task_recovery, gate), force=force)

    def human(r):
        verdict = "validated" if r["validated"] else f"not validated: {r['reason']}"
        stdout.print(f"card: {r['path']} ({verdict})" + (f"; the file it replaced: {r['backup']}" if r["backup"] else ""))

    run_command(body, mode(json, quiet), human)
