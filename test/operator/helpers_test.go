package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/store/storetest"
	"github.com/kvcache-operator/kvcache/vocab"
)

const wait = 20 * time.Second

func walkthroughBackend(name string) *kvv1.KVCacheBackend {
	return &kvv1.KVCacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Members: []kvv1.MemberGroup{{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, CapacityPerMember: resource.MustParse("8Gi")}},
		}}},
	}
}

func create(t *testing.T, o client.Object) {
	t.Helper()
	require.NoError(t, env.Client.Create(context.Background(), o))
	t.Cleanup(func() { deleteAndWait(t, o) })
}

// deleteAndWait deletes o and waits until it is gone (finalizers released by the controllers).
func deleteAndWait(t *testing.T, o client.Object) {
	t.Helper()
	ctx := context.Background()
	_ = env.Client.Delete(ctx, o)
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object)))
	}, wait, 100*time.Millisecond, "%T %s was not deleted", o, o.GetName())
}

func get[T client.Object](t *testing.T, o T) T {
	t.Helper()
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o))
	return o
}

// eventually polls f on a fresh copy of the backend until it holds.
func eventuallyBackend(t *testing.T, name string, what string, f func(b *kvv1.KVCacheBackend) bool) *kvv1.KVCacheBackend {
	t.Helper()
	b := &kvv1.KVCacheBackend{}
	poll(t, func() bool {
		return env.Client.Get(context.Background(), client.ObjectKey{Name: name}, b) == nil && f(b)
	}, func() string { return fmt.Sprintf("backend %s: %s; last status: %+v", name, what, b.Status) })
	return b
}

func condition(conds []metav1.Condition, t string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func leaderKey(backend string) client.ObjectKey {
	return client.ObjectKey{Namespace: systemNamespace, Name: generator.LeaderName(backend)}
}

// rollOutLeader sets the leader Deployment's status as the Deployment controller and the
// kubelet would once its Pods run: every replica updated, one ready (standbys never are).
func rollOutLeader(t *testing.T, backend string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	require.Eventually(t, func() bool { return env.Client.Get(context.Background(), leaderKey(backend), d) == nil }, wait, 100*time.Millisecond)
	replicas := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: 1, AvailableReplicas: 1}
	require.NoError(t, env.Client.Status().Update(context.Background(), d))
	return d
}

// memberPod creates the Pod a member DaemonSet would schedule on a node, from its template, and
// sets the status the kubelet would: running, ready, with an IP.
func memberPod(t *testing.T, backend string, group, n int, ip string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	ds := &appsv1.DaemonSet{}
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: generator.MemberName(backend, group)}, ds) == nil
	}, wait, 100*time.Millisecond)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: fmt.Sprintf("%s-%d", ds.Name, n), Labels: ds.Spec.Template.Labels},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
	p.Spec.NodeName = fmt.Sprintf("node-%d", n)
	require.NoError(t, env.Client.Create(ctx, p))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	require.NoError(t, env.Client.Status().Update(ctx, p))
	return p
}

// children lists a backend's workloads, Services, ConfigMaps and ServiceAccounts.
func children(t *testing.T, backend string) map[string]client.Object {
	t.Helper()
	return childrenOf(t, backend, &appsv1.DeploymentList{}, &appsv1.DaemonSetList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}, &corev1.ServiceAccountList{})
}

// childrenOf lists a backend's children of the given kinds in the system namespace, by
// "<type>/<name>".
func childrenOf(t *testing.T, backend string, lists ...client.ObjectList) map[string]client.Object {
	t.Helper()
	out := map[string]client.Object{}
	sel := client.MatchingLabels{vocab.LabelInstance: backend}
	for _, l := range lists {
		require.NoError(t, env.Client.List(context.Background(), l, client.InNamespace(systemNamespace), sel))
		items, err := meta.ExtractList(l)
		require.NoError(t, err)
		for _, ro := range items {
			o := ro.(client.Object)
			out[fmt.Sprintf("%T/%s", o, o.GetName())] = o
		}
	}
	return out
}

// updateBackend edits a backend, retrying on conflicts with the controller's status writes.
func updateBackend(t *testing.T, name string, edit func(b *kvv1.KVCacheBackend)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b := &kvv1.KVCacheBackend{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, b); err != nil {
			return err
		}
		edit(b)
		return env.Client.Update(context.Background(), b)
	}))
}

// poll waits for cond, failing with describe() (evaluated at the end, so it shows the last
// state observed, not the first).
func poll(t *testing.T, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(describe())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// grantedTenant runs a multi-tenant fake master for an external backend named store with one
// segment mounted (segment bytes at ip), a pool of poolTotal on it and the Binding team-a/name
// for domain with ceiling; the tenant is emptied at cleanup so the Binding can be released.
func grantedTenant(t *testing.T, store, ip string, segment int64, poolTotal, name, domain, ceiling string) *storetest.Fake {
	t.Helper()
	fake := fakeStore(t, store, storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment(ip+":15400", segment, "tcp")
	create(t, externalBackend(store, store+".example:50051"))
	create(t, pool(name+"-pool", store, poolTotal))
	create(t, binding("team-a", name, name+"-pool", domain, ceiling))
	t.Cleanup(func() { fake.SetCharged(domain, 0) })
	return fake
}
