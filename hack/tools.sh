#!/usr/bin/env bash
# Builds and caches the tools the tests need, from the Go module proxy only (this project's
# machines reach no other download site): a real kube-apiserver, etcd and kubectl for envtest,
# helm for the chart, controller-gen for `make generate` and golangci-lint for `make lint`.
#
# Binaries live outside the repository, keyed by version, so clean clones and CI reuse them:
#   ${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}/<tool>-<version>/<tool>
#
# Usage:
#   hack/tools.sh [all]      build whatever is missing (in parallel), print nothing else
#   hack/tools.sh assets     build the envtest set if missing; print the KUBEBUILDER_ASSETS dir
#   hack/tools.sh path TOOL  build TOOL if missing; print its absolute path
set -euo pipefail

K8S_VERSION=v1.37.2          # kube-apiserver and kubectl
K8S_STAGING_VERSION=v0.37.2  # the k8s.io/<staging> modules that go with it
ETCD_VERSION=v3.7.3
HELM_VERSION=v3.22.0
CONTROLLER_GEN_VERSION=v0.23.0
GOLANGCI_LINT_VERSION=v2.15.0

TOOLS_DIR=${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}
mkdir -p "$TOOLS_DIR"
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
log() { echo "tools: $*" >&2; }

tool_path() {
  case "$1" in
    kube-apiserver|kubectl) echo "$TOOLS_DIR/$1-$K8S_VERSION/$1" ;;
    etcd) echo "$TOOLS_DIR/etcd-$ETCD_VERSION/etcd" ;;
    helm) echo "$TOOLS_DIR/helm-$HELM_VERSION/helm" ;;
    controller-gen) echo "$TOOLS_DIR/controller-gen-$CONTROLLER_GEN_VERSION/controller-gen" ;;
    golangci-lint) echo "$TOOLS_DIR/golangci-lint-$GOLANGCI_LINT_VERSION/golangci-lint" ;;
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
    go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION" >/dev/null 2>&1 ||
      go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
    local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    local ld="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld="$ld -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    done
    for t in kube-apiserver kubectl; do
      go build -trimpath -ldflags "$ld" -o "$work/$t" "k8s.io/kubernetes/cmd/$t"
      install_built "$work/$t" "$(tool_path "$t")"
    done
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

go_install() ( # go_install TOOL MODULE_PATH@VERSION
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  GOBIN=$work go install -trimpath "$2"
  install_built "$work/$1" "$(tool_path "$1")"
)

build() {
  case "$1" in
    kube-apiserver|kubectl) build_k8s ;;
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
  local pids=() names=() t seen_k8s=""
  for t in "$@"; do
    [ -x "$(tool_path "$t")" ] && continue
    case "$t" in kube-apiserver|kubectl) [ -n "$seen_k8s" ] && continue; seen_k8s=1 ;; esac
    log "building $t (cached afterwards under $TOOLS_DIR)"
    build "$t" & pids+=($!); names+=("$t")
  done
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
  all) ensure kube-apiserver etcd kubectl helm controller-gen golangci-lint ;;
  assets) ensure kube-apiserver etcd kubectl && assets_dir ;;
  path) [ $# -eq 2 ] || { log "usage: $0 path TOOL"; exit 2; }; ensure "$2" && tool_path "$2" ;;
  *) log "usage: $0 [all|assets|path TOOL]"; exit 2 ;;
esac
