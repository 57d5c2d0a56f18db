package leader

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func TestHoldDeadline(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	const renew = 7 * time.Second
	for _, tc := range []struct {
		name              string
		renewed, promised time.Time
		maxHold           time.Duration
		want              time.Time
	}{
		{"without promises the master dies at the renew deadline past the last renewal", t0, time.Time{}, time.Minute, t0.Add(renew)},
		{"a promise older than the last renewal adds nothing", t0, t0.Add(-time.Second), time.Minute, t0.Add(renew)},
		{"a round every peer promised in counts as a renewal", t0, t0.Add(5 * time.Second), time.Minute, t0.Add(12 * time.Second)},
		{"promises carry the master at most maxHold past the last renewal", t0, t0.Add(58 * time.Second), time.Minute, t0.Add(time.Minute)},
		{"a maxHold shorter than the renew deadline leaves the renewal's own deadline", t0, t0.Add(time.Second), 2 * time.Second, t0.Add(renew)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, holdDeadline(tc.renewed, tc.promised, renew, tc.maxHold))
		})
	}
}

func TestJudgeRound(t *testing.T) {
	promised := holdAnswer{Verdict: verdictPromised, Reason: "the API server did not answer"}
	for _, tc := range []struct {
		name  string
		round holdRound
		want  holdOutcome
	}{
		{"no peers: every peer promised (a launcher the term never acknowledged waits maxHold longer)",
			holdRound{answers: map[string]holdAnswer{}}, holdOutcome{allPromised: true}},
		{"every peer promised", holdRound{answers: map[string]holdAnswer{"b": promised, "c": promised}}, holdOutcome{allPromised: true}},
		{"one peer renewed for the holder",
			holdRound{answers: map[string]holdAnswer{"b": {Verdict: verdictRenewed, Holder: "a"}, "c": promised}}, holdOutcome{renewedBy: "b"}},
		{"one peer did not answer: no hold",
			holdRound{answers: map[string]holdAnswer{"b": promised, "c": {Verdict: verdictRefused, Reason: "no answer: timeout"}}},
			holdOutcome{missing: []string{"c: refused no answer: timeout"}}},
		{"a peer reads another holder",
			holdRound{answers: map[string]holdAnswer{"b": {Verdict: verdictLost, Holder: "b"}, "c": promised}},
			holdOutcome{lostTo: "b", missing: []string{"b: lost "}}},
		{"a peer acknowledged during the round was not asked: the round does not count",
			holdRound{answers: map[string]holdAnswer{"b": promised}, peersGrown: true}, holdOutcome{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, judgeRound(tc.round))
		})
	}
}

// standbyLock is a standby's lock that read a Lease held by "other" at t0.
func standbyLock(t *testing.T, clock *time.Time) (*fencedLock, *memLock, term) {
	t.Helper()
	rec := resourcelock.LeaderElectionRecord{HolderIdentity: "other", LeaseDurationSeconds: 10, AcquireTime: metav1.NewTime(*clock), RenewTime: metav1.NewTime(*clock), LeaderTransitions: 2}
	inner := &memLock{rec: &rec}
	l := newFencedLock(inner, func() time.Time { return *clock })
	l.gate = &takeoverGate{maxHold: time.Minute}
	_, _, err := l.Get(context.Background())
	require.NoError(t, err)
	return l, inner, termOf(rec)
}

func takeover(l *fencedLock, now time.Time) error {
	return l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 10, AcquireTime: metav1.NewTime(now), RenewTime: metav1.NewTime(now), LeaderTransitions: 3})
}

// A standby the holder's term acknowledged takes over as client-go decides; one it did not
// waits until the record stood unchanged for maxHold plus the lease duration, since the holder
// may be keeping its master on the promises of the peers it knows.
func TestTakeoverWaitsOutAHoldTheStandbyWasNotAskedFor(t *testing.T) {
	clock := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	l, inner, _ := standbyLock(t, &clock)
	clock = clock.Add(15 * time.Second) // client-go would take over now
	err := takeover(l, clock)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not taking the Lease over from other: its term never acknowledged this launcher")
	assert.Equal(t, "other", inner.rec.HolderIdentity)

	clock = clock.Add(55 * time.Second) // 70 s unchanged: maxHold + lease duration
	require.NoError(t, takeover(l, clock))
	assert.Equal(t, "me", inner.rec.HolderIdentity)

	clock = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	acked, inner2, tm := standbyLock(t, &clock)
	acked.setAcked(tm)
	clock = clock.Add(11 * time.Second)
	require.NoError(t, takeover(acked, clock), "acknowledged: the holder holds only with this launcher's promise")
	assert.Equal(t, "me", inner2.rec.HolderIdentity)
}

func TestTakeoverWaitCountsFromTheLastChangeOfTheRecord(t *testing.T) {
	clock := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	l, inner, _ := standbyLock(t, &clock)
	clock = clock.Add(50 * time.Second)
	inner.rec.RenewTime = metav1.NewTime(clock) // a renewal, say by a peer for the holder
	inner.rec.HolderIdentity = "other"
	_, _, err := l.Get(context.Background())
	require.NoError(t, err)
	// memLock's raw record is the holder's name: make the read look changed.
	l.lastRaw = nil
	_, _, err = l.Get(context.Background())
	require.NoError(t, err)
	clock = clock.Add(30 * time.Second)
	require.Error(t, takeover(l, clock), "70 s since the first read, but only 30 s since the record changed")
}

// A promise binds the standby for its duration; it is refused once the standby wrote the
// Lease as its own or while such a write is in flight.
func TestAPromiseBindsTheStandby(t *testing.T) {
	clock := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	l, inner, tm := standbyLock(t, &clock)
	l.setAcked(tm)
	require.True(t, l.promise(tm, 10*time.Second))
	clock = clock.Add(9 * time.Second)
	err := takeover(l, clock)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "promised its term to stay standby until 2026-12-02T10:00:10Z")
	assert.Equal(t, "other", inner.rec.HolderIdentity)
	clock = clock.Add(2 * time.Second)
	require.NoError(t, takeover(l, clock), "the promise ran out")
	assert.False(t, l.promise(tm, 10*time.Second), "a launcher that wrote the Lease as its own promises nothing")

	clock = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	l2, _, tm2 := standbyLock(t, &clock)
	l2.setAcked(tm2)
	require.NoError(t, l2.beginTakeover())
	assert.False(t, l2.promise(tm2, 10*time.Second), "not while a takeover write is in flight")
	l2.endTakeover()
	assert.True(t, l2.promise(tm2, 10*time.Second))
}

func TestAProxyRenewalRenewsLikeTheLeadersOwn(t *testing.T) {
	clock := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	l := newFencedLock(&memLock{rec: &resourcelock.LeaderElectionRecord{}}, func() time.Time { return clock })
	require.NoError(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	received(l.renewed)
	l.noteProxyRenewal(clock.Add(-time.Second))
	assert.Equal(t, clock, l.lastRenewal(), "an older renewal changes nothing")
	assert.False(t, received(l.renewed))
	l.noteProxyRenewal(clock.Add(4 * time.Second))
	assert.Equal(t, clock.Add(4*time.Second), l.lastRenewal())
	assert.True(t, received(l.renewed))
}
