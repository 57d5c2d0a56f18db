#!/usr/bin/env bash
# Provides the released engines' own configuration-reading code for test/readers: the vLLM and
# SGLang wheels and the vLLM-Ascend source release from PyPI (pip download --no-deps, nothing
# built, only their .py files unpacked), plus a small venv with just what that code imports once
# torch and the engines' runtime are left out (pydantic, regex). Cached outside the repository,
# keyed by every version below:
#
#   ${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}/readers-<versions>/
#     manifest.json       versions, and the unpacked root of each distribution
#     venv/bin/python     the interpreter test/readers/harness.py runs under
#
# Usage:
#   hack/readers.sh        ensure the cache; print its directory (the only line on stdout)
#   hack/readers.sh env    ensure the cache; print `export` lines (KVCACHE_READERS_DIR, KVCACHE_READERS_PYTHON)
#
# Progress (pip, apt) goes to stderr.
set -euo pipefail
# Let `set -e` reach into $(...) too: pick_python may run apt-get inside one.
shopt -s inherit_errexit

# Every pinned version, and only here.
VLLM_VERSION=0.29.0
SGLANG_VERSION=0.5.18
# PyPI's current vLLM-Ascend release (later versions are release candidates). PyPI has only its
# source distribution, no wheel for any platform.
VLLM_ASCEND_VERSION=0.23.0.post1
# The vLLM that release is built on (its Dockerfile's VLLM_TAG): vLLM-Ascend runs inside vLLM's
# CLI, so --kv-cache-dtype and --kv-transfer-config on that engine are parsed by this vLLM.
VLLM_ASCEND_VLLM_VERSION=0.23.0
# What the extracted reader code imports: vLLM's config classes are pydantic dataclasses; the
# size parsers of vLLM and vLLM-Ascend import regex.
PYDANTIC_VERSION=2.14.4
REGEX_VERSION=2026.11.19
# Only for fetching: pip reads an sdist's metadata by running its setup.py, which imports
# setuptools and setuptools_scm and stops unless SOC_VERSION names an Ascend chip (npu-smi is
# absent here). Nothing is compiled; the fetch venv is deleted afterwards.
SETUPTOOLS_VERSION=84.2.1
SETUPTOOLS_SCM_VERSION=10.3.4
VLLM_ASCEND_SOC_VERSION=ascend910b1

TOOLS_DIR=${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}
BASE_DIR=$TOOLS_DIR/readers-vllm$VLLM_VERSION-sglang$SGLANG_VERSION-vllm-ascend$VLLM_ASCEND_VERSION-vllm$VLLM_ASCEND_VLLM_VERSION-pydantic$PYDANTIC_VERSION-regex$REGEX_VERSION
# Written last into a finished directory: one without it is never published.
MARKER=.kvcache-readers-complete

log() { echo "readers: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=hack/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ready() { [ -f "$BASE_DIR/$MARKER" ] && [ -x "$BASE_DIR/venv/bin/python" ]; }

pip_quiet() { "$@" --disable-pip-version-check --no-input --quiet >&2; }

# unpack_py ARCHIVE DEST: extract the .py files of a wheel (a zip) into DEST. The engines' native
# libraries are hundreds of MB and never loaded, so they are not unpacked.
unpack_py() {
  "$PY" - "$1" "$2" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.endswith(".py")])
EOF
}

build() {
  local build fetch dl sdist
  PY=$(pick_python READERS_PYTHON "the readers")
  mkdir -p "$TOOLS_DIR"
  build=$(mktemp -d "$TOOLS_DIR/.readers-build.XXXXXXXX")
  chmod 755 "$build"  # mktemp makes it 0700; the cache is shared like any cached tool
  # shellcheck disable=SC2064 # expand $build now: it is local
  trap "rm -rf '$build'" EXIT
  fetch=$build/fetch-venv
  dl=$build/download

  log "creating the fetch venv with $("$PY" -V 2>&1)"
  "$PY" -m venv "$fetch" >&2
  pip_quiet "$fetch/bin/python" -m pip install "setuptools==$SETUPTOOLS_VERSION" "setuptools-scm==$SETUPTOOLS_SCM_VERSION"

  log "downloading vllm==$VLLM_VERSION, vllm==$VLLM_ASCEND_VLLM_VERSION, sglang==$SGLANG_VERSION (wheels, no dependencies)"
  mkdir -p "$dl/vllm" "$dl/vllm-ascend-vllm" "$dl/sglang" "$dl/vllm-ascend"
  pip_quiet "$fetch/bin/python" -m pip download --no-deps --only-binary=:all: --dest "$dl/vllm" "vllm==$VLLM_VERSION"
  pip_quiet "$fetch/bin/python" -m pip download --no-deps --only-binary=:all: --dest "$dl/vllm-ascend-vllm" "vllm==$VLLM_ASCEND_VLLM_VERSION"
  pip_quiet "$fetch/bin/python" -m pip download --no-deps --only-binary=:all: --dest "$dl/sglang" "sglang==$SGLANG_VERSION"
  log "downloading vllm-ascend==$VLLM_ASCEND_VERSION (source distribution, metadata read without building)"
  SOC_VERSION=$VLLM_ASCEND_SOC_VERSION pip_quiet "$fetch/bin/python" -m pip download --no-deps \
    --no-binary=:all: --no-build-isolation --dest "$dl/vllm-ascend" "vllm-ascend==$VLLM_ASCEND_VERSION"

  log "unpacking the .py files"
  unpack_py "$(ls "$dl"/vllm/vllm-*.whl)" "$build/vllm-$VLLM_VERSION"
  unpack_py "$(ls "$dl"/vllm-ascend-vllm/vllm-*.whl)" "$build/vllm-$VLLM_ASCEND_VLLM_VERSION"
  unpack_py "$(ls "$dl"/sglang/sglang-*.whl)" "$build/sglang-$SGLANG_VERSION"
  sdist=$(ls "$dl"/vllm-ascend/vllm_ascend-*.tar.gz)
  mkdir -p "$build/vllm-ascend-$VLLM_ASCEND_VERSION"
  tar -xzf "$sdist" -C "$build/vllm-ascend-$VLLM_ASCEND_VERSION" --strip-components=1
  rm -rf "$dl" "$fetch"

  log "creating the readers venv (pydantic==$PYDANTIC_VERSION, regex==$REGEX_VERSION)"
  "$PY" -m venv "$build/venv" >&2
  pip_quiet "$build/venv/bin/python" -m pip install "pydantic==$PYDANTIC_VERSION" "regex==$REGEX_VERSION"
  "$build/venv/bin/python" -c 'import pydantic, regex' ||
    die "the readers venv cannot import pydantic and regex"

  "$build/venv/bin/python" - "$build/manifest.json" <<EOF
import json, sys
json.dump({
    "vllm": {"version": "$VLLM_VERSION", "root": "vllm-$VLLM_VERSION"},
    "sglang": {"version": "$SGLANG_VERSION", "root": "sglang-$SGLANG_VERSION"},
    "vllm-ascend": {"version": "$VLLM_ASCEND_VERSION", "root": "vllm-ascend-$VLLM_ASCEND_VERSION",
                    "vllm": {"version": "$VLLM_ASCEND_VLLM_VERSION", "root": "vllm-$VLLM_ASCEND_VLLM_VERSION"}},
    "pydantic": "$PYDANTIC_VERSION",
    "regex": "$REGEX_VERSION",
}, open(sys.argv[1], "w"), indent=2)
EOF
  touch "$build/$MARKER"

  # Publish in one rename. The venv survives the move: only its interpreter is used, and
  # bin/python finds its site-packages through the pyvenv.cfg beside it, wherever that is.
  rm -rf "$BASE_DIR"
  mv -T "$build" "$BASE_DIR"
  trap - EXIT
  log "ready: $BASE_DIR"
}

# Called from `if` bodies, never from `||` lists: bash ignores `set -e` inside a function called
# as the left-hand side of `||`/`&&`, which would let a failed pip download through.
ensure() {
  if ready; then return 0; fi
  mkdir -p "$TOOLS_DIR"
  # One build at a time; whoever waited finds the directory ready and returns.
  exec 9>"$TOOLS_DIR/.readers.lock"
  flock 9
  if ! ready; then
    # Leftovers of interrupted runs. Safe: the lock is held, so no other run is building.
    rm -rf "$TOOLS_DIR"/.readers-build.*
    build
  fi
  flock -u 9
}

case "${1:-}" in
  "")
    ensure
    echo "$BASE_DIR"
    ;;
  env)
    ensure
    printf 'export KVCACHE_READERS_DIR=%q\n' "$BASE_DIR"
    printf 'export KVCACHE_READERS_PYTHON=%q\n' "$BASE_DIR/venv/bin/python"
    ;;
  -h|--help|help)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    log "usage: $0 [env]"; exit 2
    ;;
esac
