package operator_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/operator/backend"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// An operator upgrade (the same backend reconciled by an operator shipping another launcher
// image) replaces no store Pod: the leader keeps the Pod template it runs, and the backend says
// an update is pending and what it would change. A spec change that restarts the leader anyway
// takes the new launcher with it, and operatorUpdates: Immediate takes it at once. Two operator
// versions are two reconcilers on one API server of this test's own, so nothing else reconciles
// meanwhile.
func TestOperatorUpgradeRestartsNoStore(t *testing.T) {
	env := testenv.StartForTest(t, "the operator-upgrade test")
	ctx := context.Background()
	c := env.Client
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}))
	for name, value := range kvv1.SettingCatalog() {
		require.NoError(t, c.Create(ctx, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.SettingSpec{Value: value}}))
	}
	fake := storetest.NewFake(storetest.FakeOptions{MultiTenancy: true})
	t.Cleanup(fake.Close)
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	const (
		oldImage = "docker.io/gpustack/kvcache-operator:0.1.0"
		newImage = "docker.io/gpustack/kvcache-operator:0.1.1"
	)
	operatorAt := func(image string) *backend.Reconciler {
		return &backend.Reconciler{Client: c, APIReader: c, Renderer: r, SystemNamespace: systemNamespace, OperatorImage: image,
			Admin: func(*kvv1.KVCacheBackend) store.Admin { return store.New(fake.URL()) }, Recorder: events.NewFakeRecorder(100)}
	}
	reconcile := func(rec *backend.Reconciler, name string) *kvv1.KVCacheBackend {
		t.Helper()
		_, err := rec.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
		require.NoError(t, err)
		b := &kvv1.KVCacheBackend{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: name}, b))
		return b
	}
	leader := func(name string) *appsv1.Deployment {
		t.Helper()
		d := &appsv1.Deployment{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: generator.LeaderName(name)}, d))
		return d
	}
	launcher := func(d *appsv1.Deployment) string {
		i := slices.IndexFunc(d.Spec.Template.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "kvcache-launcher" })
		require.GreaterOrEqual(t, i, 0, "the electing leader copies the launcher")
		return d.Spec.Template.Spec.InitContainers[i].Image
	}

	b := walkthroughBackend("upgrade")
	require.NoError(t, c.Create(ctx, b))
	reconcile(operatorAt(oldImage), "upgrade")
	before := leader("upgrade")
	require.Equal(t, oldImage, launcher(before))

	// The new operator: the leader's Pod template is kept, so its Pods are not replaced.
	got := reconcile(operatorAt(newImage), "upgrade")
	after := leader("upgrade")
	assert.Equal(t, oldImage, launcher(after), "the running launcher is kept")
	assert.Equal(t, before.Spec.Template, after.Spec.Template, "the leader's Pod template is unchanged")
	assert.Equal(t, before.Generation, after.Generation, "no rollout")
	cond := meta.FindStatusCondition(got.Status.Conditions, kvv1.ConditionUpdatePending)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Equal(t, kvv1.ReasonOperatorUpdateDeferred, cond.Reason)
	assert.Contains(t, cond.Message, "upgrade-leader: container kvcache-launcher image "+oldImage+" -> "+newImage)
	// Steady while deferred: reconciling again writes nothing to the leader.
	reconcile(operatorAt(newImage), "upgrade")
	assert.Equal(t, after.ResourceVersion, leader("upgrade").ResourceVersion)

	// A spec change that restarts the leader anyway: one restart, the new launcher with it.
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(b), b))
	b.Spec.Connection.Managed.Leader.ExtraArgs = []string{"-default_kv_lease_ttl=10m"}
	require.NoError(t, c.Update(ctx, b))
	got = reconcile(operatorAt(newImage), "upgrade")
	changed := leader("upgrade")
	assert.Equal(t, newImage, launcher(changed))
	assert.Contains(t, changed.Spec.Template.Spec.Containers[0].Args, "-default_kv_lease_ttl=10m")
	// The members' spec did not change: they keep their launcher, and only they are pending.
	cond = meta.FindStatusCondition(got.Status.Conditions, kvv1.ConditionUpdatePending)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status, cond.Message)
	assert.NotContains(t, cond.Message, "upgrade-leader:", "the leader took the update with its spec change")
	assert.Contains(t, cond.Message, "upgrade-member-0: container kvcache-launcher image "+oldImage+" -> "+newImage)

	// operatorUpdates: Immediate takes an operator's changes at once.
	im := walkthroughBackend("immediate")
	require.NoError(t, c.Create(ctx, im))
	reconcile(operatorAt(oldImage), "immediate")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(im), im))
	im.Spec.Connection.Managed.OperatorUpdates = kvv1.OperatorUpdatesImmediate
	require.NoError(t, c.Update(ctx, im))
	got = reconcile(operatorAt(newImage), "immediate")
	assert.Equal(t, newImage, launcher(leader("immediate")))
	assert.Equal(t, metav1.ConditionFalse, meta.FindStatusCondition(got.Status.Conditions, kvv1.ConditionUpdatePending).Status)
}
