package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// memLock is a Lease in memory: what the API server would hold, without one.
type memLock struct {
	rec     *resourcelock.LeaderElectionRecord
	failing error // returned by every call while set
	writes  []resourcelock.LeaderElectionRecord
}

func (m *memLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if m.failing != nil {
		return nil, nil, m.failing
	}
	r := *m.rec
	return &r, []byte(r.HolderIdentity), nil
}

func (m *memLock) Create(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	return m.Update(context.Background(), r)
}

func (m *memLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	if m.failing != nil {
		return m.failing
	}
	m.rec = &r
	m.writes = append(m.writes, r)
	return nil
}

func (m *memLock) RecordEvent(string) {}
func (m *memLock) Identity() string   { return "me" }
func (m *memLock) Describe() string   { return "ns/lease" }
func received[T any](c <-chan T) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestFencedLockTracksRenewalsByTheirStartTime(t *testing.T) {
	clock := time.Unix(1000, 0)
	inner := &memLock{rec: &resourcelock.LeaderElectionRecord{}}
	l := newFencedLock(inner, func() time.Time { return clock })
	require.NoError(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	assert.Equal(t, clock, l.lastRenewal())
	assert.True(t, received(l.renewed), "a renewal is signalled")
	assert.False(t, received(l.renewed), "once")

	clock = clock.Add(time.Second)
	inner.failing = errors.New("API server unreachable")
	require.Error(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	assert.Equal(t, time.Unix(1000, 0), l.lastRenewal(), "a failed write renews nothing")
	assert.False(t, received(l.renewed))
}

func TestFencedLockRecordsARelease(t *testing.T) {
	l := newFencedLock(&memLock{rec: &resourcelock.LeaderElectionRecord{}}, time.Now)
	require.NoError(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	assert.False(t, l.wasReleased())
	_, _, err := l.Get(context.Background()) // client-go reads before it releases
	require.NoError(t, err)
	require.EqualError(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: ""}),
		"not releasing the Lease: this launcher has not stepped down (its master may still serve)",
		"client-go releases when its renewals fail; the launcher decides when the master is gone")
	assert.False(t, l.wasReleased())
	l.allowRelease()
	require.NoError(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: ""}))
	assert.True(t, l.wasReleased())
}

func TestFencedLockReleasesOnlyALeaseTheReadBeforeNamesItsOwn(t *testing.T) {
	// This launcher renewed last, then another took over; client-go's release still thinks it
	// leads (its observation predates the read) and would clear the new holder.
	inner := &memLock{rec: &resourcelock.LeaderElectionRecord{}}
	l := newFencedLock(inner, time.Now)
	require.NoError(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	inner.rec = &resourcelock.LeaderElectionRecord{HolderIdentity: "other"}
	_, _, err := l.Get(context.Background())
	require.NoError(t, err)
	err = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: ""})
	require.EqualError(t, err, `not releasing the Lease: it names "other", not this launcher`)
	assert.Equal(t, "other", inner.rec.HolderIdentity, "the new holder's claim stands")
	assert.False(t, l.wasReleased())
}

func TestFencedLockSignalsAnotherHolderOnlyWhileLeading(t *testing.T) {
	inner := &memLock{rec: &resourcelock.LeaderElectionRecord{HolderIdentity: "other"}}
	l := newFencedLock(inner, time.Now)
	_, _, err := l.Get(context.Background())
	require.NoError(t, err)
	assert.False(t, received(l.taken), "a standby seeing another holder is the normal case")

	l.setLeading(true)
	inner.rec = &resourcelock.LeaderElectionRecord{HolderIdentity: ""}
	_, _, err = l.Get(context.Background())
	require.NoError(t, err)
	assert.False(t, received(l.taken), "a released Lease is not another's")
	inner.rec = &resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	_, _, err = l.Get(context.Background())
	require.NoError(t, err)
	assert.False(t, received(l.taken))

	inner.rec = &resourcelock.LeaderElectionRecord{HolderIdentity: "other"}
	_, _, err = l.Get(context.Background())
	require.NoError(t, err)
	select {
	case h := <-l.taken:
		assert.Equal(t, "other", h)
	default:
		t.Fatal("a leader reading another holder is told")
	}
}

func TestAFencedLockNeitherReadsNorWrites(t *testing.T) {
	inner := &memLock{rec: &resourcelock.LeaderElectionRecord{HolderIdentity: "other"}}
	l := newFencedLock(inner, time.Now)
	l.fence()
	_, _, err := l.Get(context.Background())
	require.ErrorIs(t, err, errFenced)
	require.ErrorIs(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{}), errFenced, "a release would clear the new holder")
	require.ErrorIs(t, l.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}), errFenced)
	assert.Empty(t, inner.writes)
	assert.Equal(t, "other", inner.rec.HolderIdentity)
}

// A launcher restarted in the Pod that held the Lease (same identity) starts a new, empty
// master: its term writes a new acquireTime and one more transition, and keeps them through
// its renewals and its release, though client-go hands it the old record's. A takeover from
// another holder is left as client-go writes it.
func TestFencedLockMarksATermThisPodHeldBefore(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	old := resourcelock.LeaderElectionRecord{HolderIdentity: "me", AcquireTime: metav1.NewTime(t0), LeaderTransitions: 3}
	m := &memLock{rec: &old}
	now := t0.Add(time.Hour)
	l := newFencedLock(m, func() time.Time { return now })
	_, _, err := l.Get(context.Background())
	require.NoError(t, err)
	// What client-go writes when the Lease already names this identity.
	require.NoError(t, l.Update(context.Background(), old))
	assert.Equal(t, now, m.rec.AcquireTime.Time, "a new acquireTime")
	assert.Equal(t, 4, m.rec.LeaderTransitions, "one more transition")
	now = now.Add(time.Second)
	require.NoError(t, l.Update(context.Background(), old))
	assert.Equal(t, t0.Add(time.Hour), m.rec.AcquireTime.Time, "a renewal keeps the term's mark")
	assert.Equal(t, 4, m.rec.LeaderTransitions)
	released := old
	released.HolderIdentity = ""
	l.allowRelease()
	require.NoError(t, l.Update(context.Background(), released))
	assert.Equal(t, 4, m.rec.LeaderTransitions, "the release keeps the count")

	other := resourcelock.LeaderElectionRecord{HolderIdentity: "other", AcquireTime: metav1.NewTime(t0), LeaderTransitions: 7}
	m2 := &memLock{rec: &other}
	l2 := newFencedLock(m2, func() time.Time { return now })
	_, _, err = l2.Get(context.Background())
	require.NoError(t, err)
	takeover := resourcelock.LeaderElectionRecord{HolderIdentity: "me", AcquireTime: metav1.NewTime(now), LeaderTransitions: 8}
	require.NoError(t, l2.Update(context.Background(), takeover))
	assert.Equal(t, takeover, *m2.rec, "a takeover is written as client-go made it")
}
