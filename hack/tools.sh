#!/usr/bin/env bash
# Builds and caches the tools the tests need, from the Go module proxy only (this project's
# machines reach no other download site): a real kube-apiserver, etcd and kubectl for envtest,
# helm for the chart, controller-gen for `make generate` and golangci-lint for `make lint`.
# `cluster` adds what hack/cluster.sh runs: the node and control-plane binaries, CoreDNS, the
# NetworkPolicy enforcer, crictl and the sandbox (pause) program.
#
# Binaries live outside the repository, keyed by version, so clean clones and CI reuse them:
#   ${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}/<tool>-<version>/<tool>
#
# Usage:
#   hack/tools.sh [all]      build whatever is missing (in parallel), the cluster set included; print nothing else
#   hack/tools.sh assets     build the envtest set if missing; print the KUBEBUILDER_ASSETS dir
#   hack/tools.sh path TOOL  build TOOL if missing; print its absolute path
#   hack/tools.sh cluster    build the cluster set if missing (hack/cluster.sh calls it)
set -euo pipefail

K8S_VERSION=v1.37.2          # kube-apiserver and kubectl
K8S_STAGING_VERSION=v0.37.2  # the k8s.io/<staging> modules that go with it
ETCD_VERSION=v3.7.3
HELM_VERSION=v3.22.0
CONTROLLER_GEN_VERSION=v0.23.0
GOLANGCI_LINT_VERSION=v2.15.0
CRI_TOOLS_VERSION=v1.37.0    # crictl
# CoreDNS is built from the pinned module in hack/cluster/coredns (only the plugins the cluster
# uses); its version is the one that module requires.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
COREDNS_MODULE=$HERE/cluster/coredns
COREDNS_VERSION=$(awk '$1 == "require" {$1 = ""; $0 = $0} $1 == "github.com/coredns/coredns" {print $2}' "$COREDNS_MODULE/go.mod")
[ -n "$COREDNS_VERSION" ] || { echo "tools: no github.com/coredns/coredns requirement in $COREDNS_MODULE/go.mod" >&2; exit 1; }
# The NetworkPolicy enforcer of hack/cluster.sh (kube-network-policies' controller, one per
# node in one process), built from its own pinned module; versioned by that module's requirement.
NETPOL_MODULE=$HERE/cluster/netpol
NETPOL_VERSION=$(awk '$1 == "require" {$1 = ""; $0 = $0} $1 == "sigs.k8s.io/kube-network-policies" {print $2}' "$NETPOL_MODULE/go.mod")
[ -n "$NETPOL_VERSION" ] || { echo "tools: no sigs.k8s.io/kube-network-policies requirement in $NETPOL_MODULE/go.mod" >&2; exit 1; }
# The sandbox image's program: build/pause/linux/pause.c from the k8s.io/kubernetes module zip,
# tagged as kubeadm's constants name it for this release.
PAUSE_VERSION=3.10.2

TOOLS_DIR=${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}
mkdir -p "$TOOLS_DIR"
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
log() { echo "tools: $*" >&2; }

tool_path() {
  case "$1" in
    kube-apiserver|kubectl|kube-controller-manager|kube-scheduler|kubelet|kube-proxy)
      echo "$TOOLS_DIR/$1-$K8S_VERSION/$1" ;;
    etcd) echo "$TOOLS_DIR/etcd-$ETCD_VERSION/etcd" ;;
    helm) echo "$TOOLS_DIR/helm-$HELM_VERSION/helm" ;;
    controller-gen) echo "$TOOLS_DIR/controller-gen-$CONTROLLER_GEN_VERSION/controller-gen" ;;
    golangci-lint) echo "$TOOLS_DIR/golangci-lint-$GOLANGCI_LINT_VERSION/golangci-lint" ;;
    coredns) echo "$TOOLS_DIR/coredns-$COREDNS_VERSION/coredns" ;;
    netpol) echo "$TOOLS_DIR/netpol-$NETPOL_VERSION-$(sha256sum "$NETPOL_MODULE/main.go" | cut -c1-12)/netpol" ;;
    crictl) echo "$TOOLS_DIR/crictl-$CRI_TOOLS_VERSION/crictl" ;;
    pause) echo "$TOOLS_DIR/pause-$PAUSE_VERSION/pause" ;;
    *) log "unknown tool $1"; exit 2 ;;
  esac
}

# install_built SRC DEST: move a finished binary into place atomically, so an interrupted build
# never leaves a half-written tool that later runs would trust.
install_built() {
  mkdir -p "$(dirname "$2")"
  mv -f "$1" "$2.tmp.$$" && mv -f "$2.tmp.$$" "$2"
}

# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module with a
# local path. A throwaway module requires it and replaces each staging module with the published
# version instead; the staging list is read from kubernetes' own go.mod.
# Each builder runs in its own subshell (the "( ... )" bodies), so its scratch directory and EXIT
# trap end with it.
# build_k8s CMD...: the k8s.io/kubernetes/cmd/<CMD> binaries, compiled by one `go build` so the
# packages they share are compiled once.
build_k8s() (
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (
    cd "$work"
    go mod init kvcache-tools/k8s >/dev/null 2>&1
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    [ -f "$gomod" ] || { log "could not download k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
    {
      echo "require k8s.io/kubernetes $K8S_VERSION"
      grep -Eo '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" |
        awk -v v="$K8S_STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
    } >>go.mod
    local t pkgs=()
    for t in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$t"); done
    go get "${pkgs[@]/%/@$K8S_VERSION}" >/dev/null 2>&1 || go get "${pkgs[@]/%/@$K8S_VERSION}"
    local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    local ld="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld="$ld -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    done
    mkdir "$work/bin"
    go build -trimpath -ldflags "$ld" -o "$work/bin/" "${pkgs[@]}"
    for t in "$@"; do install_built "$work/bin/$t" "$(tool_path "$t")"; done
  )
)

build_etcd() (
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (
    cd "$work"
    go mod init kvcache-tools/etcd >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 || go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    go build -trimpath -ldflags "-s -w" -o "$work/etcd" go.etcd.io/etcd/server/v3
    install_built "$work/etcd" "$(tool_path etcd)"
  )
)

# helm's version checks read these variables; unset, helm believes the cluster is 1.20.
build_helm() (
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ld="$ld -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
  done
  GOBIN=$work go install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  install_built "$work/helm" "$(tool_path helm)"
)

# CoreDNS from its own pinned module (go.mod and go.sum in the repo), read-only so a build never
# rewrites them.
build_coredns() (
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$COREDNS_MODULE"
  GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$work/coredns" .
  install_built "$work/coredns" "$(tool_path coredns)"
)

# The enforcer, like CoreDNS, from its own module (read-only: a build never rewrites go.sum).
build_netpol() (
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$NETPOL_MODULE"
  GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$work/netpol" .
  install_built "$work/netpol" "$(tool_path netpol)"
)

# pause must be static: the sandbox image holds nothing else. The source ships in the
# k8s.io/kubernetes module zip, so no download site beyond the module proxy is needed.
build_pause() (
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  command -v gcc >/dev/null 2>&1 || { log "building pause needs gcc and a static libc (Debian: gcc libc6-dev)"; exit 1; }
  local dir
  dir=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -f "$dir/build/pause/linux/pause.c" ] || { log "no build/pause/linux/pause.c in k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION" -o "$work/pause" "$dir/build/pause/linux/pause.c"
  strip "$work/pause"
  install_built "$work/pause" "$(tool_path pause)"
)

go_install() ( # go_install TOOL MODULE_PATH@VERSION
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  GOBIN=$work go install -trimpath "$2"
  install_built "$work/$1" "$(tool_path "$1")"
)

build() {
  case "$1" in
    coredns) build_coredns ;;
    netpol) build_netpol ;;
    crictl) go_install crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS_VERSION" ;;
    pause) build_pause ;;
    etcd) build_etcd ;;
    helm) build_helm ;;
    controller-gen) go_install controller-gen "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_GEN_VERSION" ;;
    golangci-lint) go_install golangci-lint "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION" ;;
  esac
}

# ensure TOOL...: build every missing tool, in parallel, holding a lock so two concurrent runs
# (make test and make lint, say) do not build the same thing twice.
ensure() {
  exec 9>"$TOOLS_DIR/.lock"
  flock 9
  local pids=() names=() t seen_k8s="" seen_node="" k8s=()
  for t in "$@"; do
    [ -x "$(tool_path "$t")" ] && continue
    case "$t" in
      kube-apiserver|kubectl) [ -n "$seen_k8s" ] && continue; seen_k8s=1; k8s+=(kube-apiserver kubectl); continue ;;
      kube-controller-manager|kube-scheduler|kubelet|kube-proxy)
        [ -n "$seen_node" ] && continue; seen_node=1; k8s+=(kube-controller-manager kube-scheduler kubelet kube-proxy); continue ;;
    esac
    log "building $t (cached afterwards under $TOOLS_DIR)"
    build "$t" & pids+=($!); names+=("$t")
  done
  # Every Kubernetes binary missing in one go build: they share most of their packages, which
  # two builds at once would each compile.
  if [ ${#k8s[@]} -gt 0 ]; then
    log "building ${k8s[*]} (cached afterwards under $TOOLS_DIR)"
    build_k8s "${k8s[@]}" & pids+=($!); names+=("${k8s[*]}")
  fi
  local i failed=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { log "building ${names[$i]} failed"; failed=1; }
  done
  flock -u 9
  return $failed
}

assets_dir() {
  local dir="$TOOLS_DIR/envtest-$K8S_VERSION-etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  for t in kube-apiserver etcd kubectl; do ln -sfn "$(tool_path "$t")" "$dir/$t"; done
  echo "$dir"
}

case "${1:-all}" in
  all) ensure kube-apiserver etcd kubectl helm controller-gen golangci-lint \
    kube-controller-manager kube-scheduler kubelet kube-proxy coredns netpol crictl pause ;;
  assets) ensure kube-apiserver etcd kubectl && assets_dir ;;
  cluster) ensure kube-apiserver kubectl etcd kube-controller-manager kube-scheduler kubelet kube-proxy coredns netpol crictl pause ;;
  path) [ $# -eq 2 ] || { log "usage: $0 path TOOL"; exit 2; }; ensure "$2" && tool_path "$2" ;;
  *) log "usage: $0 [all|assets|cluster|path TOOL]"; exit 2 ;;
esac
