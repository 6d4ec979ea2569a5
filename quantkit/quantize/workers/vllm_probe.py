"""Load checkpoints in vLLM and generate a few tokens: does this build of vLLM serve them?

Runs in the vLLM environment (standard library + vllm), one process for several checkpoints so
that vLLM's import cost is paid once. vLLM logs to stdout too, so each result is one line
prefixed with MARKER: {"model", "ok", "load_s", "text", "completion_tokens", "quantization", "error"}.
usage: python vllm_probe.py [--quantization Q] [--dtype D] DIR [DIR ...]
(--quantization: vLLM's `--quantization`, for every DIR; unset, vLLM detects each checkpoint's method;
--dtype: vLLM's `--dtype`, as quantkit would serve on this machine: float32 on a CPU without native bf16)
"""

import gc
import json
import os
import sys
import time
import traceback

PROMPT = "The capital of France is"
MARKER = "QUANTKIT_PROBE "


def probe(path, quantization=None, dtype=None):
    from vllm import LLM, SamplingParams

    started = time.monotonic()
    llm = None
    try:
        # small scheduler limits keep vLLM's warm-up forward pass cheap: on CPUs without AMX the
        # FP8 path is a plain-torch fallback, and a default-sized warm-up takes minutes there
        llm = LLM(model=path, max_model_len=256, max_num_batched_tokens=256, max_num_seqs=4,
                  enforce_eager=True, seed=0, quantization=quantization, dtype=dtype or "auto")
        load_s = time.monotonic() - started
        out = llm.generate([PROMPT], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))[0].outputs[0]
        quant = getattr(llm.llm_engine.vllm_config.model_config, "quantization", None)
        return {"model": path, "ok": len(out.token_ids) == 8, "load_s": round(load_s, 1), "text": out.text,
                "completion_tokens": len(out.token_ids), "quantization": quant, "error": None}
    except Exception as exc:  # report and go on with the next checkpoint
        lines = [line for line in traceback.format_exception_only(type(exc), exc) if line.strip()]
        return {"model": path, "ok": False, "load_s": round(time.monotonic() - started, 1), "text": None,
                "completion_tokens": 0, "quantization": None, "error": " ".join(lines[-1].split())[:400]}
    finally:
        del llm
        gc.collect()


def main():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args, options = sys.argv[1:], {"--quantization": None, "--dtype": None}
    while args[:1] and args[0] in options:
        options[args[0]], args = args[1], args[2:]
    quantization = options["--quantization"]
    for path in args:
        print(MARKER + json.dumps({**probe(path, quantization, options["--dtype"]), "requested": quantization}),
              flush=True)


if __name__ == "__main__":
    main()
