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
	started := make(chan context.Context, 1) // the elector leads at most once per Run
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            c.LeaseName,
		LeaseDuration:   c.LeaseDuration,
		RenewDeadline:   c.RenewDeadline,
		RetryPeriod:     c.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(term context.Context) { started <- term },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return err
	}
	// The elector runs under its own context, not ctx: a graceful stop must stop the master
	// before the elector releases the Lease, and ending ctx would release it at once.
	electCtx, cancelElect := context.WithCancel(logr.NewContext(context.WithoutCancel(ctx), log.WithName("leaderelection")))
	defer cancelElect()
	electorDone := make(chan struct{})
	go func() {
		defer close(electorDone)
		elector.Run(electCtx)
	}()
	// stopElector ends the campaign; with ReleaseOnCancel the elector releases the Lease (when
	// it leads and the lock is not fenced) before it returns.
	stopElector := func() {
		cancelElect()
		<-electorDone
	}

	log.Info("standby: campaigning for the Lease", "leaseDuration", c.LeaseDuration, "renewDeadline", c.RenewDeadline, "retryPeriod", c.RetryPeriod)
	select {
	case <-ctx.Done():
		stopElector()
		log.Info("stopped while standby")
		return nil
	case term := <-started:
		return c.lead(ctx, log, lock, term, stopElector)
	}
}

// lead runs the master for one term and returns when the term ends.
func (c Config) lead(ctx context.Context, log logr.Logger, lock *fencedLock, term context.Context, stopElector func()) error {
	lock.setLeading(true)
	previous := lock.previousHolder()
	log.Info("became leader", "previousHolder", previous)
	m, err := startChild(c.Command, c.Stdout, c.Stderr)
	if err != nil {
		log.Error(err, "the master did not start", "command", c.Command[0])
		c.stepDown(log, lock, stopElector)
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

	// No standby can take over before the last renewal plus the lease duration; giving up at
	// the last renewal plus the renew deadline leaves the difference to kill the master.
	deadline := time.NewTimer(time.Until(lock.lastRenewal().Add(c.RenewDeadline)))
	defer deadline.Stop()
	for {
		select {
		case <-lock.renewed:
			deadline.Reset(time.Until(lock.lastRenewal().Add(c.RenewDeadline)))
		case <-deadline.C:
			return c.lose(log, lock, m, stopLabelling, stopElector, fmt.Sprintf("no successful renewal for %s", c.RenewDeadline))
		case holder := <-lock.taken:
			return c.lose(log, lock, m, stopLabelling, stopElector, fmt.Sprintf("the Lease names %q", holder))
		case <-term.Done():
			return c.lose(log, lock, m, stopLabelling, stopElector, "the elector stopped renewing")
		case <-m.Done():
			code := m.ExitCode()
			log.Info("master exited while leading", "pid", m.Pid(), "exitCode", code)
			signalGroup(m.Pid(), sigKill) // whatever it left in its group
			stopLabelling()
			c.stepDown(log, lock, stopElector)
			return &MasterExitError{Code: code}
		case <-ctx.Done():
			// The grace ends early if renewals have been failing: the master must be gone
			// before a standby may take over.
			grace := min(c.StopGrace, max(0, time.Until(lock.lastRenewal().Add(c.RenewDeadline))))
			log.Info("stopping the master", "pid", m.Pid(), "stopGrace", grace)
			m.Stop(grace)
			log.Info("master stopped", "pid", m.Pid(), "exitCode", m.ExitCode())
			stopLabelling()
			c.stepDown(log, lock, stopElector)
			if c.Linger > 0 {
				log.Info("lingering so connections to this Pod are refused, not dropped, until a standby serves", "linger", c.Linger)
				time.Sleep(c.Linger)
			}
			return nil
		}
	}
}

// stepDown ends a term whose master is already stopped: the label first, so that two Pods
// never both read "true" after a handover, then the Lease, so that a standby takes over on its
// next retry instead of after the lease duration.
func (c Config) stepDown(log logr.Logger, lock *fencedLock, stopElector func()) {
	c.labelStandby(log)
	lock.setLeading(false)
	stopElector()
	if lock.wasReleased() {
		log.Info("released the Lease")
		return
	}
	log.Info("could not release the Lease: a standby takes over once it expires", "leaseDuration", c.LeaseDuration)
}

// lose ends a term that is no longer this launcher's: fence the lock (the Lease may be
// another's now), kill the master at once, then stop the elector.
func (c Config) lose(log logr.Logger, lock *fencedLock, m *child, stopLabelling, stopElector func(), reason string) error {
	lock.fence()
	log.Info("lost the Lease: killing the master", "reason", reason, "pid", m.Pid())
	m.Kill()
	log.Info("master stopped", "pid", m.Pid(), "exitCode", m.ExitCode())
	stopLabelling()
	stopElector()
	c.labelStandby(log)
	return fmt.Errorf("%w: %s", ErrLeaseLost, reason)
}
