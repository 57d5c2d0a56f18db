package backend

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
)

func managedBackend() *kvv1.KVCacheBackend {
	b := &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "mooncake-dram", Generation: 3}}
	b.Spec.Connection.Managed = &kvv1.ManagedConnection{Members: []kvv1.MemberGroup{{
		NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, CapacityPerMember: resource.MustParse("8Gi"),
	}}}
	b.Default()
	return b
}

func cond(b *kvv1.KVCacheBackend, t string) metav1.Condition {
	c := meta.FindStatusCondition(b.Status.Conditions, t)
	if c == nil {
		return metav1.Condition{}
	}
	return metav1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, ObservedGeneration: c.ObservedGeneration}
}

func deployment(replicas, updated, available, ready int32, observed, gen int64) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Generation: gen},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: observed, UpdatedReplicas: updated, AvailableReplicas: available, ReadyReplicas: ready},
	}
}

func TestRolloutComplete(t *testing.T) {
	cases := []struct {
		name   string
		d      *appsv1.Deployment
		held   int32
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{"no Deployment yet", nil, 0, metav1.ConditionFalse, "NotCreated", "the leader Deployment does not exist yet"},
		{"three desired, one ready is complete: standbys are not ready by design", deployment(3, 3, 1, 1, 2, 2), 0, metav1.ConditionTrue, "Complete",
			"3 desired / 1 ready: one serving leader and 2 standbys, not ready by design"},
		{"a replica count held for a template rollout is pending", deployment(1, 1, 1, 1, 2, 2), 3, metav1.ConditionFalse, "ReplicasPending",
			"rolling out the current pod template at 1 replica(s) before scaling to 3"},
		{"an unobserved spec is progressing", deployment(1, 1, 1, 1, 1, 2), 0, metav1.ConditionFalse, "Progressing", "the Deployment controller has not observed the latest spec"},
		{"replicas still on the old template are progressing", deployment(3, 1, 1, 1, 2, 2), 0, metav1.ConditionFalse, "Progressing", "1 of 3 leader replicas run the current template"},
		{"no ready leader", deployment(1, 1, 0, 0, 2, 2), 0, metav1.ConditionFalse, "NoLeaderReady", "no leader replica is ready"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := managedBackend()
			setRolloutComplete(b, c.d, c.held)
			assert.Equal(t, metav1.Condition{Type: kvv1.ConditionRolloutComplete, Status: c.status, Reason: c.reason, Message: c.msg, ObservedGeneration: 3}, cond(b, kvv1.ConditionRolloutComplete))
		})
	}
}

func TestElectionObserved(t *testing.T) {
	b := managedBackend()
	setElectionObserved(b, nil)
	assert.Equal(t, "NoLease", cond(b, kvv1.ConditionElectionObserved).Reason)
	setElectionObserved(b, &coordinationv1.Lease{})
	assert.Equal(t, "NoHolder", cond(b, kvv1.ConditionElectionObserved).Reason)
	acquired := metav1.NewMicroTime(time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC))
	setElectionObserved(b, &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("mooncake-dram-leader-7d9c-x2"), AcquireTime: &acquired, LeaseTransitions: ptr.To[int32](2)}})
	assert.Equal(t, "held by mooncake-dram-leader-7d9c-x2 since 2026-12-01T09:30:00Z (2 holder change(s))", cond(b, kvv1.ConditionElectionObserved).Message)
}

func lease(holder string, transitions int32, acquired time.Time) *coordinationv1.Lease {
	at := metav1.NewMicroTime(acquired)
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(transitions), AcquireTime: &at, LeaseDurationSeconds: ptr.To[int32](15)}}
}

// The Lease is compared with what status recorded of it: the first one seen is recorded, a new
// holder (or a holder that acquired it again) is a cold cache at its acquireTime, a released
// Lease is no change, and what was read from the old master is dropped.
func TestLeaseChangesAreColdCaches(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Recorder: rec}
	b := managedBackend()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	observe := func(l *coordinationv1.Lease, now time.Time) *state {
		s := &state{backend: b, now: now}
		r.observeLease(s, l)
		return s
	}
	s := observe(lease("leader-a", 0, t0), t0.Add(time.Second))
	assert.False(t, s.leaseChanged, "the first Lease seen is recorded, not a change")
	assert.Equal(t, &kvv1.LeaderStatus{Holder: "leader-a", HolderSince: &metav1.Time{Time: t0}, LeaseTransitions: ptr.To[int32](0)}, b.Status.Leader)
	assert.Empty(t, rec.Events)

	b.Status.Capacity = &kvv1.Capacity{Total: resource.MustParse("16Gi")}
	assert.False(t, observe(lease("leader-a", 0, t0), t0.Add(time.Minute)).leaseChanged, "renewals change nothing")
	assert.NotNil(t, b.Status.Capacity)

	// leader-a releases the Lease on its way out: nobody holds it, nothing changed yet.
	released := lease("", 0, t0.Add(2*time.Minute))
	assert.False(t, observe(released, t0.Add(2*time.Minute)).leaseChanged)
	assert.Equal(t, "", b.Status.Leader.Holder)

	t1 := t0.Add(2*time.Minute + 3*time.Second)
	s = observe(lease("leader-b", 1, t1), t1.Add(time.Second))
	assert.True(t, s.leaseChanged)
	assert.Equal(t, &kvv1.LeaderStatus{Holder: "leader-b", HolderSince: &metav1.Time{Time: t1}, LeaseTransitions: ptr.To[int32](1),
		ColdCacheSince: &metav1.Time{Time: t1}, ColdCacheReason: kvv1.ColdCacheLeaderChanged}, b.Status.Leader)
	assert.Nil(t, b.Status.Capacity, "never the old master's capacity")
	require.Len(t, rec.Events, 1)
	assert.Equal(t, "Warning ColdCache the election Lease moved to leader-b at 2026-12-01T09:02:03Z (transition 1): the new leader holds none of the objects cached before, so each of them misses (cold cache)", <-rec.Events)

	// The same holder acquiring again (its master restarted under it) is a change too.
	t2 := t1.Add(time.Hour)
	assert.True(t, observe(lease("leader-b", 2, t2), t2).leaseChanged)
	assert.Equal(t, &metav1.Time{Time: t2}, b.Status.Leader.ColdCacheSince)
	assert.Contains(t, <-rec.Events, "moved to leader-b")
	// A holder change seen directly (no release in between) names both.
	t3 := t2.Add(time.Hour)
	observe(lease("leader-c", 3, t3), t3)
	assert.Contains(t, <-rec.Events, "moved from leader-b to leader-c")
}

// A master's counters only grow in one process: a lower sum is a new process; after a Lease
// change, a sum that did not start over is the previous master until its claim ran out.
func TestMasterReads(t *testing.T) {
	var m masters
	t0 := time.Now()
	assert.Equal(t, sameMaster, m.observe("u", 40, 0, t0), "the first read has nothing to compare with")
	assert.Equal(t, sameMaster, m.observe("u", 52, 0, t0.Add(time.Second)))
	assert.Equal(t, sameMaster, m.observe("u", 52, 0, t0.Add(2*time.Second)), "an idle master")
	assert.Equal(t, newMaster, m.observe("u", 3, 0, t0.Add(3*time.Second)), "the counters started over")
	assert.Equal(t, sameMaster, m.observe("u", 9, 0, t0.Add(4*time.Second)))

	m.expectNew("u", t0.Add(20*time.Second))
	assert.Equal(t, previousMaster, m.observe("u", 11, 0, t0.Add(5*time.Second)), "still the process read before the Lease moved")
	assert.Equal(t, leaderMaster, m.observe("u", 1, 0, t0.Add(6*time.Second)), "the new leader's master answers")
	assert.Equal(t, sameMaster, m.observe("u", 4, 0, t0.Add(7*time.Second)))

	m.expectNew("u", t0.Add(10*time.Second))
	assert.Equal(t, previousMaster, m.observe("u", 5, 0, t0.Add(8*time.Second)))
	assert.Equal(t, sameMaster, m.observe("u", 30, 0, t0.Add(11*time.Second)), "once the old holder's claim ran out, the master answering is the leader's")

	m.expectNew("v", t0.Add(time.Minute))
	assert.Equal(t, sameMaster, m.observe("v", 100, 0, t0), "no read before the change: nothing to tell the old master by")
	m.forget("u")
	assert.Equal(t, sameMaster, m.observe("u", 1, 0, t0), "forgotten: a first read again")

	// A warm store's masters elect through etcd: a new view is a new serving master, even one
	// whose counters already passed those of a master that served only seconds.
	assert.Equal(t, sameMaster, m.observe("w", 10, 581, t0))
	assert.Equal(t, sameMaster, m.observe("w", 30, 581, t0.Add(time.Second)))
	assert.Equal(t, newMaster, m.observe("w", 45, 612, t0.Add(2*time.Second)), "the view moved")
	assert.Equal(t, sameMaster, m.observe("w", 50, 612, t0.Add(3*time.Second)))
	assert.Equal(t, newMaster, m.observe("w", 2, 612, t0.Add(4*time.Second)), "the counters started over")
}

func pod(name, ip string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{PodIP: ip}, Spec: corev1.PodSpec{NodeName: "node-" + name}}
}

func TestMembersAreJoinedToPodsByAddress(t *testing.T) {
	b := managedBackend()
	pods := []corev1.Pod{pod("m-a", "10.0.0.1"), pod("m-b", "10.0.0.2"), pod("m-c", "10.0.0.3")}
	segs := []store.Segment{{Name: "10.0.0.1:15001", SizeBytes: 8 << 30, Protocol: "tcp", Status: "OK"}, {Name: "10.0.0.3:15002", SizeBytes: 8 << 30, Protocol: "tcp", Status: "OK"}}
	notes := setMembers(b, pods, segs, nil, "gpustack-system")
	assert.Equal(t, []note{{corev1.EventTypeWarning, "MemberNotRegistered", "member Pods not registered with the master: m-b (2 of 3 mounted)"}}, notes, "a member missing is said once")
	assert.Empty(t, setMembers(b, pods, segs, nil, "gpustack-system"), "and not again while the same one is missing")
	assert.Equal(t, metav1.Condition{Type: kvv1.ConditionMembersMounted, Status: metav1.ConditionFalse, Reason: "NotRegistered",
		Message: "member Pods not registered with the master: m-b (2 of 3 mounted)", ObservedGeneration: 3}, cond(b, kvv1.ConditionMembersMounted))
	assert.Equal(t, "m-a", b.Status.Members[0].Pod)
	assert.Equal(t, "node-m-c", b.Status.Members[1].Node)
	assert.Equal(t, "8Gi", b.Status.Members[1].Capacity.String())

	setMembers(b, pods[:1], segs[:1], nil, "gpustack-system")
	assert.Equal(t, "AllMounted", cond(b, kvv1.ConditionMembersMounted).Reason)
	setMembers(b, nil, nil, nil, "gpustack-system")
	assert.Equal(t, "NoMemberPods", cond(b, kvv1.ConditionMembersMounted).Reason)
	setMembers(b, pods, nil, store.ErrNotSupported, "gpustack-system")
	assert.Equal(t, metav1.ConditionUnknown, cond(b, kvv1.ConditionMembersMounted).Status, "a master before 0.3.12 lists no segments: unknown, not an error")
}

// An IPv6 member registers its segment under the master's spelling of its address, which need
// not be the Pod's: the two are one member, in status and in a drain.
func TestAnIPv6MemberIsJoinedWhateverTheSpelling(t *testing.T) {
	b := managedBackend()
	pods := []corev1.Pod{pod("m-a", "fd00:0:0::7"), pod("m-b", "fd00::70")}
	segs := []store.Segment{{Name: "fd00::7:15001", SizeBytes: 1 << 30}, {Name: "[fd00::70]:15002", SizeBytes: 1 << 30}}
	assert.Empty(t, setMembers(b, pods, segs, nil, "gpustack-system"))
	assert.Equal(t, "AllMounted", cond(b, kvv1.ConditionMembersMounted).Reason)
	assert.Equal(t, "m-a", b.Status.Members[0].Pod)
	assert.Equal(t, "m-b", b.Status.Members[1].Pod)
}

func TestPhase(t *testing.T) {
	serving := func(b *kvv1.KVCacheBackend) {
		set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionTrue, "Serving", "")
		set(b, kvv1.ConditionCapacityObserved, metav1.ConditionTrue, "Observed", "")
		b.Status.Capacity = &kvv1.Capacity{Total: resource.MustParse("16Gi")}
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionTrue, "AllMounted", "")
	}
	cases := []struct {
		name  string
		setup func(b *kvv1.KVCacheBackend)
		phase kvv1.Phase
	}{
		{"serving, capacity observed, all members mounted is Ready", serving, kvv1.PhaseReady},
		{"never observed is Provisioning", func(*kvv1.KVCacheBackend) {}, kvv1.PhaseProvisioning},
		{"a leader not yet rolled out that does not answer is Provisioning", func(b *kvv1.KVCacheBackend) {
			set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionFalse, "Unreachable", "dial tcp: connection refused")
		}, kvv1.PhaseProvisioning},
		{"a store that served and stopped answering is an Error", func(b *kvv1.KVCacheBackend) {
			serving(b)
			set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionFalse, "Unreachable", "dial tcp: connection refused")
			set(b, kvv1.ConditionCapacityObserved, metav1.ConditionFalse, "LeaderUnavailable", "")
		}, kvv1.PhaseError},
		{"a member not registered is Degraded", func(b *kvv1.KVCacheBackend) {
			serving(b)
			set(b, kvv1.ConditionMembersMounted, metav1.ConditionFalse, "NotRegistered", "member Pods not registered with the master: m-b")
		}, kvv1.PhaseDegraded},
		{"a render that fails is Degraded with its message", func(b *kvv1.KVCacheBackend) {
			serving(b)
			set(b, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonRenderFailed, renderFailedPrefix+"no store image")
		}, kvv1.PhaseDegraded},
		{"a phase message alone decides nothing", func(b *kvv1.KVCacheBackend) {
			serving(b)
			b.Status.PhaseMessage = renderFailedPrefix + "no store image"
		}, kvv1.PhaseReady},
		{"the previous leader answering is Degraded", func(b *kvv1.KVCacheBackend) {
			serving(b)
			set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionUnknown, "PreviousLeaderAnswers", "the master answering has served since before the election Lease moved")
		}, kvv1.PhaseDegraded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := managedBackend()
			c.setup(b)
			setPhase(b)
			assert.Equal(t, c.phase, b.Status.Phase, b.Status.PhaseMessage)
		})
	}
}

// After a cold cache, or a warm failover, the store is read every few seconds until it serves
// with every member mounted, so full capacity shows when the members are back rather than a
// poll later; a settled store, or one whose change is long past, is read at the poll interval.
func TestStoreIsReadSoonerWhileItSettlesAfterAColdCache(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const every = 15 * time.Second
	settled := func(b *kvv1.KVCacheBackend) {
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: kvv1.ConditionLeaderAvailable, Status: metav1.ConditionTrue, Reason: "Serving"})
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: kvv1.ConditionMembersMounted, Status: metav1.ConditionTrue, Reason: "AllMounted"})
		b.Status.Capacity = &kvv1.Capacity{}
	}
	cold := func(ago time.Duration) *kvv1.KVCacheBackend {
		b := managedBackend()
		b.Status.Leader = &kvv1.LeaderStatus{ColdCacheSince: &metav1.Time{Time: now.Add(-ago)}}
		return b
	}
	for _, c := range []struct {
		name string
		b    *kvv1.KVCacheBackend
		want time.Duration
	}{
		{"no failover seen", func() *kvv1.KVCacheBackend { b := managedBackend(); return b }(), every},
		{"just failed over, members not back", cold(5 * time.Second), settlePoll},
		{"failed over, members mounted again", func() *kvv1.KVCacheBackend { b := cold(5 * time.Second); settled(b); return b }(), every},
		{"failed over long ago and never settled", cold(10 * time.Minute), every},
		{"just failed over warm, members not back", func() *kvv1.KVCacheBackend {
			b := managedBackend()
			b.Status.Leader = &kvv1.LeaderStatus{LastFailover: &kvv1.FailoverObserved{Time: metav1.Time{Time: now.Add(-5 * time.Second)}, Mode: kvv1.FailoverWarm}}
			return b
		}(), settlePoll},
	} {
		assert.Equal(t, c.want, nextPoll(c.b, now, every), c.name)
	}
	assert.Equal(t, time.Second, nextPoll(cold(time.Second), now, time.Second), "a poll already faster stays")
}

// An unreachable store is reported once: a cause that changes between polls (the resolver's
// timeout, then its refusal of the name) rewrites nothing.
func TestAnUnreachableStoreIsReportedOnce(t *testing.T) {
	b := managedBackend()
	ctx := storeContext{systemNamespace: "gpustack-system", now: time.Now()}
	dns := &net.DNSError{Err: "no such host", Name: "mooncake-dram-leader.gpustack-system.svc", IsNotFound: true}
	setStoreStatus(b, storeReading{healthErr: dns}, nil, nil, ctx)
	first := b.DeepCopy()
	setStoreStatus(b, storeReading{healthErr: context.DeadlineExceeded}, nil, nil, ctx)
	assert.Equal(t, first.Status, b.Status, "the second poll's other cause writes nothing")
	assert.Equal(t, "the name mooncake-dram-leader.gpustack-system.svc does not resolve", cond(b, kvv1.ConditionLeaderAvailable).Message)
}
