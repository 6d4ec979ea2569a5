#!/usr/bin/env bash
# Issue 29 on one H200: does vLLM 0.26 load and run quantkit's W4A8-FP8 output? After the vLLM
# bundle is installed (h200_steady.sh stash .gpu/bundle/chunk-NN, common.sh), with .gpu/w4a8-2lx carried (quantkit's
# W4A8-FP8 conversion of a 2-layer SmolLM2 cut, group 64, model.safetensors as xz; 41 MiB):
#   1. the real checkpoint served (eager: a load-and-generate check, not a speed figure) and a
#      short `quantkit bench` (c = 1, 4) against it;
#   2. with .gpu/qconfigs carried too, the 8B-shape config-only W4A8-FP8 (group 128, dummy weights)
#      served eager and measured at c = 1, 32: which kernel vLLM picks at the deployed shape.
# Results (JSON, logs with vLLM's kernel lines) under $OUT.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # VLLM_SITE, VLLM_PY
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export QUANTKIT_HOME=/tmp/qkhome QUANTKIT_VLLM=$VLLM_PY HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
QK=(env PYTHONPATH=$VLLM_SITE:$PWD python3 -P -m quantkit)
S=$Q/w4a8-real; rm -rf $S && mkdir -p $S
cp .gpu/w4a8-2lx/*.json .gpu/w4a8-2lx/*.jinja .gpu/w4a8-2lx/recipe.yaml $S/ && cp $Q/tok/* $S/
python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'), 1<<22)" \
  .gpu/w4a8-2lx/model.safetensors.xz $S/model.safetensors || exit 1
timeout -s INT 150 "${QK[@]}" bench $S -c 1,4 -n 8 --input-len 64 --output-len 32 --max-model-len 2048 --enforce-eager \
  --results-dir "$OUT/real-w4a8" --json > "$OUT/real-w4a8.json" 2> "$OUT/real-w4a8.log"
echo "real w4a8-fp8: rc=$?"; grep -E "ready in|error|c=" "$OUT/real-w4a8.log" | cut -c1-240
if [ -d .gpu/qconfigs ]; then
  python3 benchmarks/gpu/make_8b_configs.py $Q/tok .gpu/qconfigs /tmp/w8b w4a8-fp8 > /dev/null
  timeout -s INT ${EIGHT_B_S:-170} "${QK[@]}" bench /tmp/w8b/llama8b-w4a8-fp8 --load-format dummy --enforce-eager -c 1,32 -n 64 \
    --input-len 512 --output-len 128 --max-model-len 4096 --results-dir "$OUT/dummy8b-w4a8" --json > "$OUT/dummy8b-w4a8.json" 2> "$OUT/dummy8b-w4a8.log"
  echo "8B w4a8-fp8 (dummy, eager): rc=$?"; grep -E "ready in|error" "$OUT/dummy8b-w4a8.log" | cut -c1-240
fi
for f in $QUANTKIT_HOME/logs/vllm-*.log; do grep -iE "kernel|w4a8|cutlass|machete|marlin|quantiz|error" "$f" | cut -c1-300 > "$OUT/$(basename $f .log)-kernel.txt"; tail -n 40 "$f" > "$OUT/$(basename $f .log)-tail.txt"; done
ls -la "$OUT"
