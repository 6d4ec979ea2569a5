# Sourced by the h200_*.sh drivers: the work folder and the environment every one of them sets, where
# the two environments live, the log line, the time left to the deadline, and what a `wait` call does at its end (wait for the
# background work, show the GPU, bring the store and the small result files back under $OUT). A
# driver that copies itself to /tmp/qk copies this file beside it.
Q=/tmp/qk
mkdir -p $Q/logs $Q/res
export QUANTKIT_HOME=/tmp/qkhome PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # KINDS.md: no NVLink multicast

# The two environments come from quantkit's offline bundle (benchmarks/gpu/make_bundle.sh builds it
# here, into .gpu/bundle/chunk-NN, 48 MB each; docs/GPU.md). On the GPU machine, one command per
# chunk, back to back, each carrying only that chunk's folder: `bash .gpu/bundle/chunk-NN/install.sh`
# (a driver's `stash .gpu/bundle/chunk-NN` does the same). The chunks wait in $BUNDLE (/tmp lasts
# while the machine is held); the command that brings the last one installs both environments
# there (pip --target, over the image's own torch) and writes $BUNDLE/env.sh: bundle_ready.
BUNDLE=${QUANTKIT_BUNDLE_DIR:-/tmp/quantkit-bundle}
MAIN_SITE=$BUNDLE/main      # llm-compressor, lm-eval, quantkit's wheel (on PYTHONPATH before the image's packages)
VLLM_SITE=$BUNDLE/vllm      # vLLM 0.26.0
VLLM_PY=$VLLM_SITE/bin/python  # QUANTKIT_VLLM: the image's python3 with $VLLM_SITE first on its path
bundle_ready() { [ -f "$BUNDLE/env.sh" ]; }

log() { echo "$(date +%T) $*"; }

stash_common() {  # stash_common DIR: what a call carried, put where the drivers read it; 1 if DIR is not one of these
  case $1 in
    .gpu/bundle/*) bash "$1/install.sh" || echo "stash: $1: the bundle's install or its check said the above" >&2 ;;  # one chunk; the last installs
    .gpu/tok) rm -rf $Q/tok && cp -r .gpu/tok $Q/tok && echo "tokenizer ready" ;;
    .gpu/data) rm -rf $Q/data.tmp && cp -r .gpu/data $Q/data.tmp && mv $Q/data.tmp $Q/data && echo "data ready" ;;
    *) return 1 ;;
  esac
}
site_copy() {  # site_copy DIR: quantkit copied out of the checkout as its wheel lays it out (recipes/ and
  # evals/ are the data packages quantkit.recipes and quantkit.eval_tasks: pyproject.toml), so that a
  # later call's transfer, which replaces the checkout, cannot change what a background run imports
  rm -rf "$1" && mkdir -p "$1" && cp -r quantkit "$1"/ && cp -r recipes "$1"/quantkit/recipes \
    && cp -r evals "$1"/quantkit/eval_tasks
}
left() { echo $(( $(cat $Q/deadline) - $(date +%s) )); }

wait_done() {  # wait_done SECONDS: until the background work is all done or SECONDS have passed
  local end=$(( $(date +%s) + ${1:-60} ))
  while [ "$(date +%s)" -lt $end ] && [ ! -f $Q/all.done ]; do sleep 5; done
  echo "--- $(date +%T), $( [ -f $Q/deadline ] && left) s to the deadline"
}

stash_all() {  # stash_all DIR...: a driver's `stash` command, for drivers that read only what stash_common puts
  local d; for d in "$@"; do stash_common "$d" || echo "stash: $d is not something this driver reads" >&2; done
}

ladders_out() {  # the end of a ladder driver's `wait` call: its progress, the store and the small files to $OUT
  [ -f $Q/logs/orchestrate.log ] && { echo "[orchestrate]"; tail -n 14 $Q/logs/orchestrate.log; }
  for f in $Q/logs/cap-*.log; do
    [ -f "$f" ] && { echo "[$(basename $f)]"; grep -E 'offered:|ready in|^capacity|^no capacity|error' "$f" | tail -n 8 | cut -c1-300; }
  done
  store_out
  pack_out 3 tmp/qk/res tmp/qk/logs tmp/qkhome/logs
}

store_out() {  # the GPU's state now, and a consistent copy of the store (SQLite's backup, safe beside a writer)
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
  OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
  [ -f $QUANTKIT_HOME/results.db ] && python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" \
    $QUANTKIT_HOME/results.db "$OUT/results.db"
  return 0
}

pack_out() {  # pack_out DEPTH DIR... [-- MORE FIND TESTS]: the small text files below DIRs (paths from /) as $OUT/results.tgz
  local depth=$1 dirs=(); shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do dirs+=("$1"); shift; done
  [ "${1:-}" = -- ] && shift
  OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
  (cd / && find "${dirs[@]}" -maxdepth "$depth" -type f \( -name '*.json' -o -name '*.log' -o -name '*.err' -o -name '*.txt' \
     -o -name '*.md' -o -name '*.html' -o -name '*.png' -o -name '*.yaml' \) "$@" -size -8M 2>/dev/null | tar -czf "$OUT/results.tgz" -T -)
  ls -la "$OUT"
}
