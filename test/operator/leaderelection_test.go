package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvcache-operator/kvcache/internal/manager"
)

// A manager that stops gives up the controllers' Lease, so the next one (a rolled replica, the
// next install) leads at once instead of waiting out the Lease duration (15 s; 17 s was
// measured on a reinstall).
func TestAStoppingManagerReleasesItsLease(t *testing.T) {
	ctx := context.Background()
	// Only the election: the suite's manager already runs the controllers and nothing here
	// must reconcile twice.
	start := func() (stop func(), elected <-chan struct{}) {
		mgr, err := manager.New(env.Config, manager.Options{
			SystemNamespace: systemNamespace, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
			LeaderElect: true, DisableControllers: true, DisableWebhooks: true,
		})
		require.NoError(t, err)
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		return func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("the manager did not stop")
			}
		}, mgr.Elected()
	}
	key := client.ObjectKey{Namespace: systemNamespace, Name: "kvcache-operator"}
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
	})

	stopA, electedA := start()
	select {
	case <-electedA:
	case <-time.After(wait):
		t.Fatal("the first manager was not elected")
	}
	l := &coordinationv1.Lease{}
	require.NoError(t, env.Client.Get(ctx, key, l))
	require.NotNil(t, l.Spec.HolderIdentity)
	first := *l.Spec.HolderIdentity
	require.NotEmpty(t, first)
	require.NotNil(t, l.Spec.LeaseDurationSeconds)
	duration := time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second

	stopA()
	stoppedAt := time.Now()
	require.NoError(t, env.Client.Get(ctx, key, l))
	assert.Empty(t, ptr.Deref(l.Spec.HolderIdentity, ""), "the stopped manager released the Lease")

	stopB, electedB := start()
	defer stopB()
	select {
	case <-electedB:
	case <-time.After(duration):
		t.Fatalf("the next manager was not elected within the Lease duration (%s)", duration)
	}
	took := time.Since(stoppedAt)
	t.Logf("first manager stopped -> the next one leads in %s (Lease duration %s)", took.Round(time.Millisecond), duration)
	assert.Less(t, took, duration/3, "the next manager leads well before the old Lease would have run out")
	require.NoError(t, env.Client.Get(ctx, key, l))
	assert.NotEqual(t, first, *l.Spec.HolderIdentity)
}
