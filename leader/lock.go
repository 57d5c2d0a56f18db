package leader

import (
	"context"
	"errors"
	"fmt"
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
//   - A release only of a Lease this launcher holds. client-go's release reads the Lease, then
//     decides whether it leads from what it observed before that read, which may be stale; the
//     write that clears the holder is conditional on the fresh read, so it would clear another
//     launcher's claim. A release is let through only when the read before it named this
//     launcher.
type fencedLock struct {
	inner    resourcelock.Interface
	identity string
	now      func() time.Time

	renewed chan struct{} // capacity 1: a renewal happened since the last receive
	taken   chan string   // capacity 1: the holder a read showed while leading

	mu        sync.Mutex
	leading   bool
	fenced    bool
	renewedAt time.Time // start of the last successful write naming this launcher
	released  bool      // a write with an empty holder succeeded
	previous  string    // the last other holder a read showed
	lastRead  string    // the holder the last successful read showed
	wrote     bool      // a write naming this launcher succeeded (its term began)
	term      *termMark // what every write of a term this Pod held before carries
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
	fenced, lastRead := l.fenced, l.lastRead
	l.mu.Unlock()
	if fenced {
		return errFenced
	}
	if rec.HolderIdentity == "" && lastRead != l.identity {
		return fmt.Errorf("not releasing the Lease: it names %q, not this launcher", lastRead)
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
		l.renewedAt = start
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
