package backend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
)

// A loss is told from two reads of the master's figures: a new master lost everything the old
// one held; a member that went undrained lost what the object count fell by, less what was
// evicted meanwhile; a drained member that goes, or an empty one, lost nothing.
func TestLossesAreToldFromTwoReads(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	two := storeSnapshot{keys: 200, evicted: 3, charged: 200 << 16, allocated: 210 << 16, segments: map[string]segmentSnapshot{
		"10.0.0.1:13001": {allocated: 96 << 16, status: store.SegmentOK},
		"10.0.0.2:13002": {allocated: 104 << 16, status: store.SegmentOK},
	}}
	oneLeft := storeSnapshot{keys: 100, evicted: 7, charged: 100 << 16, allocated: 104 << 16, segments: map[string]segmentSnapshot{
		"10.0.0.2:13002": {allocated: 104 << 16, status: store.SegmentOK},
	}}

	l := lossBetween(two, storeSnapshot{}, true, false, at)
	if assert.NotNil(t, l) {
		assert.Equal(t, kvv1.LossMasterRestarted, l.Cause)
		assert.Equal(t, int64(200), l.Objects)
		assert.Equal(t, int64(200<<16), l.Bytes.Value(), "the tenants' charged bytes")
	}

	l = lossBetween(two, oneLeft, false, false, at)
	if assert.NotNil(t, l) {
		assert.Equal(t, kvv1.LossMemberLost, l.Cause)
		assert.Equal(t, int64(96), l.Objects, "100 fewer objects, 4 of them evicted")
		assert.Equal(t, int64(100<<16), l.Bytes.Value())
		assert.Equal(t, "10.0.0.1:13001", l.Member)
	}

	drained := two
	drained.segments = map[string]segmentSnapshot{
		"10.0.0.1:13001": {allocated: 96 << 16, status: store.SegmentDrained},
		"10.0.0.2:13002": {allocated: 104 << 16, status: store.SegmentOK},
	}
	moved := oneLeft
	moved.keys, moved.charged = 200, 200<<16
	assert.Nil(t, lossBetween(drained, moved, false, false, at), "a drained member's objects were moved")
	assert.Nil(t, lossBetween(two, two, false, false, at), "nothing went")
	empty := storeSnapshot{keys: 0, segments: map[string]segmentSnapshot{"10.0.0.1:13001": {}}}
	assert.Nil(t, lossBetween(empty, storeSnapshot{segments: map[string]segmentSnapshot{}}, false, false, at), "an empty member went")
	assert.Nil(t, lossBetween(storeSnapshot{}, storeSnapshot{}, true, false, at), "a new master after an empty one")

	// A warm store's new master replayed the log: only what it does not hold is lost.
	replayed := storeSnapshot{keys: 190, allocated: 200 << 16}
	l = lossBetween(two, replayed, true, true, at)
	if assert.NotNil(t, l) {
		assert.Equal(t, kvv1.LossMasterRestarted, l.Cause)
		assert.Equal(t, int64(10), l.Objects)
		assert.Equal(t, int64(10<<16), l.Bytes.Value(), "the allocation the new master does not hold")
	}
	assert.Nil(t, lossBetween(two, storeSnapshot{keys: 200, allocated: 210 << 16}, true, true, at), "a warm failover that kept everything lost nothing")
	l = lossBetween(two, storeSnapshot{}, true, true, at)
	if assert.NotNil(t, l, "a warm store's master that restored nothing lost everything") {
		assert.Equal(t, int64(200), l.Objects)
	}
}

// A new master process is a failover: status.leader.lastFailover and an event say what it kept.
// A warm store's new master that replayed the log is a WarmFailover; one that came up empty is
// a cold cache all the same.
func TestFailoverSaysWhatTheNewMasterKept(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	before := storeSnapshot{keys: 200, allocated: 210 << 16}
	newRead := func(b *kvv1.KVCacheBackend, now storeSnapshot) (*events.FakeRecorder, *kvv1.FailoverObserved) {
		rec := events.NewFakeRecorder(10)
		r := &Reconciler{Recorder: rec}
		r.failover(&state{backend: b, now: at}, before, now)
		return rec, b.Status.Leader.LastFailover
	}

	warmBackend := managedBackend()
	warmBackend.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionEtcd
	rec, f := newRead(warmBackend, storeSnapshot{keys: 190})
	assert.Equal(t, &kvv1.FailoverObserved{Time: metav1.Time{Time: at}, Mode: kvv1.FailoverWarm, Kept: 190, Lost: 10}, f)
	require.Len(t, rec.Events, 1)
	assert.Equal(t, "Normal WarmFailover a new master process serves and replayed the operation log: it holds 190 of the 200 objects the master before it held (10 lost)", <-rec.Events)
	assert.Nil(t, warmBackend.Status.Leader.ColdCacheSince)

	rec, f = newRead(warmBackend, storeSnapshot{})
	assert.Equal(t, kvv1.FailoverCold, f.Mode, "a warm store's master that kept nothing")
	assert.Equal(t, int64(200), f.Lost)
	assert.Contains(t, <-rec.Events, "Warning ColdCache a new master process serves and holds none of the 200 objects")
	assert.Equal(t, kvv1.ColdCacheMasterRestarted, warmBackend.Status.Leader.ColdCacheReason)

	cold := managedBackend()
	rec, f = newRead(cold, storeSnapshot{})
	assert.Equal(t, &kvv1.FailoverObserved{Time: metav1.Time{Time: at}, Mode: kvv1.FailoverCold, Kept: 0, Lost: 200}, f)
	assert.Empty(t, rec.Events, "a cold store's restart had its ColdCache event when it was read")
}

// A warm store's member that does not mount its segment on the new master of a failover in time
// is lost with what it held, though the new master still indexes those objects: the failover's
// kept count gives them up and status.lost counts them (estimated by the segment's bytes); a
// member back in time, or one drained before, loses nothing.
func TestWarmFailoverSettlesOnceTheMembersAreBack(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	seg := func(allocated int64, status string) segmentSnapshot {
		return segmentSnapshot{allocated: allocated, status: status}
	}
	before := storeSnapshot{keys: 200, allocated: 200 << 20, segments: map[string]segmentSnapshot{
		"10.0.0.1:12001": seg(150<<20, store.SegmentOK), "10.0.0.2:12002": seg(50<<20, store.SegmentOK), "10.0.0.3:12003": seg(0, store.SegmentDrained)}}
	// The new master indexes all 200 objects; the second member has not mounted yet.
	after := storeSnapshot{keys: 200, allocated: 150 << 20, segments: map[string]segmentSnapshot{"10.0.0.1:12001": seg(150<<20, store.SegmentOK)}}
	back := storeSnapshot{keys: 200, allocated: 200 << 20, segments: map[string]segmentSnapshot{
		"10.0.0.1:12001": seg(150<<20, store.SegmentOK), "10.0.0.2:12002": seg(50<<20, store.SegmentOK)}}
	run := func(reads ...storeSnapshot) (*kvv1.KVCacheBackend, *events.FakeRecorder) {
		b := managedBackend()
		b.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionEtcd
		rec := events.NewFakeRecorder(10)
		r := &Reconciler{Recorder: rec}
		r.failover(&state{backend: b, now: at}, before, after)
		for i, rd := range reads {
			r.checkRemounts(&state{backend: b, now: at.Add(time.Duration(i+1) * 20 * time.Second)}, rd)
		}
		return b, rec
	}

	b, rec := run(after, back)
	assert.Equal(t, int64(200), b.Status.Leader.LastFailover.Kept, "the member mounted again 40 s after")
	assert.Zero(t, b.Status.Leader.LastFailover.Lost)
	assert.Nil(t, b.Status.Lost)
	assert.Len(t, rec.Events, 1, "the WarmFailover event only")

	b, rec = run(after, after, after)
	f := b.Status.Leader.LastFailover
	assert.Equal(t, int64(150), f.Kept, "the missing member's share (50 of 200 MiB) of the 200 objects is lost")
	assert.Equal(t, int64(50), f.Lost)
	require.NotNil(t, b.Status.Lost)
	assert.Equal(t, int64(50), b.Status.Lost.Objects)
	assert.Equal(t, int64(50<<20), b.Status.Lost.Bytes.Value())
	assert.Equal(t, kvv1.LossMemberLost, b.Status.Lost.Last.Cause)
	assert.Equal(t, "10.0.0.2:12002", b.Status.Lost.Last.Member, "the drained segment that went lost nothing")
	<-rec.Events // WarmFailover
	assert.Equal(t, "Warning ObjectsLost 50 object(s) (50Mi) are gone from the store: member segment 10.0.0.2:12002 did not mount on the new master within 1m0s of the failover, and the about 50 objects it held (by its share of the bytes) miss, though the new master still indexes them; every engine that reads them misses and prefills again (50 objects, 50Mi lost in all)", <-rec.Events)

	b, rec = run(after, after, after, after)
	assert.Equal(t, int64(50), b.Status.Lost.Objects, "counted once")
	assert.Len(t, rec.Events, 2)
}
