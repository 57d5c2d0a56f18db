package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/kvcache-operator/kvcache/vocab"
)

// ErrLeaseLost is returned when the launcher stopped leading without being asked to: renewals
// failed for RenewDeadline, or the Lease names another holder. The master was killed.
var ErrLeaseLost = errors.New("lost the Lease")

// MasterExitError is returned when the master exited by itself while leading. The Lease was
// released.
type MasterExitError struct {
	// Code is the master's exit code, or 128+N when signal N ended it.
	Code int
}

func (e *MasterExitError) Error() string {
	return fmt.Sprintf("the master exited with code %d while leading", e.Code)
}

// Run campaigns for the Lease and runs the master while it leads. It returns nil after a
// graceful stop (ctx ended: the master was stopped, then the Lease released),
// [ErrLeaseLost] (wrapped) when leadership was lost, a [*MasterExitError] when the master
// exited by itself, or another error when the launcher could not start at all. It leads at
// most once: a launcher that stopped leading exits, and its container restarts as a standby.
func Run(ctx context.Context, c Config) error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	log := c.Log.WithValues("lease", c.LeaseNamespace+"/"+c.LeaseName, "identity", c.Identity)

	// A standby, a restarted leader included, must not keep claiming to lead.
	if err := c.labelAtStart(ctx, log); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it began
		}
		return fmt.Errorf("labelling Pod %s/%s %s=false (the launcher needs pods patch there): %w", c.PodNamespace, c.PodName, vocab.LabelStoreLeader, err)
	}

	lock := newFencedLock(&resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.LeaseNamespace, Name: c.LeaseName},
		Client:     c.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.Identity},
	}, time.Now)
	var peers *peerNet
	if c.PeerPort > 0 {
		lock.gate = &takeoverGate{maxHold: c.MaxHold}
		var err error
		if peers, err = c.startPeers(ctx, lock, log); err != nil {
			return err
		}
		defer peers.stop()
	}
	// The elector runs under its own context, not ctx: a graceful stop must stop the master
	// before the elector releases the Lease, and ending ctx would release it at once.
	k := &campaign{
		base:    logr.NewContext(context.WithoutCancel(ctx), log.WithName("leaderelection")),
		started: make(chan context.Context, 1),
	}
	k.cfg = leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            c.LeaseName,
		LeaseDuration:   c.LeaseDuration,
		RenewDeadline:   c.RenewDeadline,
		RetryPeriod:     c.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(term context.Context) { k.started <- term },
			OnStoppedLeading: func() {},
		},
	}
	if err := k.start(); err != nil {
		return err
	}
	defer k.stop()

	greeting := func() {}
	if peers != nil {
		gctx, stopGreeting := context.WithCancel(ctx)
		greeted := make(chan struct{})
		go func() {
			defer close(greeted)
			peers.greet(gctx)
		}()
		greeting = func() { stopGreeting(); <-greeted }
	}

	log.Info("standby: campaigning for the Lease", "leaseDuration", c.LeaseDuration, "renewDeadline", c.RenewDeadline, "retryPeriod", c.RetryPeriod, "peerPort", c.PeerPort, "maxHold", c.MaxHold)
	select {
	case <-ctx.Done():
		k.stop()
		greeting()
		if peers != nil {
			peers.sayGoodbye()
		}
		log.Info("stopped while standby")
		return nil
	case term := <-k.started:
		greeting()
		return c.lead(ctx, log, lock, k, peers, term)
	}
}

// campaign runs client-go's elector over the launcher's lock, and can run a new one for the
// same term: client-go's elector gives up after RenewDeadline of failed renewals, while a
// leader holding its master through an API server outage (hold.go) must renew again once the
// API server answers. A new elector finds the Lease naming this launcher and renews it; the
// lock keeps the term's acquireTime and transitions.
type campaign struct {
	cfg     leaderelection.LeaderElectionConfig
	base    context.Context
	started chan context.Context // each elector leads at most once

	cancel context.CancelFunc
	done   chan struct{}
}

func (k *campaign) start() error {
	el, err := leaderelection.NewLeaderElector(k.cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(k.base)
	done := make(chan struct{})
	k.cancel, k.done = cancel, done
	go func() {
		defer close(done)
		el.Run(ctx)
	}()
	return nil
}

// stop ends the campaign; with ReleaseOnCancel the elector releases the Lease (when it leads
// and the lock lets it) before it returns.
func (k *campaign) stop() {
	if k.cancel == nil {
		return
	}
	k.cancel()
	<-k.done
	k.cancel = nil
}

// lead runs the master for one term and returns when the term ends.
func (c Config) lead(ctx context.Context, log logr.Logger, lock *fencedLock, k *campaign, peers *peerNet, term context.Context) error {
	lock.setLeading(true)
	previous := lock.previousHolder()
	log.Info("became leader", "previousHolder", previous, "term", lock.leadTerm().String())
	m, err := startChild(c.Command, c.Stdout, c.Stderr)
	if err != nil {
		log.Error(err, "the master did not start", "command", c.Command[0])
		c.stepDown(log, lock, k)
		return fmt.Errorf("starting the master %q: %w", c.Command[0], err)
	}
	log.Info("master started", "pid", m.Pid(), "command", c.Command[0])

	// The label follows in the background: serving comes first.
	labelCtx, cancelLabel := context.WithCancel(context.WithoutCancel(ctx))
	labelDone := make(chan struct{})
	go func() {
		defer close(labelDone)
		c.labelLeading(labelCtx, log, previous)
	}()
	stopLabelling := func() {
		cancelLabel()
		<-labelDone
	}

	unserved := make(chan string, 1)
	servedCtx, stopServed := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan struct{})
	go func() {
		defer close(served)
		c.watchServed(servedCtx, time.Now(), unserved)
	}()
	defer func() { stopServed(); <-served }()

	holds := make(chan holdOutcomeAt)
	if peers != nil {
		holdCtx, stopHolds := context.WithCancel(context.WithoutCancel(ctx))
		held := make(chan struct{})
		go func() {
			defer close(held)
			peers.holdRounds(holdCtx, c.MaxHold, holds)
		}()
		defer func() { stopHolds(); <-held }()
	}
	// No standby can take over before the last renewal plus the lease duration, nor before the
	// last round all peers promised in plus the lease duration; giving up at either plus the
	// renew deadline leaves the difference to kill the master.
	var promised time.Time
	deadlineAt := func() time.Time { return holdDeadline(lock.lastRenewal(), promised, c.RenewDeadline, c.MaxHold) }
	deadline := time.NewTimer(time.Until(deadlineAt()))
	defer deadline.Stop()
	lost := func(reason string) error {
		return c.lose(log, lock, m, stopLabelling, k, reason)
	}
	for {
		select {
		case <-lock.renewed:
			deadline.Reset(time.Until(deadlineAt()))
		case h := <-holds:
			if h.lostTo != "" {
				return lost(fmt.Sprintf("a peer reads the Lease naming %q", h.lostTo))
			}
			promised = h.sent
			deadline.Reset(time.Until(deadlineAt()))
		case <-deadline.C:
			if d := deadlineAt(); time.Now().Before(d) { // extended meanwhile
				deadline.Reset(time.Until(d))
				continue
			}
			if promised.After(lock.lastRenewal()) {
				return lost(fmt.Sprintf("no renewal for %s and the peers' promises ran out (at most %s past the last renewal)", time.Since(lock.lastRenewal()).Round(time.Millisecond), c.MaxHold))
			}
			return lost(fmt.Sprintf("no successful renewal for %s", c.RenewDeadline))
		case holder := <-lock.taken:
			return lost(fmt.Sprintf("the Lease names %q", holder))
		case <-term.Done():
			if peers == nil || !time.Now().Before(deadlineAt()) {
				return lost("the elector stopped renewing")
			}
			// client-go gave up renewing while the peers hold: campaign again for the same term,
			// so renewals resume as soon as the API server answers.
			log.Info("the elector stopped renewing while the peers hold the term: campaigning again for it", "holdUntil", deadlineAt())
			k.stop()
			if err := k.start(); err != nil {
				return lost(fmt.Sprintf("the elector stopped renewing and could not be restarted: %v", err))
			}
			term = neverDone
		case t := <-k.started:
			log.Info("renewing the term again")
			term = t
		case <-m.Done():
			code := m.ExitCode()
			log.Info("master exited while leading", "pid", m.Pid(), "exitCode", code)
			signalGroup(m.Pid(), sigKill) // whatever it left in its group
			stopLabelling()
			c.stepDown(log, lock, k)
			return &MasterExitError{Code: code}
		case reason := <-unserved:
			log.Info("handing over: this master is not served", "reason", reason)
			c.handOver(log, lock, m, stopLabelling, k, deadlineAt())
			return fmt.Errorf("%w: %s", ErrSteppedDown, reason)
		case <-ctx.Done():
			c.handOver(log, lock, m, stopLabelling, k, deadlineAt())
			if c.Linger > 0 {
				log.Info("lingering so connections to this Pod are refused, not dropped, until a standby serves", "linger", c.Linger)
				time.Sleep(c.Linger)
			}
			return nil
		}
	}
}

// handOver ends a term gracefully: the master stopped (SIGTERM, SIGKILL after the stop grace),
// then the label and the Lease (stepDown). The grace ends early when the term's deadline is
// near: the master must be gone before a standby may take over.
func (c Config) handOver(log logr.Logger, lock *fencedLock, m *child, stopLabelling func(), k *campaign, deadline time.Time) {
	grace := min(c.StopGrace, max(0, time.Until(deadline)))
	log.Info("stopping the master", "pid", m.Pid(), "stopGrace", grace)
	m.Stop(grace)
	log.Info("master stopped", "pid", m.Pid(), "exitCode", m.ExitCode())
	stopLabelling()
	c.stepDown(log, lock, k)
}

// neverDone is a term context that never ends: while a new elector campaigns for the same term,
// only the deadline, the lock and the peers end it.
var neverDone = context.Background()

// stepDown ends a term whose master is already stopped: the label first, so that two Pods
// never both read "true" after a handover, then the Lease, so that a standby takes over on its
// next retry instead of after the lease duration.
func (c Config) stepDown(log logr.Logger, lock *fencedLock, k *campaign) {
	c.labelStandby(log)
	lock.setLeading(false)
	lock.allowRelease()
	k.stop()
	if lock.wasReleased() {
		log.Info("released the Lease")
		return
	}
	log.Info("could not release the Lease: a standby takes over once it expires", "leaseDuration", c.LeaseDuration)
}

// lose ends a term that is no longer this launcher's: fence the lock (the Lease may be
// another's now), kill the master at once, then stop the elector.
func (c Config) lose(log logr.Logger, lock *fencedLock, m *child, stopLabelling func(), k *campaign, reason string) error {
	lock.fence()
	log.Info("lost the Lease: killing the master", "reason", reason, "pid", m.Pid())
	m.Kill()
	log.Info("master stopped", "pid", m.Pid(), "exitCode", m.ExitCode())
	stopLabelling()
	k.stop()
	c.labelStandby(log)
	return fmt.Errorf("%w: %s", ErrLeaseLost, reason)
}
