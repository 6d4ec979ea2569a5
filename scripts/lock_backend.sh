#!/usr/bin/env bash
# Regenerates the lock file that `quantkit setup --backend NAME` installs: a fresh venv, the
# backend's top-level pins (BackendEnv.requirements in quantkit/quantize/external.py) resolved by
# pip, then `pip freeze` into quantkit/quantize/workers/requirements-NAME.txt. Run the backend
# tests (make test-backends TEST_BACKENDS=NAME) before committing a new lock.
#
# usage: scripts/lock_backend.sh NAME        (PIP_CACHE_DIR=$(mktemp -d) to time a cold build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
name=${1:?usage: scripts/lock_backend.sh NAME}
reqs=$(.venv/bin/python -c "from quantkit.registry import BACKENDS; print(' '.join(BACKENDS.load('$name').setup.requirements))")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${PYTHON:-python3}" -m venv "$tmp/venv"
started=$(date +%s)
"$tmp/venv/bin/python" -m pip install -q $reqs
lock=quantkit/quantize/workers/requirements-$name.txt
{
  echo "# quantkit setup --backend $name installs exactly this (pip install --no-deps -r): the pip freeze of"
  echo "# a fresh venv (Python $("$tmp/venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')) after: pip install $reqs"
  echo "# (torch 2.13.0+cpu comes from pip's find-links). Regenerate with scripts/lock_backend.sh $name."
  "$tmp/venv/bin/python" -m pip freeze
} > "$lock"
echo "wrote $lock ($(grep -vc '^#' "$lock") packages; resolved and installed in $(( $(date +%s) - started )) s)" >&2
