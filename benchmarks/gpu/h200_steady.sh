#!/usr/bin/env bash
# Issue 30, item 1 on one H200: quantkit's steady-state Poisson points against `vllm bench serve
# --request-rate` at the same offered rates, on one server per variant (benchmarks/steady_agreement.py):
# bf16 on dummy Llama-3.1-8B-shape weights (vLLM defaults but --load-format dummy), then fp8
# (the same plus --quantization fp8); 512 in / 256 out, SLO TTFT p95 <= 1 s, TPOT p95 <= 50 ms.
# Run from the repository root on the GPU machine.
#
# Carrying (64 MiB per call): the offline bundle's chunks .gpu/bundle/chunk-NN (common.sh);
# .gpu/tok = SmolLM2's tokenizer files (tokenizer.json,
# tokenizer_config.json, chat_template.jinja). Calls, back to back (the machine goes back 30 s
# after a call ends):
#   1, carry .gpu/bundle/chunk-00 .gpu/tok:  bash benchmarks/gpu/h200_steady.sh stash .gpu/bundle/chunk-00 .gpu/tok \
#                                      && bash benchmarks/gpu/h200_steady.sh start EPOCH
#   2.., carry .gpu/bundle/chunk-NN:  bash benchmarks/gpu/h200_steady.sh stash .gpu/bundle/chunk-NN
#   then:                            bash benchmarks/gpu/h200_steady.sh wait SECONDS   (results to $OUT)
# EPOCH: the deadline (date +%s), after which nothing new starts; give it the device time left.
#
# What runs (background, while the machine is held), once the bundle is installed: for each
# variant of VARIANTS (default "bf16 fp8") one server and steady_agreement.py at its rates
# (BF16_RATES, FP8_RATES), each point DURATION s of arrivals (default 40), the first WARMUP s
# (default 10) left out by both clients; a rate that cannot finish before the deadline is skipped.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # log, left, wait_done, store_out, pack_out
export QUANTKIT_STARTUP_TIMEOUT=900
export QUANTKIT_VLLM=$VLLM_PY
W=${MODEL_DIR-/tmp/w8b/llama8b-bf16}  # MODEL_DIR: another checkpoint (a smoke test of this script on the CPU)
QK_SITE=$Q/site-qk
PY=(env PYTHONPATH=$VLLM_SITE:$QK_SITE python3 -P)
VARIANTS=${VARIANTS-bf16 fp8}
BF16_RATES=${BF16_RATES-38,46,42}  # the middle rate last: should the deadline cut it, the others still bracket
FP8_RATES=${FP8_RATES-50,62,56}
DURATION=${DURATION-40}
WARMUP=${WARMUP-10}
SLO=${SLO-ttft_p95=1,tpot_p95=50ms}
LENS=${LENS-512/256}  # input/output tokens
SERVE_EXTRA=${SERVE_EXTRA-}  # more steady_agreement.py options for every variant (e.g. --eager on the CPU)


cmd=${1:-}; shift || true
case $cmd in
stash)
  stash_all "$@"
  ;;
start)
  # quantkit and the script copied out of the checkout: a later call's transfer replaces the checkout
  rm -f $Q/all.done && site_copy $QK_SITE \
    && cp benchmarks/steady_agreement.py $QK_SITE/ && cp benchmarks/gpu/make_8b_configs.py $Q/
  echo "$1" > $Q/deadline
  [ -n "${MODEL_DIR:-}" ] || python3 $Q/make_8b_configs.py $Q/tok /nonexistent /tmp/w8b bf16 > /dev/null || exit 1
  setsid nohup env VARIANTS="$VARIANTS" BF16_RATES="$BF16_RATES" FP8_RATES="$FP8_RATES" DURATION="$DURATION" \
    WARMUP="$WARMUP" SLO="$SLO" LENS="$LENS" SERVE_EXTRA="$SERVE_EXTRA" W="$W" MODEL_DIR="$W" bash benchmarks/gpu/h200_steady.sh orchestrate > $Q/logs/orchestrate.log 2>&1 < /dev/null &
  echo "started; $(left) s to the deadline"
  ;;
orchestrate)
  cp benchmarks/gpu/h200_steady.sh benchmarks/gpu/common.sh $Q/ 2>/dev/null
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader > $Q/res/gpu.txt
  until bundle_ready; do sleep 3; [ "$(left)" -gt 0 ] || { log "vllm never arrived"; touch $Q/all.done; exit 1; }; done
  log "vllm ready ($(left) s left)"
  first=quantkit
  for v in $VARIANTS; do
    case $v in
      bf16) rates=$BF16_RATES; extra=() ;;
      fp8) rates=$FP8_RATES; extra=(--serve-arg quantization=fp8) ;;
      *) log "unknown variant $v"; continue ;;
    esac
    [ "$(left)" -gt 300 ] || { log "$v: skipped, $(left) s left"; continue; }
    log "$v: start (rates $rates, $first first)"
    timeout -s INT $(( $(left) - 10 )) "${PY[@]}" $QK_SITE/steady_agreement.py $W --rates "$rates" --slo "$SLO" \
      --input-len ${LENS%/*} --output-len ${LENS#*/} $SERVE_EXTRA --duration "$DURATION" --warmup "$WARMUP" --max-model-len default \
      --serve-arg load-format=dummy "${extra[@]}" --first $first --label $v --deadline $(( $(cat $Q/deadline) - 15 )) \
      --json $Q/res/steady-$v.json --samples $Q/res/steady-$v-samples.json --results-dir $Q/res/raw-$v \
      > $Q/logs/steady-$v.log 2>&1
    log "$v: rc=$? $(grep -E '^capacity' $Q/logs/steady-$v.log | tr '\n' ' ' | cut -c1-400)"
    [ $first = quantkit ] && first=vllm || first=quantkit
  done
  log "all done"
  touch $Q/all.done
  ;;
wait)
  wait_done "${1:-60}"
  [ -f $Q/logs/orchestrate.log ] && { echo "[orchestrate]"; tail -n 8 $Q/logs/orchestrate.log; }
  for f in $Q/logs/steady-*.log; do [ -f "$f" ] && { echo "[$(basename $f)]"; grep -v "^\s*$" "$f" | grep -v "vLLM still starting" | tail -n 14 | cut -c1-260; }; done
  store_out
  cp $Q/res/steady-bf16.json $Q/res/steady-fp8.json "$OUT"/ 2>/dev/null
  pack_out 3 tmp/qk/res tmp/qk/logs
  ;;
*) echo "usage: h200_steady.sh stash DIR... | start EPOCH | wait SECONDS" >&2; exit 2 ;;
esac
