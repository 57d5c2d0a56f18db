#!/usr/bin/env bash
# Provides the released engines' own configuration-reading code for test/readers: every release
# of the support table (engines/releases.json) from PyPI, each vLLM-Ascend release's vLLM
# beside it (pip download --no-deps, nothing built, only .py files and a wheel's METADATA
# unpacked, and of those only the files a check reads kept), plus a small venv with just what
# that code imports once torch and the engines' runtime are left out. Cached outside the
# repository, keyed by the releases the table lists and every pin below:
#
#   ${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}/readers-<key>/
#     manifest.json       {"dists": {"vllm==0.29.0": "<its unpacked root>", ...}}
#     venv/bin/python     the interpreter test/readers/harness.py runs under
#
# Usage:
#   hack/readers.sh        ensure the cache; print its directory (the only line on stdout)
#   hack/readers.sh env    ensure the cache; print `export` lines (KVCACHE_READERS_DIR, KVCACHE_READERS_PYTHON)
#   hack/readers.sh fetch DIR ENGINE==VERSION...
#                          unpack those releases into DIR, whole, and list them in DIR/manifest.json
#                          (what hack/engines.sh reads releases the table does not hold with)
#
# Progress (pip, apt) goes to stderr.
set -euo pipefail
# Let `set -e` reach into $(...) too: pick_python may run apt-get inside one.
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TABLE=$REPO/engines/releases.json
# What the extracted reader code imports: vLLM's config classes are pydantic dataclasses; the
# size parsers of vLLM and vLLM-Ascend import regex; SGLang's argument groups (0.5.20 on) are
# msgspec structs; both engines read --config files with yaml.
PYDANTIC_VERSION=2.14.4
REGEX_VERSION=2026.11.19
MSGSPEC_VERSION=0.23.0
PYYAML_VERSION=6.0.4
# Only for fetching: pip reads an sdist's metadata by running its setup.py, which imports
# setuptools and setuptools_scm and stops unless SOC_VERSION names an Ascend chip (npu-smi is
# absent here). Nothing is compiled; the fetch venv is deleted afterwards.
SETUPTOOLS_VERSION=84.2.1
SETUPTOOLS_SCM_VERSION=10.3.4
VLLM_ASCEND_SOC_VERSION=ascend910b1
# Downloads at once: the wheels are hundreds of MB each, and the network is the limit.
PARALLEL_DOWNLOADS=4

TOOLS_DIR=${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}
# Written last into a finished directory: one without it is never published.
MARKER=.kvcache-readers-complete

log() { echo "readers: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=hack/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# releases prints one line per distribution to fetch: KEY PYPI-NAME KIND READER BASE (KIND wheel
# or sdist; READER the table's file of the release's reader, BASE the vLLM a vLLM-Ascend release
# runs in; "-" for none, as for a vLLM fetched only as a base). With KEYs as arguments
# (ENGINE==VERSION), it prints those instead, READER and BASE "-": releases the table may not hold.
releases() {
  "$PY" - "$TABLE" "$@" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
eng = {e["id"]: e for e in t["engines"]}

def line(key, reader="-", base="-"):
    e = eng.get(key.partition("==")[0])
    if e is None or not key.partition("==")[2]:
        sys.exit(f"{key}: want ENGINE==VERSION, ENGINE one of {', '.join(eng)}")
    print(key, e["pypi"], "sdist" if e.get("sdist") else "wheel", reader, base)

if len(sys.argv) > 2:
    for key in sys.argv[2:]:
        line(key)
    sys.exit(0)
seen = set()
for r in t["releases"]:
    key = f'{r["engine"]}=={r["version"]}'
    line(key, r["reader"], r.get("base") or "-")
    seen.add(key)
for r in t["releases"]:
    if r.get("base") and f'vllm=={r["base"]}' not in seen:
        seen.add(f'vllm=={r["base"]}')
        line(f'vllm=={r["base"]}')
EOF
}

base_dir() {
  local key
  key=$( { releases; echo "pydantic$PYDANTIC_VERSION regex$REGEX_VERSION msgspec$MSGSPEC_VERSION pyyaml$PYYAML_VERSION"; } | sha256sum | cut -c1-16)
  echo "$TOOLS_DIR/readers-$key"
}

ready() { [ -f "$BASE_DIR/$MARKER" ] && [ -x "$BASE_DIR/venv/bin/python" ]; }

pip_quiet() { "$@" --disable-pip-version-check --no-input --quiet --no-cache-dir >&2; }

# unpack ARCHIVE DEST: the .py files of a wheel (a zip) and its METADATA (which would declare a
# Mooncake requirement), or of an sdist the .py files of its package and its Dockerfile (which
# names the vLLM and Mooncake its image is built from). The engines' native libraries are
# hundreds of MB and never loaded, so they are not unpacked.
unpack() {
  "$PY" - "$1" "$2" <<'EOF'
import sys, tarfile, zipfile
src, dest = sys.argv[1], sys.argv[2]
if src.endswith(".whl"):
    with zipfile.ZipFile(src) as z:
        z.extractall(dest, [n for n in z.namelist() if n.endswith(".py") or n.endswith(".dist-info/METADATA")])
else:
    with tarfile.open(src) as tf:
        for m in tf.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else ""
            if m.isfile() and (rel == "Dockerfile" or (rel.endswith(".py") and rel.startswith("vllm_ascend/"))):
                m.name = rel
                tf.extract(m, dest, filter="data")
EOF
}

# fetch KEY NAME KIND DEST: pip download one distribution into DEST.
fetch() {
  local key=$1 name=$2 kind=$3 dest=$4 version=${1#*==}
  mkdir -p "$dest"
  if [ "$kind" = sdist ]; then
    SOC_VERSION=$VLLM_ASCEND_SOC_VERSION pip_quiet "$FETCH_PY" -m pip download --no-deps \
      --no-binary=:all: --no-build-isolation --dest "$dest" "$name==$version"
  else
    pip_quiet "$FETCH_PY" -m pip download --no-deps --only-binary=:all: --dest "$dest" "$name==$version"
  fi
  log "fetched $key"
}

# fetch_into DIR LINE...: download the distributions of releases' LINEs into DIR (a new
# directory on the cache's file system), unpack each into DIR/<engine>-<version>, list them in
# DIR/manifest.json (beside any listed already), and delete the archives.
fetch_into() {
  local dir=$1 dl=$1/download line key name kind reader base t0=$SECONDS
  shift
  log "creating the fetch venv with $("$PY" -V 2>&1)"
  "$PY" -m venv "$dir/fetch-venv" >&2
  FETCH_PY=$dir/fetch-venv/bin/python
  pip_quiet "$FETCH_PY" -m pip install "setuptools==$SETUPTOOLS_VERSION" "setuptools-scm==$SETUPTOOLS_SCM_VERSION"

  log "downloading $# distributions ($PARALLEL_DOWNLOADS at a time, no dependencies)"
  export -f fetch pip_quiet log
  export FETCH_PY VLLM_ASCEND_SOC_VERSION
  printf '%s\n' "$@" | awk -v dl="$dl" '{print $1, $2, $3, dl "/" $1}' |
    xargs -P "$PARALLEL_DOWNLOADS" -L 1 bash -euo pipefail -c 'fetch "$@"' _
  log "downloaded $(du -sm "$dl" | cut -f1) MB in $((SECONDS - t0)) s"

  log "unpacking the .py files"
  for line in "$@"; do
    read -r key name kind reader base <<<"$line"
    unpack "$(ls "$dl/$key"/*)" "$dir/${key/==/-}"
  done
  rm -rf "$dl" "$dir/fetch-venv"
  printf '%s\n' "$@" | "$PY" -c '
import json, os, sys
m = json.load(open(sys.argv[1])) if os.path.exists(sys.argv[1]) else {"dists": {}}
m["dists"].update({l.split()[0]: l.split()[0].replace("==", "-") for l in sys.stdin if l.strip()})
json.dump(m, open(sys.argv[1], "w"), indent=2)
' "$dir/manifest.json"
}

build() {
  local build key name kind reader base line lines rels=() args t0=$SECONDS
  mkdir -p "$TOOLS_DIR"
  build=$(mktemp -d "$TOOLS_DIR/.readers-build.XXXXXXXX")
  chmod 755 "$build"  # mktemp makes it 0700; the cache is shared like any cached tool
  # shellcheck disable=SC2064 # expand $build now: it is local
  trap "rm -rf '$build'" EXIT

  lines=$(releases)
  mapfile -t rels <<<"$lines"
  log "fetching the releases of engines/releases.json"
  fetch_into "$build" "${rels[@]}"

  log "creating the readers venv"
  "$PY" -m venv "$build/venv" >&2
  pip_quiet "$build/venv/bin/python" -m pip install "pydantic==$PYDANTIC_VERSION" "regex==$REGEX_VERSION" \
    "msgspec==$MSGSPEC_VERSION" "pyyaml==$PYYAML_VERSION"
  "$build/venv/bin/python" -c 'import pydantic, regex, msgspec, yaml' ||
    die "the readers venv cannot import pydantic, regex, msgspec and yaml"

  # Keep only the files a check reads: harness.py --facts runs every loader the checks use and
  # deletes what none read. A release whose facts do not run is kept whole (test/readers then
  # fails on it, naming it).
  for line in "${rels[@]}"; do
    read -r key name kind reader base <<<"$line"
    [ "$reader" = - ] && continue
    args=(--readers "$build" --release "$key" --reader "$reader" --facts --prune)
    [ "$base" != - ] && args+=(--base "$base")
    if ! "$build/venv/bin/python" "$REPO/test/readers/harness.py" "${args[@]}" >/dev/null 2>"$build/.prune.log"; then
      log "kept $key whole: its checks do not run ($(tail -n 1 "$build/.prune.log"))"
    fi
  done
  rm -f "$build/.prune.log"
  find "$build" -mindepth 1 -depth -type d -empty -not -path "$build/venv*" -delete
  log "kept $(du -sm --exclude=venv "$build" | cut -f1) MB of engine sources; $((SECONDS - t0)) s in all"
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

PY=$(pick_python READERS_PYTHON "the readers")
BASE_DIR=$(base_dir)

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
  fetch)
    [ $# -ge 3 ] || { log "usage: $0 fetch DIR ENGINE==VERSION..."; exit 2; }
    dir=$2
    shift 2
    lines=$(releases "$@")
    mapfile -t rels <<<"$lines"
    mkdir -p "$dir"
    fetch_into "$dir" "${rels[@]}"
    ;;
  -h|--help|help)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    log "usage: $0 [env | fetch DIR ENGINE==VERSION...]"; exit 2
    ;;
esac
