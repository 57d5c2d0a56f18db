package backend

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
)

// Objects a store loses without anyone removing them (a master that starts empty, a member gone
// with its objects) are prefill work every engine does again; a store that loses much at once is
// an avalanche of misses. The master keeps no per-segment object count, so a loss is told from
// two reads of its figures: its object count (master_key_count) falls by more than it evicted,
// and for bytes the tenants' charged bytes fall (without a ledger: the bytes the vanished
// segment held). A drained segment that goes loses nothing: its objects were moved.

// storeSnapshot is what one read of a store showed, for the next read to compare with.
type storeSnapshot struct {
	keys, evicted, charged, allocated int64
	segments                          map[string]segmentSnapshot
}

type segmentSnapshot struct {
	allocated int64
	status    string
}

// snapshots remembers each backend's last read, by UID, and, after a warm failover, what the
// master before it held until the members mounted their segments on the new one again. It is in
// memory: after the operator restarts, the first read has nothing to compare with and counts no
// loss.
type snapshots struct {
	mu       sync.Mutex
	byID     map[types.UID]storeSnapshot
	awaiting map[types.UID]awaitedRemounts
}

// awaitedRemounts is the last read of a warm store's master before a failover, and when the
// failover was read.
type awaitedRemounts struct {
	before storeSnapshot
	since  time.Time
}

// remountWindow is how long a warm store's members are given to mount their segments on the new
// master of a failover (measured: within a second of it serving). A member that has not by then
// did not survive the failover (one that restarts registers under a new segment name): the new
// master still indexes the objects it held, and every read of them misses.
const remountWindow = time.Minute

func (s *snapshots) await(uid types.UID, before storeSnapshot, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.awaiting == nil {
		s.awaiting = map[types.UID]awaitedRemounts{}
	}
	s.awaiting[uid] = awaitedRemounts{before: before, since: at}
}

func (s *snapshots) awaited(uid types.UID) (awaitedRemounts, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.awaiting[uid]
	return a, ok
}

func (s *snapshots) settle(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.awaiting, uid)
}

func (s *snapshots) swap(uid types.UID, now storeSnapshot) (prev storeSnapshot, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[types.UID]storeSnapshot{}
	}
	prev, ok = s.byID[uid]
	s.byID[uid] = now
	return prev, ok
}

func (s *snapshots) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, uid)
	delete(s.awaiting, uid)
}

// snapshotOf is what a reading shows; ok is false when it has no figures to compare.
func snapshotOf(rd storeReading) (storeSnapshot, bool) {
	if rd.noAdmin || rd.healthErr != nil || !rd.health.ServiceReady || !rd.metricsRead || rd.metricsErr != nil || rd.master == previousMaster {
		return storeSnapshot{}, false
	}
	m := rd.metrics
	snap := storeSnapshot{keys: m.KeyCount, evicted: m.EvictedKeys, allocated: m.AllocatedBytes}
	for _, t := range m.Tenants {
		snap.charged += t.ChargedBytes
	}
	if rd.segmentsRead && rd.segErr == nil {
		snap.segments = map[string]segmentSnapshot{}
		for _, seg := range rd.segments {
			snap.segments[seg.Name] = segmentSnapshot{allocated: m.Segments[seg.Name].AllocatedBytes, status: seg.Status}
		}
	}
	return snap, true
}

// lossBetween is what the store lost from prev to now (nil: nothing). newMaster says the master
// answering now is a new process: everything prev held is gone, unless the store is warm, where
// the new master replayed the operation log and only what it does not hold is gone.
func lossBetween(prev, now storeSnapshot, newMaster, warm bool, at time.Time) *kvv1.Loss {
	at = at.Truncate(time.Second)
	if newMaster {
		objects, bytes := prev.keys, prev.charged
		if bytes == 0 {
			bytes = prev.allocated
		}
		if warm {
			objects, bytes = prev.keys-now.keys, prev.allocated-now.allocated
		}
		if objects <= 0 {
			return nil
		}
		return &kvv1.Loss{Time: metav1.Time{Time: at}, Cause: kvv1.LossMasterRestarted, Objects: objects, Bytes: *resource.NewQuantity(max(0, bytes), resource.BinarySI)}
	}
	if prev.segments == nil || now.segments == nil {
		return nil
	}
	var gone []string
	var goneBytes int64
	for name, seg := range prev.segments {
		if _, still := now.segments[name]; still || seg.status == store.SegmentDrained {
			continue
		}
		gone = append(gone, name)
		goneBytes += seg.allocated
	}
	if len(gone) == 0 {
		return nil
	}
	sort.Strings(gone)
	objects := prev.keys - now.keys - max(0, now.evicted-prev.evicted)
	bytes := prev.charged - now.charged
	if prev.charged == 0 && now.charged == 0 {
		bytes = goneBytes
	}
	if objects <= 0 && bytes <= 0 {
		return nil // an empty member went
	}
	return &kvv1.Loss{Time: metav1.Time{Time: at}, Cause: kvv1.LossMemberLost, Objects: max(0, objects),
		Bytes: *resource.NewQuantity(max(0, bytes), resource.BinarySI), Member: strings.Join(gone, ", ")}
}

// countLoss reads what the store lost since the last read and reports it: the running totals
// and the last loss in status.lost, an Event, and the lost-objects and lost-bytes counters.
func (r *Reconciler) countLoss(s *state) {
	b := s.backend
	now, ok := snapshotOf(s.reading)
	if !ok {
		return
	}
	prev, seen := r.seen.swap(b.UID, now)
	if !seen {
		return
	}
	if s.reading.master == newMaster {
		r.failover(s, prev, now)
	} else {
		r.checkRemounts(s, now)
	}
	l := lossBetween(prev, now, s.reading.master == newMaster, warm(b), s.now)
	if l == nil {
		return
	}
	what := "the master answering is a new process that holds none of them"
	if warm(b) {
		what = "the master answering is a new process, and the operation log it replayed does not hold them"
	}
	if l.Cause == kvv1.LossMemberLost {
		what = fmt.Sprintf("member segment %s went without its objects moved to the other members", l.Member)
	}
	r.recordLoss(b, l, what)
}

// recordLoss adds a loss to status.lost and the lost-objects and lost-bytes counters, and says
// what went and why (what) in an ObjectsLost event.
func (r *Reconciler) recordLoss(b *kvv1.KVCacheBackend, l *kvv1.Loss, what string) {
	if b.Status.Lost == nil {
		b.Status.Lost = &kvv1.LossStatus{}
	}
	b.Status.Lost.Objects += l.Objects
	b.Status.Lost.Bytes.Add(l.Bytes)
	b.Status.Lost.Last = l
	r.Metrics.Lost(b.Name, l.Cause, l.Objects, l.Bytes.Value())
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "ObjectsLost", "Observe",
		"%d object(s) (%s) are gone from the store: %s; every engine that reads them misses and prefills again (%d objects, %s lost in all)",
		l.Objects, l.Bytes.String(), what, b.Status.Lost.Objects, b.Status.Lost.Bytes.String())
}

// checkRemounts follows a warm store's members after a failover: once every segment the master
// before listed (and had not drained) is listed again, what the new master kept is settled;
// segments still missing when remountWindow has passed are lost with what they held. The new
// master keeps those objects in its index (measured: its object count does not fall, and each
// read misses), so their number is estimated from the segments' share of the bytes allocated
// before, and status.leader.lastFailover counts them lost rather than kept.
func (r *Reconciler) checkRemounts(s *state, now storeSnapshot) {
	b := s.backend
	a, ok := r.seen.awaited(b.UID)
	if !ok || now.segments == nil {
		return
	}
	var missing []string
	var bytes int64
	for name, seg := range a.before.segments {
		if _, back := now.segments[name]; back || seg.status == store.SegmentDrained {
			continue
		}
		missing = append(missing, name)
		bytes += seg.allocated
	}
	var f *kvv1.FailoverObserved
	if b.Status.Leader != nil {
		f = b.Status.Leader.LastFailover
	}
	if len(missing) > 0 && s.now.Sub(a.since) < remountWindow {
		return
	}
	r.seen.settle(b.UID)
	var objects int64
	if a.before.allocated > 0 {
		objects = min(a.before.keys, (a.before.keys*bytes+a.before.allocated/2)/a.before.allocated)
	}
	if f != nil {
		objects = min(objects, f.Kept)
		f.Kept -= objects
		f.Lost += objects
		r.Metrics.FailoverKept(b.Name, f.Kept)
	}
	if len(missing) == 0 || objects <= 0 && bytes <= 0 {
		return
	}
	sort.Strings(missing)
	r.recordLoss(b, &kvv1.Loss{Time: metav1.Time{Time: s.now.Truncate(time.Second)}, Cause: kvv1.LossMemberLost, Objects: objects,
		Bytes: *resource.NewQuantity(bytes, resource.BinarySI), Member: strings.Join(missing, ", ")},
		fmt.Sprintf("member segment %s did not mount on the new master within %s of the failover, and the about %d objects it held (by its share of the bytes) miss, though the new master still indexes them", strings.Join(missing, ", "), remountWindow, objects))
}

// failover records what a new master process kept of the objects the one before it held:
// status.leader.lastFailover, the failover metrics and, when a warm store's new master kept
// them, a WarmFailover event (a cold one has had its ColdCache event, or gets it here when a
// warm store's new master came up empty).
func (r *Reconciler) failover(s *state, prev, now storeSnapshot) {
	b := s.backend
	kept := min(prev.keys, now.keys)
	f := &kvv1.FailoverObserved{Time: metav1.Time{Time: s.now.Truncate(time.Second)}, Mode: kvv1.FailoverCold, Kept: kept, Lost: prev.keys - kept}
	if warm(b) && (kept > 0 || prev.keys == 0) {
		f.Mode = kvv1.FailoverWarm
	}
	if b.Status.Leader == nil {
		b.Status.Leader = &kvv1.LeaderStatus{}
	}
	b.Status.Leader.LastFailover = f
	r.Metrics.Failover(b.Name, string(f.Mode))
	if f.Mode == kvv1.FailoverWarm && prev.segments != nil {
		// What it kept is settled once the members are back on it (checkRemounts).
		r.seen.await(b.UID, prev, s.now)
	} else {
		r.Metrics.FailoverKept(b.Name, kept)
	}
	switch {
	case f.Mode == kvv1.FailoverWarm:
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "WarmFailover", "Observe",
			"a new master process serves and replayed the operation log: it holds %d of the %d objects the master before it held (%d lost)", kept, prev.keys, f.Lost)
	case warm(b):
		r.coldCache(s, kvv1.ColdCacheMasterRestarted, f.Time,
			fmt.Sprintf("a new master process serves and holds none of the %d objects the master before it held: its replay of the operation log kept nothing (its log says why: a refused restore is logged as \"Standby restore failed\"), so each of them misses (cold cache)", prev.keys))
	}
}
