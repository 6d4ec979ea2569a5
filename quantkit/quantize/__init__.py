"""`quantkit convert`: resolve the model and recipe, run a backend, write quantkit.json.

The checkpoint is written to a temporary sibling of the output folder and renamed into place
only when complete, so an interrupted or failed convert never leaves a folder that looks done.

What `-o` may name (`check_output`): a new path, an empty folder, or, with `--force`, a
checkpoint quantkit wrote (it holds quantkit.json), which is then replaced. Never the source
model, a folder that holds it, the working directory or a folder above it, the home directory or
`/`, whatever `--force` says: replacing one of those deletes what the user has.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from pathlib import Path
from typing import Any

from .. import models, settings
from ..checkpoint import RECORD_FILE, ConvertRecord, SourceModel, check_causal_lm, dir_size
from ..console import info, library_output, step
from ..errors import BackendError, UsageError
from ..files import hidden_prefix, listed_while_here, output_folder, temp_folder
from ..machine import hardware
from ..registry import BACKENDS
from . import recipe as recipes


def default_output(model_name: str, method: str) -> Path:
    return settings.models_dir() / f"{model_name}-{method}"


def plan(
    model: str | models.ResolvedModel,
    method: str | None = None,
    recipe: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> tuple[models.ResolvedModel, recipes.Recipe]:
    """Validate everything that can be checked before the slow part starts."""
    if method is None and recipe is None:
        raise UsageError("say what to do: --method (awq, gptq, int8, fp8, ...) or --recipe")
    chosen = recipes.load(recipe) if recipe else recipes.for_method(method)  # type: ignore[arg-type]
    if method is not None and recipe is not None and recipes.check_method(method) != chosen.method:
        raise UsageError(f"--method {method} contradicts the recipe's method '{chosen.method}'; pass one of them")
    chosen = recipes.override(chosen, **(overrides or {}))
    backend = BACKENDS.check(chosen.backend)
    backend_cls = BACKENDS.load(backend)
    if chosen.method not in backend_cls.methods:
        raise UsageError(
            f"backend '{backend}' does not do method '{chosen.method}' (it does: {', '.join(sorted(backend_cls.methods))})"
        )
    if chosen.kv_cache is not None and backend != "llmcompressor":
        raise UsageError(f"a calibrated KV cache (kv_cache: {chosen.kv_cache}) is made by the llmcompressor backend, "
                         f"not '{backend}': leave --backend out, or drop the KV cache")
    if hasattr(backend_cls, "check_machine"):  # e.g. AutoGPTQ without CUDA: refuse before anything starts
        backend_cls.check_machine(chosen.method)
    # a ResolvedModel travels down as it is: resolving its path again would lose its provenance
    # (a built-in alias or Hub id would read as a local folder in quantkit.json)
    resolved = model if isinstance(model, models.ResolvedModel) else models.resolve(model)
    check_causal_lm(resolved.path)  # a Hub download or a GGUF can be something else
    return resolved, chosen


def convert(
    model: str | models.ResolvedModel,
    method: str | None = None,
    output: Path | None = None,
    recipe: str | None = None,
    overrides: dict[str, Any] | None = None,
    force: bool = False,
    verify: bool = False,
    owner: dict[str, str] | None = None,
) -> ConvertRecord:
    started = time.monotonic()
    resolved, chosen = plan(model, method, recipe, overrides)
    label = recipes.variant_label(chosen.method, chosen.kv_cache)
    out = check_output(Path(output) if output else default_output(resolved.name, label), resolved.path, force)

    info(f"convert {resolved.ref} -> {out} ({chosen.method} via {chosen.backend}, recipe {chosen.name})")
    source = SourceModel(ref=resolved.ref, kind=resolved.kind, path=str(resolved.path), fingerprint=resolved.fingerprint())
    backend = BACKENDS.load(chosen.backend)()

    with temp_folder(out) as tmp:  # listed in the ledger while it exists: doctor finds a killed one anywhere
        with library_output(f"{chosen.backend}: {chosen.method} of {resolved.ref}"):
            result = backend.quantize(resolved, chosen, tmp)
        peak_rss_mb = result.peak_rss_mb or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        record = ConvertRecord(
            method=chosen.method,
            backend=chosen.backend,
            scheme=chosen.scheme,
            group_size=result.group_size,
            recipe_name=chosen.name,
            recipe_hash=chosen.hash(),
            recipe=chosen.model_dump(mode="json"),
            source=source,
            calibration=result.calibration,
            quantization_config=_quantization_config(tmp),
            versions=result.versions,
            hardware=hardware(),
            wall_time_s=0.0,
            quantize_time_s=result.quantize_time_s,
            peak_rss_mb=round(peak_rss_mb, 1),
            size_bytes=0,
            output_dir=str(out),
            notes=result.notes,
            owner=owner,
        )
        record.size_bytes = dir_size(tmp)
        record.wall_time_s = round(time.monotonic() - started, 2)
        record.write(tmp)
        _replace(tmp, out)
    info(f"wrote {out} ({record.size_bytes / 1e6:.1f} MB) in {record.wall_time_s:.1f} s")
    if verify:
        _verify(record, out)
    return record


def check_output(output: Path, source: Path, force: bool) -> Path:
    """The folder to write (absolute, as given: a symlink there is replaced, never its target);
    a UsageError (one line, exit 2) for any `-o` whose writing or replacing could lose something
    that quantkit did not write. The checks read the resolved path."""
    given = Path(output).expanduser()
    try:
        out = given.resolve()
    except (RuntimeError, OSError):  # RuntimeError: Python 3.11's "Symlink loop"
        raise UsageError(f"output {given} is a symlink loop (or passes through one); choose another -o") from None
    if given.is_symlink() and not given.exists():
        raise UsageError(f"output {given} is a symlink to {out}, which does not exist; choose another -o "
                         "or make the symlink point at a folder")
    for parent in given.absolute().parents:  # a folder to be made inside a dangling link
        if parent.is_symlink() and not parent.exists():
            raise UsageError(f"output {given}: {parent} is a symlink to nothing; choose another -o")
    src = Path(source).expanduser().resolve()
    protected = [(src, "the source model's folder"), (Path.cwd().resolve(), "the working directory"),
                 (Path.home().resolve(), "the home directory"), (Path("/"), "/")]
    for folder, what in protected:
        if out == folder or out in folder.parents:
            name = what if out == folder else f"a folder that holds {what} ({folder})"
            raise UsageError(f"output {given} is {name}; writing there would replace it: choose a new folder for -o")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise UsageError(f"output {out} already exists; pass --force to replace it or choose another -o")
        if not out.is_dir() or not (out / RECORD_FILE).is_file():
            kind = "a file" if not out.is_dir() else f"a folder quantkit did not write (no {RECORD_FILE})"
            raise UsageError(f"output {out} is {kind}: --force replaces only a checkpoint quantkit wrote; "
                             "choose another -o, or move it away yourself")
    if not out.exists():  # a name the filesystem takes, under a folder that can be made and written
        output_folder(given, "-o")
    return given.absolute()


def _verify(record: ConvertRecord, out: Path) -> None:
    """Load the written checkpoint in vLLM; record the verdict; fail (keeping the checkpoint) if it does not load."""
    from .verify import verify_in_vllm

    with step("checking that vLLM loads and generates from it"):
        result = verify_in_vllm([out])[0]
    from ..serve.env import installed_vllm_version

    result["vllm"] = installed_vllm_version()
    record.vllm_check = result
    record.write(out)
    if not result["ok"]:
        raise BackendError(
            f"the checkpoint was written to {out}, but vLLM {result['vllm']} cannot load it: {result['error']}"
        )


def _replace(tmp: Path, out: Path) -> None:
    """Move the finished checkpoint into place; an old one (with --force) goes only after that."""
    if not out.exists():
        os.replace(tmp, out)
        return
    old = out.with_name(f"{hidden_prefix(out.name)}old-{os.getpid()}")
    with listed_while_here(old):  # a kill before it is removed leaves it where doctor finds it
        os.replace(out, old)
        try:
            os.replace(tmp, out)
        except BaseException:
            if not out.exists():
                os.replace(old, out)  # the old checkpoint back: a failed replace loses nothing
            raise
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
        # what could not be removed is listed by `quantkit doctor` and `quantkit models ls`


def _quantization_config(folder: Path) -> dict[str, Any] | None:
    import json

    config_file = folder / "config.json"
    if not config_file.is_file():
        return None
    qc = json.loads(config_file.read_text()).get("quantization_config")
    if not isinstance(qc, dict):
        return None
    # the essentials only: the full config (with every layer's scheme) stays in config.json
    keys = ("quant_method", "format", "quantization_status", "bits", "group_size", "version", "zero_point", "sym",
            "kv_cache_scheme")  # a calibrated KV cache: vLLM serves it with --kv-cache-dtype fp8
    summary = {k: qc[k] for k in keys if k in qc}
    groups = qc.get("config_groups") or {}
    if groups:
        summary["config_groups"] = {
            name: {part: group.get(part) for part in ("weights", "input_activations") if group.get(part)}
            for name, group in groups.items()
        }
    return summary
