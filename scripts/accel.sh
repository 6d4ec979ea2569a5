#!/usr/bin/env bash
# Prints which environments scripts/setup.sh builds here: `cuda` on a machine with an NVIDIA GPU
# (`nvidia-smi -L` lists one, or the driver's /proc/driver/nvidia/gpus has one), else `cpu`.
# QUANTKIT_ACCEL=cuda|cpu decides instead (auto, or unset: detect). A bad value: one line, exit 2.
set -euo pipefail
case ${QUANTKIT_ACCEL:-auto} in
  cuda|cpu) echo "$QUANTKIT_ACCEL" ;;
  auto)
    if { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; } \
       || [ -n "$(ls -A /proc/driver/nvidia/gpus 2>/dev/null)" ]; then
      echo cuda
    else
      echo cpu
    fi ;;
  *) echo "error: QUANTKIT_ACCEL=$QUANTKIT_ACCEL: use cuda, cpu or auto (detect an NVIDIA GPU)" >&2; exit 2 ;;
esac
