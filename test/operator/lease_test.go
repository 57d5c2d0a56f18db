package operator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// Deleting a backend removes the election Lease its launchers created, and only once no leader
// Pod is left to create it again: the leader Deployment and the member DaemonSets go first, the
// backend waits (saying so) while a leader Pod terminates, then the Lease and the backend go.
// The members stop at once: nothing is left to drain them into.
func TestDeletingABackendRemovesItsElectionLease(t *testing.T) {
	ctx := context.Background()
	fakeStore(t, "leased", storetest.FakeOptions{MultiTenancy: true})
	b := walkthroughBackend("leased")
	require.NoError(t, env.Client.Create(ctx, b))
	d := rollOutLeader(t, "leased")
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: generator.LeaderName("leased")},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("leased-leader-0"), LeaseDurationSeconds: ptr.To[int32](10)}}
	require.NoError(t, env.Client.Create(ctx, lease), "as the leading launcher creates it")
	// A leader Pod still running (envtest has no kubelet or garbage collector: the test plays
	// them), with a finalizer so that it stays while "terminating".
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: "leased-leader-0", Labels: d.Spec.Template.Labels,
		Finalizers: []string{"kvcache-test/terminating"}}, Spec: *d.Spec.Template.Spec.DeepCopy()}
	require.NoError(t, env.Client.Create(ctx, pod))
	release := func() {
		p := &corev1.Pod{}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(pod), p) == nil {
			p.Finalizers = nil
			_ = env.Client.Update(ctx, p)
			_ = env.Client.Delete(ctx, p, client.GracePeriodSeconds(0))
		}
	}
	t.Cleanup(release)
	// A member on a node: its preStop drain would have nowhere to go with the whole store leaving.
	member := memberPod(t, "leased", 0, 0, "10.0.0.9")
	require.NotNil(t, member.Spec.TerminationGracePeriodSeconds)
	assert.Greater(t, *member.Spec.TerminationGracePeriodSeconds, int64(300), "a member's grace period covers its drain")

	require.NoError(t, env.Client.Delete(ctx, b))
	got := eventuallyBackend(t, "leased", "waiting for the leader Pod", func(b *kvv1.KVCacheBackend) bool {
		return strings.HasPrefix(b.Status.PhaseMessage, "waiting for 1 leader Pod(s) to stop")
	})
	assert.Equal(t, "waiting for 1 leader Pod(s) to stop before the election Lease leased-leader is removed", got.Status.PhaseMessage)
	assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, leaderKey("leased"), &appsv1.Deployment{})), "the leader Deployment went first")
	assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: generator.MemberName("leased", 0)}, &appsv1.DaemonSet{})),
		"and the members with it, to stop side by side")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(lease), &coordinationv1.Lease{}), "the Lease stays while a launcher may run")
	poll(t, func() bool {
		p := &corev1.Pod{}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(member), p)
		return apierrors.IsNotFound(err) || (p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds <= 2)
	}, func() string { return "the member stopping within 2 s, not after its drain" })

	require.NoError(t, env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)))
	release()
	poll(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(b), &kvv1.KVCacheBackend{})) &&
			apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(lease), &coordinationv1.Lease{}))
	}, func() string { return "the backend and its Lease gone" })
}
