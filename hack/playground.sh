#!/usr/bin/env bash
# The whole system live on the real two-node cluster of hack/cluster.sh, as `make playground`
# and `make playground-down` run it (test/cluster runs `up` twice in a row against its cluster).
#
# Usage:
#   hack/playground.sh up     the cluster up (a no-op when it runs), the images loaded, the chart
#                             installed with its default values (helm install --wait; upgraded
#                             when the release exists), the walkthrough applied as adapted to this
#                             machine (test/cluster/walkthrough), the store's capacity as its
#                             members registered it, and the injected engine Pod
#                             (test/cluster/walkthrough/engine-pod.yaml) created anew, moving bytes
#   hack/playground.sh down   the cluster down, then the host checked: no cni bridge, no KUBE-/CNI-
#                             chains, net.ipv4.ip_forward as before, no process or cgroup of the
#                             cluster left
#
# `up` converges whatever ran before: run again, it upgrades the release, re-applies the
# walkthrough and replaces the engine Pod (see replace_engine).
set -Eeuo pipefail
shopt -s inherit_errexit
# No failure is silent: name the command and line that stopped the script.
trap 'echo "playground: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
ENGINE_POD=$REPO/test/cluster/walkthrough/engine-pod.yaml

log() { echo "playground: $*" >&2; }
die() { log "$*"; exit 1; }

# The engine is a bare Pod: the webhook injects the store's configuration when it is created,
# and a Pod's containers cannot change afterwards, so `kubectl apply` of the file over the
# injected Pod is refused ("pod updates may not change fields other than ..."). Each run deletes
# it (the stand-in stops on SIGTERM in well under a second), waits until it is gone, and creates
# it again: the Pod that runs is the file as it is now, admitted by the manager as installed now
# (after an upgrade, with what the upgrade changed), and its first round is printed again.
replace_engine() {
  local kubectl=$1
  if "$kubectl" get -f "$ENGINE_POD" >/dev/null 2>&1; then
    log "replacing the engine Pod (a Pod is not updated in place)"
    "$kubectl" delete -f "$ENGINE_POD" --wait=true --timeout=2m >/dev/null
  fi
  "$kubectl" create -f "$ENGINE_POD" >/dev/null
  "$kubectl" wait -f "$ENGINE_POD" --for=condition=Ready --timeout=3m >/dev/null
}

cmd_up() {
  local kubectl helm ns
  cd "$REPO"
  "$HERE/cluster.sh" up >/dev/null
  "$HERE/images.sh" load
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
  echo; echo "$ kubectl get kvcb,kvcp -o wide"; "$kubectl" get kvcb,kvcp -o wide
  echo; echo "$ kubectl get kvcpb -A"; "$kubectl" get kvcpb -A
  replace_engine "$kubectl"
  echo; echo "$ kubectl -n team-a get pod playground-engine -o jsonpath='{.metadata.annotations.kvcache\\.gpustack\\.ai/injected}'"
  "$kubectl" -n team-a get pod playground-engine -o jsonpath='{.metadata.annotations.kvcache\.gpustack\.ai/injected}'; echo
  echo; echo "$ kubectl -n team-a logs playground-engine   # its first round: a put and a get through the store"
  # Read whole, then searched: grep stopping at its first match must not cut kubectl's pipe.
  grep -m1 '^{' <<<"$("$kubectl" -n team-a logs playground-engine)" || die "no round in the engine's log"
  echo; echo "The playground runs. Continue with:"
  echo "  export KUBECONFIG=$KUBECONFIG"
  echo "  alias kubectl=$kubectl helm=$helm"
  echo "  kubectl -n team-a logs -f playground-engine     # a round every few seconds"
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
