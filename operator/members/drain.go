package members

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
)

// A member's objects live in its own memory: a member that stops takes them with it, unless the
// master moves them to the other members first (its drain API). Members drain themselves when
// they stop (their preStop hook); the operator does not wait for that when it is the one
// replacing a member: it drains the member through the master, says so in status.drains while
// it runs, and deletes the Pod once the job ended (or the group's drainTimeout passed). A
// member on a cordoned node is drained the same way and left running with nothing new written
// to it (a drained segment takes no puts), so that whatever the node's maintenance does to it
// loses nothing; once the node is schedulable again, the member is restarted to take writes.

// drainConcurrency is how many objects the master moves at once (about one object per second
// each, measured; more competes with the engines' own transfers).
const drainConcurrency = 8

// act finishes or waits on the drains in status.drains, replaces the next stale member of each
// group, drains the members of cordoned nodes and restarts drained members whose node is
// schedulable again. It changes w.backend.Status.Drains in memory, and returns when to look
// again for a wait it knows the end of (0: none).
func (r *Reconciler) act(ctx context.Context, w world) (time.Duration, error) {
	b := w.backend
	replace := staleNext(w)
	if len(b.Status.Drains) == 0 && len(replace) == 0 && !cordonWork(w) {
		return 0, nil
	}
	st := r.readStore(ctx, b)
	// After a warm failover the new master leases every object it kept: nothing moves before the
	// leases end, so no drain starts before (it would only run out its drainTimeout).
	leased := leasesAfterFailover(w)
	var next time.Duration
	busy := busyGroups(w)

	// Drains in progress first: each ends, waits, or is given up.
	kept := b.Status.Drains[:0:0]
	for _, d := range b.Status.Drains {
		p := podNamed(w.pods, d.Pod)
		if p == nil || (d.Reason == kvv1.DrainReplace && !p.DeletionTimestamp.IsZero()) {
			// Gone meanwhile, or deleted by the reconcile that finished the drain and read
			// again before its status patch reached the cache: nothing to finish twice.
			continue
		}
		if !st.up {
			kept = append(kept, d)
			continue
		}
		done, err := r.finishDrain(ctx, w, st, &d, p)
		if err != nil {
			return 0, err
		}
		if !done {
			kept = append(kept, d)
		}
	}
	b.Status.Drains = kept

	// The stale members, one per group while the rest of the group is ready.
	for _, rp := range replace {
		p := rp.pod
		busy[memberGroup(p)] = true
		if w.now.Before(leased) {
			r.Recorder.Eventf(b, p, corev1.EventTypeNormal, "MemberDrainWaiting", "Drain",
				"member %s is replaced once the leases the new master of the failover at %s granted on every object it kept end, at %s: its objects cannot move before",
				p.Name, b.Status.Leader.LastFailover.Time.UTC().Format(time.RFC3339), leased.UTC().Format(time.RFC3339))
			next = minPositive(next, leased.Sub(w.now))
			continue
		}
		if err := r.drainOrDelete(ctx, w, st, p, kvv1.DrainReplace, rp.why()); err != nil {
			return 0, err
		}
	}

	// Cordoned nodes: drain their members; schedulable again: restart the drained ones.
	if !st.up {
		return next, nil
	}
	for i := range w.pods {
		p := &w.pods[i]
		if !p.DeletionTimestamp.IsZero() || drainOf(b, p.Name) != nil {
			continue
		}
		segs := segmentsOf(st.segments, p)
		if len(segs) == 0 {
			continue
		}
		node := w.nodes[p.Spec.NodeName]
		cordoned := node != nil && node.Spec.Unschedulable
		drained := allDrained(segs)
		switch {
		case cordoned && !drained && !busy[memberGroup(p)] && w.now.Before(leased):
			next = minPositive(next, leased.Sub(w.now))
		case cordoned && !drained && !busy[memberGroup(p)]:
			busy[memberGroup(p)] = true
			if err := r.startDrain(ctx, w, st.admin, p, segs, kvv1.DrainCordoned); err != nil {
				return 0, err
			}
		case !cordoned && drained && node != nil:
			if err := r.deleteMember(ctx, w, p, "its node "+p.Spec.NodeName+" is schedulable again and its segment was drained, which takes no writes: it starts again to take them"); err != nil {
				return 0, err
			}
		}
	}
	return next, nil
}

// drainOrDelete starts the drain of a member about to be replaced, or deletes it at once when
// there is nothing to move (no segment registered, or already drained) or the store cannot be
// asked (a master that does not answer holds nothing to move either way).
func (r *Reconciler) drainOrDelete(ctx context.Context, w world, st storeView, p *corev1.Pod, reason, why string) error {
	segs := segmentsOf(st.segments, p)
	if !st.up || len(segs) == 0 || allDrained(segs) {
		return r.deleteMember(ctx, w, p, why)
	}
	return r.startDrain(ctx, w, st.admin, p, segs, reason)
}

// startDrain asks the master to move a member's objects to the others and records the job.
func (r *Reconciler) startDrain(ctx context.Context, w world, admin store.Admin, p *corev1.Pod, segs []store.Segment, reason string) error {
	b := w.backend
	names := store.SegmentNames(segs)
	job, err := admin.CreateDrain(ctx, names, nil, drainConcurrency)
	switch {
	case store.HasCode(err, store.CodeSegmentNotFound):
		if reason == kvv1.DrainReplace {
			return r.deleteMember(ctx, w, p, "its segment is no longer mounted")
		}
		return nil
	case store.HasCode(err, store.CodeUnavailableInStatus):
		return nil // being drained already (its own preStop hook, or a job of ours): look again later
	case err != nil:
		r.Metrics.ScrapeFailed(b.Name, "drain", err)
		log.FromContext(ctx).Error(err, "drain of a member could not start", "pod", p.Name, "segments", names)
		r.Recorder.Eventf(b, p, corev1.EventTypeWarning, "MemberDrainFailed", "Drain", "the master refused the drain of member %s (%s): %v; retried with the next poll", p.Name, strings.Join(names, ", "), err)
		return nil
	}
	b.Status.Drains = append(b.Status.Drains, kvv1.MemberDrain{
		Pod: p.Name, Node: p.Spec.NodeName, Segments: names, JobID: job.ID, Reason: reason, StartTime: metav1.Time{Time: w.now.Truncate(time.Second)},
	})
	slices.SortFunc(b.Status.Drains, func(a, b kvv1.MemberDrain) int { return strings.Compare(a.Pod, b.Pod) })
	why := "its Pod is replaced"
	if reason == kvv1.DrainCordoned {
		why = "its node " + p.Spec.NodeName + " is cordoned"
	}
	r.Recorder.Eventf(b, p, corev1.EventTypeNormal, "MemberDraining", "Drain",
		"moving the objects of member %s (%s) to the other members: %s; it takes no new writes meanwhile", p.Name, strings.Join(names, ", "), why)
	return nil
}

// finishDrain looks at a recorded drain: when it ended (or its time is up) the member is
// deleted (a replacement) or left drained (a cordoned node); done says the record can go.
func (r *Reconciler) finishDrain(ctx context.Context, w world, st storeView, d *kvv1.MemberDrain, p *corev1.Pod) (done bool, err error) {
	b := w.backend
	admin := st.admin
	job, err := admin.Drain(ctx, d.JobID)
	if store.HasCode(err, store.CodeJobNotFound) && b.Spec.Connection.Managed.Leader.Warm() {
		if w.now.Before(leasesAfterFailover(w)) || r.restartDrain(ctx, w, st, d, p) || w.now.Sub(d.StartTime.Time) < drainTimeout(b, p) {
			return false, nil
		}
		// Its segment never came back on the new master: nothing there to move.
	}
	switch {
	case store.HasCode(err, store.CodeJobNotFound):
		// A new master: it knows neither the job nor the objects.
		job = store.DrainJob{Status: "UNKNOWN", Message: "the master that ran the job is gone"}
	case err != nil:
		r.Metrics.ScrapeFailed(b.Name, "drain", err)
		log.FromContext(ctx).Error(err, "drain job unreadable", "pod", p.Name, "job", d.JobID)
		return false, nil
	}
	timeout := drainTimeout(b, p)
	if !job.Done() && job.Status != "UNKNOWN" {
		if w.now.Sub(d.StartTime.Time) < timeout {
			return false, nil
		}
		_ = admin.CancelDrain(ctx, d.JobID) // often refused while moves are in flight; the Pod goes either way
		job.Message = fmt.Sprintf("given up after the group's drainTimeout (%s): %s", timeout, job.Message)
	}
	took := w.now.Sub(d.StartTime.Time).Round(time.Second)
	moved := resource.NewQuantity(job.MigratedBytes, resource.BinarySI)
	kind := corev1.EventTypeNormal
	summary := fmt.Sprintf("moved %d object replica(s) (%s) of member %s to the other members in %s", job.SucceededUnits, moved, p.Name, took)
	if job.FailedUnits > 0 || job.Status != store.DrainSucceeded {
		kind = corev1.EventTypeWarning
		summary += fmt.Sprintf("; the job ended %s with %d move(s) failed (%s): what was not moved is lost with the member when it stops (the other members may lack the room)", job.Status, job.FailedUnits, job.Message)
	}
	r.Recorder.Eventf(b, p, kind, "MemberDrained", "Drain", "%s", summary)
	if d.Reason == kvv1.DrainReplace {
		return true, r.deleteMember(ctx, w, p, "its objects were moved to the other members first")
	}
	return true, nil
}

// restartDrain drains a member again on a warm store's new master, which kept the member's
// objects through the failover but knows no job of the master before: the record is given the
// new job, and the group's drainTimeout starts over. Until the member's segment is listed on the
// new master again (the members mount theirs again after it serves), or while the master
// refuses the job, nothing is restarted and the record waits.
func (r *Reconciler) restartDrain(ctx context.Context, w world, st storeView, d *kvv1.MemberDrain, p *corev1.Pod) bool {
	b := w.backend
	segs := segmentsOf(st.segments, p)
	if len(segs) == 0 {
		return false
	}
	names := store.SegmentNames(segs)
	job, err := st.admin.CreateDrain(ctx, names, nil, drainConcurrency)
	if err != nil {
		r.Metrics.ScrapeFailed(b.Name, "drain", err)
		log.FromContext(ctx).Error(err, "drain of a member could not start again after a failover", "pod", p.Name, "segments", names)
		return false
	}
	d.JobID, d.Segments, d.StartTime = job.ID, names, metav1.Time{Time: w.now.Truncate(time.Second)}
	r.Recorder.Eventf(b, p, corev1.EventTypeNormal, "MemberDraining", "Drain",
		"the store failed over while member %s was drained: the new master kept its objects but not the job, so they are moved again (%s); the new master leases every object it kept for its default_kv_lease_ttl, and a leased object moves only once its lease ended", p.Name, strings.Join(names, ", "))
	return true
}

// deleteMember deletes a member Pod and says why, on the backend.
func (r *Reconciler) deleteMember(ctx context.Context, w world, p *corev1.Pod, why string) error {
	if err := r.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	now := metav1.NewTime(w.now)
	p.DeletionTimestamp = &now // the rest of this reconcile sees it away
	r.Recorder.Eventf(w.backend, p, corev1.EventTypeNormal, "MemberRestarted", "Delete", "deleted member Pod %s: %s", p.Name, why)
	return nil
}

// segmentsOf are the segments a member Pod mounted (store.MemberSegments: named after its IP,
// which MOONCAKE_LOCAL_HOSTNAME is).
func segmentsOf(segments []store.Segment, p *corev1.Pod) []store.Segment {
	own, _ := store.MemberSegments(segments, p.Status.PodIP, nil)
	return own
}

func allDrained(segs []store.Segment) bool {
	for _, s := range segs {
		if s.Status != store.SegmentDrained {
			return false
		}
	}
	return len(segs) > 0
}
