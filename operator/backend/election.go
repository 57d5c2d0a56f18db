package backend

import (
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// A failover or a restart of the master empties the cache: a standby holds no objects, and a
// restarted master knows none of the objects in member memory. Status says so (status.leader
// coldCacheSince and an Event) and never reports capacity read from the master that was
// replaced. Two signals are read:
//   - the election Lease (coordination.k8s.io, <backend>-leader): a new holder, or a holder
//     that acquired it again, moves leaseTransitions; its acquireTime is the time of the change.
//     What status last recorded of the Lease is the comparison, so a change while the operator
//     was down is seen too;
//   - the master's own counters (store.Metrics.CounterSum): they only grow in one process and
//     start over in a new one, which catches a single master that restarted (no election), an
//     external store, and tells whether the master answering after a Lease change is the new
//     one. The last sum read is kept in memory: a restart while the operator itself was down
//     is not seen this way;
//   - a warm store's election view (store.Health.ViewVersion), new at every election of its
//     masters: a view other than the last one read is a new serving master even when its
//     counters have already grown past those of a master that served only briefly.

// observeLease records the Lease in status.leader and reports a change of holder against
// what status recorded before: cold cache since the new holder's acquireTime.
func (r *Reconciler) observeLease(s *state, lease *coordinationv1.Lease) {
	b := s.backend
	if lease == nil || leaseHolder(lease) == "" {
		if l := b.Status.Leader; l != nil {
			l.Holder, l.HolderSince = "", nil
		}
		return
	}
	if b.Status.Leader == nil {
		b.Status.Leader = &kvv1.LeaderStatus{}
	}
	l := b.Status.Leader
	holder, transitions := leaseHolder(lease), leaseTransitions(lease)
	acquired := leaseAcquired(lease, s.now)
	changed := l.LeaseTransitions != nil && (*l.LeaseTransitions != transitions || (l.Holder != "" && l.Holder != holder))
	prev := l.Holder
	l.Holder, l.HolderSince, l.LeaseTransitions = holder, &metav1.Time{Time: acquired.Truncate(time.Second)}, &transitions
	if !changed {
		return
	}
	s.leaseChanged = true
	from := ""
	if prev != "" && prev != holder {
		from = " from " + prev
	}
	r.coldCache(s, kvv1.ColdCacheLeaderChanged, acquired,
		fmt.Sprintf("the election Lease moved%s to %s at %s (transition %d): the new leader holds none of the objects cached before, so each of them misses (cold cache)",
			from, holder, acquired.UTC().Format(time.RFC3339), transitions))
	// Until the old holder's Lease would have run out, a master whose counters did not start
	// over is the old one still answering through the Service.
	r.masters.expectNew(b.UID, acquired.Add(leaseDuration(lease)))
}

// coldCache records a change of the serving master in status and as an Event, and drops what
// was read from the master that is gone.
func (r *Reconciler) coldCache(s *state, reason string, at metav1.Time, msg string) {
	b := s.backend
	if b.Status.Leader == nil {
		b.Status.Leader = &kvv1.LeaderStatus{}
	}
	t := metav1.Time{Time: at.Truncate(time.Second)}
	b.Status.Leader.ColdCacheSince, b.Status.Leader.ColdCacheReason = &t, reason
	b.Status.Capacity, b.Status.Members = nil, nil
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "ColdCache", reason, "%s", msg)
}

func leaseHolder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func leaseTransitions(l *coordinationv1.Lease) int32 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// leaseAcquired is when the holder acquired the Lease; now when the Lease does not say.
func leaseAcquired(l *coordinationv1.Lease, now time.Time) metav1.Time {
	if l.Spec.AcquireTime != nil {
		return metav1.Time{Time: l.Spec.AcquireTime.Time}
	}
	return metav1.Time{Time: now}
}

// leaseDuration is how long a holder's claim lasts without a renewal (client-go's default
// when the Lease does not say).
func leaseDuration(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil {
		return 15 * time.Second
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// masterRead classifies a read of a master's counters against the reads before.
type masterRead int

const (
	// sameMaster: the process read before (or the first read: nothing to compare with).
	sameMaster masterRead = iota
	// newMaster: the counters started over: another process than the one read before, which
	// nothing announced (a restart).
	newMaster
	// leaderMaster: after a Lease change, the first read of a process whose counters started
	// over: the new leader's master, the change already reported.
	leaderMaster
	// previousMaster: the Lease moved, and the process answering is still the one read before
	// it moved (its counters did not start over) while the old holder's claim could last.
	previousMaster
)

// masters remembers, per backend, the counter sum of the last read and, after a Lease change,
// the sum the old master had reached.
type masters struct {
	mu   sync.Mutex
	seen map[types.UID]*masterSeen
}

type masterSeen struct {
	counters float64
	view     int64
	known    bool
	// awaiting is set after a Lease change until the new master answered or until.
	awaiting bool
	baseline float64
	until    time.Time
}

func (m *masters) get(uid types.UID) *masterSeen {
	if m.seen == nil {
		m.seen = map[types.UID]*masterSeen{}
	}
	s := m.seen[uid]
	if s == nil {
		s = &masterSeen{}
		m.seen[uid] = s
	}
	return s
}

// expectNew says the serving master changed (the Lease moved): reads until until whose
// counters did not start over are the previous master's.
func (m *masters) expectNew(uid types.UID, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.get(uid)
	if !s.known {
		return // no read to compare with: any master answering is taken as the new one
	}
	s.awaiting, s.baseline, s.until = true, s.counters, until
}

// observe classifies a read of counters and of the election view (0: none) at now and
// remembers it.
func (m *masters) observe(uid types.UID, counters float64, view int64, now time.Time) masterRead {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.get(uid)
	prev, prevView, known := s.counters, s.view, s.known
	s.counters, s.view, s.known = counters, view, true
	if s.awaiting {
		switch {
		case counters < s.baseline:
			s.awaiting = false
			return leaderMaster
		case now.Before(s.until):
			return previousMaster
		default:
			// The old holder's claim ran out: whatever answers now is the leader's master.
			s.awaiting = false
			return sameMaster
		}
	}
	if known && (counters < prev || view != 0 && prevView != 0 && view != prevView) {
		return newMaster
	}
	return sameMaster
}

func (m *masters) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, uid)
}
