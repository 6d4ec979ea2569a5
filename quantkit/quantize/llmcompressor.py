"""llm-compressor backend (default): compressed-tensors checkpoints that vLLM loads natively.

Runs in quantkit's main environment. Which methods it does, and which builder below makes each
one's modifiers, is the methods' registry (methods.py); the builders:
- awq_modifiers          : AWQModifier (scaling) + QuantizationModifier(scheme)     awq, w4a8-fp8-awq
- gptq_modifiers         : [SmoothQuantModifier(strength)] + GPTQModifier(scheme)   gptq, int8, w4a8-fp8
- quantization_modifiers : QuantizationModifier(scheme), data-free                  fp8, w4a16-rtn, w8a16
The scheme is the recipe's compressed-tensors preset with its group size (W4A16_ASYM group G for
awq, W4A16 group G for gptq and w4a16-rtn, W8A8 for int8, FP8_DYNAMIC, W8A16 per channel, W4AFP8
group G for w4a8-fp8 and w4a8-fp8-awq). A recipe's `kv_cache: fp8` adds a kv_cache_scheme to the
quantization modifier (calibrated K/V scales, for any method).
"""

from __future__ import annotations

import contextlib
import gc
import time
from pathlib import Path
from typing import Any, Iterator

from ..console import step
from ..errors import BackendError, SetupError
from ..machine import package_versions
from ..methods import METHODS
from ..models import ResolvedModel
from . import calibration
from .base import BackendResult, resolve_group_size
from .recipe import Recipe


class LLMCompressorBackend:
    name = "llmcompressor"
    methods = METHODS.for_backend(name)

    def quantize(self, model_ref: ResolvedModel, recipe: Recipe, out_dir: Path) -> BackendResult:
        try:
            return self._quantize(model_ref, recipe, out_dir)
        finally:  # the model is unreachable once _quantize has returned
            release_accelerator()

    def _quantize(self, model_ref: ResolvedModel, recipe: Recipe, out_dir: Path) -> BackendResult:
        try:
            import torch
            from llmcompressor import oneshot
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise SetupError(f"the llmcompressor backend needs llm-compressor ({exc}); run scripts/setup.sh") from None

        compute_dtype = _compute_dtype(recipe.compute_dtype, torch)
        with step(f"loading {model_ref.ref} ({compute_dtype})"):
            tokenizer = AutoTokenizer.from_pretrained(model_ref.path)
            # Calibrated methods load on the CPU: llm-compressor's sequential pipeline onloads one
            # layer at a time to the GPU. Data-free ones (fp8, rtn) quantize in place, so on a GPU
            # machine they load onto it (llm-compressor's advice; an 8B fp8 pass would crawl on CPU).
            device_map = "auto" if torch.cuda.is_available() and not recipe.needs_calibration else None
            model = AutoModelForCausalLM.from_pretrained(model_ref.path, dtype=getattr(torch, compute_dtype),
                                                         device_map=device_map)
            model.eval()

        group_size = resolve_group_size(model, recipe)
        modifiers = build_modifiers(recipe, group_size)
        calib_info = None
        dataset = None
        if recipe.needs_calibration:
            assert recipe.calibration is not None
            calib = recipe.calibration
            with step(f"preparing {calib.num_samples} calibration samples from {calib.dataset}"):
                calib_set = calibration.load(calib)
                samples = calibration.tokenize(calib_set, tokenizer, calib.num_samples, calib.seq_len)
                from datasets import Dataset

                dataset = Dataset.from_list(samples)
            calib_info = {
                **calib_set.describe(),
                "num_samples": len(samples),
                "seq_len": calib.seq_len,
                "tokens": sum(len(s["input_ids"]) for s in samples),
                "seed": calib.seed,
            }

        oneshot_args: dict[str, Any] = {"model": model, "recipe": modifiers, "processor": tokenizer}
        if dataset is not None:
            oneshot_args.update(
                dataset=dataset,
                num_calibration_samples=len(dataset),
                max_seq_length=recipe.calibration.seq_len if recipe.calibration else None,
                shuffle_calibration_samples=False,
            )
        started = time.monotonic()
        with step(f"quantizing with llm-compressor ({recipe.method}, {recipe.scheme}"
                  + (f", group {group_size}" if group_size else "") + ")"):
            with _cpu_safe_awq(torch):
                try:
                    oneshot(**oneshot_args)
                except (RuntimeError, ValueError, TypeError) as exc:
                    raise BackendError(f"llm-compressor failed: {' '.join(str(exc).split())[:300]}") from exc
        quantize_time = time.monotonic() - started

        with step(f"saving compressed checkpoint ({recipe.dtype})"):
            save_dtype = getattr(torch, recipe.dtype)
            if compute_dtype != recipe.dtype:
                model.to(save_dtype)
            model.config.dtype = save_dtype
            model.save_pretrained(out_dir, save_compressed=True, quantization_format=SAVE_FORMAT.get(recipe.scheme))
            tokenizer.save_pretrained(out_dir)
        notes = []
        if compute_dtype != recipe.dtype:
            notes.append(f"calibrated in {compute_dtype}, saved in {recipe.dtype}")
        return BackendResult(
            group_size=group_size,
            calibration=calib_info,
            quantize_time_s=round(quantize_time, 2),
            versions=package_versions("torch", "transformers", "llmcompressor", "compressed-tensors"),
            notes=notes,
        )


def release_accelerator() -> None:
    """Give the GPU memory of a conversion back before anything is served.

    `quantkit run` starts vLLM right after converting, in another process that asks for 92% of
    the GPU. The converted model stays referenced by llm-compressor's session and its memory in
    this process's caching allocator: on an H200 a forced fp8 conversion (loaded onto the GPU)
    left 16.8 GiB held, and vLLM refused to start ("Free memory on device ... is less than
    desired GPU memory utilization")."""
    try:
        import torch
    except ImportError:  # nothing was loaded (_quantize said why)
        return
    try:
        from llmcompressor.core.session_functions import reset_session

        reset_session()
    except Exception:  # noqa: BLE001 - releasing is best effort; a failure here must not fail the conversion
        pass
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def build_modifiers(recipe: Recipe, group_size: int | None) -> list[Any]:
    """The llm-compressor modifiers a recipe stands for (the 'recipe' argument of oneshot): its
    method's builder (methods.py) given the scheme and ignore list every modifier shares."""
    common = {"config_groups": {"group_0": quant_scheme(recipe.scheme, group_size)}, "ignore": list(recipe.ignore)}
    if recipe.kv_cache is not None:
        common["kv_cache_scheme"] = KV_CACHE_SCHEMES[recipe.kv_cache]
    return METHODS[recipe.method].modifier_builder()(recipe, common)


# Formats compressed-tensors would infer wrongly for vLLM: 0.19 saves W4AFP8 as int-quantized (int4
# values in int8, unpacked), but vLLM's W4A8-FP8 scheme loads `weight_packed` (int32, 8 per word)
# and `weight_shape`, which only pack-quantized writes.
SAVE_FORMAT = {"W4AFP8": "pack-quantized"}

# llm-compressor's examples/quantization_kv_cache: static per-tensor FP8 (E4M3) scales for K and V,
# observed on the calibration data; vLLM reads them with --kv-cache-dtype fp8
KV_CACHE_SCHEMES = {"fp8": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}}


def awq_modifiers(recipe: Recipe, common: dict[str, Any]) -> list[Any]:
    """AWQ's activation-aware scaling, then the scaled weights rounded to the scheme. The recipe's
    options (duo_scaling, ...) are AWQModifier's: the quantization step takes none."""
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform import AWQModifier

    return [AWQModifier(**recipe.options), QuantizationModifier(**common)]


def gptq_modifiers(recipe: Recipe, common: dict[str, Any]) -> list[Any]:
    """GPTQ, after SmoothQuant when the recipe sets a strength (int8's moves activation outliers
    into the weights first). The recipe's options (dampening_frac, ...) are GPTQModifier's."""
    from llmcompressor.modifiers.gptq import GPTQModifier

    modifiers: list[Any] = []
    if recipe.smoothing_strength is not None:
        from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

        modifiers.append(SmoothQuantModifier(smoothing_strength=recipe.smoothing_strength))
    modifiers.append(GPTQModifier(**common, **recipe.options))
    return modifiers


def quantization_modifiers(recipe: Recipe, common: dict[str, Any]) -> list[Any]:
    """Data-free: the scheme applied to the weights as they are (round-to-nearest, or FP8's cast)."""
    from llmcompressor.modifiers.quantization import QuantizationModifier

    return [QuantizationModifier(**common, **recipe.options)]


def quant_scheme(preset: str, group_size: int | None):
    """A compressed-tensors preset with the group size applied.

    A grouped preset given no group size becomes per-channel (W8A16 in the recipes means
    per-channel INT8 weights, while compressed-tensors' preset groups by 128).
    """
    from compressed_tensors.quantization import preset_name_to_scheme

    scheme = preset_name_to_scheme(preset, ["Linear"])
    weights = scheme.weights
    if weights is not None and weights.strategy == "group":
        if group_size is None:
            scheme.weights = weights.model_copy(update={"strategy": "channel", "group_size": None})
        else:
            scheme.weights = weights.model_copy(update={"group_size": group_size})
    return scheme


def _compute_dtype(requested: str, torch) -> str:
    if requested != "auto":
        return requested
    # bf16 matmuls run about 2x slower than fp32 on CPUs without AMX (docs/DESIGN.md, "What was seen")
    return "bfloat16" if torch.cuda.is_available() else "float32"


@contextlib.contextmanager
def _cpu_safe_awq(torch) -> Iterator[None]:
    """AWQ pins its activation cache for faster host-to-device copies; with CPU-only torch that
    raises "Cannot access accelerator device when none is available". Pinning buys nothing
    without an accelerator, so it is skipped there."""
    if torch.accelerator.is_available():
        yield
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    original = IntermediatesCache.pin_memory
    IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None
    try:
        yield
    finally:
        IntermediatesCache.pin_memory = original
