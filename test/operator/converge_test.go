package operator_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// allChildren lists a backend's children of every kind the store render produces.
func allChildren(t *testing.T, backend string) map[string]client.Object {
	t.Helper()
	return childrenOf(t, backend, &appsv1.DeploymentList{}, &appsv1.DaemonSetList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{},
		&corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &networkingv1.NetworkPolicyList{})
}

// converged reports "" once the live children are exactly what the backend's spec renders and
// no workload names an object that does not exist; otherwise what is still off.
func converged(t *testing.T, backend string) string {
	t.Helper()
	b := &kvv1.KVCacheBackend{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Name: backend}, b))
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	rendered, err := r.RenderStore(generator.StoreInput{Backend: b, SystemNamespace: systemNamespace, BackendImageSetting: kvv1.DefaultKVCacheBackendImage})
	require.NoError(t, err)
	var want, have []string
	for _, o := range rendered {
		want = append(want, fmt.Sprintf("%T/%s", o, o.GetName()))
	}
	live := allChildren(t, backend)
	for k := range live {
		have = append(have, k)
	}
	sort.Strings(want)
	sort.Strings(have)
	if !slices.Equal(want, have) {
		return fmt.Sprintf("children %v, the spec renders %v", have, want)
	}
	if d := dangling(live); len(d) > 0 {
		return fmt.Sprintf("dangling references: %v", d)
	}
	return ""
}

// dangling lists what a workload names that does not exist: its service account (either the
// field or the deprecated alias the API server keeps; "default" always exists in a cluster)
// and the ConfigMaps its Pods mount.
func dangling(live map[string]client.Object) []string {
	exists := func(kind, name string) bool {
		_, ok := live[fmt.Sprintf("*v1.%s/%s", kind, name)]
		return ok
	}
	var out []string
	check := func(what string, p *corev1.PodSpec) {
		for _, sa := range []string{p.ServiceAccountName, p.DeprecatedServiceAccount} {
			if sa != "" && sa != "default" && !exists("ServiceAccount", sa) {
				out = append(out, fmt.Sprintf("%s runs as ServiceAccount %s", what, sa))
			}
		}
		if p.ServiceAccountName != p.DeprecatedServiceAccount {
			out = append(out, fmt.Sprintf("%s: serviceAccountName %q, serviceAccount %q", what, p.ServiceAccountName, p.DeprecatedServiceAccount))
		}
		for _, v := range p.Volumes {
			if v.ConfigMap != nil && !exists("ConfigMap", v.ConfigMap.Name) {
				out = append(out, fmt.Sprintf("%s mounts ConfigMap %s", what, v.ConfigMap.Name))
			}
		}
	}
	for k, o := range live {
		switch x := o.(type) {
		case *appsv1.Deployment:
			check(k, &x.Spec.Template.Spec)
		case *appsv1.DaemonSet:
			check(k, &x.Spec.Template.Spec)
		case *rbacv1.RoleBinding:
			if !exists("Role", x.RoleRef.Name) {
				out = append(out, fmt.Sprintf("%s grants Role %s", k, x.RoleRef.Name))
			}
		}
	}
	sort.Strings(out)
	return out
}

func eventuallyConverged(t *testing.T, backend, after string) {
	t.Helper()
	var last string
	start := time.Now()
	poll(t, func() bool { last = converged(t, backend); return last == "" }, func() string {
		return fmt.Sprintf("backend %s after %s: %s", backend, after, last)
	})
	t.Logf("%s: converged in %s", after, time.Since(start).Round(time.Millisecond))
}

// Issue 15: every spec field whose change adds or removes a child converges, and nothing left
// live references what was pruned. Turning the election off used to leave the Deployment on
// the pruned leader account (the deprecated serviceAccount field kept the name when the
// applied template omitted it), so no leader Pod could be created again.
func TestSpecChangesConverge(t *testing.T) {
	ctx := context.Background()
	fakeStore(t, "converge", storetest.FakeOptions{MultiTenancy: true})
	create(t, walkthroughBackend("converge"))
	eventuallyConverged(t, "converge", "creation")

	steps := []struct {
		name string
		edit func(m *kvv1.ManagedConnection)
	}{
		{"election Kubernetes -> None", func(m *kvv1.ManagedConnection) { m.Leader.ElectionBackend = kvv1.ElectionNone }},
		{"election None -> Kubernetes", func(m *kvv1.ManagedConnection) { m.Leader.ElectionBackend = kvv1.ElectionKubernetes }},
		{"multiTenancy true -> false", func(m *kvv1.ManagedConnection) { m.Leader.MultiTenancy = ptr.To(false) }},
		{"multiTenancy false -> true", func(m *kvv1.ManagedConnection) { m.Leader.MultiTenancy = ptr.To(true) }},
		{"a member group added", func(m *kvv1.ManagedConnection) {
			m.Members = append(m.Members, kvv1.MemberGroup{NodeSelector: map[string]string{"pool": "b"}, CapacityPerMember: resource.MustParse("1Gi")})
		}},
		{"the last member group removed", func(m *kvv1.ManagedConnection) { m.Members = m.Members[:1] }},
		{"election off and multiTenancy off in one edit", func(m *kvv1.ManagedConnection) {
			m.Leader.ElectionBackend, m.Leader.MultiTenancy = kvv1.ElectionNone, ptr.To(false)
		}},
		{"both back on in one edit", func(m *kvv1.ManagedConnection) {
			m.Leader.ElectionBackend, m.Leader.MultiTenancy = kvv1.ElectionKubernetes, ptr.To(true)
		}},
		{"networkPolicy off", func(m *kvv1.ManagedConnection) { m.NetworkPolicy.Enabled = ptr.To(false) }},
		{"networkPolicy on", func(m *kvv1.ManagedConnection) { m.NetworkPolicy.Enabled = ptr.To(true) }},
	}
	for _, st := range steps {
		updateBackend(t, "converge", func(b *kvv1.KVCacheBackend) { st.edit(b.Spec.Connection.Managed) })
		eventuallyConverged(t, "converge", st.name)
	}
	// Not electing, the Pods run as the namespace's default account without its token.
	updateBackend(t, "converge", func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionNone })
	eventuallyConverged(t, "converge", "election off again")
	d := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, leaderKey("converge"), d))
	assert.Equal(t, "default", d.Spec.Template.Spec.ServiceAccountName)
	assert.Equal(t, ptr.To(false), d.Spec.Template.Spec.AutomountServiceAccountToken)
}

// What a live Pod still references is not pruned: a member Pod started under the election's
// member account keeps that account until the Pod is gone (the DaemonSets update OnDelete, so
// old Pods run on until they are restarted).
func TestPruneWaitsForPodsThatReferenceIt(t *testing.T) {
	ctx := context.Background()
	fakeStore(t, "prune-wait", storetest.FakeOptions{MultiTenancy: true})
	create(t, walkthroughBackend("prune-wait"))
	eventuallyConverged(t, "prune-wait", "creation")
	p := memberPod(t, "prune-wait", 0, 0, "10.9.3.10")
	require.Equal(t, "prune-wait-member", p.Spec.ServiceAccountName)

	updateBackend(t, "prune-wait", func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionNone })
	leaderSA := client.ObjectKey{Namespace: systemNamespace, Name: "prune-wait-leader"}
	memberSA := client.ObjectKey{Namespace: systemNamespace, Name: "prune-wait-member"}
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, leaderSA, &corev1.ServiceAccount{}))
	}, wait, 100*time.Millisecond, "the leader account, which nothing runs as any more, is pruned")
	time.Sleep(2 * time.Second) // several reconciles
	require.NoError(t, env.Client.Get(ctx, memberSA, &corev1.ServiceAccount{}), "the member account stays while a member Pod runs as it")
	// The stale member was deleted for its restart (no kubelet here: it stays terminating,
	// still running as far as anyone knows).
	live := &corev1.Pod{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), live))
	assert.NotNil(t, live.DeletionTimestamp, "the stale member Pod is restarted")

	require.NoError(t, env.Client.Delete(ctx, p, client.GracePeriodSeconds(0)))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, memberSA, &corev1.ServiceAccount{}))
	}, wait, 100*time.Millisecond, "once the Pod is gone the account is pruned")
	eventuallyConverged(t, "prune-wait", "the Pod gone")
}
