package operator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// admitted reads a backend's NetworkPolicy as stored: whether it exists, and the namespaces its
// In list admits (nil when it has no such rule). Any other namespace selector by name fails the
// test: the bound namespaces are only ever values of that one list.
func admitted(t *testing.T, backend string) (bool, []string) {
	t.Helper()
	np := &networkingv1.NetworkPolicy{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: systemNamespace, Name: generator.NetworkPolicyName(backend)}, np)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	require.NoError(t, err)
	var in []string
	for _, r := range np.Spec.Ingress {
		for _, p := range r.From {
			if p.NamespaceSelector == nil {
				continue
			}
			for _, e := range p.NamespaceSelector.MatchExpressions {
				require.Equal(t, "kubernetes.io/metadata.name", e.Key)
				require.Equal(t, metav1.LabelSelectorOpIn, e.Operator)
				require.Nil(t, in, "one In list")
				in = e.Values
			}
		}
	}
	return true, in
}

func eventuallyAdmits(t *testing.T, backend string, want ...string) {
	t.Helper()
	var exists bool
	var got []string
	poll(t, func() bool {
		exists, got = admitted(t, backend)
		return exists && fmt.Sprint(got) == fmt.Sprint(want)
	}, func() string {
		return fmt.Sprintf("NetworkPolicy of %s admits %v (exists: %t, admits %v)", backend, want, exists, got)
	})
}

// The store's NetworkPolicy admits exactly the namespaces holding a Binding on one of the
// backend's pools: a Binding created adds its namespace, a Binding deleted removes it as soon
// as its deletion starts, a Binding recreated on a pool of another backend moves its namespace
// to that store's policy. What `kvcache render` prints over the same objects is what was
// applied, the policy included. Turning the policy off prunes it and leaves the other store's.
func TestStoreNetworkPolicyFollowsBindings(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"np-a", "np-b"} {
		fake := fakeStore(t, name, storetest.FakeOptions{MultiTenancy: true})
		fake.MountSegment("10.6.0.10:15400", 16<<30, "tcp")
		create(t, walkthroughBackend(name))
		create(t, pool(name+"-pool", name, "16Gi"))
	}
	eventuallyAdmits(t, "np-a")
	eventuallyAdmits(t, "np-b")

	create(t, binding("team-b", "np", "np-a-pool", "team-b-np", "4Gi"))
	eventuallyAdmits(t, "np-a", "team-b")
	create(t, binding("team-a", "np", "np-a-pool", "team-a-np", "4Gi"))
	eventuallyAdmits(t, "np-a", "team-a", "team-b")
	eventuallyAdmits(t, "np-b")

	compared := renderedMatchesApplied(t,
		get(t, &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "np"}}),
		get(t, &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "np"}}),
		get(t, &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "np-a-pool"}}),
		get(t, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "np-a"}}))
	assert.Contains(t, compared, "NetworkPolicy/"+systemNamespace+"/np-a-store")

	// Deleted: gone from the list while the pool still releases its tenant.
	require.NoError(t, env.Client.Delete(ctx, &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "np"}}))
	eventuallyAdmits(t, "np-a", "team-a")

	// Moved: the same Binding recreated on the other backend's pool (poolRef is immutable).
	moved := binding("team-a", "np", "np-a-pool", "team-a-np", "4Gi")
	deleteAndWait(t, moved)
	eventuallyAdmits(t, "np-a")
	create(t, binding("team-a", "np", "np-b-pool", "team-a-np", "4Gi"))
	eventuallyAdmits(t, "np-b", "team-a")
	eventuallyAdmits(t, "np-a")

	updateBackend(t, "np-b", func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.NetworkPolicy.Enabled = ptr.To(false) })
	poll(t, func() bool {
		exists, _ := admitted(t, "np-b")
		return !exists
	}, func() string { return "the NetworkPolicy of np-b is pruned once the backend turns it off" })
	assert.Contains(t, eventNotes(t, "Pruned", "np-b"), "deleted NetworkPolicy np-b-store, which the spec no longer produces")
	exists, _ := admitted(t, "np-a")
	assert.True(t, exists, "the other store keeps its policy")

	updateBackend(t, "np-b", func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.NetworkPolicy.Enabled = nil })
	eventuallyAdmits(t, "np-b", "team-a")
}

// The manager measures whether the cluster enforces the policy: a connection to the serving
// master's RPC port that is answered (here refused, as a node with nothing enforcing refuses
// it) says the policy is not in force; a backend with the policy off says so too.
func TestNetworkPolicyEnforcementIsMeasured(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "np-probe", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.6.0.10:15400", 16<<30, "tcp")
	create(t, walkthroughBackend("np-probe"))
	d := rollOutLeader(t, "np-probe")
	// The serving master's Pod, at an address where nothing listens on the RPC port.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: "np-probe-leader-0", Labels: d.Spec.Template.Labels},
		Spec: *d.Spec.Template.Spec.DeepCopy()}
	pod.Spec.NodeName = "node-0"
	require.NoError(t, env.Client.Create(ctx, pod))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))

	got := eventuallyBackend(t, "np-probe", "the enforcement measured", func(b *kvv1.KVCacheBackend) bool {
		return condition(b.Status.Conditions, kvv1.ConditionNetworkPolicyEnforced).Reason == kvv1.ReasonPolicyNotEnforced
	})
	c := condition(got.Status.Conditions, kvv1.ConditionNetworkPolicyEnforced)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, "the manager's probe connection to the serving master's RPC port (127.0.0.1:50051), which the store's NetworkPolicy does not admit it to, was answered (its node refused it): the cluster's network plugin does not enforce NetworkPolicy, so every Pod can reach this store and name any tenant", c.Message)

	updateBackend(t, "np-probe", func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.NetworkPolicy.Enabled = ptr.To(false) })
	got = eventuallyBackend(t, "np-probe", "the policy off", func(b *kvv1.KVCacheBackend) bool {
		return condition(b.Status.Conditions, kvv1.ConditionNetworkPolicyEnforced).Reason == kvv1.ReasonPolicyDisabled
	})
	assert.Contains(t, condition(got.Status.Conditions, kvv1.ConditionNetworkPolicyEnforced).Message, "spec.connection.managed.networkPolicy.enabled is false")
}
