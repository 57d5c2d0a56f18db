package member

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/kvcache-operator/kvcache/store"
)

// Defaults of a Config.
const (
	// DefaultMaxConcurrency: the master moves about one object per second per concurrent unit,
	// at most 16 per second per member whatever the setting.
	DefaultMaxConcurrency = 8
	DefaultDeadline       = 5 * time.Minute
	DefaultPollInterval   = 500 * time.Millisecond
	// DefaultMasterWait is how long a master that does not answer is retried. One silent for
	// longer has restarted or gone, and a restarted master holds none of the old objects: there
	// is nothing left to move.
	DefaultMasterWait = 10 * time.Second
	// DefaultWarmMasterWait is DefaultMasterWait for a warm store, whose new master holds this
	// member's objects after a failover: longer than a failover takes (measured 10 to 18 s on a
	// cluster: the etcd lease, then the standby's fixed warm-up), well within the drain's deadline.
	DefaultWarmMasterWait = time.Minute
	// maxWarmRestarts bounds how often a warm store's drain starts over on a new master.
	maxWarmRestarts = 3
	// remountWait is how long a warm store's new master is given for the members to mount their
	// segments on it again: it serves before they have (measured: all back within a second),
	// listing some or none of them meanwhile.
	remountWait = 30 * time.Second
	// progressEvery spaces the progress lines of a long drain.
	progressEvery = 10 * time.Second
)

// Config is what a drain needs.
type Config struct {
	// Admin is the master's admin API.
	Admin store.Admin
	// PodIP is the member Pod's IP: the host part of the segment names its member registered.
	PodIP string
	// Ports, when not nil, narrows the member's segments to those whose name ends in one of these
	// ports (ListeningPorts of the member process): members sharing an IP (host networking) are
	// told apart by it.
	Ports map[int]bool
	// MaxConcurrency is the job's max_concurrency (DefaultMaxConcurrency when 0).
	MaxConcurrency int
	// Deadline bounds the whole drain (DefaultDeadline when 0). The Pod's grace period must exceed
	// it, or the kubelet stops the member while objects are still moving.
	Deadline time.Duration
	// PollInterval between reads of the job (DefaultPollInterval when 0).
	PollInterval time.Duration
	// MasterWait is how long a master that does not answer is retried (DefaultMasterWait, or
	// DefaultWarmMasterWait when Warm, when 0).
	MasterWait time.Duration
	// Warm: the store fails over warm (its masters keep the objects through a failover), so a
	// master that stops answering is waited for through a failover, and a drain job the new
	// master does not know is started again there.
	Warm bool
	// Log receives one line per event (nil: none).
	Log *slog.Logger
}

// Result is how a drain ended.
type Result string

// Results, as the final log line names them.
const (
	// ResultDrained: the job SUCCEEDED with no failed unit; the member holds nothing any more.
	ResultDrained Result = "drained"
	// ResultSucceededWithFailures: the master says SUCCEEDED, but some units failed (it calls a
	// job that has no replica left to move a success): those objects did not move.
	ResultSucceededWithFailures Result = "succeeded-with-failures"
	// ResultPartial: the job FAILED (the others lack room): what fit moved, the rest did not.
	ResultPartial Result = "partial"
	// ResultCanceled: someone cancelled the job; the rest did not move.
	ResultCanceled Result = "canceled"
	// ResultDeadline: the job was still running at the deadline; what had not moved yet stays.
	ResultDeadline Result = "deadline"
	// ResultNothingToDrain: no segment of this member is mounted, or they are DRAINED already.
	ResultNothingToDrain Result = "nothing-to-drain"
	// ResultNoTarget: no other segment takes objects, so nothing can move.
	ResultNoTarget Result = "no-target"
	// ResultMasterUnreachable: the master did not answer within MasterWait.
	ResultMasterUnreachable Result = "master-unreachable"
	// ResultMasterRestarted: the master forgot the job mid-drain: it restarted, with none of the
	// old objects.
	ResultMasterRestarted Result = "master-restarted"
	// ResultRefused: the master refused the drain, or answered in a way it cannot use (a master
	// without the segment listing or the drain API).
	ResultRefused Result = "refused"
)

// Outcome is what a drain did.
type Outcome struct {
	Result Result
	// Message says what the result means for the member's objects.
	Message string
	// Segments drained and Targets they were drained to.
	Segments, Targets []string
	// BytesAtStart were on Segments when the drain was created (their allocator_used_bytes);
	// FreeOnTargets was free on the targets then. A segment drained in part before (a FAILED
	// job) still counts the bytes that moved then (measured), so BytesAtStart, and what follows
	// from it, is an upper bound on a second drain.
	BytesAtStart, FreeOnTargets int64
	// Job is the job as last read (zero when none was created).
	Job     store.DrainJob
	Elapsed time.Duration
	// Err is the failure behind an unreachable master or a refusal.
	Err error
}

// BytesNotMoved is what stayed on the segments: their bytes at the start less what the job
// migrated (0 once drained, or when there was nothing to drain); an upper bound as BytesAtStart
// is.
func (o Outcome) BytesNotMoved() int64 {
	if o.Result == ResultDrained || o.Result == ResultNothingToDrain {
		return 0
	}
	return max(0, o.BytesAtStart-o.Job.MigratedBytes)
}

// Drain moves every object on the member's segments to the other segments through the master
// (one drain job), waits until the job ends or the deadline passes, and logs one line per change
// of the job's status and a final line with what moved and what did not. It always returns: what
// could not move is reported in the Outcome, never waited for past the deadline.
func Drain(ctx context.Context, c Config) Outcome {
	if c.MaxConcurrency <= 0 {
		c.MaxConcurrency = DefaultMaxConcurrency
	}
	if c.Deadline <= 0 {
		c.Deadline = DefaultDeadline
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MasterWait <= 0 {
		c.MasterWait = DefaultMasterWait
		if c.Warm {
			c.MasterWait = DefaultWarmMasterWait
		}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.Deadline)
	defer cancel()
	d := &drainer{Config: c}
	o := d.run(ctx)
	o.Elapsed = time.Since(start)
	d.final(o)
	return o
}

type drainer struct {
	Config
	// remountsUntil: until then, a listing without this member's segments or without a target
	// is a new master the members have not all mounted on again yet, and is read again.
	remountsUntil time.Time
}

// run drains, starting over on a warm store's new master when the master that ran the job
// failed over.
func (d *drainer) run(ctx context.Context) Outcome {
	var o Outcome
	for restarts := 0; ; restarts++ {
		o = d.once(ctx)
		if o.Result != ResultMasterRestarted || !d.Warm {
			return o
		}
		if restarts == maxWarmRestarts {
			o.Message = fmt.Sprintf("the store failed over %d times during this drain: what had not moved by then stays on this member and is lost when it stops", restarts+1)
			return o
		}
		d.Log.Info("drain-restarting", "job", o.Job.ID, "reason", "the master failed over and the new one, which kept this member's objects, does not know the job: draining again there")
		d.remountsUntil = time.Now().Add(remountWait)
	}
}

// once lists the member's segments, creates one drain job and follows it.
func (d *drainer) once(ctx context.Context) Outcome {
	var o Outcome
	waiting, remounting := false, false
	// remounts reports whether to list again because the members may not be back yet on a new
	// master, and logs that once.
	remounts := func(what string) bool {
		if time.Now().After(d.remountsUntil) {
			return false
		}
		if !remounting {
			d.Log.Info("drain-awaiting-remounts", "listing", what, "until", d.remountsUntil.Format(time.RFC3339),
				"reason", "the new master serves before every member has mounted its segment on it again")
			remounting = true
		}
		return d.sleep(ctx, d.PollInterval)
	}
	for attempt := 1; ; attempt++ {
		segs, err := retry(ctx, d, "listing the segments", func() ([]store.Segment, error) { return d.Admin.Segments(ctx) })
		if err != nil {
			return d.stopped(ctx, o, err)
		}
		own, others := store.MemberSegments(segs, d.PodIP, d.Ports)
		o.Segments = store.SegmentNames(own)
		if len(own) == 0 && remounts("none of this member's segments") {
			attempt--
			continue
		}
		if len(own) == 0 {
			o.Result = ResultNothingToDrain
			o.Message = fmt.Sprintf("no segment of this member (Pod IP %s) is mounted on the master: nothing to move", d.PodIP)
			return o
		}
		var ok []store.Segment
		draining := false
		for _, s := range own {
			switch s.Status {
			case store.SegmentOK:
				ok = append(ok, s)
			case store.SegmentDraining:
				draining = true
			}
		}
		if draining {
			// Another job (an earlier run of this hook, or someone by hand) is moving them; its
			// id cannot be listed, so follow the segments instead.
			if !waiting {
				d.Log.Info("drain-waiting", "segments", o.Segments, "reason", "another drain job is already moving this member's objects; waiting until its segments are DRAINED or OK again")
				waiting = true
			}
			if !d.sleep(ctx, d.PollInterval) {
				o.Result, o.Message = ResultDeadline, fmt.Sprintf("another drain job was still moving this member's objects at the deadline (%s): what it had not moved yet is lost when the member stops", d.Deadline)
				return o
			}
			attempt--
			continue
		}
		if len(ok) == 0 {
			o.Result = ResultNothingToDrain
			o.Message = "this member's segments are DRAINED already: nothing left to move"
			return o
		}
		var targets []store.Segment
		for _, s := range others {
			if s.Status == store.SegmentOK {
				targets = append(targets, s)
			}
		}
		o.Segments, o.Targets = store.SegmentNames(ok), store.SegmentNames(targets)
		o.BytesAtStart, o.FreeOnTargets = 0, 0
		for _, s := range ok {
			o.BytesAtStart += s.UsedBytes // read before the drain: it reads 0 once DRAINING
		}
		for _, s := range targets {
			o.FreeOnTargets += max(0, s.SizeBytes-s.UsedBytes)
		}
		if len(targets) == 0 && remounts("no other member's segment") {
			attempt--
			continue
		}
		if len(targets) == 0 {
			o.Result = ResultNoTarget
			o.Message = fmt.Sprintf("no other member's segment takes objects: the %d bytes on this member cannot move and are lost when it stops", o.BytesAtStart)
			return o
		}
		d.Log.Info("drain-starting", "segments", o.Segments, "targets", o.Targets, "bytes", o.BytesAtStart,
			"free_on_targets", o.FreeOnTargets, "max_concurrency", d.MaxConcurrency)
		if o.FreeOnTargets < o.BytesAtStart {
			d.Log.Warn("drain-lacks-room", "bytes", o.BytesAtStart, "free_on_targets", o.FreeOnTargets,
				"reason", fmt.Sprintf("the other members have room for %d of the %d bytes: what fits moves, the rest is lost when this member stops", o.FreeOnTargets, o.BytesAtStart))
		}
		job, err := d.Admin.CreateDrain(ctx, o.Segments, o.Targets, d.MaxConcurrency)
		if (store.HasCode(err, store.CodeUnavailableInStatus) || store.HasCode(err, store.CodeSegmentNotFound)) && attempt < 3 {
			// A segment changed between the listing and the POST (a target started draining or
			// went away): list them again.
			d.Log.Info("drain-retrying", "error", err.Error())
			continue
		}
		if err != nil {
			return d.stopped(ctx, o, err)
		}
		o.Job = job
		d.Log.Info("drain-created", "job", job.ID, "status", job.Status)
		return d.follow(ctx, o)
	}
}

// follow polls the job until it ends or the deadline passes.
func (d *drainer) follow(ctx context.Context, o Outcome) Outcome {
	last := o.Job
	lastProgress := time.Now()
	for {
		j, err := retry(ctx, d, "reading drain job "+o.Job.ID, func() (store.DrainJob, error) { return d.Admin.Drain(ctx, o.Job.ID) })
		if store.HasCode(err, store.CodeJobNotFound) {
			o.Result = ResultMasterRestarted
			o.Message = "the master no longer knows the drain job: it restarted, and a restarted master holds none of the old objects"
			o.Err = err
			return o
		}
		if err != nil {
			return d.stopped(ctx, o, err)
		}
		o.Job = j
		switch {
		case j.Status != last.Status:
			d.Log.Info("drain-status", jobAttrs(j)...)
			lastProgress = time.Now()
		case time.Since(lastProgress) >= progressEvery && units(j) != units(last):
			d.Log.Info("drain-progress", jobAttrs(j)...)
			lastProgress = time.Now()
		}
		last = j
		if j.Done() {
			return classify(o)
		}
		if !d.sleep(ctx, d.PollInterval) {
			o.Result = ResultDeadline
			o.Message = fmt.Sprintf("the drain was still %s at the deadline (%s): the objects not moved yet are lost when this member stops; a longer drainTimeout on the member group, or a higher max_concurrency, gives it time", j.Status, d.Deadline)
			if !d.remountsUntil.IsZero() && j.BlockedUnits > 0 {
				o.Message = fmt.Sprintf("the drain was still %s at the deadline (%s) with %d objects blocked: a master that took over in a failover leases every object it kept for its default_kv_lease_ttl, and a leased object cannot move; they are lost when this member stops. A drainTimeout longer than that lease, or a shorter lease (leader.extraArgs), gives them time", j.Status, d.Deadline, j.BlockedUnits)
			}
			return o
		}
	}
}

// classify reads a finished job.
func classify(o Outcome) Outcome {
	j := o.Job
	switch {
	case j.Status == store.DrainSucceeded && j.FailedUnits == 0:
		o.Result = ResultDrained
		o.Message = "every object on this member's segments moved to the other members"
	case j.Status == store.DrainSucceeded:
		o.Result = ResultSucceededWithFailures
		o.Message = fmt.Sprintf("the master reports SUCCEEDED, but %d units failed: those objects did not move and are lost when this member stops", j.FailedUnits)
	case j.Status == store.DrainFailed:
		o.Result = ResultPartial
		o.Message = fmt.Sprintf("the drain FAILED (%s): %d units moved, and the rest (%d failed attempts) did not, most likely for lack of room on the other members; what did not move is lost when this member stops", j.Message, j.SucceededUnits, j.FailedUnits)
	default:
		o.Result = ResultCanceled
		o.Message = "the drain job was cancelled: what had not moved yet is lost when this member stops"
	}
	return o
}

// stopped turns a failed call into the outcome: the deadline, a master that does not answer, or
// a refusal.
func (d *drainer) stopped(ctx context.Context, o Outcome, err error) Outcome {
	o.Err = err
	switch {
	case ctx.Err() != nil:
		o.Result = ResultDeadline
		o.Message = fmt.Sprintf("the deadline (%s) passed before the drain ended: what had not moved is lost when this member stops", d.Deadline)
	case unreachable(err):
		o.Result = ResultMasterUnreachable
		o.Message = fmt.Sprintf("the master did not answer for %s (%v): a restarted master holds none of this member's objects anyway; stopping without a drain", d.MasterWait, err)
		if d.Warm {
			o.Message = fmt.Sprintf("the master did not answer for %s, longer than a failover takes (%v): stopping without a drain, and what had not moved by then is lost when this member stops", d.MasterWait, err)
		}
	case o.Job.ID != "":
		o.Result = ResultRefused
		o.Message = fmt.Sprintf("the master answered drain job %s with an error (%v): what had not moved by then is lost when this member stops", o.Job.ID, err)
	default:
		o.Result = ResultRefused
		o.Message = fmt.Sprintf("the master refused or cannot drain (%v): nothing moved, and this member's objects are lost when it stops", err)
	}
	return o
}

// retry calls f until the master answers (a result, or any error but a failure to reach it),
// retrying failures to reach it until MasterWait has passed since the first call, so a master
// that hangs (each call running to the client's timeout) is given up on as soon as one that
// refuses connections.
func retry[T any](ctx context.Context, d *drainer, what string, f func() (T, error)) (T, error) {
	first := time.Now()
	warned := false
	for {
		v, err := f()
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return v, err
		}
		if !warned {
			d.Log.Warn("master-not-answering", "while", what, "error", err.Error())
			warned = true
		}
		if time.Since(first) >= d.MasterWait || !d.sleep(ctx, d.PollInterval) {
			return v, err
		}
	}
}

// unreachable tells a failure to reach the master (refused, reset, unresolvable, timed out)
// from an answer it gave.
func unreachable(err error) bool {
	var ne net.Error // *net.OpError, *net.DNSError, the client's timeout
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

func (d *drainer) sleep(ctx context.Context, t time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(t):
		return true
	}
}

func (d *drainer) final(o Outcome) {
	attrs := []any{"result", string(o.Result), "segments", o.Segments, "bytes_at_start", o.BytesAtStart,
		"bytes_not_moved", o.BytesNotMoved(), "elapsed", o.Elapsed.Round(time.Millisecond).String(), "message", o.Message}
	if o.Job.ID != "" {
		attrs = append(attrs, jobAttrs(o.Job)...)
	}
	if o.Err != nil {
		attrs = append(attrs, "error", o.Err.Error())
	}
	level := slog.LevelWarn
	if o.Result == ResultDrained || o.Result == ResultNothingToDrain {
		level = slog.LevelInfo
	}
	d.Log.Log(context.Background(), level, "drain-done", attrs...)
}

func jobAttrs(j store.DrainJob) []any {
	return []any{"job", j.ID, "status", j.Status, "succeeded_units", j.SucceededUnits, "failed_units", j.FailedUnits,
		"blocked_units", j.BlockedUnits, "active_units", j.ActiveUnits, "migrated_bytes", j.MigratedBytes}
}

func units(j store.DrainJob) [4]int64 {
	return [4]int64{j.SucceededUnits, j.FailedUnits, j.BlockedUnits, j.ActiveUnits}
}
