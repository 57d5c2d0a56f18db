package operator_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// What the operator owns is put back within one reconcile of a change made outside it (the
// watch on the children runs that reconcile): `kubectl scale deploy <b>-leader --replicas=0`
// (the scale subresource, another field manager) and an edited member env. Afterwards the
// children are left alone: no resourceVersion moves over several polls.
func TestDriftIsUndone(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "drift", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.5.0.10:15400", 8<<30, "tcp")
	create(t, walkthroughBackend("drift"))
	rollOutLeader(t, "drift")
	memberPod(t, "drift", 0, 0, "10.5.0.10")
	eventuallyBackend(t, "drift", "Ready", func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseReady })

	// kubectl scale deploy drift-leader --replicas=0
	d := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, leaderKey("drift"), d))
	scale := &autoscalingv1.Scale{}
	require.NoError(t, env.Client.SubResource("scale").Get(ctx, d, scale))
	scale.Spec.Replicas = 0
	scaledAt := time.Now()
	require.NoError(t, env.Client.SubResource("scale").Update(ctx, d, client.WithSubResourceBody(scale), client.FieldOwner("kubectl")))
	require.NoError(t, env.Client.Get(ctx, leaderKey("drift"), d))
	require.Equal(t, int32(0), *d.Spec.Replicas, "the scale went through")
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, leaderKey("drift"), d) == nil && *d.Spec.Replicas == 1
	}, wait, 20*time.Millisecond, "the leader is scaled back to its spec")
	t.Logf("leader scaled to 0 -> back at 1 replica in %s", time.Since(scaledAt).Round(time.Millisecond))

	// kubectl edit ds drift-member-0: MOONCAKE_PROTOCOL=tcp -> rdma
	key := client.ObjectKey{Namespace: systemNamespace, Name: generator.MemberName("drift", 0)}
	ds := &appsv1.DaemonSet{}
	require.NoError(t, env.Client.Get(ctx, key, ds))
	env0 := ds.Spec.Template.Spec.Containers[0].Env
	i := slices.IndexFunc(env0, func(e corev1.EnvVar) bool { return e.Name == "MOONCAKE_PROTOCOL" })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, "tcp", env0[i].Value)
	env0[i].Value = "rdma"
	editedAt := time.Now()
	require.NoError(t, env.Client.Update(ctx, ds, client.FieldOwner("kubectl-edit")))
	require.Eventually(t, func() bool {
		if env.Client.Get(ctx, key, ds) != nil {
			return false
		}
		e := ds.Spec.Template.Spec.Containers[0].Env
		j := slices.IndexFunc(e, func(e corev1.EnvVar) bool { return e.Name == "MOONCAKE_PROTOCOL" })
		return j >= 0 && e[j].Value == "tcp"
	}, wait, 20*time.Millisecond, "the member env is put back")
	t.Logf("member env edited -> put back in %s", time.Since(editedAt).Round(time.Millisecond))

	// The operator says what it put back, naming the field.
	require.Eventually(t, func() bool {
		return hasEvent(t, "DriftReverted", "Deployment drift-leader: spec.replicas was changed outside the operator; applied the rendered value again") &&
			hasEvent(t, "DriftReverted", "DaemonSet drift-member-0: spec.template.spec.containers[name=member].env[name=MOONCAKE_PROTOCOL].value was changed outside the operator; applied the rendered value again")
	}, wait, 100*time.Millisecond, "the DriftReverted events")

	// Steady again: nothing the operator owns is written over several polls (500 ms).
	before := resourceVersions(t, "drift")
	time.Sleep(3 * time.Second)
	assert.Equal(t, before, resourceVersions(t, "drift"), "resourceVersions of the backend and its children in steady state")
}

// resourceVersions of a backend and every child it owns.
func resourceVersions(t *testing.T, backend string) map[string]string {
	t.Helper()
	out := map[string]string{}
	b := &kvv1.KVCacheBackend{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Name: backend}, b))
	out["KVCacheBackend/"+backend] = b.ResourceVersion
	for k, o := range allChildren(t, backend) {
		out[k] = o.GetResourceVersion()
	}
	return out
}

// hasEvent reports whether an Event with reason and note was recorded (by the manager's
// recorder, events.k8s.io/v1).
func hasEvent(t *testing.T, reason, note string) bool {
	t.Helper()
	l := &eventsv1.EventList{}
	require.NoError(t, env.Client.List(context.Background(), l))
	for _, e := range l.Items {
		if e.Reason == reason && e.Note == note {
			return true
		}
	}
	return false
}

// eventNotes are the notes of the Events with reason about regarding's name.
func eventNotes(t *testing.T, reason, regarding string) []string {
	t.Helper()
	l := &eventsv1.EventList{}
	require.NoError(t, env.Client.List(context.Background(), l))
	var out []string
	for _, e := range l.Items {
		if e.Reason == reason && e.Regarding.Name == regarding {
			out = append(out, e.Note)
		}
	}
	return out
}
