"""Loaded by every Python process of a vLLM server that imitates a lesser CPU (serve/isa.py puts
this folder first on its PYTHONPATH): torch's CPU feature probes answer as that CPU's would, so
vLLM-CPU loads the kernel library such a CPU gets (`_C_AVX2` on AVX2, `_C_AVX512` on AVX-512
without bf16) and takes the same code paths (attention ISA, FP8 KV-cache refusal). ATEN and oneDNN
are held to the same ISA by ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA, set beside it."""

import os

# the probes each class answers False to (vLLM 0.32 reads these: platforms/cpu.py, cpu_attn.py)
_FALSE = {
    "avx2": ("_is_avx512_supported", "_is_avx512_vnni_supported", "_is_avx512_bf16_supported",
             "_is_amx_tile_supported", "_is_amx_fp16_supported", "_is_vnni_supported"),
    "avx512": ("_is_avx512_bf16_supported", "_is_amx_tile_supported", "_is_amx_fp16_supported"),
    "avx512_bf16": ("_is_amx_tile_supported", "_is_amx_fp16_supported"),
}
_names = _FALSE.get(os.environ.get("QUANTKIT_IMITATED_ISA", ""), ())
if _names:
    import torch

    for _name in _names:
        if hasattr(torch.cpu, _name):
            setattr(torch.cpu, _name, lambda: False)
