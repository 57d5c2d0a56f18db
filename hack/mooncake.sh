#!/usr/bin/env bash
# Provides the real Mooncake store (mooncake_master, mc_store_rest_server and the Python client
# `mooncake.store`) from PyPI's mooncake-transfer-engine-non-cuda wheel, in a Python venv cached
# outside the repository and keyed by version, so clean clones and CI reuse it:
#
#   ${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}/mooncake-<version>/venv
#
# Usage:
#   hack/mooncake.sh        ensure the venv; print its bin dir (the only line on stdout)
#   hack/mooncake.sh env    ensure the venv; print `export` lines for `eval "$(hack/mooncake.sh env)"`
#
# Everything else (progress, pip, apt) goes to stderr. See hack/MOONCAKE_NOTES.md for what the
# binaries do; the facts this script relies on are repeated next to the code that relies on them.
set -euo pipefail
# Let `set -e` reach into $(...) too: pick_python runs apt-get inside one.
shopt -s inherit_errexit

MOONCAKE_VERSION=0.3.13.post1
MOONCAKE_PACKAGE=mooncake-transfer-engine-non-cuda

TOOLS_DIR=${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}
BASE_DIR=$TOOLS_DIR/mooncake-$MOONCAKE_VERSION
VENV=$BASE_DIR/venv
# Written last into a finished venv: a venv without it is never published.
MARKER=.kvcache-mooncake-complete

log() { echo "mooncake: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=hack/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The wheel bundles glog, gflags, yaml-cpp, jsoncpp, zstd, xxhash, liburing, asio and the etcd
# client; readelf -d on every binary and .so in it leaves exactly three libraries that must come
# from the system (besides libc/libstdc++/libgcc_s). Without libibverbs1 even the TCP-only master
# fails to start ("libibverbs.so.1: cannot open shared object file"). librdmacm1 and liburing2
# are NOT needed (no binary links or dlopens librdmacm; liburing ships inside the wheel), and
# neither is any CUDA runtime: nothing in the non-CUDA wheel references libcudart, so no
# LD_LIBRARY_PATH is ever needed. Format: soname:debian-package.
SYSTEM_LIBS=(libibverbs.so.1:libibverbs1 libnuma.so.1:libnuma1 libcurl.so.4:libcurl4)

ensure_system_libs() {
  local pkgs=() entry
  for entry in "${SYSTEM_LIBS[@]}"; do pkgs+=("${entry#*:}"); done
  ensure_debs "${pkgs[@]}"
}

venv_ready() { [ -L "$VENV" ] && [ -f "$VENV/$MARKER" ] && [ -x "$VENV/bin/mooncake_master" ]; }

# check_loads DIR: fail unless the binaries and the Python extension in venv DIR load. The
# console script mooncake_master execs the real binary, so --version exercises its libraries.
check_loads() {
  local out
  if ! out=$("$1/bin/mooncake_master" --version 2>&1); then
    log "mooncake_master does not start:"; echo "$out" >&2; return 1
  fi
  if ! out=$("$1/bin/python" -c 'import mooncake.store' 2>&1); then
    log "python cannot import mooncake.store:"; echo "$out" >&2; return 1
  fi
}

# build_venv: create a complete venv and publish it at $VENV in one atomic step.
# A venv cannot be moved once built (its scripts' shebangs and bin/activate hold its absolute
# path), so it is built in place at venv.<id> beside $VENV and published by renaming a symlink
# over $VENV (rename(2) is atomic). An interrupted run leaves only an unpublished venv.<id>,
# which the next run deletes; $VENV itself is either absent or complete.
build_venv() {
  local py build
  py=$(pick_python MOONCAKE_PYTHON "$MOONCAKE_PACKAGE")
  mkdir -p "$BASE_DIR"
  # Leftovers of interrupted runs: every venv.* that $VENV does not point to. Safe because the
  # caller holds the lock, so no other run is building one right now.
  local current="" d
  if [ -L "$VENV" ]; then current=$(readlink "$VENV")
  elif [ -e "$VENV" ]; then rm -rf "$VENV"  # not this script's layout: cannot be trusted
  fi
  for d in "$BASE_DIR"/venv.*; do
    [ -e "$d" ] || continue
    [ "$(basename "$d")" = "$current" ] || rm -rf "$d"
  done

  build=$(mktemp -d "$BASE_DIR/venv.XXXXXXXX")
  chmod 755 "$build"  # mktemp makes it 0700; the venv is shared like any cached tool
  log "creating $build with $("$py" -V 2>&1) (cached afterwards)"
  "$py" -m venv "$build" >&2
  "$build/bin/python" -m pip install --disable-pip-version-check --no-input --quiet \
    "$MOONCAKE_PACKAGE==$MOONCAKE_VERSION" >&2
  if ! check_loads "$build"; then rm -rf "$build"; return 1; fi
  touch "$build/$MARKER"

  ln -sfn "$(basename "$build")" "$VENV.new.$$"
  mv -fT "$VENV.new.$$" "$VENV"
  if [ -n "$current" ]; then rm -rf "${BASE_DIR:?}/$current"; fi
  log "ready: $VENV"
}

# Functions are called from `if` bodies, never from `||` lists: bash ignores `set -e` inside a
# function called as the left-hand side of `||`/`&&`, which would let a failed pip install through.
ensure() {
  # The system packages are checked on every run: the cache directory can outlive the machine
  # it was built on (a restored CI cache, a copied home directory).
  ensure_system_libs
  if venv_ready; then return 0; fi
  mkdir -p "$TOOLS_DIR"
  # One build at a time; whoever waited finds the venv ready and returns.
  exec 9>"$TOOLS_DIR/.mooncake.lock"
  flock 9
  if ! venv_ready; then build_venv; fi
  flock -u 9
}

case "${1:-}" in
  "")
    ensure
    echo "$VENV/bin"
    ;;
  env)
    ensure
    # PATH only: nothing in the non-CUDA wheel needs LD_LIBRARY_PATH (its binaries find their
    # bundled libraries through RPATH $ORIGIN). "$PATH" stays literal, expanded by the caller.
    # shellcheck disable=SC2016 # "$PATH" is meant to stay literal
    printf 'export PATH=%q:"$PATH"\n' "$VENV/bin"
    ;;
  -h|--help|help)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    log "usage: $0 [env]"; exit 2
    ;;
esac
