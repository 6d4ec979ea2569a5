#!/usr/bin/env bash
# Issue 42 on one H200: the steady-state decision table on REAL random weights. A Llama-3.1-8B-shape
# model with random bf16 weights is made on the machine (make_random_8b.py, on the GPU), quantkit's
# own conversions of it run side by side with the smallest calibration that runs (speed needs real
# values, not good ones), then each variant is served ONCE (`quantkit serve`, vLLM 0.26 defaults,
# --max-model-len 8192) and, on that one server, its tasks run in order:
#   L512@S   `quantkit bench --url --capacity --capacity-profile poisson` at 512 in / 256 out from S req/s
#            (the recipe's SLO, the MLPerf server and interactive tiers spanned on the same ladder);
#            a ladder whose top load held goes on from that top, at most twice (ladder_up)
#   C512     vLLM's own client, `vllm bench serve --request-rate`, at the two loads that bracket
#            quantkit's capacity (benchmarks/steady_agreement.py --clients vllm: 60 s of arrivals after
#            10 s of warm-up; sustained or not by the growth of requests in flight, as quantkit decides)
#   L4096@S  the same ladder at 4,096 in / 512 out
# While the conversions run, a 2-layer model of the same shape is served once with a small memory
# share, so the first real start finds vLLM's JIT caches warm (a fresh machine's first start pays
# ~100 s of compilation; the warm-up overlaps it with the conversions, which do not need vLLM). On
# 12-06's H100s: a cold first bf16 server 209 s (97 s of it JIT after the CUDA graphs); the warm-up
# 149 s, then warm servers 60-89 s; bundle calls ~4 s each and the install ~60 s.
# Run from the repository root on the GPU machine.
#
# Carrying (64 MiB per call; the working tree is ~11 MB): .gpu/bundle/chunk-NN (the offline bundle,
# common.sh), .gpu/tok (SmolLM2's tokenizer files), .gpu/data (c4 from ../shared/data, calibration).
# Calls, back to back (the machine goes back 30 s after a call ends):
#   1, carry .gpu/bundle/chunk-00 .gpu/tok:
#        bash benchmarks/gpu/h200_table.sh stash .gpu/bundle/chunk-00 .gpu/tok && bash benchmarks/gpu/h200_table.sh start SECONDS
#   2-8, carry .gpu/bundle/chunk-NN:   bash benchmarks/gpu/h200_table.sh stash .gpu/bundle/chunk-NN
#   9, carry .gpu/bundle/chunk-08 .gpu/data:  bash benchmarks/gpu/h200_table.sh stash .gpu/data .gpu/bundle/chunk-08
#   then:                              bash benchmarks/gpu/h200_table.sh wait SECONDS  (store + results to $OUT)
# Send the `wait` calls two at a time, in one batch of tool calls, so the second starts the moment
# the first returns: 12-06 lost a warm H100 (its bundle, checkpoints and a ladder) by reading a
# wait's figures before sending the next, and four fresh starts were then refused.
# SECONDS (of `start`): how long from now the plan may run; a task that cannot finish by then is
# skipped, one cut by it is stopped with Ctrl-C (its points so far are stored).
# Settings (environment of `start`): PLAN (servers in order: label:DIR:serve flags, comma-separated:
# tasks, +-separated; DIR relative to /tmp/qkmodels, or "bf16" for the random model), CONVERT
# (methods converted first, side by side), CALIB ("--num-samples N --seq-len L" for the calibrated
# ones), WINDOW ("MIN,MAX,WARMUP" s of a point), SLO, SPANS512, SPANS4096, LOAD_SCALE (the plan's
# loads times this, default 1), WARMUP (0: no 2-layer warm-up).
#
#
# Issue 42, what is left after 12-06's two H100 runs (docs/reports/h200/table-h100-2026-12-06: bf16 32.83 /
# 33.41 and fp8 39.5 / 42.58 with vLLM's client on one H100; int8 40.08 / 43.2 and W4A16 34.35 / 34.93 on
# another, where bf16 was not re-measured). The second run's 30 minutes: five refused starts cost 331 s, then
# start + bundle ~200 s, conversions (~95-108 s) beside the warm-up (197 s, served: the fixed KV cache works),
# int8 server 80 s + ladder 148 s, gptq server 76 s + two ladders 175 + 485 s (its top held, then a recheck).
# Plans left, one session each:
#   (a) done 12-07 c on one H100 (PLAN="w4a8:w4a8-fp8::L512@32 bf16:bf16::L512@31 int8:int8::L512@38"
#       CONVERT="w4a8-fp8 int8" HI_FACTOR=1.35): bf16 36.02 / 38.83, W4A8-FP8 40.08 / 43.2 (1.11x, 1.03-1.20x),
#       int8 44.15 / 47.59 (1.23x, 1.14-1.32x), every tier the same (docs/reports/h200/w4a8-int8-h100-2026-12-07).
#   (b) long context, the FP8 KV cache on bf16 and fp8 on one machine. Half done, the same session and
#       machine (PLAN="bf16+kv-long:bf16:--kv-cache-dtype=fp8:L4096@5" CONVERT="" WARMUP=0 WINDOW=60,120,8
#       SPANS4096= HI_FACTOR=1.2): bf16 + FP8 KV 4.585 / 5, GPU-bound, not the ~5.6 that bf16's 512/256
#       tokens/s predicted. Earlier machines at 4,096/512 (60-120-s windows; 20-s ones missed KV episodes):
#       bf16 3.93 / 5.07, KV-bound (long-h100-2026-12-07); fp8 4.5 / 5.62, KV-bound; fp8 + FP8 KV 5.69 / 6.2,
#       GPU-bound (long-fp8-h100-2026-12-07). Left: fp8 + FP8 KV on the same machine as bf16 + FP8 KV, for a
#       same-machine ratio (now 1.24x, 1.14-1.35x, across machines), e.g.
#       PLAN="fp8+kv-long:fp8:--kv-cache-dtype=fp8:L4096@5.7 bf16+kv-long:bf16:--kv-cache-dtype=fp8:L4096@4.6" CONVERT=fp8 WINDOW=60,120,8 SPANS4096= HI_FACTOR=1.2
#       (each long ladder takes 200-500 s), and a vLLM-client check at long context (C512 is 512/256 only).
# Give `start` the budget left after the first call less ~60 s; a refused start costs 15-90 s of the budget:
# ask `status` first and wait out a "none now". A second `start` on the same warm machine (12-07 c: the budget
# left after plan 1 went to plan 2) appends to orchestrate.log; until 12-07 c it overwrote plan 1's.
# Issue 43 (what binds near 10k tok/s) runs on this driver too: every ladder point stores the host
# figures (engine-core and API-server CPU, GPU busy and SM clock, step time; bench --url finds the
# local server by its port), and the bound is named at each ladder's first failing load. In its own
# 30 minutes, with CONVERT=fp8 (data-free: no calibration wait):
#   PLAN="bf16:bf16::L512@30 fp8:fp8::L512@35 fp8-host:fp8:--api-server-count=4,--stream-interval=16:L512@35" HI_FACTOR=1.3
# (starts from 12-06's loads: an H200 machine saturated bf16 at 28.6, an H100 held bf16 at 31.2 and
# fp8 at 36; a ladder whose top holds goes on from it) the defaults of bf16 and fp8, then fp8 with the
# host levers (more API servers, fewer stream chunks); a lever that moves the fp8 ceiling is the
# host's proof. Ran 12-06 night on an H100 (docs/reports/h200/levers-h100-2026-12-06): bf16 34.21,
# fp8 41.05, fp8 with the host levers 41.05 again: the host does not bind, the GPU at its power limit
# does. Next, the levers that shorten the step, on one machine (fp8 first, bf16 for the ratio):
#   PLAN="fp8:fp8::L512@38 fp8-kv:fp8:--kv-cache-dtype=fp8:L512@38 fp8-mnbt:fp8:--max-num-batched-tokens=4096:L512@38 bf16:bf16::L512@32" CONVERT=fp8 HI_FACTOR=1.2
# The tuner: a T512@S task (tune_task). 12-07 on an H100 (docs/reports/h200/tune-h100-2026-12-07), with
#   PLAN="bf16:bf16::L512@32 fp8-tune:fp8::T512@38" CONVERT=fp8 HI_FACTOR=1.25 TUNE_BUDGET=3
# after five refused starts (376 s): bf16 33.84 / 35.78 (its ladder with two tiers spanned: 474 s, 10
# points), then the tuner's first trial only probed (fp8 server 123 s cold, probe 38 met / 47.5 saturated)
# before the deadline. A trial at 8B cost ~7 min (start, a 2-point probe, a 3-4 point search); --no-prune
# runs no probe since (~5 min). Next, the tuner alone (bf16 at 512/256 is measured on five H100s):
#   PLAN="fp8-tune:fp8::T512@38" CONVERT=fp8 TUNE_BUDGET=4 SPANS512= HI_FACTOR=1.25   (WARMUP=0 after a refused start)
# Ran 12-07 evening on another H100 (docs/reports/h200/tune2-h100-2026-12-07), with bf16 first and no warm-up:
#   PLAN="bf16:bf16::L512@30 fp8-tune:fp8::T512@40" CONVERT=fp8 WARMUP=0 SPANS512= HI_FACTOR=1.35 TUNE_BUDGET=4
# bf16 34.86 / 37.57; fp8 defaults 38.14 / 40; fp8 + graphs to 1,024 >= 40 / 54; fp8 + FP8 KV + graphs 36.36 /
# 38.14 (a trial ~4.5 min: server 115-125 s cold-compiled, search 120-185 s; a cold bf16 start 187 s). Next,
# tuned bf16 against tuned fp8 on one machine, over the one lever that moved fp8:
#   PLAN="bf16-tune:bf16::T512@33 fp8-tune:fp8::T512@40" CONVERT=fp8 WARMUP=0 TUNE_KNOBS=max-cudagraph-capture-size \
#   TUNE_SPACE="max-cudagraph-capture-size=default,1024" TUNE_BUDGET=2 HI_FACTOR=1.35
# 12-07 night (docs/reports/h200/tuned-h100-2026-12-07), four refused starts left ~15 min for two ladders, both
# with the graphs, on one H100:
#   PLAN="bf16g:bf16:--max-cudagraph-capture-size=1024:L512@35 fp8g:fp8:--max-cudagraph-capture-size=1024:L512@40" CONVERT=fp8 WARMUP=0 SPANS512= HI_FACTOR=1.35
# bf16 35 / 37.73, fp8 35.41 / 37.64 (1.01x): the lever did not hold fp8 at 40 on this machine. Next: int8 against
# fp8 on one machine (PLAN="int8:int8::L512@38 fp8g:fp8:--max-cudagraph-capture-size=1024:L512@38" CONVERT="int8 fp8").
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # log, left, stash_common, wait_done, store_out, pack_out
export QUANTKIT_MODELS_DIR=/tmp/qkmodels QUANTKIT_DATA_DIR=$Q/data QUANTKIT_STARTUP_TIMEOUT=900
export QUANTKIT_VLLM=${QUANTKIT_VLLM-$VLLM_PY}
W8=${W8-/tmp/w8b/llama8b-random}
WARM=/tmp/w8b/warm-2l
QK_SITE=$Q/site-qk
QK_ENV=(env PYTHONPATH=$QK_SITE:$MAIN_SITE)
QK=("${QK_ENV[@]}" ${QK_PY-python3} -P -m quantkit)
PORT=8200
URL=http://127.0.0.1:$PORT
PLAN=${PLAN-"bf16:bf16::L512@36+C512 fp8:fp8::L512@42+C512 int8:int8::L512@40 gptq:gptq::L512@22 fp8-long:fp8::L4096@5 bf16-long:bf16::L4096@4 fp8+kv-fp8-long:fp8:--kv-cache-dtype=fp8:L4096@6"}
CONVERT=${CONVERT-fp8 int8 gptq}
CALIB=${CALIB-"--num-samples 16 --seq-len 256"}
# quantkit stretches a window to 3 request durations (measure/stats/window.py): at 512/256 (~8-s requests at
# load) ~24 s instead of 20; at 4,096/512 (14-24 s) 42-72 s, so give long context a cap of 120 (WINDOW=60,120,8)
WINDOW=${WINDOW-20,60,8}
SLO=${SLO-ttft_p95=1,tpot_p95=50ms}
SPANS512=${SPANS512-mlperf-server interactive}
SPANS4096=${SPANS4096-mlperf-server}
MAXLEN=${MAXLEN-8192}
SHORT=${SHORT-512/256}  # IN/OUT tokens of L512 and C512 (a smoke test on the CPU: smaller)
LONG=${LONG-4096/512}   # ... of L4096
HI_FACTOR=${HI_FACTOR-1.3}  # a ladder's top load: its start times this
CHECK_S=${CHECK_S-70}      # seconds of arrivals of a vLLM-client check point, its first 10 dropped
EXTRA=${EXTRA-}  # more serve flags for every server (e.g. --enforce-eager on the CPU)
# T512@S (a spec's only task): `quantkit tune` over these knobs' grid (NAME=V1,V2 each, "default" = vLLM's)
TUNE_KNOBS=${TUNE_KNOBS-kv-cache-dtype,max-cudagraph-capture-size}
TUNE_SPACE=${TUNE_SPACE-"kv-cache-dtype=default,fp8 max-cudagraph-capture-size=default,1024"}
TUNE_BUDGET=${TUNE_BUDGET-4}


healthy() { curl -sf -m 2 "$1/health" > /dev/null 2>&1; }

serve_up() {  # serve_up LOGNAME DIR FLAGS...: `quantkit serve` in the background until /health answers
  local name=$1 dir=$2; shift 2
  "${QK[@]}" serve "$dir" --port $PORT --max-model-len $MAXLEN "$@" $EXTRA > $Q/logs/serve-$name.log 2>&1 &
  SERVE_PID=$!
  local t0=$(date +%s)
  until healthy $URL; do
    sleep 2
    kill -0 $SERVE_PID 2>/dev/null || { log "$name: server exited: $(tail -n 3 $Q/logs/serve-$name.log | tr '\n' ' ' | cut -c1-300)"; return 1; }
    [ "$(left)" -gt 30 ] || { serve_down; return 1; }
  done
  log "$name: server ready in $(( $(date +%s) - t0 )) s"
}

serve_down() {  # SIGTERM to `quantkit serve`, which stops vLLM's process group cleanly (a background job of a
  # script ignores SIGINT); the GPU is free again before the next server, which takes the next port
  [ -n "${SERVE_PID:-}" ] || return 0
  kill -TERM $SERVE_PID 2>/dev/null; wait $SERVE_PID 2>/dev/null
  SERVE_PID=
  for _ in $(seq 30); do healthy $URL || break; sleep 1; done
}

ladder() {  # ladder LABEL DIR IN OUT START FLAGS...: one capacity ladder on the running server
  local label=$1 dir=$2 in=$3 out=$4 start=$5; shift 5
  local spans=() s long=0; [ "$in" = "${LONG%/*}" ] && long=1
  for s in $( [ $long = 0 ] && echo $SPANS512 || echo $SPANS4096 ); do spans+=(--span "$s"); done
  IFS=, read -r wmin wmax wwarm <<< "$WINDOW"
  [ $long = 0 ] || wwarm=$(( wwarm * 3 ))  # a long request takes longer to reach steady state
  local name=cap-$label-$( [ $long = 0 ] && echo short || echo long )
  start=$(python3 -c "print(round($start * $SCALE, 1))")  # LOAD_SCALE (orchestrate)
  [ "$(left)" -gt 150 ] || { log "$name: skipped, $(left) s left"; return; }
  log "$name: start from $start req/s"
  timeout -s INT -k 60 $(( $(left) - 10 )) "${QK[@]}" bench "$dir" --url $URL --max-model-len $MAXLEN "$@" \
    --capacity --capacity-profile poisson --slo "$SLO" "${spans[@]}" --input-len $in --output-len $out \
    --capacity-start "$start" --capacity-max "$(python3 -c "print(round($start * $HI_FACTOR, 2))")" --tolerance 0.1 \
    --window-min "$wmin" --window-max "$wmax" --window-warmup "$wwarm" \
    --results-dir $Q/res/$name --json > $Q/res/$name.json 2> $Q/logs/$name.log
  log "$name: rc=$? $(grep -E '^(capacity|no capacity|bound)' $Q/logs/$name.log | tr '\n' ' ' | cut -c1-300)"
}

tune_task() {  # tune_task LABEL DIR IN OUT START FLAGS...: `quantkit tune` from START req/s, one server per trial
  # (it starts its own: no driver server runs), TUNE_BUDGET servers over TUNE_SPACE's grid, no pruning (so no
  # probe: each trial's full search from START), the ladder's window, SLO and top; trials are stored as they end
  local label=$1 dir=$2 in=$3 out=$4 start=$5; shift 5
  local space=() s
  for s in $TUNE_SPACE; do space+=(--space "$s"); done
  IFS=, read -r wmin wmax wwarm <<< "$WINDOW"
  start=$(python3 -c "print(round($start * $SCALE, 1))")
  [ "$(left)" -gt 300 ] || { log "tune-$label: skipped, $(left) s left"; return; }
  log "tune-$label: $TUNE_BUDGET servers over $TUNE_SPACE, from $start req/s"
  timeout -s INT -k 60 $(( $(left) - 10 )) "${QK[@]}" tune "$dir" --max-model-len $MAXLEN "$@" --slo "$SLO" \
    --knobs "$TUNE_KNOBS" "${space[@]}" --budget $TUNE_BUDGET --sampler grid --no-prune \
    --capacity-profile poisson --capacity-start "$start" --capacity-max "$(python3 -c "print(round($start * $HI_FACTOR, 2))")" \
    --tolerance 0.1 --input-len $in --output-len $out --window-min "$wmin" --window-max "$wmax" --window-warmup "$wwarm" \
    --json > $Q/res/tune-$label.json 2> $Q/logs/tune-$label.log
  log "tune-$label: rc=$? $(grep -E 'trial [0-9]' $Q/logs/tune-$label.log | tr '\n' ' ' | cut -c1-400)"
}

topped() {  # topped FILE: the ladder's top load if its top held (search reason max_reached: no ceiling found)
  python3 - "$1" <<'EOF2'
import json, sys
try:
    search = json.load(open(sys.argv[1])).get("search") or {}
except (OSError, ValueError):
    search = {}
if search.get("reason") == "max_reached" and search.get("capacity"):
    print(f"{search['capacity']:g}")
EOF2
}

ladder_up() {  # ladder_up LABEL DIR IN OUT START FLAGS...: a ladder, then (at most twice) another from its top while
  # its top held; 12-06's H100 ladders held their tops in two points each and left the machine idle
  local label=$1 dir=$2 in=$3 out=$4 start=$5 top cur up; shift 5
  local tag=$( [ "$in" = "${LONG%/*}" ] && echo long || echo short )
  ladder "$label" "$dir" "$in" "$out" "$start" "$@"
  cur=$label
  for up in up1 up2; do
    top=$(topped $Q/res/cap-$cur-$tag.json); [ -n "$top" ] || return 0
    log "$cur: its top ($top req/s) held; the ladder goes on from there"
    ladder "$label-$up" "$dir" "$in" "$out" "$(python3 -c "print(round($top / $SCALE, 2))")" "$@"
    cur=$label-$up
  done
}

bracket() {  # bracket FILE: "PASS,FAIL", the loads around the recipe SLO's capacity in a ladder's JSON
  # (its search's capacity and ceiling: the points list holds the spanned tiers' loads too)
  python3 - "$1" <<'EOF'
import json, sys
search = json.load(open(sys.argv[1])).get("search") or {}
if search.get("capacity") and search.get("ceiling"):
    print(f"{search['capacity']:g},{search['ceiling']:g}")
EOF
}

check() {  # check LABEL DIR: vLLM's client at the two loads that bracket quantkit's capacity
  local label=$1 dir=$2 rates f
  for f in $Q/res/cap-$label-up2-short.json $Q/res/cap-$label-up1-short.json $Q/res/cap-$label-short.json; do
    rates=$(bracket $f 2>/dev/null); [ -z "$rates" ] || break  # the ladder that found the ceiling
  done
  [ -n "$rates" ] || { log "check-$label: no bracket in cap-$label-short.json"; return; }
  [ "$(left)" -gt 200 ] || { log "check-$label: skipped, $(left) s left"; return; }
  log "check-$label: vllm bench serve at $rates req/s"
  timeout -s INT -k 30 $(( $(left) - 10 )) "${QK_ENV[@]}" python3 -P $QK_SITE/steady_agreement.py "$dir" --url $URL \
    --clients vllm --rates "$rates" --slo "$SLO" --input-len ${SHORT%/*} --output-len ${SHORT#*/} --duration $CHECK_S --warmup 10 \
    --label $label --deadline $(( $(cat $Q/deadline) - 10 )) --json $Q/res/check-$label.json \
    --samples $Q/res/check-$label-samples.json --results-dir $Q/res/check-$label > $Q/logs/check-$label.log 2>&1
  log "check-$label: rc=$? $(grep -E 'vllm: achieved' $Q/logs/check-$label.log | tr '\n' ' ' | cut -c1-300)"
}

warm_up() {  # the 2-layer model served once: compilation caches for the first real start
  [ "${WARMUP:-1}" = 1 ] || { log "warm-up: skipped (WARMUP=$WARMUP)"; return; }  # a short budget: the first start compiles
  [ -f $WARM/config.json ] || { log "warm-up: no model"; return; }
  # a fixed KV cache (2 GiB), not a memory share: vLLM then skips its memory profiling, which the conversions
  # beside it fail (12-06, H100: "Error in memory profiling. Initial free memory 67.15 GiB, current free
  # memory 69.19 GiB": a conversion freed memory meanwhile), so the first real server started cold (151 s)
  "${QK[@]}" serve $WARM --port 8100 --max-model-len $MAXLEN --gpu-memory-utilization 0.12 \
    --serve-arg kv-cache-memory=2147483648 > $Q/logs/warm-up.log 2>&1 &
  local pid=$! t0=$(date +%s)
  until healthy http://127.0.0.1:8100 || ! kill -0 $pid 2>/dev/null || [ $(( $(date +%s) - t0 )) -gt 400 ]; do sleep 2; done
  curl -s -m 60 http://127.0.0.1:8100/v1/completions -H 'content-type: application/json' \
    -d "{\"model\": \"$WARM\", \"prompt\": \"hello\", \"max_tokens\": 8}" > /dev/null 2>&1
  log "warm-up: $( healthy http://127.0.0.1:8100 && echo served || echo 'did not come up') after $(( $(date +%s) - t0 )) s"
  kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
}

cmd=${1:-}; shift || true
case $cmd in
stash)
  stash_all "$@"
  ;;
start)
  # quantkit and the scripts copied out of the checkout: a later call's transfer replaces the checkout
  rm -f $Q/all.done && site_copy $QK_SITE \
    && cp benchmarks/steady_agreement.py $QK_SITE/ && cp benchmarks/gpu/h200_table.sh benchmarks/gpu/common.sh \
       benchmarks/gpu/make_random_8b.py benchmarks/gpu/make_8b_configs.py $Q/
  echo $(( $(date +%s) + $1 )) > $Q/deadline
  echo "=== $(date +%T) start $1: PLAN=\"$PLAN\" CONVERT=\"$CONVERT\"" >> $Q/logs/orchestrate.log
  setsid nohup env PLAN="$PLAN" CONVERT="$CONVERT" CALIB="$CALIB" WINDOW="$WINDOW" SLO="$SLO" SPANS512="$SPANS512" \
    SPANS4096="$SPANS4096" HI_FACTOR="$HI_FACTOR" LOAD_SCALE="${LOAD_SCALE-}" WARMUP="${WARMUP-1}" MAXLEN="$MAXLEN" SHORT="$SHORT" LONG="$LONG" CHECK_S="$CHECK_S" EXTRA="$EXTRA" W8="$W8" TUNE_KNOBS="$TUNE_KNOBS" TUNE_SPACE="$TUNE_SPACE" TUNE_BUDGET="$TUNE_BUDGET" bash $Q/h200_table.sh orchestrate \
    >> $Q/logs/orchestrate.log 2>&1 < /dev/null &  # appended: a second plan on the same machine keeps the first's
  echo "started; $(left) s to the deadline"
  ;;
orchestrate)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $Q/res/gpu.txt 2>/dev/null
  dev=cuda; nvidia-smi -L > /dev/null 2>&1 || dev=cpu
  # LOAD_SCALE: the plan's loads times this. Not set by the card: 12-06's H100 held bf16 at 31.2 req/s
  # where that day's H200 machine saturated at 28.6 (its host bound it), so loads follow the machine
  SCALE=${LOAD_SCALE:-1}
  log "GPU: $(cut -d, -f2 $Q/res/gpu.txt 2>/dev/null | head -1); the plan's loads x $SCALE"
  if [ ! -f $W8/config.json ]; then  # the image's torch and safetensors suffice: no need to wait for the bundle
    python3 $Q/make_random_8b.py $Q/tok $W8 --device $dev > $Q/logs/random.log 2>&1
    python3 $Q/make_random_8b.py $Q/tok $WARM --layers 2 --device $dev --seed 1 >> $Q/logs/random.log 2>&1
  fi
  log "random model: $(grep -h parameters $Q/logs/random.log | tr '\n' ' ')"
  until bundle_ready && [ -d $Q/data ]; do sleep 2; [ "$(left)" -gt 0 ] || { log "bundle never arrived"; touch $Q/all.done; exit 1; }; done
  log "bundle and data ready ($(left) s left)"
  pids=()
  for m in $CONVERT; do
    calib=(); case $m in int8|gptq|awq|w4a8-fp8*) calib=($CALIB) ;; esac
    "${QK[@]}" convert $W8 --method $m -o /tmp/qkmodels/llama8b-random-$m "${calib[@]}" --json > $Q/res/convert-$m.json 2> $Q/logs/convert-$m.log &
    pids+=($!)
  done
  warm_up
  for p in "${pids[@]}"; do wait $p; done
  log "conversions done: $(grep -h -E 'wrote ' $Q/logs/convert-*.log | sed 's/.*wrote //' | tr '\n' ' ' | cut -c1-400)"
  for spec in $PLAN; do
    IFS=: read -r label dir flags tasks <<< "$spec"
    [ "$(left)" -gt 240 ] || { log "$label: skipped, $(left) s left"; continue; }
    [ "$dir" = bf16 ] && dir=$W8 || dir=/tmp/qkmodels/llama8b-random-$dir
    [ -f $dir/config.json ] || { log "$label: no checkpoint at $dir"; continue; }
    serve=(); for f in ${flags//,/ }; do serve+=("$f"); done
    if [[ $tasks == T512@* ]]; then  # the tuner starts a server per trial itself
      tune_task $label $dir ${SHORT%/*} ${SHORT#*/} ${tasks#*@} "${serve[@]}" $EXTRA
      continue
    fi
    PORT=$(( PORT + 1 )); URL=http://127.0.0.1:$PORT
    serve_up $label $dir "${serve[@]}" || continue
    for t in ${tasks//+/ }; do
      case $t in
        L512@*) ladder_up $label $dir ${SHORT%/*} ${SHORT#*/} ${t#*@} "${serve[@]}" ;;
        L4096@*) ladder_up $label $dir ${LONG%/*} ${LONG#*/} ${t#*@} "${serve[@]}" ;;
        C512) check $label $dir ;;
      esac
    done
    serve_down
  done
  log "all done"
  touch $Q/all.done
  ;;
wait)
  wait_done "${1:-60}"
  ladders_out
  ;;
*) echo "usage: h200_table.sh stash DIR... | start SECONDS | wait SECONDS" >&2; exit 2 ;;
esac
