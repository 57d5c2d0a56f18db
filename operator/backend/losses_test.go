package backend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator/store"
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
