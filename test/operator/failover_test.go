package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// writeLease writes the backend's election Lease as client-go's leaderelection does for a
// holder: holderIdentity the leader Pod's name, leaseTransitions bumped on every change of
// holder, acquireTime set when a holder acquires, renewTime on every renewal.
func writeLease(t *testing.T, backend, holder string, transitions int32, acquired time.Time) {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKey{Namespace: systemNamespace, Name: generator.LeaderName(backend)}
	at, now := metav1.NewMicroTime(acquired), metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
		AcquireTime: &at, RenewTime: &now, LeaseTransitions: ptr.To(transitions)}
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, key, l); err != nil {
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Spec: spec}
			return env.Client.Create(ctx, l)
		}
		l.Spec = spec
		return env.Client.Update(ctx, l)
	}))
}

// Step 5 of the walkthrough, from the Lease the leader's launcher writes: ElectionObserved
// names the holder and since when; a change of holder is a cold cache at the new holder's
// acquireTime (status.leader and an Event); capacity is not reported from the old master
// (withheld while the master answering is still the one from before the change) and comes
// back once the new leader's master answers.
func TestFailoverIsAColdCache(t *testing.T) {
	fake := fakeStore(t, "failover", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.9.1.10:15400", 8<<30, "tcp")
	create(t, walkthroughBackend("failover")) // electing (the default)
	rollOutLeader(t, "failover")
	memberPod(t, "failover", 0, 0, "10.9.1.10")
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: "failover-leader"}})
	})

	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	writeLease(t, "failover", "failover-leader-6c9f-a", 0, t0)
	got := eventuallyBackend(t, "failover", "Ready with the holder named", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Phase == kvv1.PhaseReady && condition(b.Status.Conditions, kvv1.ConditionElectionObserved).Status == metav1.ConditionTrue
	})
	assert.Equal(t, fmt.Sprintf("held by failover-leader-6c9f-a since %s (0 holder change(s))", t0.UTC().Format(time.RFC3339)),
		condition(got.Status.Conditions, kvv1.ConditionElectionObserved).Message)
	assert.Equal(t, &kvv1.LeaderStatus{Holder: "failover-leader-6c9f-a", HolderSince: &metav1.Time{Time: t0}, LeaseTransitions: ptr.To[int32](0), Failover: kvv1.FailoverCold}, got.Status.Leader,
		"the first holder seen is no change: nothing was cached before it")
	time.Sleep(2 * time.Second) // the member pings the master: its counters grow

	// The leader's launcher released the Lease on SIGTERM, a standby acquired it.
	writeLease(t, "failover", "", 0, t0)
	got = eventuallyBackend(t, "failover", "nobody holds the Lease", func(b *kvv1.KVCacheBackend) bool {
		return condition(b.Status.Conditions, kvv1.ConditionElectionObserved).Reason == "NoHolder"
	})
	assert.Nil(t, got.Status.Leader.ColdCacheSince, "a released Lease is no change yet")
	t1 := time.Now().Truncate(time.Second)
	writeLease(t, "failover", "failover-leader-6c9f-b", 1, t1)
	got = eventuallyBackend(t, "failover", "a cold cache since the new holder's acquireTime", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Leader != nil && b.Status.Leader.ColdCacheSince != nil
	})
	assert.Equal(t, &kvv1.LeaderStatus{Holder: "failover-leader-6c9f-b", HolderSince: &metav1.Time{Time: t1}, LeaseTransitions: ptr.To[int32](1),
		ColdCacheSince: &metav1.Time{Time: t1}, ColdCacheReason: kvv1.ColdCacheLeaderChanged, Failover: kvv1.FailoverCold}, got.Status.Leader)
	assert.Nil(t, got.Status.Capacity, "no capacity from the master that was replaced")
	assert.Equal(t, fmt.Sprintf("held by failover-leader-6c9f-b since %s (1 holder change(s))", t1.UTC().Format(time.RFC3339)),
		condition(got.Status.Conditions, kvv1.ConditionElectionObserved).Message)
	require.Eventually(t, func() bool {
		return hasEvent(t, "ColdCache", fmt.Sprintf("the election Lease moved to failover-leader-6c9f-b at %s (transition 1): the new leader holds none of the objects cached before, so each of them misses (cold cache)", t1.UTC().Format(time.RFC3339)))
	}, wait, 100*time.Millisecond, "the ColdCache event")

	// The fake master was not restarted: what answers is still the old process. Its figures
	// are withheld for as long as the old holder's claim could last (15 s here).
	time.Sleep(1500 * time.Millisecond) // three polls
	got = get(t, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "failover"}})
	assert.Nil(t, got.Status.Capacity, "the old master's capacity is not reported")
	assert.Equal(t, "PreviousLeaderAnswers", condition(got.Status.Conditions, kvv1.ConditionCapacityObserved).Reason)
	assert.Equal(t, metav1.ConditionUnknown, condition(got.Status.Conditions, kvv1.ConditionLeaderAvailable).Status)
	assert.Equal(t, kvv1.PhaseDegraded, got.Status.Phase)

	// The new leader's master answers: a new process, counters from zero.
	fake.Restart()
	got = eventuallyBackend(t, "failover", "Ready again with the new master's capacity", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Phase == kvv1.PhaseReady && b.Status.Capacity != nil
	})
	assert.Equal(t, "8Gi", got.Status.Capacity.Total.String())
	assert.Equal(t, &metav1.Time{Time: t1}, got.Status.Leader.ColdCacheSince, "the new master answering is the change already reported, not another")
	assert.Equal(t, kvv1.ColdCacheLeaderChanged, got.Status.Leader.ColdCacheReason)
	assert.Len(t, eventNotes(t, "ColdCache", "failover"), 1, "one event for one failover")
}

// A single master (no election) that restarts is a cold cache too, told by its own counters
// starting over; a master that was only unreachable for a while is not.
func TestMasterRestartIsAColdCache(t *testing.T) {
	fake := fakeStore(t, "restart", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.9.2.10:15400", 8<<30, "tcp")
	b := walkthroughBackend("restart")
	b.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionNone
	create(t, b)
	rollOutLeader(t, "restart")
	memberPod(t, "restart", 0, 0, "10.9.2.10")
	eventuallyBackend(t, "restart", "Ready", func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseReady })
	time.Sleep(2 * time.Second) // the member pings the master: its counters grow

	fake.SetDown(true)
	eventuallyBackend(t, "restart", "Error", func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseError })
	fake.SetDown(false)
	got := eventuallyBackend(t, "restart", "Ready again", func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseReady })
	assert.Equal(t, &kvv1.LeaderStatus{Failover: kvv1.FailoverCold}, got.Status.Leader, "the same master answering again lost nothing")

	restartedAt := time.Now()
	fake.Restart()
	got = eventuallyBackend(t, "restart", "a cold cache", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Leader != nil && b.Status.Leader.ColdCacheSince != nil
	})
	detected := got.Status.Leader.ColdCacheSince.Time
	t.Logf("master restarted -> cold cache reported in %s", time.Since(restartedAt).Round(time.Millisecond))
	assert.Equal(t, kvv1.ColdCacheMasterRestarted, got.Status.Leader.ColdCacheReason)
	assert.False(t, detected.Before(restartedAt.Truncate(time.Second)), "the time of the change, %s, is not before the restart at %s", detected, restartedAt)
	assert.WithinDuration(t, restartedAt, detected, 3*time.Second)
	assert.Empty(t, got.Status.Leader.Holder, "no election")
	require.Eventually(t, func() bool {
		return hasEvent(t, "ColdCache", fmt.Sprintf("the master answering at %s is a new process (its counters started over): it holds none of the objects cached before, so each of them misses (cold cache)", detected.UTC().Format(time.RFC3339)))
	}, wait, 100*time.Millisecond, "the ColdCache event")
	eventuallyBackend(t, "restart", "Ready with the restarted master's capacity", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Phase == kvv1.PhaseReady && b.Status.Capacity != nil
	})
}
