# Sourced by the h200_*.sh drivers: the work folder and the environment every one of them sets, the
# log line, the time left to the deadline, and what a `wait` call does at its end (wait for the
# background work, show the GPU, bring the store and the small result files back under $OUT). A
# driver that copies itself to /tmp/qk copies this file beside it.
Q=/tmp/qk
mkdir -p $Q/logs $Q/res
export QUANTKIT_HOME=/tmp/qkhome PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # KINDS.md: no NVLink multicast

log() { echo "$(date +%T) $*"; }
left() { echo $(( $(cat $Q/deadline) - $(date +%s) )); }

wait_done() {  # wait_done SECONDS: until the background work is all done or SECONDS have passed
  local end=$(( $(date +%s) + ${1:-60} ))
  while [ "$(date +%s)" -lt $end ] && [ ! -f $Q/all.done ]; do sleep 5; done
  echo "--- $(date +%T), $( [ -f $Q/deadline ] && left) s to the deadline"
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
