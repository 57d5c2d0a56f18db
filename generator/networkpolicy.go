package generator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

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
		if err := peerError(p); err != "" {
			return nil, fmt.Errorf("peer %d: %s", i, err)
		}
	}
	if len(peers) == 0 {
		return nil, nil
	}
	return peers, nil
}

// peerError is why the API server would refuse peer in a NetworkPolicy (the whole policy, and with
// it every store's, would fail to apply), or "".
func peerError(p networkingv1.NetworkPolicyPeer) string {
	if p.PodSelector == nil && p.NamespaceSelector == nil && p.IPBlock == nil {
		return "names nothing: set podSelector, namespaceSelector or ipBlock"
	}
	if b := p.IPBlock; b != nil {
		if p.PodSelector != nil || p.NamespaceSelector != nil {
			return "ipBlock cannot be combined with podSelector or namespaceSelector in one peer: give it a peer of its own"
		}
		_, cidr, err := net.ParseCIDR(b.CIDR)
		if err != nil {
			return fmt.Sprintf("ipBlock.cidr %q is not a CIDR, e.g. 10.0.0.0/8", b.CIDR)
		}
		for _, e := range b.Except {
			_, ex, err := net.ParseCIDR(e)
			if err != nil {
				return fmt.Sprintf("ipBlock.except %q is not a CIDR", e)
			}
			exOnes, _ := ex.Mask.Size()
			ones, _ := cidr.Mask.Size()
			if !cidr.Contains(ex.IP) || exOnes <= ones {
				return fmt.Sprintf("ipBlock.except %q is not strictly inside ipBlock.cidr %q", e, b.CIDR)
			}
		}
	}
	for _, sel := range []struct {
		name string
		s    *metav1.LabelSelector
	}{{"podSelector", p.PodSelector}, {"namespaceSelector", p.NamespaceSelector}} {
		if errs := metav1validation.ValidateLabelSelector(sel.s, metav1validation.LabelSelectorValidationOptions{}, field.NewPath(sel.name)); len(errs) > 0 {
			return errs.ToAggregate().Error()
		}
	}
	return ""
}
