// Package cluster is the smoke test of the project's real cluster and images: hack/cluster.sh
// (etcd, kube-apiserver, controllers, kube-proxy, CoreDNS and containerd-backed kubelets as host
// processes) and hack/images.sh (the operator, store, stand-in engine and pause images, imported
// without a registry). It proves that the nodes become Ready, that a Mooncake master and its
// members run from the store image and find each other through a Service name, that stand-in
// engines configured the way injection configures them move bytes through the store, and that
// the operator image runs as non-root.
//
// Run it as root on a machine that can host the cluster: go test ./test/cluster/. It uses a
// running cluster when there is one and leaves it running; otherwise it starts one and takes it
// down at the end (KVCACHE_CLUSTER_KEEP=1 keeps it).
package cluster
