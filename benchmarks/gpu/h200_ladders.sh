#!/usr/bin/env bash
# Issue 30, item 2 on one H200: each variant's steady-state capacity ladder at Llama-3.1-8B shape,
# on vLLM 0.26's defaults: `quantkit bench DIR --capacity --capacity-profile poisson` under the
# recipe's SLO (TTFT p95 <= 1 s, TPOT p95 <= 50 ms), the same ladder spanning the MLPerf server
# and interactive tiers. The checkpoints are config-only (benchmarks/gpu/make_8b_configs.py: 8B
# config.json + the quantization_config `quantkit convert` wrote, served with --load-format
# dummy): real kernels and speed, no accuracy (that comes from SmolLM2: --accuracy-from). No quant
# stack and no 16-GB weights to carry or make: the vLLM bundle, the tokenizer and four small JSONs.
# Run from the repository root on the GPU machine.
#
# Carrying (64 MiB per call): .gpu/bundle/chunk-NN (the offline bundle, see common.sh), .gpu/tok
# (SmolLM2's tokenizer files), .gpu/qconfigs (fp8.json, int8.json, w4a16.json, awq.json, w4a8-fp8.json: the
# `quantization_config` of quantkit's own conversions of SmolLM2; group size set to 128 for 8B).
# Calls, back to back (the machine goes back 30 s after a call ends):
#   1, carry .gpu/bundle/chunk-00 .gpu/tok .gpu/qconfigs:
#        bash benchmarks/gpu/h200_steady.sh stash .gpu/bundle/chunk-00 .gpu/tok && bash benchmarks/gpu/h200_ladders.sh start EPOCH
#   2.., carry .gpu/bundle/chunk-NN:   bash benchmarks/gpu/h200_steady.sh stash .gpu/bundle/chunk-NN
#   4, carry .gpu/w4a8-2l (quantkit's W4A8-FP8 conversion of a 2-layer SmolLM2 cut, 61 MiB: real
#      weights, served once between two ladders to see vLLM load and run the packed layout):
#        cp -r .gpu/w4a8-2l /tmp/qk/w4a8-real && bash benchmarks/gpu/h200_ladders.sh wait SECONDS
#   then:                     bash benchmarks/gpu/h200_ladders.sh wait SECONDS    (results to $OUT)
# EPOCH: the deadline (date +%s) after which nothing new starts; a search cut by it is stopped
# with Ctrl-C (its points so far are stored: the store is brought back, not only the JSONs).
#
# Settings (environment of `start`): VARIANTS (in order, each skipped when fewer than MIN_LEFT s
# remain), label:config:start[:serve flags, comma-separated[:IN/OUT]], e.g.
# "fp8+kv-fp8:fp8:40:--kv-cache-dtype=fp8" or "long-bf16:bf16:2.5::4096/512" (--max-model-len 8192
# once IN+OUT passes 4,096); WINDOW ("MIN,MAX,WARMUP" seconds of a point's window), TOLERANCE, SLO,
# LENS (IN/OUT tokens where a variant names none), SPANS (the tiers each ladder also answers; a
# tier the store can judge later need not be searched on the device: `quantkit compare --slo`).
# Back here: `quantkit runs import cap-LABEL.json --model llama8b-shape --variant LABEL` for each,
# then `quantkit compare --model llama8b-shape --accuracy-from smollm2-135m` (the README of the
# session's report folder has the exact lines).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # log, left, wait_done, store_out, pack_out
export QUANTKIT_STARTUP_TIMEOUT=900
export QUANTKIT_VLLM=${QUANTKIT_VLLM-$VLLM_PY}  # another vLLM: the CPU smoke test
QK_SITE=$Q/site-qk
QK=(env PYTHONPATH=$VLLM_SITE:$QK_SITE ${QK_PY-python3} -P -m quantkit)
CFG=${CFG-/tmp/w8b}  # the config-only folders (another set: a smoke test of this script on the CPU)
VARIANTS=${VARIANTS-"baseline:bf16:30 fp8+kv-fp8:fp8:40:--kv-cache-dtype=fp8 w4a8-fp8:w4a8-fp8:36 fp8:fp8:38 int8:int8:36 gptq:w4a16:30"}
WINDOW=${WINDOW-20,60,8}
TOLERANCE=${TOLERANCE-0.1}
SLO=${SLO-ttft_p95=1,tpot_p95=50ms}
LENS=${LENS-512/256}
SPANS=${SPANS-mlperf-server interactive}
MIN_LEFT=${MIN_LEFT-240}
EXTRA=${EXTRA-}  # more `quantkit bench` options for every variant (e.g. --enforce-eager on the CPU)


real_check() {  # a real W4A8-FP8 checkpoint (quantkit's, 2 layers), once it is here: loaded, generating?
  [ -d $Q/w4a8-real ] && [ ! -f $Q/res/real-w4a8.json ] || return 0
  log "real w4a8-fp8 checkpoint: serve and generate"
  timeout -s INT 300 "${QK[@]}" bench $Q/w4a8-real -c 1,4 -n 8 --input-len 64 --output-len 32 --max-model-len 2048 \
    --enforce-eager --results-dir $Q/res/real-w4a8 --json > $Q/res/real-w4a8.json 2> $Q/logs/real-w4a8.log
  log "real w4a8-fp8: rc=$? $(grep -E 'ready in|error' $Q/logs/real-w4a8.log | tr '\n' ' ' | cut -c1-300)"
}

cmd=${1:-}; shift || true
case $cmd in
start)
  # quantkit copied out of the checkout: a later call's transfer replaces the checkout
  rm -f $Q/all.done && site_copy $QK_SITE && cp benchmarks/gpu/h200_ladders.sh benchmarks/gpu/common.sh $Q/
  echo "$1" > $Q/deadline
  if [ "$CFG" = /tmp/w8b ]; then
    python3 benchmarks/gpu/make_8b_configs.py $Q/tok .gpu/qconfigs $CFG bf16 fp8 int8 w4a16 awq w4a8-fp8 > /dev/null || exit 1
  fi
  setsid nohup env VARIANTS="$VARIANTS" WINDOW="$WINDOW" TOLERANCE="$TOLERANCE" SLO="$SLO" LENS="$LENS" SPANS="$SPANS" MIN_LEFT="$MIN_LEFT" \
    EXTRA="$EXTRA" CFG="$CFG" QK_PY="${QK_PY-python3}" bash $Q/h200_ladders.sh orchestrate > $Q/logs/orchestrate.log 2>&1 < /dev/null &
  echo "started; $(left) s to the deadline"
  ;;
orchestrate)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader > $Q/res/gpu.txt 2>/dev/null
  until bundle_ready || [ -n "${QUANTKIT_VLLM_READY:-}" ]; do
    sleep 3; [ "$(left)" -gt 0 ] || { log "vllm never arrived"; touch $Q/all.done; exit 1; }
  done
  log "vllm ready ($(left) s left)"
  IFS=, read -r wmin wmax wwarm <<< "$WINDOW"
  for spec in $VARIANTS; do
    real_check
    IFS=: read -r label cfg start flags lens <<< "$spec"
    [ "$(left)" -gt "$MIN_LEFT" ] || { log "$label: skipped, $(left) s left"; continue; }
    serve=(); for f in ${flags//,/ }; do serve+=("$f"); done
    spans=(); for s in $SPANS; do spans+=(--span "$s"); done
    lens=${lens:-$LENS}; in=${lens%/*}; out=${lens#*/}
    maxlen=4096; [ $(( in + out )) -le 4096 ] || maxlen=8192
    log "$label: start ($CFG/llama8b-$cfg at $lens from $start req/s ${serve[*]})"
    timeout -s INT -k 60 $(( $(left) - 5 )) "${QK[@]}" bench $CFG/llama8b-$cfg --load-format dummy --max-model-len $maxlen \
      --capacity --capacity-profile poisson --slo "$SLO" "${spans[@]}" \
      --input-len $in --output-len $out --capacity-start "$start" --capacity-max 128 --tolerance "$TOLERANCE" \
      --window-min "$wmin" --window-max "$wmax" --window-warmup "$wwarm" "${serve[@]}" $EXTRA \
      --results-dir $Q/res/cap-$label --json > $Q/res/cap-$label.json 2> $Q/logs/cap-$label.log
    log "$label: rc=$? $(grep -E '^(capacity|no capacity|bound)' $Q/logs/cap-$label.log | tr '\n' ' ' | cut -c1-300)"
  done
  real_check
  log "all done"
  touch $Q/all.done
  ;;
wait)
  wait_done "${1:-60}"
  ladders_out
  ;;
*) echo "usage: h200_ladders.sh start EPOCH | wait SECONDS   (stash: h200_steady.sh)" >&2; exit 2 ;;
esac
