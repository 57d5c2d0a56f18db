#!/usr/bin/env bash
# A real Kubernetes cluster on this machine, as host processes: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy (iptables mode), CoreDNS, a NetworkPolicy
# enforcer (kube-network-policies' evaluator, hack/cluster/netpol), and per node a containerd
# (Debian's, with runc) and a kubelet. Binaries come from hack/tools.sh (Go module
# proxy, cached by version); Debian packages are installed with apt when missing.
#
# Everything the cluster owns lives under one state directory (override KVCACHE_CLUSTER_DIR):
#   ${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-cluster/
#     kubeconfig           admin credentials (printed by `up`)
#     pki/ kubeconfigs/    certificates (kept across down/up, so a warm up signs nothing)
#     etcd/ coredns/       etcd's data (wiped by down) and the Corefile
#     node-<i>/            one node: containerd root (images, kept) and state, kubelet root-dir,
#                          CNI config and IPAM, pod logs, kubelet config
#     run/<name>.pid       "PID START BINARY" of the process `up` runs as <name> (START: its start
#                          time in clock ticks after boot, so a reused PID is never taken for it)
#     run/started          "NAME PID START BINARY" of every process `up` ever started (a daemon
#                          started twice leaves both); `down` stops every one of them, and only those
#     host/                what `up` found on the host before changing it; `down` restores it
#     logs/<name>.log      each process's output (kept after down, for post-mortems)
#
# Network: node i is bridge cni<i> with 10.244.<i>.0/24, gateway 10.244.<i>.1 = the node IP;
# services 10.96.0.0/16; DNS 10.96.0.10 (CoreDNS as a host process on 10.244.0.1:53 behind a
# selector-less Service). The API server, kubelets and CoreDNS listen on bridge addresses,
# everything else on 127.0.0.1: nothing listens on the machine's external interfaces.
#
# Usage:
#   hack/cluster.sh up          start (idempotent); prints the kubeconfig path
#   hack/cluster.sh down        stop what up started and undo its host changes (no-op if none)
#   hack/cluster.sh status      what runs; exit 0 all running, 3 nothing, 1 partly
#   hack/cluster.sh kubeconfig  print the admin kubeconfig path
#   hack/cluster.sh env         print `export KUBECONFIG=...` for eval
#   hack/cluster.sh sockets     print each node's containerd socket (for ctr / hack/images.sh)
#   hack/cluster.sh purge       down, then delete the state directory (images included)
#   hack/cluster.sh prereqs     install what `up` needs and changes nothing else (Debian packages,
#                               the cluster's tools): a test pictures the host after it
#   hack/cluster.sh footprint   print what `up` may change on the host, for a test to compare
#   hack/cluster.sh restart NAME  stop one process `up` runs (kube-apiserver, containerd-<i>,
#                               kubelet-<i>) with its usual grace, start it again, and return once
#                               it serves (the soak's faults; a containerd's containers live on)
#   hack/cluster.sh node-off I  node I loses power: its kubelet, containerd, shims and every
#                               container SIGKILLed at once (its Pods' state stays, as on a disk)
#   hack/cluster.sh node-on I   node I boots: containerd and kubelet started, the node Ready
# KVCACHE_CLUSTER_NODES (default 2) sets how many nodes `up` starts. A failed `up` takes down what
# it started unless KVCACHE_CLUSTER_KEEP is set.
# Test only: KVCACHE_CLUSTER_TEST_CONTAINERD_EXITS=1 starts node 0's containerd with an unknown
# flag, so it exits at once and `up` fails (test/cluster proves the failed `up` leaves nothing).
set -Eeuo pipefail
shopt -s inherit_errexit nullglob
# No failure is silent: name the command and line that stopped the script.
trap 'echo "cluster: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE=${KVCACHE_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-cluster}
NODES=${KVCACHE_CLUSTER_NODES:-2}

API_IP=10.244.0.1
API_PORT=6443
SERVICE_CIDR=10.96.0.0/16
SERVICE_API_IP=10.96.0.1
DNS_IP=10.96.0.10
CLUSTER_CIDR=10.244.0.0/16
ETCD_CLIENT=127.0.0.1:12379
ETCD_PEER=127.0.0.1:12380
PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
# Debian packages the cluster runs (containerd 1.6 with runc: crun cannot run on this cgroup v1
# hybrid host) plus what this script itself calls.
PACKAGES=(containerd runc containernetworking-plugins iptables nftables iproute2 openssl gcc libc6-dev)
CNI_BIN_DIR=/usr/lib/cni
# Paths kubelet, containerd and the CNI plugins use whatever their configuration says. `up`
# records which of them were absent; `down` removes only those.
HOST_PATHS=(/var/lib/kubelet /var/lib/cni /var/log/pods /var/log/containers /run/containerd
  /run/netns /run/nri /etc/cni /opt/cni /opt/containerd /var/lib/containerd /etc/kubernetes
  /run/kubernetes)
# Kernel settings the cluster changes: the bridge plugin turns on forwarding, the kubelet sets the
# panic and overcommit tunables it wants, kube-proxy route_localnet.
SYSCTLS=(net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv4.conf.all.route_localnet
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.netfilter.nf_conntrack_max
  net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait)
# iptables-nft tables: deleted by down only when up created them and they are empty again.
NFT_TABLES=("ip filter" "ip nat" "ip mangle" "ip raw" "ip security" "ip6 filter" "ip6 nat"
  "ip6 mangle" "ip6 raw" "ip6 security" "ip kube-proxy" "ip6 kube-proxy")

# The enforcer's queue and the iptables chain that feeds it (down removes KVCACHE- chains).
NETPOL_QUEUE=100
NETPOL_CHAIN=KVCACHE-NETPOL

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH

log() { echo "cluster: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=hack/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

node_name() { echo "node-$1"; }
node_dir() { echo "$STATE/node-$1"; }
node_ip() { echo "10.244.$1.1"; }
bridge_name() { echo "cni$1"; }
ctr_sock() { echo "$(node_dir "$1")/containerd/containerd.sock"; }
# The nodes of the cluster up started (recorded in run/nodes), whatever KVCACHE_CLUSTER_NODES
# says now; none when no cluster was started.
known_nodes() {
  local n
  n=$(cat "$STATE/run/nodes" 2>/dev/null) || return 0
  if [ "$n" -gt 0 ] 2>/dev/null; then seq 0 $((n - 1)); fi
}

# cgroup_hierarchies: every mounted cgroup hierarchy (one per v1 controller, plus the v2 one).
cgroup_hierarchies() {
  awk '{for (i = 7; i <= NF; i++) if ($i == "-") {fs = $(i + 1); break}} fs == "cgroup" || fs == "cgroup2" {print $5}' /proc/self/mountinfo
}

# ---------------------------------------------------------------------------------------------
# Processes: each recorded as "PID START BINARY" in run/<name>.pid, and as "NAME PID START BINARY"
# in run/started (every start, never overwritten), and stopped only through those records.

pidfile() { echo "$STATE/run/$1.pid"; }

# proc_start PID: sets START to PID's start time (clock ticks after boot, field 22 of its stat),
# which a PID handed to a new process never keeps. Builtins only: every wait_for poll reads it.
proc_start() {
  local line f
  START=""
  read -r line 2>/dev/null <"/proc/$1/stat" || return 1
  # The name in parentheses may hold spaces: count fields after the last ')' (field 3 first).
  read -ra f <<<"${line##*) }"
  START=${f[19]:-}
  [ -n "$START" ]
}

# execs PID BINARY: PID is a process (not a thread of one) running BINARY now. /proc/N exists for
# a thread N of any process too, while kill(2) on a thread ID signals its whole process: an old
# PID of one node's kubelet that was now a thread of the other's read as still running, and
# node-off SIGTERMed and SIGKILLed the other node's kubelet (hour soak, twice). A zombie has no
# exe: ended, for our purposes.
execs() {
  local exe key tgid=""
  [ -n "$1" ] && [ -d "/proc/$1" ] || return 1
  while read -r key tgid _; do [ "$key" != Tgid: ] || break; done 2>/dev/null <"/proc/$1/status" || return 1
  [ "$tgid" = "$1" ] || return 1
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  [ "${exe% (deleted)}" = "$2" ]
}

# runs PID START BINARY: PID is still the process recorded as started at START, running BINARY.
# PIDs wrap (pid_max is 32768 here) and both nodes' containerds and kubelets run the same
# binaries, so over an hour of restarts one node's old PID can become the other node's daemon:
# only the start time tells them apart.
runs() {
  [ -n "$1" ] && proc_start "$1" && [ "$START" = "$2" ] && execs "$1" "$3"
}

# alive NAME: the recorded PID runs the recorded binary.
alive() {
  local f pid start bin
  f=$(pidfile "$1")
  [ -f "$f" ] || return 1
  read -r pid start bin <"$f" || return 1
  runs "$pid" "$start" "$bin"
}

# until_exec PID BINARY: wait until the child PID has exec'd BINARY, or is gone. Until then its
# /proc/PID/exe names bash (the fork), then setsid, and `alive` calls a daemon that is still
# starting dead. Under disk pressure, with BINARY out of the page cache, that took 50-900 ms
# here, while the first `alive` of containerd-0 comes 20-70 ms after its fork: `up` used to
# report it "exited" with an empty log, start it again, give up, and leave both running (their
# lock on the node's boltdb then hung the next up).
until_exec() {
  local pid=$1 bin=$2 exe deadline=$((SECONDS + 10))
  while exe=$(readlink "/proc/$pid/exe" 2>/dev/null); do
    [ "${exe% (deleted)}" != "$bin" ] || return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "pid $pid has not become $bin after 10s (it runs ${exe% (deleted)})"
      return 0
    fi
    sleep 0.01
  done
}

# start NAME BINARY ARGS...: run detached (own session, output to logs/NAME.log), record its PID,
# and return once it runs BINARY (or has already exited: wait_for then reports it).
start() {
  local name=$1 bin pid
  bin=$(readlink -f "$2"); shift 2
  if alive "$name"; then return 0; fi
  mkdir -p "$STATE/run" "$STATE/logs"
  # setsid execs in place (a background job is never a group leader), so $! is the program.
  # fd 8 is the up/down lock: a daemon holding it would block every later down.
  # How it was started, for a restart by wait_for (printf %q keeps every argument whole).
  printf '%q ' "$name" "$bin" "$@" >"$STATE/run/$name.cmd"
  setsid "$bin" "$@" </dev/null >"$STATE/logs/$name.log" 2>&1 8>&- &
  pid=$!
  # The start time is the fork's, kept through exec; an exited child stays a zombie until this
  # shell waits for it, so its stat is there to read.
  proc_start "$pid" || START=0
  echo "$name $pid $START $bin" >>"$STATE/run/started"
  echo "$pid $START $bin" >"$(pidfile "$name")"
  until_exec "$pid" "$bin"
}

# how_ended NAME: sets ENDED to " (pid P, exit status S)" for the recorded process of NAME once
# it is gone. Not in a command substitution: only this shell, its parent, can wait for it (127 is
# bash's "not my child", e.g. a process an earlier `up` started).
how_ended() {
  local pid st=0
  ENDED=""
  read -r pid _ 2>/dev/null <"$(pidfile "$1")" || return 0
  [ -n "$pid" ] || return 0
  # Never block on a process that still runs (a zombie has ended).
  if [ -d "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; then return 0; fi
  wait "$pid" 2>/dev/null || st=$?
  if [ "$st" -eq 127 ]; then ENDED=" (pid $pid)"
  elif [ "$st" -gt 128 ]; then ENDED=" (pid $pid, killed by signal $((st - 128)))"
  else ENDED=" (pid $pid, exit status $st)"
  fi
}

# stop_pid NAME PID START BINARY GRACE: SIGTERM, then SIGKILL after the grace period, to the
# process recorded as PID START BINARY, only while it is that process.
stop_pid() {
  local name=$1 pid=$2 start=$3 bin=$4 grace=$5 i
  runs "$pid" "$start" "$bin" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do
    runs "$pid" "$start" "$bin" || break
    sleep 0.1
  done
  if runs "$pid" "$start" "$bin"; then
    [ "$grace" -eq 0 ] || log "$name (pid $pid) ignored SIGTERM for ${grace}s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

# stop NAME [GRACE_SECONDS]: every process up started as NAME: the recorded one, and any other
# run/started lists (a NAME started again while an earlier one still ran).
stop() {
  local name=$1 grace=${2:-10} pid start bin
  while read -r pid start bin; do
    [ -z "$pid" ] || stop_pid "$name" "$pid" "$start" "$bin" "$grace"
  done < <({
    cat "$(pidfile "$name")" 2>/dev/null || true
    awk -v n="$name" '$1 == n {sub(/^[^ ]+ /, ""); print}' "$STATE/run/started" 2>/dev/null || true
  } | sort -u)
  rm -f "$(pidfile "$name")"
}

# wait_for DESCRIPTION TIMEOUT LOGNAME CMD...: poll CMD until it succeeds.
# RESTARTABLE are the control-plane programs that keep no state of their own: one that exits
# while up waits on it is started again, at most RESTARTS_MAX times per up, instead of failing
# the whole up (a newcomer's first command must not fail at random; see wait_for).
RESTARTABLE=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy coredns netpol)
RESTARTS_MAX=2
declare -A RESTARTED=()

# restart NAME: start NAME again as it was started, when it may be and its budget allows.
restart() {
  local name=$1 n=${RESTARTED[$1]:-0} cmd
  [[ " ${RESTARTABLE[*]} " == *" $name "* ]] && [ "$n" -lt "$RESTARTS_MAX" ] && [ -f "$STATE/run/$name.cmd" ] || return 1
  RESTARTED[$name]=$((n + 1))
  cmd=$(cat "$STATE/run/$name.cmd")
  log "starting $name again (restart $((n + 1)) of at most $RESTARTS_MAX in this up; its log before: $STATE/logs/$name.log.prev)"
  keep_log "$name"
  eval "start $cmd"
}

wait_for() {
  local what=$1 timeout=$2 logname=$3 deadline; shift 3
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$logname" ] && ! alive "$logname"; then
      how_ended "$logname"
      log "$logname exited$ENDED while waiting for $what; last lines of $STATE/logs/$logname.log:"
      tail -n 20 "$STATE/logs/$logname.log" >&2 || true
      if restart "$logname"; then
        deadline=$(($(date +%s) + timeout))
        continue
      fi
      # What it depends on may have gone first (a kubelet whose containerd stopped).
      local n
      for n in $(all_names); do
        [ "$n" = "$logname" ] || [ ! -f "$(pidfile "$n")" ] || alive "$n" || {
          how_ended "$n"
          log "$n exited too$ENDED; last lines of $STATE/logs/$n.log:"
          tail -n 5 "$STATE/logs/$n.log" >&2 || true
        }
      done
      return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "timed out after ${timeout}s waiting for $what"
      [ -z "$logname" ] || tail -n 20 "$STATE/logs/$logname.log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------------------------------------
# Prerequisites

# Debian's containerd ships only a systemd unit, so installing it starts no daemon where systemd
# does not run.
ensure_packages() { ensure_debs "${PACKAGES[@]}"; }

# cmd_prereqs: what up needs before it changes the host (up runs it; a test runs it alone to
# picture the host as up will find it).
cmd_prereqs() {
  ensure_packages
  check_host
  "$HERE/tools.sh" cluster
}

check_host() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (bridges, iptables, cgroups and mounts)"
  grep -qw overlay /proc/filesystems || die "the kernel has no overlay filesystem (containerd's snapshotter needs it)"
  local c
  for c in cpu cpuacct cpuset memory pids devices freezer; do
    [ -d "/sys/fs/cgroup/$c" ] || [ -f /sys/fs/cgroup/cgroup.controllers ] ||
      die "no cgroup hierarchy for $c under /sys/fs/cgroup (the kubelet needs it)"
  done
  command -v runc >/dev/null 2>&1 || die "runc not found after installing packages"
  for c in bridge host-local loopback; do
    [ -x "$CNI_BIN_DIR/$c" ] || die "CNI plugin $c missing in $CNI_BIN_DIR (Debian containernetworking-plugins)"
  done
}

# tool NAME: path of a hack/tools.sh binary (built by `hack/tools.sh cluster` beforehand).
tool() { "$HERE/tools.sh" path "$1"; }

# ---------------------------------------------------------------------------------------------
# Host record: taken once, before the first change, kept until down has restored it.

record_host() {
  local h=$STATE/host
  [ -f "$h/complete" ] && return 0
  rm -rf "$h"; mkdir -p "$h"
  local k p v
  for k in "${SYSCTLS[@]}"; do
    if v=$(sysctl -n "$k" 2>/dev/null); then printf '%s\t%s\n' "$k" "$v"; fi
  done >"$h/sysctl"
  for p in "${HOST_PATHS[@]}"; do [ -e "$p" ] || echo "$p"; done >"$h/absent-paths"
  nft list tables 2>/dev/null >"$h/nft-tables" || : >"$h/nft-tables"
  touch "$h/complete"
}

# ---------------------------------------------------------------------------------------------
# PKI and kubeconfigs (openssl, ECDSA P-256). Regenerated only when the plan below changes.

PKI_PLAN="v1 api=$API_IP svc=$SERVICE_API_IP"

pki_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# pki_cert NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
pki_cert() {
  local d=$STATE/pki name=$1 subj=$2 eku=$3 san=${4:-}
  [ -f "$d/$name.crt" ] && return 0
  pki_key "$d/$name.key"
  openssl req -new -key "$d/$name.key" -subj "$subj" -out "$d/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -z "$san" ] || echo "subjectAltName=$san"
  } >"$d/$name.ext"
  openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -extfile "$d/$name.ext" -out "$d/$name.crt" 2>/dev/null
  rm -f "$d/$name.csr" "$d/$name.ext"
}

# write_kubeconfig FILE CERT_NAME
write_kubeconfig() {
  local d=$STATE/pki
  cat >"$1.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kvcache
  cluster:
    server: https://$API_IP:$API_PORT
    certificate-authority-data: $(base64 -w0 "$d/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$d/$2.crt")
    client-key-data: $(base64 -w0 "$d/$2.key")
contexts:
- name: kvcache
  context:
    cluster: kvcache
    user: $2
current-context: kvcache
EOF
  mv -f "$1.tmp" "$1"
}

ensure_pki() {
  local d=$STATE/pki i
  if [ "$(cat "$d/plan" 2>/dev/null)" != "$PKI_PLAN" ]; then
    rm -rf "$d" "$STATE/kubeconfigs"
    mkdir -p "$d"; chmod 700 "$d"
    pki_key "$d/ca.key"
    openssl req -x509 -new -key "$d/ca.key" -subj "/CN=kvcache-cluster-ca" -days 3650 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out "$d/ca.crt" 2>/dev/null
    # Service account tokens are signed with their own key.
    pki_key "$d/sa.key"
    openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
    echo "$PKI_PLAN" >"$d/plan"
  fi
  pki_cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:$API_IP,IP:$SERVICE_API_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
  pki_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  pki_cert admin "/O=system:masters/CN=kvcache-admin" clientAuth
  pki_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  pki_cert scheduler "/CN=system:kube-scheduler" clientAuth
  pki_cert kube-proxy "/CN=system:kube-proxy" clientAuth
  pki_cert coredns "/CN=kvcache:coredns" clientAuth
  pki_cert netpol "/CN=kvcache:netpol" clientAuth
  for i in $(seq 0 $((NODES - 1))); do
    pki_cert "kubelet-$i" "/O=system:nodes/CN=system:node:$(node_name "$i")" clientAuth
    pki_cert "kubelet-serving-$i" "/O=system:nodes/CN=system:node:$(node_name "$i")" serverAuth \
      "IP:$(node_ip "$i"),DNS:$(node_name "$i")"
  done
  mkdir -p "$STATE/kubeconfigs"
  local n
  for n in admin controller-manager scheduler kube-proxy coredns netpol; do
    [ -f "$STATE/kubeconfigs/$n" ] || write_kubeconfig "$STATE/kubeconfigs/$n" "$n"
  done
  for i in $(seq 0 $((NODES - 1))); do
    [ -f "$STATE/kubeconfigs/kubelet-$i" ] || write_kubeconfig "$STATE/kubeconfigs/kubelet-$i" "kubelet-$i"
  done
  cp -f "$STATE/kubeconfigs/admin" "$STATE/kubeconfig"
}

# ---------------------------------------------------------------------------------------------
# Node plumbing

ensure_bridge() {
  local br ip
  br=$(bridge_name "$1"); ip=$(node_ip "$1")
  if ip link show "$br" >/dev/null 2>&1; then
    grep -qxF "$br" "$STATE/host/bridges" 2>/dev/null ||
      die "bridge $br exists and this cluster did not create it; remove it or use another machine"
  else
    echo "$br" >>"$STATE/host/bridges"
    ip link add "$br" type bridge
  fi
  ip addr replace "$ip/24" dev "$br"
  ip link set "$br" up
}

# The cgroupRoot of each kubelet must exist before it starts, in every v1 hierarchy; cpuset
# cgroups start empty, so they inherit the parent's CPUs and memory nodes.
ensure_cgroups() {
  local root=kvcache-node-$1 h
  for h in $(cgroup_hierarchies); do
    [ -d "$h/$root" ] || mkdir "$h/$root"
    if [ -f "$h/cpuset.cpus" ]; then
      [ -n "$(cat "$h/$root/cpuset.cpus")" ] || cat "$h/cpuset.cpus" >"$h/$root/cpuset.cpus"
      [ -n "$(cat "$h/$root/cpuset.mems")" ] || cat "$h/cpuset.mems" >"$h/$root/cpuset.mems"
    fi
  done
}

write_node_config() {
  local i=$1 d name ip
  d=$(node_dir "$i"); name=$(node_name "$i"); ip=$(node_ip "$i")
  mkdir -p "$d/containerd" "$d/cni/net.d" "$d/cni/ipam" "$d/kubelet" "$d/pod-logs"
  cat >"$d/containerd/config.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$d/containerd/containerd.sock"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Processes here lack CAP_SYS_RESOURCE: without this, runc fails to apply the sandbox's
  # oom_score_adj (-998) and no Pod starts.
  restrict_oom_score_adj = true
  # Keeps Pod network namespaces under this node's state, not in /run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$d/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$d/cni/net.d"
    max_conf_num = 1
EOF
  # host-local keeps its leases under this node (dataDir); the network name keys CNI's result
  # cache, so two nodes never share entries.
  cat >"$d/cni/net.d/10-kvcache.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kvcache-$name",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$(bridge_name "$i")",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.244.$i.0/24", "gateway": "$ip"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$d/cni/ipam"
      }
    }
  ]
}
EOF
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $ip
healthzPort: 10248
tlsCertFile: $STATE/pki/kubelet-serving-$i.crt
tlsPrivateKeyFile: $STATE/pki/kubelet-serving-$i.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $STATE/pki/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$(ctr_sock "$i")
# This host mounts cgroup v1 (v2 only at /sys/fs/cgroup/unified).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /kvcache-node-$i
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: $d/pod-logs
failSwapOn: false
# A shared machine's disk is not this cluster's to police: no evictions for disk pressure, and no
# image garbage collection (the images are imported, not pullable).
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerNode: true
serializeImagePulls: false
EOF
}

# holders BINARY ARG: PIDs of the processes running BINARY with ARG as one of their arguments.
holders() {
  local p
  for p in $(grep -lszxF -- "$2" /proc/[0-9]*/cmdline | cut -d/ -f3 || true); do
    ! execs "$p" "$1" || echo "$p"
  done
}

start_node() {
  local i=$1 d cfg bin others test_hook=()
  alive "containerd-$i" && return 0
  d=$(node_dir "$i"); cfg=$d/containerd/config.toml; bin=$(readlink -f "$(command -v containerd)")
  # A containerd this cluster no longer records (started by hand, or by an older hack/cluster.sh
  # that lost track of it) holds the node's metadata store: a new one would wait forever on
  # "waiting for response from boltdb open". Say so, and leave it to whoever started it.
  others=$(holders "$bin" "$cfg" | paste -sd ' ' -)
  [ -z "$others" ] || die "a containerd this cluster did not record already runs on $cfg (pid $others): stop it, then run up again"
  if [ "$i" -eq 0 ] && [ -n "${KVCACHE_CLUSTER_TEST_CONTAINERD_EXITS:-}" ]; then
    log "KVCACHE_CLUSTER_TEST_CONTAINERD_EXITS is set (test only): containerd-0 gets an unknown flag and exits at once"
    test_hook=(--kvcache-test-exits-at-once)
  fi
  start "containerd-$i" "$bin" --config "$cfg" "${test_hook[@]}"
}

start_kubelet() {
  local i=$1 d
  d=$(node_dir "$i")
  start "kubelet-$i" "$(tool kubelet)" --config="$d/kubelet.yaml" \
    --kubeconfig="$STATE/kubeconfigs/kubelet-$i" --root-dir="$d/kubelet" \
    --hostname-override="$(node_name "$i")" --node-ip="$(node_ip "$i")" --v=1
}

# ---------------------------------------------------------------------------------------------
# Control plane

start_etcd() {
  mkdir -p "$STATE/etcd"
  start etcd "$(tool etcd)" --name=kvcache --data-dir="$STATE/etcd" \
    --listen-client-urls="http://$ETCD_CLIENT" --advertise-client-urls="http://$ETCD_CLIENT" \
    --listen-peer-urls="http://$ETCD_PEER" --initial-advertise-peer-urls="http://$ETCD_PEER" \
    --initial-cluster="kvcache=http://$ETCD_PEER" --unsafe-no-fsync=true --log-level=warn
}

start_apiserver() {
  local p=$STATE/pki
  mkdir -p "$STATE/apiserver"
  start kube-apiserver "$(tool kube-apiserver)" \
    --etcd-servers="http://$ETCD_CLIENT" \
    --bind-address="$API_IP" --advertise-address="$API_IP" --secure-port="$API_PORT" \
    --cert-dir="$STATE/apiserver" \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --authorization-mode=Node,RBAC --allow-privileged=true --profiling=false
}

start_controllers() {
  local p=$STATE/pki k=$STATE/kubeconfigs
  start kube-controller-manager "$(tool kube-controller-manager)" \
    --kubeconfig="$k/controller-manager" --authentication-kubeconfig="$k/controller-manager" \
    --authorization-kubeconfig="$k/controller-manager" \
    --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
    --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
    --use-service-account-credentials=true --service-cluster-ip-range="$SERVICE_CIDR" \
    --allocate-node-cidrs=false --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key"
  start kube-scheduler "$(tool kube-scheduler)" \
    --kubeconfig="$k/scheduler" --authentication-kubeconfig="$k/scheduler" \
    --authorization-kubeconfig="$k/scheduler" \
    --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false
}

# One kube-proxy serves every node: they share this network namespace and its iptables.
start_proxy() {
  cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $STATE/kubeconfigs/kube-proxy
hostnameOverride: $(node_name 0)
clusterCIDR: $CLUSTER_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$CLUSTER_CIDR"]
iptables:
  localhostNodePorts: false
  masqueradeAll: false
# Zero leaves the host's conntrack limits and timeouts as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
  start kube-proxy "$(tool kube-proxy)" --config="$STATE/kube-proxy.yaml" --v=1
}

# The bridge CNI enforces no NetworkPolicy; the enforcer (hack/cluster/netpol) does. The rule
# below sends the first packet of every new connection between Pods (and from outside the host)
# to the enforcer's queue; the host's own connections (the kubelets' probes) do not pass FORWARD.
# With the enforcer gone, packets pass unjudged (queue-bypass): the suites' reachability checks,
# not a dead cluster, say so.
start_netpol() {
  start netpol "$(tool netpol)" --kubeconfig="$STATE/kubeconfigs/netpol" --node="$(node_name 0)" \
    --nfqueue="$NETPOL_QUEUE" --v=1
  iptables -N "$NETPOL_CHAIN" 2>/dev/null || iptables -F "$NETPOL_CHAIN"
  iptables -A "$NETPOL_CHAIN" -d "$CLUSTER_CIDR" -m conntrack --ctstate NEW -j NFQUEUE --queue-num "$NETPOL_QUEUE" --queue-bypass
  iptables -C FORWARD -j "$NETPOL_CHAIN" 2>/dev/null || iptables -I FORWARD 1 -j "$NETPOL_CHAIN"
}

# CoreDNS answers only cluster.local and the reverse zones (no forward plugin is built in). As
# kubeadm's Corefile does since Kubernetes 1.32, cluster.local answers are never cached: the
# kubernetes plugin follows the API itself, and a cached NXDOMAIN would hide a Service created a
# moment after someone asked for its name (for up to 30 s).
start_coredns() {
  mkdir -p "$STATE/coredns"
  cat >"$STATE/coredns/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $API_IP
    errors
    log . {
        class denial error
    }
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $STATE/kubeconfigs/coredns
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30 {
        disable success cluster.local
        disable denial cluster.local
    }
}
EOF
  start coredns "$(tool coredns)" -conf "$STATE/coredns/Corefile"
}

kubectl_admin() { "$(tool kubectl)" --kubeconfig="$STATE/kubeconfig" --request-timeout=10s "$@"; }

# Cluster objects the host processes need: CoreDNS's read access, and the selector-less DNS
# Service whose only endpoint is the CoreDNS host process.
apply_addons() {
  kubectl_admin apply --server-side --force-conflicts --field-manager=kvcache-cluster -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kvcache:coredns
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kvcache:netpol
rules:
  - apiGroups: [""]
    resources: [pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [list, watch]
  - apiGroups: [""]
    resources: [events]
    verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kvcache:netpol
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: kvcache:netpol
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: kvcache:netpol
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kvcache:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: kvcache:coredns
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: kvcache:coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  clusterIP: $DNS_IP
  ports:
    - name: dns
      port: 53
      protocol: UDP
    - name: dns-tcp
      port: 53
      protocol: TCP
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: kvcache-cluster
addressType: IPv4
endpoints:
  - addresses: ["$API_IP"]
    conditions:
      ready: true
ports:
  - name: dns
    port: 53
    protocol: UDP
  - name: dns-tcp
    port: 53
    protocol: TCP
EOF
}

# ---------------------------------------------------------------------------------------------
# up

COMPONENTS_CP=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy coredns netpol)

all_names() {
  local i
  printf '%s\n' "${COMPONENTS_CP[@]}"
  for i in $(known_nodes); do echo "containerd-$i"; echo "kubelet-$i"; done
}

running_count() {
  local n c=0 t=0
  for n in $(all_names); do t=$((t + 1)); if alive "$n"; then c=$((c + 1)); fi; done
  echo "$c $t"
}

cmd_up() {
  local t0 c t
  t0=$(now)
  [[ "$NODES" =~ ^[1-9]$ ]] || die "KVCACHE_CLUSTER_NODES must be 1-9, not $NODES"
  read -r c t < <(running_count)
  if [ -d "$STATE/node-0" ] && [ "$c" -eq "$t" ] && [ "$(known_nodes | wc -l)" -eq "$NODES" ]; then
    log "already up ($t processes)"
    echo "$STATE/kubeconfig"
    return 0
  fi
  if [ "$c" -gt 0 ] || [ -f "$STATE/host/complete" ]; then
    log "a previous cluster is partly up ($c of $t processes): taking it down first"
    cmd_down
  fi
  cmd_prereqs
  local i
  mkdir -p "$STATE/run" "$STATE/logs" "$STATE/host"
  # From here on a failure takes down whatever was started (logs stay for the post-mortem).
  trap 'up_failed $?' EXIT
  record_host
  echo "$NODES" >"$STATE/run/nodes"
  ensure_pki
  for i in $(seq 0 $((NODES - 1))); do
    ensure_bridge "$i"
    ensure_cgroups "$i"
    write_node_config "$i"
  done
  start_etcd
  start_apiserver
  for i in $(seq 0 $((NODES - 1))); do start_node "$i"; done
  # The sandbox image, imported while the API server starts.
  local socks=()
  for i in $(seq 0 $((NODES - 1))); do
    wait_for "containerd-$i" 30 "containerd-$i" test -S "$(ctr_sock "$i")"
    socks+=(--socket "$(ctr_sock "$i")")
  done
  "$HERE/images.sh" load "${socks[@]}" pause
  wait_for "etcd" 30 etcd curl -fsS --max-time 2 "http://$ETCD_CLIENT/health"
  wait_for "the API server" 60 kube-apiserver kubectl_admin get --raw /readyz
  start_controllers
  apply_addons
  start_coredns
  start_proxy
  start_netpol
  for i in $(seq 0 $((NODES - 1))); do wait_cri "$i"; start_kubelet "$i"; done
  local names=()
  for i in $(seq 0 $((NODES - 1))); do names+=("node/$(node_name "$i")"); done
  wait_for "nodes to register" 60 kubelet-0 kubectl_admin get "${names[@]}"
  wait_for "nodes Ready" 90 kubelet-0 kubectl_admin wait --for=condition=Ready "${names[@]}" --timeout=2s
  # Pods need the default ServiceAccount, which the controller manager creates shortly after.
  wait_for "the default ServiceAccount" 30 kube-controller-manager kubectl_admin -n default get serviceaccount default
  wait_for "CoreDNS" 30 coredns curl -fsS --max-time 2 http://127.0.0.1:18181/ready
  trap - EXIT
  log "up in $(since "$t0")s: $NODES node(s) Ready; kubeconfig (admin):"
  echo "$STATE/kubeconfig"
}

up_failed() {
  [ "$1" -ne 0 ] || return 0
  if [ -n "${KVCACHE_CLUSTER_KEEP:-}" ]; then
    log "up failed; KVCACHE_CLUSTER_KEEP is set, so it stays as it is (hack/cluster.sh down removes it)"
    return 0
  fi
  log "up failed: taking down what it started (logs kept in $STATE/logs)"
  cmd_down || true
}

# One up or down at a time.
lock() {
  mkdir -p "$STATE"
  exec 8>"$STATE/.lock"
  flock 8
}

check_root_early() { [ "$(id -u)" -eq 0 ] || die "must run as root (bridges, iptables, cgroups and mounts)"; }

# ---------------------------------------------------------------------------------------------
# down

# Remove every Pod sandbox through the CRI, so containerd tears down each Pod's network (CNI DEL
# releases the address and deletes the veth) before it stops.
remove_pods() {
  local i=$1 sock crictl
  sock=$(ctr_sock "$i")
  alive "containerd-$i" && [ -S "$sock" ] || return 0
  crictl=$(tool crictl)
  timeout 60 "$crictl" --runtime-endpoint "unix://$sock" --timeout 30s rmp --all --force >/dev/null 2>&1 ||
    log "crictl could not remove every Pod of $(node_name "$i"); cleaning up after containerd"
}

# Shims outlive containerd (only when Pods could not be removed through the CRI, e.g. after
# containerd died). containerd 1.6 records no shim PIDs; a shim names the containerd it serves
# in its arguments (-address <socket>), and that socket path is this node's alone.
stop_shims() {
  local sock=$1 p exe args
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$exe" in */containerd-shim-runc-v2) ;; *) continue ;; esac
    args=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    case " $args " in
      *" -address $sock "*)
        log "stopping the shim ${p#/proc/} of $sock"
        kill -KILL "${p#/proc/}" 2>/dev/null || true ;;
    esac
  done
}

# Processes still in a node's cgroupRoot are that node's containers: the kubelet puts only Pods
# there (cgroupRoot), never itself or containerd.
kill_cgroup_procs() {
  local root=$1 h pid
  for h in $(cgroup_hierarchies); do
    [ -d "$h/$root" ] || continue
    while read -r pid; do
      [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true
    done < <(find "$h/$root" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done
}

remove_cgroups() {
  local root=$1 h i
  for ((i = 0; i < 20; i++)); do
    local left=0
    for h in $(cgroup_hierarchies); do
      [ -d "$h/$root" ] || continue
      find "$h/$root" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$h/$root" ] && left=1
    done
    [ "$left" -eq 0 ] && return 0
    kill_cgroup_procs "$root"
    sleep 0.25
  done
  log "cgroups left under $root in: $(for h in $(cgroup_hierarchies); do [ -d "$h/$root" ] && echo "$h"; done | tr '\n' ' ')"
}

# Mounts under the state directory (overlay rootfs, shm, netns, volume tmpfs), deepest first.
unmount_state() {
  local m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done < <(awk -v p="$STATE/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r)
}

# iptables: delete every rule in another chain that jumps to a KUBE-*/CNI-*/KVCACHE-* chain, then flush
# and delete those chains, all in one iptables-restore --noflush transaction per table. Nothing
# else in any table is touched.
clean_iptables() {
  local save=$1 restore=$2 family=$3 dump table script
  command -v "$save" >/dev/null 2>&1 || return 0
  dump=$("$save" 2>/dev/null) || return 0
  for table in $(sed -n 's/^\*//p' <<<"$dump"); do
    script=$(awk -v t="$table" '
      /^\*/ {cur = substr($0, 2); next}
      cur != t {next}
      /^:(KUBE|CNI|KVCACHE)-/ {chains[++n] = substr($1, 2); next}
      /^-A / && $2 !~ /^(KUBE|CNI|KVCACHE)-/ && / -j (KUBE|CNI|KVCACHE)-/ {sub(/^-A /, "-D "); dels[++m] = $0}
      END {
        if (n == 0 && m == 0) exit
        print "*" t
        for (i = 1; i <= m; i++) print dels[i]
        for (i = 1; i <= n; i++) print "-F " chains[i]
        for (i = 1; i <= n; i++) print "-X " chains[i]
        print "COMMIT"
      }' <<<"$dump")
    [ -z "$script" ] || "$restore" --noflush <<<"$script" || log "$restore could not remove the cluster's chains from $family $table"
  done
}

# nft tables iptables-nft (or kube-proxy) created during up, once empty of rules.
clean_nft_tables() {
  command -v nft >/dev/null 2>&1 || return 0
  local t family name
  for t in "${NFT_TABLES[@]}"; do
    grep -qxF "table $t" "$STATE/host/nft-tables" 2>/dev/null && continue
    read -r family name <<<"$t"
    nft list table "$family" "$name" >/dev/null 2>&1 || continue
    # Only base chains and no rules left: nothing but this cluster ever used it.
    if ! nft list table "$family" "$name" | grep -vE '^\s*(table|chain|type|policy|\}|$)' | grep -q .; then
      nft delete table "$family" "$name"
    else
      log "nft table $t holds rules this cluster did not write: left in place"
    fi
  done
}

restore_sysctls() {
  local k v
  [ -f "$STATE/host/sysctl" ] || return 0
  while IFS=$'\t' read -r k v; do
    [ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] || sysctl -qw "$k=$v" || log "could not restore $k=$v"
  done <"$STATE/host/sysctl"
}

remove_host_paths() {
  local p
  [ -f "$STATE/host/absent-paths" ] || return 0
  while read -r p; do
    [ -n "$p" ] && [ -e "$p" ] || continue
    if awk -v p="$p/" 'index($5, p) == 1 {found = 1} END {exit !found}' /proc/self/mountinfo; then
      log "$p holds mounts: left in place"
      continue
    fi
    rm -rf "$p"
  done <"$STATE/host/absent-paths"
}

cmd_down() {
  local t0 i d br
  t0=$(now)
  if [ ! -d "$STATE/run" ] && [ ! -d "$STATE/host" ]; then
    log "no cluster here ($STATE): nothing to do"
    return 0
  fi
  check_root_early
  # Kubelets first, so nothing recreates the Pods removed next.
  for i in $(known_nodes); do stop "kubelet-$i" 10; done
  for i in $(known_nodes); do remove_pods "$i"; done
  for i in $(known_nodes); do stop "containerd-$i" 10; done
  for i in $(known_nodes); do stop_shims "$(ctr_sock "$i")"; done
  stop netpol 10
  stop kube-proxy 5
  stop coredns 5
  stop kube-scheduler 5
  stop kube-controller-manager 5
  stop kube-apiserver 15
  stop etcd 10
  # Whatever else run/started lists (a name this down does not know) goes too.
  local name pid start bin
  while read -r name pid start bin; do
    [ -z "$pid" ] || stop_pid "$name" "$pid" "$start" "$bin" 5
  done < <(cat "$STATE/run/started" 2>/dev/null || true)
  for i in $(known_nodes); do kill_cgroup_procs "kvcache-node-$i"; done
  unmount_state
  for i in $(known_nodes); do remove_cgroups "kvcache-node-$i"; done
  if [ -f "$STATE/host/bridges" ]; then
    while read -r br; do
      [ -n "$br" ] || continue
      # Host ends of Pod veths still attached (their Pods were not removed through the CRI).
      for d in $(ip -o link show master "$br" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
        ip link del "$d" 2>/dev/null || true
      done
      ip link del "$br" 2>/dev/null || true
    done <"$STATE/host/bridges"
  fi
  clean_iptables iptables-save iptables-restore ipv4
  clean_iptables ip6tables-save ip6tables-restore ipv6
  clean_nft_tables
  restore_sysctls
  remove_host_paths
  # Runtime state goes; certificates, kubeconfigs, logs and each node's image store stay.
  for i in $(known_nodes); do
    d=$(node_dir "$i")
    rm -rf "$d/containerd/state" "$d/containerd/runc" "$d/kubelet" "$d/cni/ipam" "$d/pod-logs"
    # Containers and snapshots of removed Pods stay in containerd's store otherwise; images stay.
    rm -f "$d/containerd/containerd.sock" "$d/containerd/containerd.sock.ttrpc"
  done
  rm -rf "$STATE/etcd" "$STATE/run" "$STATE/host" "$STATE/apiserver"
  log "down in $(since "$t0")s"
}

# What up may change outside its state directory, one "KIND VALUE" a line, so a test can take
# the host's picture before and compare after down: sysctl KEY, path PATH (one of those up
# records when absent), cgroup DIR (a node's cgroupRoot in one hierarchy), bridge NAME; and
# state DIR, where every process up starts has an argument.
cmd_footprint() {
  local k p h i
  for k in "${SYSCTLS[@]}"; do echo "sysctl $k"; done
  for p in "${HOST_PATHS[@]}"; do echo "path $p"; done
  for i in $(seq 0 $((NODES - 1))); do
    for h in $(cgroup_hierarchies); do echo "cgroup $h/kvcache-node-$i"; done
    echo "bridge $(bridge_name "$i")"
  done
  echo "state $STATE"
}

cmd_status() {
  local n pid bin c t
  if [ ! -d "$STATE/run" ]; then
    echo "no cluster running (state: $STATE)"
    return 3
  fi
  for n in $(all_names); do
    if alive "$n"; then
      read -r pid _ <"$(pidfile "$n")"
      printf '%-24s running  pid %s\n' "$n" "$pid"
    else
      printf '%-24s stopped\n' "$n"
    fi
  done
  read -r c t < <(running_count)
  if alive kube-apiserver; then
    kubectl_admin get nodes -o wide 2>/dev/null || true
  fi
  echo "kubeconfig: $STATE/kubeconfig"
  if [ "$c" -eq "$t" ]; then return 0; elif [ "$c" -eq 0 ]; then return 3; else return 1; fi
}

# ---------------------------------------------------------------------------------------------
# Faults (the soak's): every process is stopped and started through the same records as up/down.

# keep_log NAME: the log of the process a fault stops stays beside the new one's (start truncates).
keep_log() { [ ! -f "$STATE/logs/$1.log" ] || mv -f "$STATE/logs/$1.log" "$STATE/logs/$1.log.prev"; }

node_index() {
  [[ "$1" =~ ^[0-9]$ ]] && known_nodes | grep -qx "$1" || die "no node $1 in this cluster (nodes: $(known_nodes | paste -sd ' ' -))"
}

cmd_restart() {
  local name=${1:-} i t0
  t0=$(now)
  [ -d "$STATE/run" ] || die "no cluster running (state: $STATE)"
  case "$name" in
    kube-apiserver)
      stop kube-apiserver 15
      keep_log kube-apiserver
      start_apiserver
      wait_for "the API server" 60 kube-apiserver kubectl_admin get --raw /readyz ;;
    containerd-[0-9])
      i=${name#containerd-}; node_index "$i"
      stop "$name" 10
      keep_log "$name"
      start_node "$i"
      wait_for "$name" 30 "$name" containerd_answers "$i"
      wait_cri "$i" ;;
    kubelet-[0-9])
      i=${name#kubelet-}; node_index "$i"
      stop "$name" 10
      keep_log "$name"
      start_kubelet "$i"
      wait_for "node $(node_name "$i") Ready" 90 "$name" kubectl_admin wait --for=condition=Ready "node/$(node_name "$i")" --timeout=2s ;;
    *) die "restart: unknown process '$name' (kube-apiserver, containerd-<i>, kubelet-<i>)" ;;
  esac
  log "$name restarted in $(since "$t0")s"
}

cmd_node_off() {
  local i=${1:-} t0
  t0=$(now)
  node_index "$i"
  # No grace anywhere: a power loss gives none.
  stop "kubelet-$i" 0
  stop "containerd-$i" 0
  stop_shims "$(ctr_sock "$i")"
  kill_cgroup_procs "kvcache-node-$i"
  log "$(node_name "$i") off in $(since "$t0")s"
}

# containerd_answers I: node I's containerd serves its API (a SIGKILLed one leaves its socket
# file behind, so the file alone says nothing: a kubelet started on it exits at once).
containerd_answers() { ctr --address "$(ctr_sock "$1")" --timeout 2s version; }

# cri_serves I: node I's containerd also serves the CRI, which answers "server is not initialized
# yet" for a while after its own API does (longer after a power loss, while it recovers the
# sandboxes whose shims died). A kubelet started in that window exits at once: seen in the hour
# soak after a node-off, the node stayed NotReady until the end.
cri_serves() { "$(tool crictl)" --runtime-endpoint "unix://$(ctr_sock "$1")" --timeout 2s version; }

# wait_cri I: wait until node I's CRI serves, and say how long it took past containerd's own API.
wait_cri() {
  local t0
  t0=$(now)
  wait_for "containerd-$1's CRI" 60 "containerd-$1" cri_serves "$1"
  log "containerd-$1 serves the CRI (waited $(since "$t0")s past its own API)"
}

cmd_node_on() {
  local i=${1:-} t0
  t0=$(now)
  node_index "$i"
  keep_log "containerd-$i"
  keep_log "kubelet-$i"
  start_node "$i"
  wait_for "containerd-$i" 30 "containerd-$i" containerd_answers "$i"
  wait_cri "$i"
  start_kubelet "$i"
  wait_for "node $(node_name "$i") Ready" 90 "kubelet-$i" kubectl_admin wait --for=condition=Ready "node/$(node_name "$i")" --timeout=2s
  log "$(node_name "$i") on and Ready in $(since "$t0")s"
}

# Sourced, it defines its functions and runs nothing (test/harness drives the process records).
if [ "${BASH_SOURCE[0]}" != "$0" ]; then return 0; fi

case "${1:-}" in
  up) check_root_early; lock; cmd_up ;;
  down) if [ -d "$STATE" ]; then lock; fi; cmd_down ;;
  status) cmd_status || exit $? ;;  # its exit code is its answer, not a failure
  kubeconfig) echo "$STATE/kubeconfig" ;;
  env) printf 'export KUBECONFIG=%q\n' "$STATE/kubeconfig" ;;
  sockets) for i in $(known_nodes); do ctr_sock "$i"; done ;;
  purge) if [ -d "$STATE" ]; then lock; fi; cmd_down; rm -rf "$STATE"; log "removed $STATE" ;;
  footprint) cmd_footprint ;;
  prereqs) check_root_early; cmd_prereqs ;;
  restart) check_root_early; lock; cmd_restart "${2:-}" ;;
  node-off) check_root_early; lock; cmd_node_off "${2:-}" ;;
  node-on) check_root_early; lock; cmd_node_on "${2:-}" ;;
  -h|--help|help) sed -n '2,43p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) log "usage: $0 up|down|status|kubeconfig|env|sockets|purge|footprint|restart NAME|node-off I|node-on I"; exit 2 ;;
esac
