"""What a checkpoint folder says about itself: its `quantkit.json`, its quantization, its weights.

`quantkit.json` (a `ConvertRecord`, schema version 1) is written by `quantkit convert` beside the
weights; later stages read it to know a checkpoint's method, scheme, source and calibration
without re-deriving anything. `describe(folder)` is the one reading of "what is this checkpoint"
that bench and eval records carry (`checkpoint`), for folders quantkit made and for others.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from . import settings
from .errors import UsageError
from .files import atomic_write_text
from .safeload import read_config, read_json

RECORD_FILE = "quantkit.json"
SCHEMA_VERSION = 1
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


class SourceModel(BaseModel):
    ref: str  # what the user typed: an alias, a Hub id, a path
    kind: str  # builtin | local | gguf | hub
    path: str  # the local checkpoint it resolved to
    fingerprint: str


# The sub-dicts below are kept in the records as the plain dicts their writers gave (config.json's
# quantization_config, the calibration figures, the vLLM probe's verdict, `describe()`): what is
# stored never changes. These models are how a stored result's reader sees them (report/records.py
# reads each record into them); a key a writer leaves out is None.


class QuantArgs(BaseModel):
    num_bits: int | None = None


class QuantGroup(BaseModel):
    weights: QuantArgs | None = None


class QuantizationConfig(BaseModel):
    """A checkpoint's `quantization_config` (compressed-tensors', or GPTQ's and AWQ's own) as
    quantkit reads it: what vLLM sees the checkpoint as."""

    quant_method: str | None = None
    format: str | None = None  # compressed-tensors' packing: pack-quantized, float-quantized, ...
    bits: int | None = None  # GPTQ's and AWQ's own configs
    config_groups: dict[str, QuantGroup | None] | None = None  # compressed-tensors': group name -> its scheme
    kv_cache_scheme: dict[str, Any] | None = None  # calibrated K/V scales (serve.hardware_fit.kv_cache_label reads it)

    @property
    def weight_bits(self) -> int | None:
        """The weights' bits: the first group that names them, else GPTQ's or AWQ's `bits`."""
        for group in (self.config_groups or {}).values():
            if group is not None and group.weights is not None and group.weights.num_bits:
                return int(group.weights.num_bits)
        return self.bits or None


class CalibrationUsed(BaseModel):
    """What a conversion calibrated on (`ConvertRecord.calibration`): the recipe's numbers may have
    been overridden, these are the data's own."""

    dataset: str | None = None
    resolved: str | None = None  # the file it was read from
    conversational: bool | None = None
    num_samples: int | None = None
    seq_len: int | None = None
    tokens: int | None = None
    seed: int | None = None


class VllmCheck(BaseModel):
    """`convert --verify`'s verdict (`ConvertRecord.vllm_check`): did vLLM load and generate?"""

    ok: bool | None = None
    vllm: str | None = None
    load_s: float | None = None
    error: str | None = None


class CheckpointInfo(BaseModel):
    """`describe(folder)` (and a bench's `weights_bytes`) as the records carry it: `checkpoint`."""

    method: str | None = None  # quantkit's method; "none" unquantized, "unknown" quantized elsewhere
    scheme: str | None = None
    group_size: int | None = None
    backend: str | None = None
    recipe_hash: str | None = None
    source: str | None = None
    quantization_config: QuantizationConfig | None = None
    quant_method: str | None = None  # "unknown": the config's own quantization
    note: str | None = None
    weights_bytes: int | None = None  # bench.checkpoint_info: what a batch-1 decode step reads


class ConvertRecord(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "quantkit.convert"
    method: str
    backend: str
    scheme: str
    group_size: int | None = None
    recipe_name: str
    recipe_hash: str
    recipe: dict[str, Any]
    source: SourceModel
    calibration: dict[str, Any] | None = None
    quantization_config: dict[str, Any] | None = None  # what vLLM will read from config.json
    versions: dict[str, str] = Field(default_factory=dict)
    hardware: dict[str, Any] = Field(default_factory=dict)
    wall_time_s: float  # the whole convert: load, calibrate, quantize, save
    quantize_time_s: float | None = None  # the quantizer call alone
    peak_rss_mb: float | None = None
    size_bytes: int
    output_dir: str
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    notes: list[str] = Field(default_factory=list)
    # `--verify`: did vLLM (which build) load the checkpoint and generate? None = not checked.
    vllm_check: dict[str, Any] | None = None
    # `quantkit run`: the run key and store that own this folder (None for `quantkit convert`);
    # a run replaces a folder only when its own key made it (checkpoint ownership)
    owner: dict[str, str] | None = None

    def write(self, folder: Path) -> Path:
        path = Path(folder) / RECORD_FILE
        atomic_write_text(path, json.dumps(self.model_dump(mode="json"), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, folder: Path) -> "ConvertRecord | None":
        path = Path(folder) / RECORD_FILE
        if not path.is_file():
            return None
        return cls.model_validate_json(path.read_text())


def describe(folder: Path) -> dict[str, Any]:
    """The checkpoint as bench and eval records name it.

    A folder quantkit converted: its method, scheme, group size, backend, recipe hash, source
    reference and quantization config summary. Any other folder: method "none" (unquantized) or
    "unknown" with the config's own `quant_method` (quantized elsewhere). A damaged quantkit.json
    is read as "unknown": it must not stop an hour of benchmarking or evaluation.
    """
    folder = Path(folder)
    try:
        record = ConvertRecord.read(folder)
    except (ValueError, OSError):
        record = None
        if (folder / RECORD_FILE).is_file():
            return {"method": "unknown", "quant_method": _config_quant_method(folder), "note": f"{RECORD_FILE} is unreadable"}
    if record is None:
        qm = _config_quant_method(folder)
        return {"method": "unknown" if qm else "none", "quant_method": qm}
    return {"method": record.method, "scheme": record.scheme, "group_size": record.group_size,
            "backend": record.backend, "recipe_hash": record.recipe_hash, "source": record.source.ref,
            "quantization_config": record.quantization_config}


def method_of(checkpoint: CheckpointInfo | None) -> str | None:
    """The quantization a stored `checkpoint` description names: quantkit's method; for one
    quantkit did not write, its own quant_method (else "unknown"); None when unquantized.
    ("baseline" is what eval records written before 0.1.1 said for an unquantized folder.)"""
    method = checkpoint.method if checkpoint is not None else None
    if method in (None, "none", "baseline"):
        return None
    if method == "unknown":
        return checkpoint.quant_method or "unknown"
    return method


def quantization_config(model_dir: Path) -> dict | None:
    """config.json's `quantization_config`, or None (no file, unreadable, or not quantized)."""
    try:
        qc = read_config(model_dir).get("quantization_config")
    except UsageError:  # the checks that need a config (validate) name what is wrong
        return None
    return qc if isinstance(qc, dict) else None


def _config_quant_method(folder: Path) -> str | None:
    return (quantization_config(folder) or {}).get("quant_method")


def check_causal_lm(path: Path, weights: bool = True) -> dict:
    """The checkpoint's config, or a one-line reason it is not a loadable causal LM (`weights`
    False: a config-only folder, as `--load-format dummy` serves)."""
    config_file = path / "config.json"
    if not config_file.is_file():
        raise UsageError(f"{path} has no config.json: not a Hugging Face checkpoint directory")
    # bad JSON or nesting deeper than transformers and vLLM can walk: one line, before they read it
    config = read_config(path)
    if not isinstance(config, dict):
        raise UsageError(f"{config_file} is not a valid Hugging Face config (its JSON is not an object); "
                         "fix it, or re-download or re-convert the checkpoint")
    architectures = config.get("architectures") or []
    if not any(a.endswith(("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")) for a in architectures):
        raise UsageError(
            f"{path} is not a causal language model (architectures: {architectures or 'none'}); "
            "quantkit converts decoder LLMs (*ForCausalLM)"
        )
    if weights and not any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir()):
        raise UsageError(f"{path} has a config but no weight files (*.safetensors / *.bin)")
    return config


def weight_bytes(folder: Path) -> int | None:
    """Bytes of a checkpoint's weight files: what one batch-1 decode step reads (None if none)."""
    return sum(p.stat().st_size for p in Path(folder).glob("*.safetensors")) or None


def dir_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def fingerprint(path: Path) -> str:
    """sha256 over config and weight files (names, sizes, contents), cached by size and mtime."""
    files = sorted(
        p for p in path.iterdir()
        if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name == "config.json")
    )
    stat_key = json.dumps([(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files])
    cache_dir = settings.home() / "fingerprints"
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache_file = cache_dir / (hashlib.sha256((str(path.resolve()) + stat_key).encode()).hexdigest() + ".txt")
    if cache_file.exists():
        return cache_file.read_text().strip()
    digest = hashlib.sha256()
    for p in files:
        digest.update(f"{p.name}\0{p.stat().st_size}\0".encode())
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    value = "sha256:" + digest.hexdigest()
    cache_file.write_text(value)
    return value


def validate(folder: Path, architectures: set[str] | None = None, weights: bool = True) -> dict:
    """Check a checkpoint in seconds, before a server or a quantizer spends minutes on it: the
    config parses and names an architecture (one of `architectures`, when the serving
    environment's list is known), and every safetensors file has a readable header and all the
    bytes that header promises, and holds every tensor its index names. Returns the config."""
    folder = Path(folder)
    config = check_causal_lm(folder, weights)
    if architectures:
        unknown = [a for a in config.get("architectures") or [] if a not in architectures]
        if unknown:
            raise UsageError(f"{folder}/config.json names architecture {', '.join(unknown)}, which is not supported "
                             "by this vLLM; check the config, or use a vLLM build that has it")
    if not weights:
        return config
    files = sorted(folder.glob("*.safetensors"))
    tensors: set[str] = set()
    for path in files:
        tensors |= _safetensors_names(path)
    index_file = folder / "model.safetensors.index.json"
    if index_file.is_file():
        index = read_json(index_file, "a safetensors index", "re-download or re-convert the checkpoint", expect=dict)
        weight_map = index.get("weight_map") or {}
        if not isinstance(weight_map, dict):
            raise UsageError(f"{index_file}: its weight_map is not an object; re-download or re-convert the checkpoint")
        missing_files = sorted({f for f in weight_map.values() if not (folder / f).is_file()})
        if missing_files:
            raise UsageError(f"{folder} lacks {', '.join(missing_files[:3])} named by its safetensors index; "
                             "the checkpoint is incomplete: re-download or re-convert it")
        missing = sorted(set(weight_map) - tensors)
        if missing:
            raise UsageError(f"{folder}: {len(missing)} tensors of its index are in no safetensors file "
                             f"(e.g. {missing[0]}); re-download or re-convert it")
    return config


def _safetensors_names(path: Path) -> set[str]:
    """The tensor names of a safetensors file, after checking its header and its length."""
    size = path.stat().st_size
    problem = None
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if length <= 0 or 8 + length > size:
                problem = "its header is cut short"
            else:
                header = json.loads(fh.read(length))
                ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
                if 8 + length + max(ends, default=0) > size:
                    problem = f"it holds {size:,} bytes of the {8 + length + max(ends):,} its header promises"
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        problem = "its header is not valid safetensors JSON"
    if problem:
        raise UsageError(f"{path} is truncated or damaged ({problem}); re-download or re-convert the checkpoint")
    return {k for k in header if k != "__metadata__"}
