// Package cluster is the end-to-end suite on a real cluster: hack/cluster.sh (etcd,
// kube-apiserver, controllers, kube-proxy, CoreDNS and containerd-backed kubelets as host
// processes, two nodes) and hack/images.sh (the operator, store, stand-in engine, etcd and pause
// images, imported without a registry).
//
// The smoke tests prove the parts: the nodes become Ready, a Mooncake master and its members run
// from the store image and find each other through a Service name, stand-in engines configured
// the way injection configures them move bytes, and the operator image runs as non-root.
//
// TestPlayground runs `make playground`'s steps (hack/playground.sh up) twice in a row, as a
// newcomer does: the second run upgrades the release and keeps the two real vLLM engines
// (hack/images.sh's vllm image, one per node, injected by the webhook), and both end with a
// new prompt sent to the first engine and then to the second, which loads at least 90% of it
// from the store, by its own counters.
//
// TestWalkthrough drives the product as a user does, with the real helm and kubectl: the chart
// installed with its default values, the walkthrough applied as adapted to this machine
// (test/cluster/walkthrough, which make playground applies too), engines injected through the
// webhook's Service and rendered for a ModelDeployment moving bytes under the Binding's tenant,
// every manager replica serving admission, the manager gone and back, the store's leader failed
// over (graceful and killed, measured), the release upgraded and uninstalled in both orders.
// Real vLLM engines prove the cache between the steps: a prompt's blocks read back from the
// store, another Binding's engine getting none of them, the Binding's status.storeHits and
// HIT RATE column moved by the engine's own counters, nothing from the store after the cold
// failovers (and the backend saying the cache went cold), and a fresh engine loading the prompt
// after every member was replaced. It prints the figures it measured at the end.
//
// TestWarmFailover is the failover step on a store with warm failover (electionBackend: Etcd,
// test/cluster/warm: an etcd the user runs, three leader replicas naming it): the serving leader
// Pod deleted and its master killed, measured, every probe object read back with its own bytes
// and counted kept in status, a real vLLM engine loading its prompt back from the store after
// its master was killed, and a member deleted during a failover reading back nothing wrong.
//
// Run it as root on a machine that can host the cluster: go test ./test/cluster/ (make test
// does, with the helm that make tools builds). It uses a running cluster when there is one and
// leaves it running; otherwise it starts one and takes it down at the end
// (KVCACHE_CLUSTER_KEEP=1 keeps it). A cluster it starts comes up after a failed up (node 0's
// containerd made to exit at once through hack/cluster.sh's test-only hook), which must say which
// process exited and leave the host as it was (`hack/cluster.sh footprint` names what to
// compare); after the last down the host must be as it was too. It fails, never skips, when the
// machine cannot run it.
package cluster
