package generator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// renderPolicy renders in and returns its NetworkPolicy (nil when there is none) and every
// object of the render.
func renderPolicy(t *testing.T, in StoreInput) (*networkingv1.NetworkPolicy, []Object) {
	t.Helper()
	r, err := NewRenderer()
	require.NoError(t, err)
	if in.BackendImageSetting == "" {
		in.BackendImageSetting = kvv1.DefaultKVCacheBackendImage
	}
	objs, err := r.RenderStore(in)
	require.NoError(t, err)
	var np *networkingv1.NetworkPolicy
	for _, o := range objs {
		if p, ok := o.(*networkingv1.NetworkPolicy); ok {
			require.Nil(t, np, "one NetworkPolicy per store")
			np = p
		}
	}
	return np, objs
}

var storePods = map[string]string{"app.kubernetes.io/name": "kv-cache-backend", "app.kubernetes.io/instance": "mooncake-dram"}

func adminPort() []networkingv1.NetworkPolicyPort {
	return []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(9003))}}
}

func boundRule(namespaces ...string) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces}},
	}}}}
}

func managerRule(ns string) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "kvcache-operator"}},
	}}, Ports: adminPort()}
}

var ownRule = networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: storePods}}}}

func TestStoreNetworkPolicyAdmitsOnlyWhomItNames(t *testing.T) {
	scraper := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}}
	np, _ := renderPolicy(t, StoreInput{
		Backend:           walkthroughBackend(),
		BoundNamespaces:   []string{"team-b", "team-a", "team-b"},
		OperatorNamespace: "ops",
		MetricsFrom:       scraper,
	})
	require.NotNil(t, np, "on by default")
	assert.Equal(t, "mooncake-dram-store", np.Name)
	assert.Equal(t, "gpustack-system", np.Namespace)
	assert.Equal(t, metav1.LabelSelector{MatchLabels: storePods}, np.Spec.PodSelector, "leader and members alike")
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes, "egress is not narrowed")
	assert.Equal(t, []networkingv1.NetworkPolicyIngressRule{
		ownRule,
		boundRule("team-a", "team-b"),
		managerRule("ops"),
		{From: scraper, Ports: adminPort()},
	}, np.Spec.Ingress)
}

// No Binding, no scraper: neither rule is rendered at all. An In with no values is invalid, and
// a rule with an empty from admits every Pod of the cluster.
func TestStoreNetworkPolicyWithoutBindingsAdmitsTheStoreAndTheManagerOnly(t *testing.T) {
	np, _ := renderPolicy(t, StoreInput{Backend: walkthroughBackend()})
	require.NotNil(t, np)
	assert.Equal(t, []networkingv1.NetworkPolicyIngressRule{ownRule, managerRule("kvcache-system")}, np.Spec.Ingress,
		"the manager's namespace defaults to the chart's")
	for _, r := range np.Spec.Ingress {
		assert.NotEmpty(t, r.From, "a rule without peers admits everyone")
	}
}

func TestStoreNetworkPolicyIsOmittedWhenOffOrOnTheHostNetwork(t *testing.T) {
	off := walkthroughBackend()
	off.Spec.Connection.Managed.NetworkPolicy.Enabled = ptr.To(false)
	np, objs := renderPolicy(t, StoreInput{Backend: off, BoundNamespaces: []string{"team-a"}})
	assert.Nil(t, np, "spec.connection.managed.networkPolicy.enabled: false")
	assert.NotEmpty(t, objs, "the rest of the store renders")

	rdma := walkthroughBackend()
	rdma.Spec.Connection.Managed.Members = append(rdma.Spec.Connection.Managed.Members, kvv1.MemberGroup{
		NodeSelector: map[string]string{"rdma": "true"}, CapacityPerMember: resource.MustParse("8Gi"),
		Transport: &kvv1.Transport{Protocol: kvv1.ProtocolRDMA}, FabricInterfaceCount: ptr.To[int32](1),
	})
	np, objs = renderPolicy(t, StoreInput{Backend: rdma, BoundNamespaces: []string{"team-a"}})
	assert.Nil(t, np, "a host-network member can be neither selected nor admitted by Pod")
	var hostNetwork bool
	for _, o := range objs {
		if d, ok := o.(interface{ GetName() string }); ok && d.GetName() == "mooncake-dram-member-1" {
			b, err := json.Marshal(o)
			require.NoError(t, err)
			hostNetwork = strings.Contains(string(b), `"hostNetwork":true`)
		}
	}
	assert.True(t, hostNetwork, "the rdma group is what runs on the host network")
}

func TestBoundNamespacesAreTheLiveBindingsNamespacesOnce(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	deleting := tenantBinding("team-d", "going", "chat", "going", "1Gi", t0)
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(time.Hour)))
	bindings := []kvv1.KVCachePoolBinding{
		tenantBinding("team-c", "batch", "batch", "c-batch", "1Gi", t0),
		tenantBinding("team-a", "chat", "chat", "a", "1Gi", t0),
		deleting,
		tenantBinding("team-c", "chat", "chat", "c-chat", "1Gi", t0),
	}
	assert.Equal(t, []string{"team-a", "team-c"}, BoundNamespaces(bindings), "a Binding being deleted grants nothing")
	assert.Empty(t, BoundNamespaces([]kvv1.KVCachePoolBinding{deleting}))
}

// A Binding's namespace is the one tenant string the policy carries, and it can only ever be a
// value of the In list: whatever it spells (YAML, JSON, a selector of its own), the rendered
// policy keeps its shape, and the string appears nowhere else in the whole render.
func TestATenantsNamespaceIsOnlyEverAValueOfTheInList(t *testing.T) {
	odd := []string{
		"evil\n  - from: []",
		`"]}},{}],"x":["`,
		"x: y\n---\napiVersion: v1\nkind: Namespace",
		"{{ .Names.StoreName }}",
		"kvcache-system",
	}
	var bindings []kvv1.KVCachePoolBinding
	for i, ns := range odd {
		bindings = append(bindings, tenantBinding(ns, "b", "chat", fmt.Sprintf("d%d", i), "1Gi", time.Time{}))
	}
	np, objs := renderPolicy(t, StoreInput{Backend: walkthroughBackend(), BoundNamespaces: BoundNamespaces(bindings), Tenants: TenantsFor(bindings)})
	require.NotNil(t, np)
	sorted := sortedUnique(odd)
	assert.Equal(t, []networkingv1.NetworkPolicyIngressRule{ownRule, boundRule(sorted...), managerRule("kvcache-system")}, np.Spec.Ingress)

	// Take the values out: none of the strings is left anywhere in any rendered object.
	np.Spec.Ingress[1].From[0].NamespaceSelector.MatchExpressions[0].Values = nil
	for _, o := range objs {
		b, err := json.Marshal(o)
		require.NoError(t, err)
		for _, s := range odd {
			if s == "kvcache-system" {
				continue // the manager's namespace, by the manager's rule
			}
			for _, part := range []string{s, "evil", `"x"`, "kind: Namespace", "{{"} {
				if strings.Contains(s, part) {
					assert.NotContains(t, string(b), jsonText(t, part), "%s %s", o.GetObjectKind().GroupVersionKind().Kind, o.GetName())
				}
			}
		}
	}
}

// jsonText is how s reads inside a JSON document.
func jsonText(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return strings.Trim(string(b), `"`)
}

func TestParseNetworkPolicyPeers(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []networkingv1.NetworkPolicyPeer
		wantErr  string
	}{
		{name: "empty is none", in: ""},
		{name: "an empty list is none", in: "[]"},
		{name: "a scraper by namespace and Pod", in: `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}},"podSelector":{"matchLabels":{"app":"prometheus"}}}]`,
			want: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "prometheus"}},
			}}},
		{name: "a peer that names nothing would admit everyone", in: `[{}]`, wantErr: "peer 0: names nothing: set podSelector, namespaceSelector or ipBlock"},
		{name: "an ipBlock without a CIDR", in: `[{"ipBlock":{}}]`, wantErr: `peer 0: ipBlock.cidr "" is not a CIDR, e.g. 10.0.0.0/8`},
		{name: "a CIDR past its address size", in: `[{"ipBlock":{"cidr":"10.0.0.0/33"}}]`, wantErr: `peer 0: ipBlock.cidr "10.0.0.0/33" is not a CIDR`},
		{name: "an exception outside the block", in: `[{"ipBlock":{"cidr":"10.0.0.0/8","except":["192.168.0.0/16"]}}]`, wantErr: `peer 0: ipBlock.except "192.168.0.0/16" is not strictly inside ipBlock.cidr "10.0.0.0/8"`},
		{name: "an exception as large as the block", in: `[{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.0.0.0/8"]}}]`, wantErr: `is not strictly inside`},
		{name: "an ipBlock with a selector", in: `[{"ipBlock":{"cidr":"10.0.0.0/8"},"podSelector":{}}]`, wantErr: "peer 0: ipBlock cannot be combined with podSelector or namespaceSelector in one peer"},
		{name: "a label key with a space", in: `[{"podSelector":{"matchLabels":{"app name":"prometheus"}}}]`, wantErr: `peer 0: podSelector.matchLabels: Invalid value: "app name"`},
		{name: "an operator that is none", in: `[{"namespaceSelector":{"matchExpressions":[{"key":"team","operator":"Like","values":["a"]}]}}]`, wantErr: `peer 0: namespaceSelector.matchExpressions[0].operator: Invalid value: "Like"`},
		{name: "an exception inside the block", in: `[{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.1.0.0/16"]}}]`,
			want: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}}}},
		{name: "a misspelt field", in: `[{"namespaceSelecter":{}}]`, wantErr: `unknown field "namespaceSelecter"`},
		{name: "not a list", in: `{"podSelector":{}}`, wantErr: "a JSON list of NetworkPolicyPeer"},
		{name: "text after the list", in: `[] []`, wantErr: "text after the list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseNetworkPolicyPeers(c.in)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}
