#!/usr/bin/env bash
# Installs a quantkit bundle (`quantkit bundle`) on a machine with no network, then runs
# `quantkit doctor`. Needs bash, tar, sha256sum and the target's Python of the manifest's release
# (PYTHON, default python3) with pip.
#
#   bash BUNDLE/install.sh                a whole bundle (its wheels/ folder): verify, install
#   bash BUNDLE/chunk-NN/install.sh       one chunk: verify it and keep it in $QUANTKIT_BUNDLE_DIR;
#                                         the command that brings the last one installs
#   bash BUNDLE/install.sh                (a chunked bundle all here) every chunk, then install
#
# QUANTKIT_BUNDLE_DIR (default /tmp/quantkit-bundle) must lie outside a checkout that is replaced
# between commands. Each environment is installed with `pip install --target` into a folder of its
# own there (main/, vllm/), not into a venv: the target's python stays the interpreter, so what it
# already has and the bundle left out (torch and its CUDA libraries on a GPU image) is found behind
# the bundle's packages, whether or not that python is itself a venv (a venv made from a venv with
# --system-site-packages sees the base interpreter's packages, not the venv's). Then:
#   . $QUANTKIT_BUNDLE_DIR/env.sh         quantkit on PATH, QUANTKIT_VLLM set to the vLLM environment
# A bad or corrupt chunk or wheel: one line, exit 2 (send that chunk again).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${QUANTKIT_BUNDLE_DIR:-/tmp/quantkit-bundle}
py=${PYTHON:-python3}
die() { echo "error: $*" >&2; exit 2; }
field() { "$py" -c "import json,sys; m=json.load(open(sys.argv[1])); print($1)" "$here/manifest.json"; }

[ -f "$here/manifest.json" ] || die "$here has no manifest.json: run the install.sh of a bundle or of one of its chunks"
command -v "$py" >/dev/null || die "no $py here: set PYTHON to the Python the bundle is for"
want=$(field 'm["python"]')
have=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$want" = "$have" ] || die "the bundle is for Python $want but $py is $have: set PYTHON to a python$want"
mkdir -p "$dir/chunks"
id=$(sha256sum "$here/manifest.json" | cut -c1-16)

check() {  # check FILE SHA256 WHAT: the file's digest is the manifest's, or one line and exit 2
  [ "$(sha256sum "$1" | cut -c1-64)" = "$2" ] || die "$3 $(basename "$1") is corrupt (its sha256 is not the manifest's): send it again"
}

if [ -d "$here/wheels" ]; then
  payload=$here
else
  total=$(field 'len(m["chunks"])')
  [ "$total" -gt 0 ] || die "$here holds neither wheels/ nor a chunk: the bundle is incomplete"
  # chunks of another bundle left in the folder would assemble into garbage
  [ "$(cat "$dir/bundle-id" 2>/dev/null)" = "$id" ] || { rm -rf "$dir/chunks" "$dir/payload"; mkdir -p "$dir/chunks"; echo "$id" > "$dir/bundle-id"; }
  field '"\n".join(c["file"] + " " + c["sha256"] for c in m["chunks"])' > "$dir/chunks.sha256"
  for part in "$here"/bundle.tar.* "$here"/chunk-*/bundle.tar.*; do  # one chunk, or all of them beside
    [ -e "$part" ] || continue
    check "$part" "$(grep "^$(basename "$part") " "$dir/chunks.sha256" | cut -d' ' -f2)" chunk
    cp "$part" "$dir/chunks/"
  done
  n=$(ls "$dir/chunks" | wc -l)
  echo "bundle chunks in $dir/chunks: $n of $total"
  [ "$n" = "$total" ] || exit 0
  if [ ! -f "$dir/payload/assembled" ]; then
    rm -rf "$dir/payload"; mkdir -p "$dir/payload"
    while read -r file sha; do check "$dir/chunks/$file" "$sha" chunk; done < "$dir/chunks.sha256"
    cat $(ls "$dir"/chunks/bundle.tar.* | sort) | tar -x -C "$dir/payload"
    touch "$dir/payload/assembled"
  fi
  payload=$dir/payload
fi

field '"\n".join(w["file"] + " " + w["sha256"] for w in m["wheels"])' | while read -r file sha; do
  [ -f "$payload/wheels/$file" ] || die "wheel $file is missing from the bundle: build it again"
  check "$payload/wheels/$file" "$sha" wheel
done
accel=$(field 'm["accel"]')
for env in $(field '" ".join(m["envs"])'); do
  site=$dir/$env
  if [ "$(cat "$site/.quantkit-stamp" 2>/dev/null)" != "$id bundle $accel" ]; then
    echo "installing the $env environment into $site ..."
    rm -rf "$site"
    mkdir -p "$site"  # bin/ only after pip: pip --target skips a folder that is already there
    if grep -q . "$payload/requirements-$env.txt"; then  # empty where the target has every pin
      if ! "$py" -m pip install -q --no-index --no-deps --disable-pip-version-check --find-links "$payload/wheels" \
          --target "$site" -r "$payload/requirements-$env.txt" > "$dir/pip-$env.log" 2>&1; then
        tail -n 20 "$dir/pip-$env.log" >&2
        echo "error: pip could not install the $env environment (above; the whole log: $dir/pip-$env.log)" >&2
        exit 1
      fi
    fi
    # the environment's python: the target's interpreter with this folder first on its path
    mkdir -p "$site/bin"
    printf '#!/bin/sh\nexport PYTHONPATH=%s PATH=%s/bin:$PATH\nexec %s "$@"\n' "$site" "$site" "$(command -v "$py")" > "$site/bin/python"
    chmod +x "$site/bin/python"
    echo "$id bundle $accel" > "$site/.quantkit-stamp"
  fi
done
cat > "$dir/env.sh" <<EOF
export PYTHONPATH=$dir/main PATH=$dir/main/bin:\$PATH
[ -x $dir/vllm/bin/python ] && export QUANTKIT_VLLM=$dir/vllm/bin/python
EOF
echo "installed: . $dir/env.sh  (quantkit on PATH; QUANTKIT_VLLM=$dir/vllm/bin/python)"
if [ -x "$dir/main/bin/quantkit" ]; then
  . "$dir/env.sh"
  quantkit doctor
else
  echo "quantkit is not in this bundle: run \`quantkit doctor\` from your checkout with . $dir/env.sh"
fi
