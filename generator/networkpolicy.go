package generator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/values"
)

// NetworkPolicyName is the name of a backend's store NetworkPolicy.
func NetworkPolicyName(backend string) string { return backend + "-store" }

// networkPolicyValues are what the store's NetworkPolicy admits besides the store's own Pods.
type networkPolicyValues struct {
	Name string
	// BoundNamespaces are the namespaces whose Pods reach the store, sorted; none renders no
	// peer at all (an In with no values is invalid, and an empty peer list admits everyone).
	BoundNamespaces []string
	// ManagerNamespace is where the manager's Pods run; they reach the admin port.
	ManagerNamespace string
	// MetricsFrom may scrape the admin port (the master's /metrics); empty renders no rule.
	MetricsFrom []networkingv1.NetworkPolicyPeer
}

// BoundNamespaces lists the namespaces holding a Binding on one backend (every Binding of every
// pool on it) that is not being deleted, sorted, once each: the namespaces whose Pods the
// store's NetworkPolicy admits. A Binding being deleted no longer grants anything.
func BoundNamespaces(onBackend []kvv1.KVCachePoolBinding) []string {
	var out []string
	for i := range onBackend {
		if onBackend[i].DeletionTimestamp.IsZero() {
			out = append(out, onBackend[i].Namespace)
		}
	}
	return sortedUnique(out)
}

func sortedUnique(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// WhyNoNetworkPolicy says why a managed backend's store renders no NetworkPolicy, "" when it
// renders one: the render and the NetworkPolicy probe decide by it alike. A member group on the
// host network (the fabric grants of rdma and efa) rules the policy out: NetworkPolicy selects
// Pods by their own addresses, and a host-network member has its node's, so a policy could
// neither admit it by Pod (its traffic to the master would be cut off from every other node) nor
// isolate it.
func WhyNoNetworkPolicy(b *kvv1.KVCacheBackend) string {
	m := b.Spec.Connection.Managed
	if m == nil {
		return "the backend is external: the operator runs none of its store"
	}
	if !m.NetworkPolicyEnabled() {
		return "spec.connection.managed.networkPolicy.enabled is false"
	}
	for i := range m.Members {
		if _, _, fabric := FabricResource(b.EffectiveProtocol(i).StoreSpelling(), 1, values.Store{}); fabric {
			return "a member group runs on the host network (rdma or efa), which a NetworkPolicy can neither select nor admit by Pod"
		}
	}
	return ""
}

// ParseNetworkPolicyPeers reads the manager's and `kvcache render`'s --network-policy-metrics-from:
// a JSON list of NetworkPolicyPeer (the chart's networkPolicy.metricsFrom). Empty means none. A
// peer that names nothing is refused: in a NetworkPolicy it is invalid, and the scraper would
// otherwise read as everyone.
func ParseNetworkPolicyPeers(s string) ([]networkingv1.NetworkPolicyPeer, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var peers []networkingv1.NetworkPolicyPeer
	if err := dec.Decode(&peers); err != nil {
		return nil, fmt.Errorf("a JSON list of NetworkPolicyPeer (podSelector, namespaceSelector, ipBlock): %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("a JSON list of NetworkPolicyPeer: text after the list")
	}
	for i, p := range peers {
		if p.PodSelector == nil && p.NamespaceSelector == nil && p.IPBlock == nil {
			return nil, fmt.Errorf("peer %d names nothing: set podSelector, namespaceSelector or ipBlock", i)
		}
		if p.IPBlock != nil && p.IPBlock.CIDR == "" {
			return nil, fmt.Errorf("peer %d: ipBlock.cidr is empty", i)
		}
	}
	if len(peers) == 0 {
		return nil, nil
	}
	return peers, nil
}
