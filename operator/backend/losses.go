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
	"github.com/kvcache-operator/kvcache/operator/store"
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

// snapshots remembers each backend's last read, by UID. It is in memory: after the operator
// restarts, the first read has nothing to compare with and counts no loss.
type snapshots struct {
	mu   sync.Mutex
	byID map[types.UID]storeSnapshot
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
	}
	l := lossBetween(prev, now, s.reading.master == newMaster, warm(b), s.now)
	if l == nil {
		return
	}
	if b.Status.Lost == nil {
		b.Status.Lost = &kvv1.LossStatus{}
	}
	b.Status.Lost.Objects += l.Objects
	b.Status.Lost.Bytes.Add(l.Bytes)
	b.Status.Lost.Last = l
	r.Metrics.Lost(b.Name, l.Cause, l.Objects, l.Bytes.Value())
	what := "the master answering is a new process that holds none of them"
	if warm(b) {
		what = "the master answering is a new process, and the operation log it replayed does not hold them"
	}
	if l.Cause == kvv1.LossMemberLost {
		what = fmt.Sprintf("member segment %s went without its objects moved to the other members", l.Member)
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "ObjectsLost", "Observe",
		"%d object(s) (%s) are gone from the store: %s; every engine that reads them misses and prefills again (%d objects, %s lost in all)",
		l.Objects, l.Bytes.String(), what, b.Status.Lost.Objects, b.Status.Lost.Bytes.String())
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
	r.Metrics.Failover(b.Name, string(f.Mode), kept)
	switch {
	case f.Mode == kvv1.FailoverWarm:
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "WarmFailover", "Observe",
			"a new master process serves and replayed the operation log: it holds %d of the %d objects the master before it held (%d lost)", kept, prev.keys, f.Lost)
	case warm(b):
		r.coldCache(s, kvv1.ColdCacheMasterRestarted, f.Time,
			fmt.Sprintf("a new master process serves and holds none of the %d objects the master before it held: its replay of the operation log kept nothing (its log says why: a refused restore is logged as \"Standby restore failed\"), so each of them misses (cold cache)", prev.keys))
	}
}
