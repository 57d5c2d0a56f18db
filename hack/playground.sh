#!/usr/bin/env bash
# The whole system live on the real two-node cluster of hack/cluster.sh, as `make playground`
# and `make playground-down` run it (test/cluster runs `up` twice in a row against its cluster).
#
# Usage:
#   hack/playground.sh up     the cluster up (a no-op when it runs), the images loaded, the chart
#                             installed with its default values (helm install --wait; upgraded
#                             when the release exists), the walkthrough applied as adapted to this
#                             machine (test/cluster/walkthrough), the store's capacity as its
#                             members registered it, and two real vLLM engines injected by the
#                             webhook, one per node (test/cluster/walkthrough/vllm-engines.yaml):
#                             one long prompt to the first, then to the second, which loads the
#                             first one's blocks from the store (hack/prompt prints the figures)
#   hack/playground.sh down   the cluster down, then the host checked: no cni bridge, no KUBE-/CNI-
#                             chains, net.ipv4.ip_forward as before, no process or cgroup of the
#                             cluster left
#
# `up` converges whatever ran before: run again, it upgrades the release, re-applies the
# walkthrough, keeps the engines that are still what the file and injection make of them (a
# real engine takes a minute to start) and replaces the others (see ensure_engines), then
# sends a new prompt.
set -Eeuo pipefail
shopt -s inherit_errexit
# No failure is silent: name the command and line that stopped the script.
trap 'echo "playground: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
ENGINES=$REPO/test/cluster/walkthrough/vllm-engines.yaml

log() { echo "playground: $*" >&2; }
die() { log "$*"; exit 1; }

# The engines are bare Pods: the webhook injects the store's configuration when a Pod is
# created, and a Pod's containers cannot change afterwards (`kubectl apply` over an injected Pod
# is refused). A run keeps an engine that is current: created from the file as it is now (the
# hash of the rendered file is its annotation kvcache-playground/manifest) and not named drifted
# by its Binding (status.drift: injection would write something else now, e.g. after an
# upgrade). Any other is deleted and created again, admitted by the manager as installed now.
ensure_engines() {
  local kubectl=$1 venv=$2 rendered hash pod have out
  rendered=$(sed "s|__VLLM_VENV__|$venv|" "$ENGINES")
  hash=$(sha256sum <<<"$rendered" | cut -c1-16)
  rendered=$(awk -v h="$hash" '{print} /^  annotations:$/ {print "    kvcache-playground/manifest: \"" h "\""}' <<<"$rendered")
  for pod in vllm-a vllm-b; do
    have=$("$kubectl" -n team-a get pod "$pod" -o jsonpath='{.metadata.annotations.kvcache-playground/manifest}' 2>/dev/null || true)
    [ -n "$have" ] || "$kubectl" -n team-a get pod "$pod" >/dev/null 2>&1 || continue
    if [ "$have" = "$hash" ] && ! "$kubectl" -n team-a get kvcpb team-a -o jsonpath='{.status.drift.names}' | grep -qw "$pod"; then
      log "keeping engine $pod (current)"
      continue
    fi
    log "replacing engine $pod (a Pod is not updated in place)"
    "$kubectl" -n team-a delete pod "$pod" --wait=true --timeout=2m >/dev/null
  done
  if ! out=$("$kubectl" create -f - <<<"$rendered" 2>&1); then
    grep -v 'AlreadyExists' <<<"$out" | grep -q . && { echo "$out" >&2; die "creating the engines failed"; }
  fi
  log "waiting until both engines serve (a cold start takes about a minute each)"
  "$kubectl" -n team-a wait pod/vllm-a pod/vllm-b --for=condition=Ready --timeout=8m >/dev/null ||
    { "$kubectl" -n team-a describe pod vllm-a vllm-b | tail -40 >&2; die "the engines did not become Ready"; }
}

cmd_up() {
  local kubectl helm ns venv
  cd "$REPO"
  "$HERE/cluster.sh" up >/dev/null
  "$HERE/images.sh" load
  venv=$("$HERE/images.sh" venv vllm)
  KUBECONFIG=$("$HERE/cluster.sh" kubeconfig)
  export KUBECONFIG
  kubectl=$("$HERE/tools.sh" path kubectl)
  helm=$("$HERE/tools.sh" path helm)
  for ns in gpustack-system team-a; do
    "$kubectl" get namespace "$ns" >/dev/null 2>&1 || "$kubectl" create namespace "$ns"
  done
  if "$helm" status kvcache --namespace kvcache-system >/dev/null 2>&1; then
    "$helm" upgrade kvcache charts/kvcache-operator --namespace kvcache-system --wait --timeout 5m
  else
    "$helm" install kvcache charts/kvcache-operator --namespace kvcache-system --create-namespace --wait --timeout 5m
  fi
  "$kubectl" kustomize --load-restrictor=LoadRestrictionsNone test/cluster/walkthrough | "$kubectl" apply -f -
  log "waiting until every member registered its segment with the master"
  "$kubectl" wait kvcb/mooncake-dram --for=condition=MembersMounted --timeout=5m >/dev/null
  "$kubectl" wait kvcb/mooncake-dram --for=jsonpath='{.status.phase}'=Ready --timeout=5m >/dev/null
  # Pods are admitted once the Binding's tenant is in the ledger (the pool has read it).
  "$kubectl" -n team-a wait kvcpb/team-a --for=jsonpath='{.status.phase}'=Ready --timeout=2m >/dev/null
  echo; echo "$ kubectl get kvcb,kvcp -o wide"; "$kubectl" get kvcb,kvcp -o wide
  echo; echo "$ kubectl get kvcpb -A"; "$kubectl" get kvcpb -A
  ensure_engines "$kubectl" "$venv"
  echo; echo "$ kubectl -n team-a get pod vllm-b -o jsonpath='{.metadata.annotations.kvcache\\.gpustack\\.ai/injected}'"
  "$kubectl" -n team-a get pod vllm-b -o jsonpath='{.metadata.annotations.kvcache\.gpustack\.ai/injected}'; echo
  local a b
  a=$("$kubectl" -n team-a get pod vllm-a -o jsonpath='{.status.podIP}')
  b=$("$kubectl" -n team-a get pod vllm-b -o jsonpath='{.status.podIP}')
  echo; echo "$ go run ./hack/prompt -first http://$a:8000 -second http://$b:8000   # one prompt to vllm-a, then to vllm-b"
  go run ./hack/prompt -first "http://$a:8000" -second "http://$b:8000" -first-name "vllm-a (node-0)" -second-name "vllm-b (node-1)" ||
    die "the second engine did not load the first one's prompt from the store"
  echo; echo "The playground runs. Continue with:"
  echo "  export KUBECONFIG=$KUBECONFIG"
  echo "  alias kubectl=$kubectl helm=$helm"
  echo "  go run ./hack/prompt -first http://$a:8000 -second http://$b:8000   # again, with a new prompt"
  echo "  kubectl patch kvcb mooncake-dram --type=merge -p '{\"spec\":{\"connection\":{\"managed\":{\"leader\":{\"replicas\":3}}}}}'   # Step 4"
  echo "Tear it down (nothing stays on the host) with: make playground-down"
}

cmd_down() {
  local state fwd left="" save pids cgroups
  state=$(dirname "$("$HERE/cluster.sh" kubeconfig)")
  fwd=$(awk -F'\t' '$1 == "net.ipv4.ip_forward" {print $2}' "$state/host/sysctl" 2>/dev/null || true)
  "$HERE/cluster.sh" down
  if ip -o link show type bridge 2>/dev/null | grep -qE '^[0-9]+: cni[0-9]+[:@]'; then left="$left a cni bridge;"; fi
  for save in iptables-save ip6tables-save; do
    if command -v "$save" >/dev/null && "$save" 2>/dev/null | grep -qE '^:(KUBE|CNI)-'; then left="$left $save shows KUBE-/CNI- chains;"; fi
  done
  if [ -n "$fwd" ] && [ "$(sysctl -n net.ipv4.ip_forward)" != "$fwd" ]; then left="$left net.ipv4.ip_forward is not back to $fwd;"; fi
  # Every process the cluster runs has an argument under its state directory (a config file,
  # a data directory, a socket); the containers ran in the nodes' cgroups. The pattern comes
  # from a file, so that grep's own arguments do not match it.
  pids=$(grep -lsFf <(echo "$state/") /proc/[0-9]*/cmdline | cut -d/ -f3 | tr '\n' ' ' || true)
  if [ -n "$pids" ]; then left="$left processes of the cluster (pid $pids);"; fi
  cgroups=$(find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name 'kvcache-node-*' 2>/dev/null | tr '\n' ' ' || true)
  if [ -n "$cgroups" ]; then left="$left the nodes' cgroups ($cgroups);"; fi
  [ -z "$left" ] || die "the host still has$left"
  log "nothing left on the host (no cni bridge, no KUBE-/CNI- chains, no process or cgroup of the cluster, net.ipv4.ip_forward=$(sysctl -n net.ipv4.ip_forward))"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  -h|--help|help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) log "usage: $0 up|down"; exit 2 ;;
esac
