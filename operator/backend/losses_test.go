package backend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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

	l := lossBetween(two, storeSnapshot{}, true, at)
	if assert.NotNil(t, l) {
		assert.Equal(t, kvv1.LossMasterRestarted, l.Cause)
		assert.Equal(t, int64(200), l.Objects)
		assert.Equal(t, int64(200<<16), l.Bytes.Value(), "the tenants' charged bytes")
	}

	l = lossBetween(two, oneLeft, false, at)
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
	assert.Nil(t, lossBetween(drained, moved, false, at), "a drained member's objects were moved")
	assert.Nil(t, lossBetween(two, two, false, at), "nothing went")
	empty := storeSnapshot{keys: 0, segments: map[string]segmentSnapshot{"10.0.0.1:13001": {}}}
	assert.Nil(t, lossBetween(empty, storeSnapshot{segments: map[string]segmentSnapshot{}}, false, at), "an empty member went")
	assert.Nil(t, lossBetween(storeSnapshot{}, storeSnapshot{}, true, at), "a new master after an empty one")
}
