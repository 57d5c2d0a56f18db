package leader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// errFenced is what the elector gets from the Lease once this launcher gave up leadership on
// its own: it must not write the Lease again.
var errFenced = errors.New("this launcher lost the Lease and no longer reads or writes it")

// fencedLock wraps the Lease lock client-go campaigns with, for what client-go does not
// offer:
//
//   - Timely loss. client-go's elector gives up only after RenewDeadline of failed renewals
//     counted from the next retry, and with ReleaseOnCancel it then tries to release the Lease
//     (up to another RenewDeadline when the API server is unreachable) before it cancels the
//     leader's context. The launcher instead watches the renewals itself: renewed signals every
//     successful write naming this launcher, with its start time kept in renewedAt, and taken
//     signals a read that shows another holder while leading.
//   - No write after loss. Once fenced every call fails, so the elector's last attempts and its
//     release cannot overwrite a Lease another launcher now holds.
//   - A new term on the Lease when this launcher's Pod held it before. The holder identity is
//     the Pod's name, so a launcher restarted in the same Pod (its master killed, the API
//     server away past the renew deadline) acquires a Lease that already names it, and
//     client-go then keeps the old acquireTime and leaseTransitions: the master it starts is a
//     new, empty one, but the Lease would not say so, and an operator that restarted meanwhile
//     could not tell a cold cache. The term's writes carry a new acquireTime and one more
//     transition instead.
//   - A release only of a Lease this launcher holds, and only when it steps down. client-go's
//     release reads the Lease, then decides whether it leads from what it observed before that
//     read, which may be stale; the write that clears the holder is conditional on the fresh
//     read, so it would clear another launcher's claim. A release is let through only when the
//     read before it named this launcher. And client-go releases whenever its renewals fail for
//     RenewDeadline, before the launcher hears of it: with the master still running (or held
//     through an API server outage, see hold.go) a standby would take the released Lease at
//     once. A release is let through only after allowRelease, which stepDown calls once the
//     master is stopped.
//   - No takeover against the peer protocol (takeoverGate): not while this launcher promised the
//     holder's term to stay standby, and, unless that term acknowledged it as a peer, not before
//     the record has stood unchanged for MaxHold more than its lease duration.
type fencedLock struct {
	inner    resourcelock.Interface
	identity string
	now      func() time.Time

	renewed chan struct{} // capacity 1: a renewal happened since the last receive
	taken   chan string   // capacity 1: the holder a read showed while leading

	mu        sync.Mutex
	leading   bool
	fenced    bool
	renewedAt time.Time // start of the last successful write naming this launcher, or of a peer's ask for one (noteProxyRenewal)
	ownAt     time.Time // start of the last successful write naming this launcher
	released  bool      // a write with an empty holder succeeded
	previous  string    // the last other holder a read showed
	lastRead  string    // the holder the last successful read showed
	wrote     bool      // a write naming this launcher succeeded (its term began)
	term      *termMark // what every write of a term this Pod held before carries

	mayRelease bool                              // stepDown allowed the release
	lastRec    resourcelock.LeaderElectionRecord // what the last successful read showed
	lastRaw    []byte
	changedAt  time.Time                         // when a read first showed lastRaw
	written    resourcelock.LeaderElectionRecord // the last write naming this launcher

	gate      *takeoverGate // nil: no peer protocol, client-go's takeover rule alone
	acked     term          // the holder's term that acknowledged this launcher as its peer
	promised  term          // the holder's term this launcher promised to stay standby for
	until     time.Time     // ... until then
	acquiring bool          // a takeover write is in flight
}

// takeoverGate is the standby's side of the peer protocol.
type takeoverGate struct {
	// maxHold is how long past its last renewal a holder may keep its master on promises; a
	// standby its term does not know may not count on its promise being asked for.
	maxHold time.Duration
}

// termMark is the acquireTime and transition count of a term that re-acquired a Lease naming
// this launcher's Pod.
type termMark struct {
	acquired    metav1.Time
	transitions int
}

var _ resourcelock.Interface = (*fencedLock)(nil)

func newFencedLock(inner resourcelock.Interface, now func() time.Time) *fencedLock {
	return &fencedLock{
		inner:    inner,
		identity: inner.Identity(),
		now:      now,
		renewed:  make(chan struct{}, 1),
		taken:    make(chan string, 1),
	}
}

// setLeading says whether a read showing another holder means this launcher lost the Lease.
func (l *fencedLock) setLeading(v bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading = v
}

// fence refuses every later call.
func (l *fencedLock) fence() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fenced = true
}

// lastRenewal is when the last successful write naming this launcher started: the Lease it
// wrote cannot have been committed earlier, so no standby can take over before lastRenewal
// plus the lease duration.
func (l *fencedLock) lastRenewal() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewedAt
}

// lastOwnRenewal is when the last successful write of this launcher's own started.
func (l *fencedLock) lastOwnRenewal() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ownAt
}

// previousHolder is the last holder other than this launcher that a read showed: on taking
// over, the leader before.
func (l *fencedLock) previousHolder() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.previous
}

// wasReleased reports whether this launcher's release of the Lease succeeded.
func (l *fencedLock) wasReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

func (l *fencedLock) isFenced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fenced
}

func (l *fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if l.isFenced() {
		return nil, nil, errFenced
	}
	rec, raw, err := l.inner.Get(ctx)
	if err != nil {
		return rec, raw, err
	}
	other := rec.HolderIdentity != "" && rec.HolderIdentity != l.identity
	l.mu.Lock()
	l.lastRead = rec.HolderIdentity
	l.lastRec = *rec
	if !bytes.Equal(raw, l.lastRaw) || l.changedAt.IsZero() {
		l.lastRaw, l.changedAt = slices.Clone(raw), l.now()
	}
	if other {
		l.previous = rec.HolderIdentity
	}
	// An empty holder is a released Lease; the elector may take it again without a gap, since
	// its write is conditional on what it read.
	lost := l.leading && !l.fenced && other
	l.mu.Unlock()
	if lost {
		select {
		case l.taken <- rec.HolderIdentity:
		default:
		}
	}
	return rec, raw, nil
}

func (l *fencedLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.inner.Create)
}

func (l *fencedLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.inner.Update)
}

func (l *fencedLock) write(ctx context.Context, rec resourcelock.LeaderElectionRecord, f func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	l.mu.Lock()
	fenced, lastRead, mayRelease := l.fenced, l.lastRead, l.mayRelease
	l.mu.Unlock()
	if fenced {
		return errFenced
	}
	if rec.HolderIdentity == "" {
		if lastRead != l.identity {
			return fmt.Errorf("not releasing the Lease: it names %q, not this launcher", lastRead)
		}
		if !mayRelease {
			return errors.New("not releasing the Lease: this launcher has not stepped down (its master may still serve)")
		}
	}
	if rec.HolderIdentity == l.identity && lastRead != "" && lastRead != l.identity {
		if err := l.beginTakeover(); err != nil {
			return err
		}
		defer l.endTakeover()
	}
	start := l.now()
	l.mu.Lock()
	term := l.term
	if term == nil && !l.wrote && rec.HolderIdentity == l.identity && lastRead == l.identity {
		term = &termMark{acquired: metav1.NewTime(start), transitions: rec.LeaderTransitions + 1}
	}
	l.mu.Unlock()
	if term != nil {
		rec.AcquireTime, rec.LeaderTransitions = term.acquired, term.transitions
	}
	if err := f(ctx, rec); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch rec.HolderIdentity {
	case l.identity:
		l.term = term
		l.wrote = true
		l.written = rec
		l.renewedAt = later(l.renewedAt, start)
		l.ownAt = start
		select {
		case l.renewed <- struct{}{}:
		default:
		}
	case "":
		l.released = true
	}
	return nil
}

func (l *fencedLock) RecordEvent(s string) { l.inner.RecordEvent(s) }
func (l *fencedLock) Identity() string     { return l.identity }
func (l *fencedLock) Describe() string     { return l.inner.Describe() }

// allowRelease lets the elector release the Lease: the master is stopped.
func (l *fencedLock) allowRelease() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mayRelease = true
}

// isLeading reports whether this launcher runs a term.
func (l *fencedLock) isLeading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading && !l.fenced
}

// leadTerm is the term this launcher leads: the last record it wrote naming itself.
func (l *fencedLock) leadTerm() term {
	l.mu.Lock()
	defer l.mu.Unlock()
	return termOf(l.written)
}

// readTerm is the term the last successful read showed, and whether one did.
func (l *fencedLock) readTerm() (term, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return termOf(l.lastRec), !l.changedAt.IsZero()
}

// noteProxyRenewal records a renewal a peer wrote for this launcher's term, counted from when
// this launcher asked for it (the write cannot have committed earlier).
func (l *fencedLock) noteProxyRenewal(asked time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !asked.After(l.renewedAt) {
		return
	}
	l.renewedAt = asked
	select {
	case l.renewed <- struct{}{}:
	default:
	}
}

// setAcked records that the holder's term t acknowledged this launcher as its peer: that
// holder keeps its master past its renewals only with this launcher's promise.
func (l *fencedLock) setAcked(t term) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked = t
}

// isAcked reports whether term t acknowledged this launcher.
func (l *fencedLock) isAcked(t term) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked == t && t.Holder != ""
}

// promise binds this launcher to take no Lease over from term t for d. It is refused (false)
// once this launcher has written the Lease as its own, or while such a write is in flight: the
// holder must not count on a standby that may already lead.
func (l *fencedLock) promise(t term, d time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote || l.acquiring || l.leading {
		return false
	}
	if until := l.now().Add(d); l.promised != t || until.After(l.until) {
		l.promised, l.until = t, until
	}
	return true
}

// beginTakeover admits a write that takes the Lease from the holder the last read showed, or
// says why not.
func (l *fencedLock) beginTakeover() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gate == nil {
		l.acquiring = true
		return nil
	}
	from, now := termOf(l.lastRec), l.now()
	if l.promised == from && now.Before(l.until) {
		return fmt.Errorf("not taking the Lease over from %s: promised its term to stay standby until %s", from.Holder, l.until.Format(time.RFC3339Nano))
	}
	if l.acked != from {
		wait := l.gate.maxHold + time.Duration(l.lastRec.LeaseDurationSeconds)*time.Second
		if standing := now.Sub(l.changedAt); standing < wait {
			return fmt.Errorf("not taking the Lease over from %s: its term never acknowledged this launcher as a peer, so it may still hold its master on promises; the record stood unchanged for %s of the %s that rules that out", from.Holder, standing.Round(time.Millisecond), wait)
		}
	}
	l.acquiring = true
	return nil
}

func (l *fencedLock) endTakeover() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquiring = false
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
