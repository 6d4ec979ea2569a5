#!/usr/bin/env bash
# On the H200 (after the offline bundle is installed, see common.sh): config-only
# Llama-3.1-8B-shape variants served with --load-format dummy; per variant one `quantkit bench`
# (512 in / 256 out, concurrency list) and, with AGREE=1, `vllm bench serve` on the same server.
# usage: bash benchmarks/gpu/h200_bench.sh VARIANT [VARIANT...]    (results under $OUT)
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # BUNDLE, VLLM_SITE
export PYTHONPATH=$VLLM_SITE PATH=$VLLM_SITE/bin:$PATH  # quantkit from the checkout (the working folder), in vLLM's environment
export QUANTKIT_VLLM=$(command -v python3) QUANTKIT_HOME=/tmp/qkhome HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W=/tmp/w8b; OUT=${OUT:-/tmp/out}; mkdir -p "$W" "$OUT"
CONC=${CONC:-1,16,64,256}
python3 benchmarks/gpu/make_8b_configs.py .gpu/tok .gpu/qconfigs "$W" "$@" >/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for v in "$@"; do
  d=$W/llama8b-$v; port=8000
  python3 -m quantkit serve "$d" --port $port --load-format dummy --max-model-len 4096 > "$OUT/serve-$v.log" 2>&1 &
  spid=$!
  t0=$(date +%s)
  until curl -sf localhost:$port/health >/dev/null; do
    sleep 2; kill -0 $spid 2>/dev/null || { echo "server $v died"; tail -20 "$OUT/serve-$v.log"; continue 2; }
  done
  echo "$v ready after $(( $(date +%s) - t0 )) s"
  python3 -m quantkit bench "$d" --url http://127.0.0.1:$port -c "$CONC" --input-len 512 --output-len 256 \
    --results-dir "$OUT/bench-$v" --json > "$OUT/bench-$v.json" 2> "$OUT/bench-$v.err"
  python3 - "$OUT/bench-$v.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for p in r["points"]:
    print(f"  c={p['concurrency']:>4} out tok/s {p['output_tok_s']:>9.1f}  ttft p50 {p['ttft']['p50']*1e3:7.1f} ms  itl p50 {p['itl']['p50']*1e3:6.2f} ms  fail {p['failures']}")
PY
  if [ "${SWEEP:-0}" = 1 ]; then  # the knee search on the same server
    python3 -m quantkit bench "$d" --url http://127.0.0.1:$port --sweep --sweep-max 512 --input-len 512 --output-len 256 \
      --results-dir "$OUT/sweep-$v" --json > "$OUT/sweep-$v.json" 2> "$OUT/sweep-$v.err"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); k=r['knee']; print('  knee', {x: k.get(x) for x in ('knee','reason','measured')}); [print(f\"   c={p['concurrency']:>4} {p['output_tok_s']:9.1f} tok/s\") for p in r['points']]" "$OUT/sweep-$v.json"
  fi
  if [ "${AGREE:-0}" = 1 ]; then
    for c in 1 64; do
      n=$(( c == 1 ? 16 : 256 ))
      python3 -m vllm.entrypoints.cli.main bench serve --backend vllm --base-url http://127.0.0.1:$port --model "$d" \
        --served-model-name "$(basename $d)" --tokenizer "$d" --dataset-name random --random-input-len 512 \
        --random-output-len 256 --ignore-eos --num-prompts $n --max-concurrency $c --save-result \
        --result-dir "$OUT" --result-filename "vllm-$v-c$c.json" > "$OUT/vllm-$v-c$c.log" 2>&1
      python3 -m quantkit bench "$d" --url http://127.0.0.1:$port -c $c -n $n --input-len 512 --output-len 256 \
        --results-dir "$OUT/agree-$v-c$c" --json > "$OUT/agree-$v-c$c.json" 2>/dev/null
      python3 benchmarks/gpu/agree.py "$OUT/vllm-$v-c$c.json" "$OUT/agree-$v-c$c.json"
    done
  fi
  kill $spid; wait $spid 2>/dev/null
done
