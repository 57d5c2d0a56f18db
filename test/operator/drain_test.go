package operator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// A member the operator replaces leaves with its objects moved: the master drains it first (the
// job is in status.drains while it runs), and the Pod is deleted only once the job ended, with
// an event saying what moved. A member whose node is cordoned is drained and kept; once the node
// is schedulable again it is restarted, to take writes again.
func TestMembersAreDrainedBeforeTheyGo(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "drains", storetest.FakeOptions{MultiTenancy: true})
	create(t, walkthroughBackend("drains"))
	p0 := memberPod(t, "drains", 0, 0, "10.7.0.10")
	p1 := memberPod(t, "drains", 0, 1, "10.7.0.11")
	fake.MountSegment("10.7.0.10:15400", 8<<30, "tcp")
	fake.MountSegment("10.7.0.11:15400", 8<<30, "tcp")
	eventuallyBackend(t, "drains", "both members mounted", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Members) == 2 })
	gone := func(p *corev1.Pod) bool {
		live := &corev1.Pod{}
		return env.Client.Get(ctx, client.ObjectKeyFromObject(p), live) != nil || live.DeletionTimestamp != nil
	}

	updateBackend(t, "drains", func(b *kvv1.KVCacheBackend) {
		b.Spec.Connection.Managed.Members[0].CapacityPerMember = resource.MustParse("16Gi")
	})
	var job string
	b := eventuallyBackend(t, "drains", "a drain of the first stale member", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Drains) == 1 })
	d := b.Status.Drains[0]
	assert.Equal(t, kvv1.DrainReplace, d.Reason)
	assert.Equal(t, []string{"10.7.0.10:15400"}, d.Segments, "the first stale member, by name")
	require.Len(t, fake.DrainJobs(), 1)
	job = fake.DrainJobs()[0]
	assert.Equal(t, job, d.JobID)
	time.Sleep(time.Second) // several reconciles while the job runs
	assert.False(t, gone(p0), "the member stays while its objects move")
	assert.False(t, gone(p1))

	fake.SetDrain(job, storetest.DrainProgress{Status: store.DrainSucceeded, Succeeded: 40, MigratedBytes: 40 << 20})
	require.Eventually(t, func() bool { return gone(p0) }, wait, 100*time.Millisecond, "deleted once drained")
	assert.False(t, gone(p1), "one member at a time")
	require.Eventually(t, func() bool {
		return len(eventNotes(t, "MemberDrained", "drains")) > 0
	}, wait, 100*time.Millisecond)
	assert.Contains(t, strings.Join(eventNotes(t, "MemberDrained", "drains"), "\n"), "moved 40 object replica(s) (40Mi) of member drains-member-0-0 to the other members")
	eventuallyBackend(t, "drains", "the finished drain leaves status", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Drains) == 0 })
}

func TestACordonedNodesMemberIsDrainedAndRestartedWhenItIsBack(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "cordon", storetest.FakeOptions{MultiTenancy: true})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-cordon"}}
	require.NoError(t, env.Client.Create(ctx, node))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	create(t, walkthroughBackend("cordon"))
	p := memberPod(t, "cordon", 0, 0, "10.8.0.10")
	memberPod(t, "cordon", 0, 1, "10.8.0.11")
	// memberPod names its node node-<n>; this one runs on the node the test cordons.
	live := &corev1.Pod{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), live))
	fake.MountSegment("10.8.0.10:15400", 8<<30, "tcp")
	fake.MountSegment("10.8.0.11:15400", 8<<30, "tcp")
	eventuallyBackend(t, "cordon", "both members mounted", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Members) == 2 })

	n0 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: live.Spec.NodeName}, Spec: corev1.NodeSpec{Unschedulable: true}}
	require.NoError(t, env.Client.Create(ctx, n0))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n0) })
	b := eventuallyBackend(t, "cordon", "the cordoned node's member drained", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Drains) == 1 })
	assert.Equal(t, kvv1.DrainCordoned, b.Status.Drains[0].Reason)
	assert.Equal(t, live.Spec.NodeName, b.Status.Drains[0].Node)
	fake.SetDrain(b.Status.Drains[0].JobID, storetest.DrainProgress{Status: store.DrainSucceeded, Succeeded: 10, MigratedBytes: 10 << 20})
	eventuallyBackend(t, "cordon", "the drain done", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Drains) == 0 })
	time.Sleep(time.Second)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), live))
	assert.Nil(t, live.DeletionTimestamp, "a drained member on a cordoned node keeps running: nothing is written to it")

	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(n0), n0))
	n0.Spec.Unschedulable = false
	require.NoError(t, env.Client.Update(ctx, n0))
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(p), live) != nil || live.DeletionTimestamp != nil
	}, wait, 100*time.Millisecond, "uncordoned: the drained member restarts to take writes")
}

// On a warm store, a failover while a member is drained keeps the member's objects on the new
// master, which knows no job of the one before: the operator drains the member there again
// (a new job in status.drains, an event saying why) instead of deleting it with its objects,
// once the leases the new master granted on every object it kept ended (the masters'
// default_kv_lease_ttl, here 3 s), before which nothing could move.
func TestAWarmFailoverDuringADrainDrainsAgain(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "warm-drains", storetest.FakeOptions{})
	b := walkthroughBackend("warm-drains")
	b.Spec.Connection.Managed.Leader = kvv1.Leader{ElectionBackend: kvv1.ElectionEtcd, MultiTenancy: ptr.To(false),
		Etcd: &kvv1.StoreEtcd{Endpoints: []string{"store-etcd.gpustack-system.svc:2379"}}, ExtraArgs: []string{"-default_kv_lease_ttl=3s"}}
	create(t, b)
	p0 := memberPod(t, "warm-drains", 0, 0, "10.9.0.10")
	memberPod(t, "warm-drains", 0, 1, "10.9.0.11")
	fake.MountSegment("10.9.0.10:15400", 8<<30, "tcp")
	fake.MountSegment("10.9.0.11:15400", 8<<30, "tcp")
	eventuallyBackend(t, "warm-drains", "both members mounted", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Members) == 2 })

	updateBackend(t, "warm-drains", func(b *kvv1.KVCacheBackend) {
		b.Spec.Connection.Managed.Members[0].CapacityPerMember = resource.MustParse("16Gi")
	})
	first := eventuallyBackend(t, "warm-drains", "a drain of the first stale member", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Drains) == 1 }).Status.Drains[0]
	require.Equal(t, []string{first.JobID}, fake.DrainJobs())

	time.Sleep(2 * time.Second) // the members ping the master: its counters grow past the new one's
	fake.FailOverWarm()
	again := eventuallyBackend(t, "warm-drains", "the member drained again on the new master", func(b *kvv1.KVCacheBackend) bool {
		return len(b.Status.Drains) == 1 && b.Status.Drains[0].JobID != first.JobID
	}).Status.Drains[0]
	failedOver := get(t, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "warm-drains"}}).Status.Leader.LastFailover
	require.NotNil(t, failedOver, "the failover observed")
	assert.Equal(t, kvv1.FailoverWarm, failedOver.Mode)
	assert.False(t, again.StartTime.Before(&metav1.Time{Time: failedOver.Time.Add(3 * time.Second)}),
		"drained again once the leases ended: failover observed %s, drain started %s", failedOver.Time, again.StartTime)
	assert.Equal(t, first.Pod, again.Pod)
	assert.Equal(t, []string{"10.9.0.10:15400"}, again.Segments)
	assert.Equal(t, []string{again.JobID}, fake.DrainJobs(), "the new master runs the new job")
	live := &corev1.Pod{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p0), live))
	assert.Nil(t, live.DeletionTimestamp, "the member stays while its objects move again")
	assert.Contains(t, strings.Join(eventNotes(t, "MemberDraining", "warm-drains"), "\n"), "the new master kept its objects but not the job, so they are moved again")

	fake.SetDrain(again.JobID, storetest.DrainProgress{Status: store.DrainSucceeded, Succeeded: 12, MigratedBytes: 12 << 20})
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(p0), live) != nil || live.DeletionTimestamp != nil
	}, wait, 100*time.Millisecond, "deleted once drained on the new master")
}

// A warm store's member is replaced only once the leases its last failover's new master granted
// ended: until then its objects could not move, and the drain would only run out its time.
func TestAWarmStoresMembersWaitForTheLeasesOfAFailover(t *testing.T) {
	fake := fakeStore(t, "warm-waits", storetest.FakeOptions{})
	b := walkthroughBackend("warm-waits")
	b.Spec.Connection.Managed.Leader = kvv1.Leader{ElectionBackend: kvv1.ElectionEtcd, MultiTenancy: ptr.To(false),
		Etcd: &kvv1.StoreEtcd{Endpoints: []string{"store-etcd.gpustack-system.svc:2379"}}, ExtraArgs: []string{"-default_kv_lease_ttl=4s"}}
	create(t, b)
	memberPod(t, "warm-waits", 0, 0, "10.9.1.10")
	memberPod(t, "warm-waits", 0, 1, "10.9.1.11")
	fake.MountSegment("10.9.1.10:15400", 8<<30, "tcp")
	fake.MountSegment("10.9.1.11:15400", 8<<30, "tcp")
	eventuallyBackend(t, "warm-waits", "both members mounted", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Members) == 2 })
	time.Sleep(2 * time.Second) // the members ping the master: its counters grow past the new one's

	fake.FailOverWarm()
	failedOver := eventuallyBackend(t, "warm-waits", "the failover observed", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Leader != nil && b.Status.Leader.LastFailover != nil
	}).Status.Leader.LastFailover
	updateBackend(t, "warm-waits", func(b *kvv1.KVCacheBackend) {
		b.Spec.Connection.Managed.Members[0].CapacityPerMember = resource.MustParse("16Gi")
	})
	require.Eventually(t, func() bool { return len(eventNotes(t, "MemberDrainWaiting", "warm-waits")) > 0 }, wait, 100*time.Millisecond)
	assert.Contains(t, eventNotes(t, "MemberDrainWaiting", "warm-waits")[0], "once the leases the new master of the failover at "+failedOver.Time.UTC().Format(time.RFC3339)+" granted on every object it kept end")
	assert.Empty(t, fake.DrainJobs(), "no drain while the leases last")

	d := eventuallyBackend(t, "warm-waits", "a drain once the leases ended", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Drains) == 1 }).Status.Drains[0]
	assert.False(t, d.StartTime.Before(&metav1.Time{Time: failedOver.Time.Add(4 * time.Second)}), "failover observed %s, drain started %s", failedOver.Time, d.StartTime)
}
