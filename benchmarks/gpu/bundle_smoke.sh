#!/usr/bin/env bash
# After the offline bundle is installed on a GPU machine (common.sh): does it serve? A tiny
# random-weight Llama (2 layers, hidden 256, a 512-word tokenizer made here: nothing to carry) is
# written with the image's torch and transformers, served by the bundle's vLLM (`vllm serve`,
# eager: a load-and-generate check, not a speed figure), asked for one completion, then measured
# briefly by the bundle's quantkit (`quantkit bench --url`, c = 1, 4); then the main environment:
# `quantkit convert --method fp8` (llm-compressor on the GPU) and `quantkit bench` of that checkpoint
# on a server quantkit starts itself. Prints each step's result; seven files under $OUT (the device
# tool brings back 8 files at most). Exit 0 only if the completion came back and the bench finished.
#
# usage, from the checkout's root on the GPU machine:   bash benchmarks/gpu/bundle_smoke.sh
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # BUNDLE, VLLM_PY
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=/tmp/tiny-llama; PORT=8011
bundle_ready || { echo "error: the bundle is not installed ($BUNDLE/env.sh is missing): send its chunks first" >&2; exit 2; }
. "$BUNDLE/env.sh"
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader

"$VLLM_PY" - "$M" <<'PY' || exit 1
import sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out = sys.argv[1]
words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(509)]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(out)
config = LlamaConfig(vocab_size=len(words), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                     bos_token_id=1, eos_token_id=2)
torch.manual_seed(0)
LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
print(f"tiny llama written: {out} (torch {torch.__version__}, cuda {torch.cuda.is_available()})")
PY

t0=$(date +%s)
"$VLLM_PY" -m vllm.entrypoints.cli.main serve $M --port $PORT --max-model-len 512 --enforce-eager \
  --gpu-memory-utilization 0.2 > "$OUT/smoke-serve.log" 2>&1 &
pid=$!
until curl -sf localhost:$PORT/health >/dev/null; do
  sleep 2
  kill -0 $pid 2>/dev/null || { echo "vllm serve died:"; tail -n 25 "$OUT/smoke-serve.log"; exit 1; }
  [ $(( $(date +%s) - t0 )) -lt 400 ] || { echo "vllm serve not ready after 400 s"; kill $pid; exit 1; }
done
echo "vllm $("$VLLM_PY" -c 'import vllm; print(vllm.__version__)') ready in $(( $(date +%s) - t0 )) s"
answer=$(curl -s localhost:$PORT/v1/completions -H 'Content-Type: application/json' \
  -d "{\"model\": \"$M\", \"prompt\": \"w1 w2 w3\", \"max_tokens\": 8, \"temperature\": 0}")
echo "completion: $answer" | cut -c1-400
rc=0
echo "$answer" | grep -q '"completion_tokens":8' || rc=1
quantkit bench $M --url http://127.0.0.1:$PORT -c 1,4 -n 8 --input-len 32 --output-len 16 \
  --results-dir /tmp/smoke-bench --json > "$OUT/smoke-bench.json" 2> "$OUT/smoke-bench.err" || rc=1
python3 -c "import json,sys; [print(f\"bench c={p['concurrency']}: {p['output_tok_s']:.0f} out tok/s, failures {p['failures']}\") for p in json.load(open(sys.argv[1]))['points']]" \
  "$OUT/smoke-bench.json" 2>/dev/null || { rc=1; tail -n 5 "$OUT/smoke-bench.err"; }
kill $pid; wait $pid 2>/dev/null

# The main environment on the GPU: llm-compressor writes an FP8 checkpoint (data-free), and quantkit
# serves it itself (vLLM from QUANTKIT_VLLM, the bundle's) for a short bench.
t0=$(date +%s)
quantkit convert $M --method fp8 -o /tmp/tiny-fp8 --json > "$OUT/smoke-convert.json" 2> "$OUT/smoke-convert.err" \
  && echo "convert fp8: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['method'], r['scheme'], f\"{r['wall_time_s']:.0f} s\")" "$OUT/smoke-convert.json") in $(( $(date +%s) - t0 )) s" \
  || { rc=1; echo "convert fp8 FAILED:"; tail -n 8 "$OUT/smoke-convert.err"; }
if [ -d /tmp/tiny-fp8 ]; then
  quantkit bench /tmp/tiny-fp8 -c 1,4 -n 8 --input-len 32 --output-len 16 --max-model-len 512 --enforce-eager \
    --gpu-memory-utilization 0.2 --results-dir /tmp/smoke-bench-fp8 --json > "$OUT/smoke-fp8.json" 2> "$OUT/smoke-fp8.err" || rc=1
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('quantkit-served', r['checkpoint']['scheme'], 'on vLLM', r['server']['vllm_version'], '(' + r['server']['args'][0] + ')'); [print(f\"bench fp8 c={p['concurrency']}: {p['output_tok_s']:.0f} out tok/s, failures {p['failures']}\") for p in r['points']]" \
    "$OUT/smoke-fp8.json" 2>/dev/null || { rc=1; tail -n 8 "$OUT/smoke-fp8.err"; }
fi
echo "smoke: $([ $rc = 0 ] && echo ok || echo FAILED)"
exit $rc
