#!/usr/bin/env bash
# Builds the offline bundle the h200_*.sh drivers install (docs/GPU.md): both CUDA environments for
# the H200 image's Python 3.12, without what that image has (benchmarks/gpu/h200-host.txt) and
# without the vLLM dependencies that no H200 run has needed (left out of every bundle of 11-28 ..
# 12-03, which served bf16, fp8, int8, GPTQ, AWQ and W4A8-FP8 without them: Blackwell/Cute-DSL
# kernels and their compilers, video decoding, TileLang, Ray for `--executor ray`), about 440 MB
# less. Chunks of 48 MB: each H200 command carries one, with the checkout, under its 64 MiB limit.
#
# usage, from the checkout's root:  benchmarks/gpu/make_bundle.sh [OUT]     (default .gpu/bundle, ignored by git)
set -euo pipefail
out=${1:-.gpu/bundle}
LEAVE_OUT=tokenspeed-triton,nvidia-cutlass-dsl*,nvidia-nvvm,nvidia-cuda-nvcc,nvidia-cuda-crt,nvidia-cuda-cccl
LEAVE_OUT+=,nvidia-cuda-nvdisasm,tilelang,pynvvideocodec,z3-solver,torchcodec,quack-kernels,cuda-tile,ray
exec ${QUANTKIT:-.venv/bin/quantkit} bundle "$out" --accel cuda --python 3.12 --chunk-mb 48 \
  --host-has benchmarks/gpu/h200-host.txt --exclude "$LEAVE_OUT" "${@:2}"
