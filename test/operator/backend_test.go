package operator_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// The walkthrough's Step 1: the children exist with owner references, and once the leader
// serves and two members registered 8Gi each, the backend reads Ready with 16Gi read from the
// store, and `kubectl get kvcb` prints the walkthrough's line.
func TestWalkthroughBackendBecomesReadyFromTheStore(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "mooncake-dram", storetest.FakeOptions{MultiTenancy: true})
	b := walkthroughBackend("mooncake-dram")
	create(t, b)

	require.Eventually(t, func() bool { return len(children(t, "mooncake-dram")) == 6 }, wait, 100*time.Millisecond)
	kids := children(t, "mooncake-dram")
	for name, o := range kids {
		require.Len(t, o.GetOwnerReferences(), 1, name)
		ref := o.GetOwnerReferences()[0]
		assert.Equal(t, "KVCacheBackend", ref.Kind, name)
		assert.Equal(t, get(t, b).UID, ref.UID, name)
		assert.True(t, *ref.Controller, name)
	}
	// What was applied is what `kvcache render` prints for the same backend.
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	rendered, err := r.RenderStore(generator.StoreInput{Backend: get(t, b), SystemNamespace: systemNamespace, BackendImageSetting: kvv1.DefaultKVCacheBackendImage})
	require.NoError(t, err)
	for _, o := range rendered {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			live := kids["*v1.DaemonSet/"+ds.Name].(*appsv1.DaemonSet)
			assert.Equal(t, ds.Spec.Template.Spec.Containers[0].Env, live.Spec.Template.Spec.Containers[0].Env)
			assert.Equal(t, ds.Spec.Template.Labels, live.Spec.Template.Labels)
		}
	}

	eventuallyBackend(t, "mooncake-dram", "provisioning until the leader serves", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Phase == kvv1.PhaseDegraded || b.Status.Phase == kvv1.PhaseProvisioning
	})
	rollOutLeader(t, "mooncake-dram")
	memberPod(t, "mooncake-dram", 0, 0, "10.0.0.10")
	memberPod(t, "mooncake-dram", 0, 1, "10.0.0.11")
	fake.MountSegment("10.0.0.10:15400", 8<<30, "tcp")
	fake.MountSegment("10.0.0.11:15400", 8<<30, "tcp")

	got := eventuallyBackend(t, "mooncake-dram", "Ready", func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseReady })
	assert.Equal(t, "16Gi", got.Status.Capacity.Total.String())
	assert.Equal(t, metav1.ConditionTrue, condition(got.Status.Conditions, kvv1.ConditionMembersMounted).Status)
	assert.Equal(t, "all 2 member Pod(s) registered their segments", condition(got.Status.Conditions, kvv1.ConditionMembersMounted).Message)
	assert.Equal(t, "mooncake-dram-leader.gpustack-system.svc:50051", got.Status.Endpoints[0].Address)
	assert.ElementsMatch(t, []string{"mooncake-dram-member-0-0", "mooncake-dram-member-0-1"}, []string{got.Status.Members[0].Pod, got.Status.Members[1].Pod})

	kubectl := filepath.Join(env.Environment().BinaryAssetsDirectory, "kubectl")
	kubeconfig := writeKubeconfig(t)
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "kvcb", "mooncake-dram").CombinedOutput()
	require.NoError(t, err, string(out))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, []string{"NAME", "TYPE", "PHASE", "ENDPOINT", "CAPACITY", "AGE"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"mooncake-dram", "Mooncake", "Ready", "mooncake-dram-leader.gpustack-system.svc:50051", "16Gi"}, strings.Fields(lines[1])[:5])
	// -o wide says what a failover does to the cache.
	out, err = exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "kvcb", "mooncake-dram", "-o", "wide").CombinedOutput()
	require.NoError(t, err, string(out))
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, []string{"NAME", "TYPE", "PHASE", "ENDPOINT", "CAPACITY", "FAILOVER", "AGE", "UPDATE-PENDING"}, strings.Fields(lines[0]))
	assert.Equal(t, "Cold", strings.Fields(lines[1])[5])
	t.Logf("kubectl get kvcb:\n%s", out)

	// A member that runs but has not registered is named, and the store is Degraded.
	memberPod(t, "mooncake-dram", 0, 2, "10.0.0.12")
	got = eventuallyBackend(t, "mooncake-dram", "a member not registered", func(b *kvv1.KVCacheBackend) bool {
		return condition(b.Status.Conditions, kvv1.ConditionMembersMounted).Reason == "NotRegistered"
	})
	assert.Equal(t, "member Pods not registered with the master: mooncake-dram-member-0-2 (2 of 3 mounted)", condition(got.Status.Conditions, kvv1.ConditionMembersMounted).Message)
	assert.Equal(t, kvv1.PhaseDegraded, got.Status.Phase)
	fake.MountSegment("10.0.0.12:15400", 8<<30, "tcp")
	eventuallyBackend(t, "mooncake-dram", "Ready with 24Gi", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Phase == kvv1.PhaseReady && b.Status.Capacity.Total.String() == "24Gi"
	})

	// The master goes away: capacity is absent (not zero) and the phase says the store is down.
	fake.SetDown(true)
	got = eventuallyBackend(t, "mooncake-dram", "Error with no capacity", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Phase == kvv1.PhaseError && b.Status.Capacity == nil
	})
	assert.Equal(t, "LeaderUnavailable", condition(got.Status.Conditions, kvv1.ConditionCapacityObserved).Reason)
	fake.SetDown(false)
	eventuallyBackend(t, "mooncake-dram", "Ready again", func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseReady })
	_ = ctx
}

func writeKubeconfig(t *testing.T) string {
	t.Helper()
	user, err := env.Environment().ControlPlane.AddUser(envtestAdmin(), nil)
	require.NoError(t, err)
	kc, err := user.KubeConfig()
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, writeFile(p, kc))
	return p
}

// Removing a member group deletes its DaemonSet; turning the election off deletes the Lease
// accounts. Nothing the render no longer produces is left behind.
func TestChildrenTheRenderDropsArePruned(t *testing.T) {
	ctx := context.Background()
	fakeStore(t, "prune", storetest.FakeOptions{MultiTenancy: true})
	b := walkthroughBackend("prune")
	b.Spec.Connection.Managed.Members = append(b.Spec.Connection.Managed.Members, kvv1.MemberGroup{
		NodeSelector: map[string]string{"pool": "b"}, CapacityPerMember: resource.MustParse("1Gi")})
	create(t, b)
	ds1 := client.ObjectKey{Namespace: systemNamespace, Name: generator.MemberName("prune", 1)}
	require.Eventually(t, func() bool { return env.Client.Get(ctx, ds1, &appsv1.DaemonSet{}) == nil }, wait, 100*time.Millisecond)

	updateBackend(t, "prune", func(b *kvv1.KVCacheBackend) {
		b.Spec.Connection.Managed.Members = b.Spec.Connection.Managed.Members[:1]
		b.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionNone
	})
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, ds1, &appsv1.DaemonSet{})) &&
			apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "prune-leader"}, &rbacv1.Role{})) &&
			apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "prune-member"}, &corev1.ServiceAccount{}))
	}, wait, 100*time.Millisecond, "the dropped group's DaemonSet and the election accounts are pruned")
	d := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, leaderKey("prune"), d))
	assert.NotContains(t, d.Spec.Template.Spec.Containers[0].Args, "-enable_ha=true")
}

// Member DaemonSets update OnDelete: the operator deletes member Pods whose pod spec is stale,
// one at a time while the rest of the group is ready; widening the nodeSelector makes nothing
// stale.
func TestStaleMembersAreRestartedAndWideningRestartsNobody(t *testing.T) {
	ctx := context.Background()
	fakeStore(t, "restarts", storetest.FakeOptions{MultiTenancy: true})
	b := walkthroughBackend("restarts")
	create(t, b)
	p0 := memberPod(t, "restarts", 0, 0, "10.1.0.10")
	p1 := memberPod(t, "restarts", 0, 1, "10.1.0.11")

	updateBackend(t, "restarts", func(b *kvv1.KVCacheBackend) {
		b.Spec.Connection.Managed.Members[0].NodeSelector["gpustack.ai/tier"] = "cache"
	})
	require.Eventually(t, func() bool {
		ds := &appsv1.DaemonSet{}
		_ = env.Client.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "restarts-member-0"}, ds)
		return ds.Spec.Template.Spec.NodeSelector["gpustack.ai/tier"] == "cache"
	}, wait, 100*time.Millisecond)
	time.Sleep(2 * time.Second) // several reconciles
	for _, p := range []*corev1.Pod{p0, p1} {
		live := &corev1.Pod{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), live), "a widened nodeSelector restarts nobody")
		assert.Nil(t, live.DeletionTimestamp)
	}

	updateBackend(t, "restarts", func(b *kvv1.KVCacheBackend) {
		b.Spec.Connection.Managed.Members[0].CapacityPerMember = resource.MustParse("16Gi")
	})
	// Exactly one stale Pod goes first; the other stays while its group has one member away.
	// Without a kubelet a deleted Pod stays terminating; that is the member being away.
	terminating := func(p *corev1.Pod) bool {
		live := &corev1.Pod{}
		return env.Client.Get(ctx, client.ObjectKeyFromObject(p), live) != nil || live.DeletionTimestamp != nil
	}
	require.Eventually(t, func() bool { return terminating(p0) }, wait, 100*time.Millisecond, "the first stale member Pod is deleted")
	time.Sleep(2 * time.Second) // several reconciles
	assert.False(t, terminating(p1), "the second waits while its group has a member away")
}

// Step 4: raising 1 -> 3 replicas of an electing leader changes only the count (the electing
// template existed at one replica), so the first leader Pod stays. Turning the election on and
// raising the count in one edit rolls the new template out at one replica first.
func TestHighAvailabilityScalesWithoutReplacingTheLeader(t *testing.T) {
	ctx := context.Background()
	fakeStore(t, "ha", storetest.FakeOptions{MultiTenancy: true})
	b := walkthroughBackend("ha")
	create(t, b)
	before := rollOutLeader(t, "ha")
	updateBackend(t, "ha", func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.Leader.Replicas = ptr.To[int32](3) })
	d := &appsv1.Deployment{}
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, leaderKey("ha"), d) == nil && *d.Spec.Replicas == 3
	}, wait, 100*time.Millisecond)
	assert.Equal(t, before.Spec.Template, d.Spec.Template, "the pod template is unchanged, so no leader Pod is replaced")
	assert.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, d.Spec.Strategy.Type)
	assert.Equal(t, int32(2147483647), *d.Spec.ProgressDeadlineSeconds)

	fakeStore(t, "ha-late", storetest.FakeOptions{MultiTenancy: true})
	late := walkthroughBackend("ha-late")
	late.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionNone
	create(t, late)
	rollOutLeader(t, "ha-late")
	updateBackend(t, "ha-late", func(b *kvv1.KVCacheBackend) {
		b.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionKubernetes
		b.Spec.Connection.Managed.Leader.Replicas = ptr.To[int32](3)
	})
	eventuallyBackend(t, "ha-late", "ReplicasPending while the electing template rolls out at one replica", func(b *kvv1.KVCacheBackend) bool {
		return condition(b.Status.Conditions, kvv1.ConditionRolloutComplete).Reason == "ReplicasPending"
	})
	require.NoError(t, env.Client.Get(ctx, leaderKey("ha-late"), d))
	assert.Equal(t, int32(1), *d.Spec.Replicas)
	args := d.Spec.Template.Spec.Containers[0].Args
	dash := slices.Index(args, "--")
	require.Positive(t, dash, "the electing template separates the launcher's flags from the master's: %q", args)
	assert.Equal(t, "elect", args[0], "the electing template runs the launcher")
	assert.Contains(t, args[:dash], "--lease-name=ha-late-leader", "the launcher campaigns for the backend's Lease")
	assert.Equal(t, "mooncake_master", args[dash+1], "the launcher runs the master")
	rollOutLeader(t, "ha-late") // the Deployment controller finished the template
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, leaderKey("ha-late"), d) == nil && *d.Spec.Replicas == 3
	}, wait, 100*time.Millisecond, "then the count")
}

// A backend whose image resolves from nowhere is Degraded with the reason; nothing crashes.
func TestMissingImageIsDegradedNotACrash(t *testing.T) {
	ctx := context.Background()
	s := &kvv1.Setting{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: kvv1.SettingKVCacheBackendImage}, s))
	fakeStore(t, "no-image", storetest.FakeOptions{MultiTenancy: true})
	create(t, walkthroughBackend("no-image"))
	eventuallyBackend(t, "no-image", "rendered", func(b *kvv1.KVCacheBackend) bool { return b.Status.ObservedGeneration == b.Generation })
	require.NoError(t, env.Client.Delete(ctx, s))
	t.Cleanup(func() {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(s), &kvv1.Setting{}); apierrors.IsNotFound(err) {
			s.ResourceVersion = ""
			require.NoError(t, env.Client.Create(ctx, s))
		}
	})
	got := eventuallyBackend(t, "no-image", "Degraded for the image", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Phase == kvv1.PhaseDegraded && strings.Contains(b.Status.PhaseMessage, "no store image")
	})
	assert.Equal(t, "cannot render the store: KVCacheBackend no-image: no store image: set spec.image or create the Setting kv-cache-backend-image", got.Status.PhaseMessage)
	rendered := condition(got.Status.Conditions, kvv1.ConditionRolloutComplete)
	assert.Equal(t, metav1.ConditionFalse, rendered.Status)
	assert.Equal(t, "RenderFailed", rendered.Reason, "the failed render is a condition, not text to parse back")
	assert.Equal(t, got.Status.PhaseMessage, rendered.Message)

	// A generation that cannot be rendered is not put into effect: observedGeneration stays at
	// the last one that was, while the condition says which generation failed.
	observed := got.Status.ObservedGeneration
	require.Equal(t, got.Generation, observed)
	updateBackend(t, "no-image", func(b *kvv1.KVCacheBackend) {
		b.Spec.Connection.Managed.Members[0].CapacityPerMember = resource.MustParse("4Gi")
	})
	got = eventuallyBackend(t, "no-image", "the new generation's render failed", func(b *kvv1.KVCacheBackend) bool {
		return condition(b.Status.Conditions, kvv1.ConditionRolloutComplete).ObservedGeneration == b.Generation
	})
	assert.Equal(t, observed, got.Status.ObservedGeneration, "observedGeneration only moves when a reconcile succeeded")
	assert.Greater(t, got.Generation, observed)
	require.NoError(t, env.Client.Create(ctx, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: kvv1.SettingKVCacheBackendImage}, Spec: s.Spec}))
	got = eventuallyBackend(t, "no-image", "rendered again", func(b *kvv1.KVCacheBackend) bool { return b.Status.ObservedGeneration == b.Generation })
	assert.NotEqual(t, "RenderFailed", condition(got.Status.Conditions, kvv1.ConditionRolloutComplete).Reason)
}

// Deletion waits while a pool uses the backend.
func TestDeletionWaitsForThePools(t *testing.T) {
	ctx := context.Background()
	fakeStore(t, "held", storetest.FakeOptions{MultiTenancy: true})
	b := walkthroughBackend("held")
	create(t, b)
	p := &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "held-pool"}, Spec: kvv1.KVCachePoolSpec{Backends: []string{"held"}, Quota: kvv1.PoolQuota{Total: resource.MustParse("8Gi")}}}
	require.NoError(t, env.Client.Create(ctx, p))
	eventuallyBackend(t, "held", "used by the pool", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.UsedBy) == 1 })
	require.NoError(t, env.Client.Delete(ctx, b))
	got := eventuallyBackend(t, "held", "Deleting, held", func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseDeleting })
	assert.Equal(t, metav1.Condition{Type: kvv1.ConditionDeletable, Status: metav1.ConditionFalse, Reason: "InUse",
		Message: "used by KVCachePool held-pool; deleting the backend waits until they are gone"}, stripTimes(condition(got.Status.Conditions, kvv1.ConditionDeletable)))
	deleteAndWait(t, p)
	deleteAndWait(t, b)
}

func stripTimes(c metav1.Condition) metav1.Condition {
	c.LastTransitionTime = metav1.Time{}
	c.ObservedGeneration = 0
	return c
}
