package backend

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
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

// replaceMembers replaces stale member Pods one at a time per group, each after its objects
// were moved, drains the members of cordoned nodes, and restarts drained members whose node is
// schedulable again. It runs after the store was read (segments from s.reading).
func (r *Reconciler) replaceMembers(ctx context.Context, s *state) error {
	b := s.backend
	m := b.Spec.Connection.Managed
	if m == nil {
		return nil
	}
	admin := r.Admin(b)
	storeUp := admin != nil && s.reading.segmentsRead && s.reading.segErr == nil
	// After a warm failover the new master leases every object it kept: nothing moves before the
	// leases end, so no drain starts before (it would only run out its drainTimeout).
	leased := leasesAfterFailover(s)
	kept := b.Status.Drains[:0:0]
	busy := map[string]bool{} // groups with a member away or being drained
	// Drains in progress first: each ends, waits, or is given up.
	for _, d := range b.Status.Drains {
		p := podNamed(s.memberPods, d.Pod)
		if p == nil || (d.Reason == kvv1.DrainReplace && !p.DeletionTimestamp.IsZero()) {
			// Gone meanwhile, or deleted by the reconcile that finished the drain and read
			// again before its status patch reached the cache: nothing to finish twice.
			continue
		}
		group := memberGroup(p)
		busy[group] = true
		if !storeUp {
			kept = append(kept, d)
			continue
		}
		done, err := r.finishDrain(ctx, s, admin, &d, p)
		if err != nil {
			return err
		}
		if !done {
			kept = append(kept, d)
		}
	}
	b.Status.Drains = kept

	// Which Pods to replace: the stale ones of each group, one at a time, while the rest of the
	// group is ready.
	for _, o := range s.rendered {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		want := ds.Spec.Template.Labels[vocab.LabelPodSpecHash]
		group := ds.Labels[vocab.LabelComponent]
		var stale []corev1.Pod
		allReady := true
		for _, p := range s.memberPods {
			if p.Labels[vocab.LabelComponent] != group {
				continue
			}
			if !p.DeletionTimestamp.IsZero() {
				allReady = false // a member is already away
				continue
			}
			if p.Labels[vocab.LabelPodSpecHash] != want {
				stale = append(stale, p)
			} else if !podReady(&p) {
				allReady = false
			}
		}
		if len(stale) == 0 || !allReady || busy[group] {
			continue
		}
		busy[group] = true
		p := stale[0]
		if s.now.Before(leased) {
			r.Recorder.Eventf(b, &p, corev1.EventTypeNormal, "MemberDrainWaiting", "Drain",
				"member %s is replaced once the leases the new master of the failover at %s granted on every object it kept end, at %s: its objects cannot move before",
				p.Name, b.Status.Leader.LastFailover.Time.UTC().Format(time.RFC3339), leased.UTC().Format(time.RFC3339))
			continue
		}
		if err := r.drainOrDelete(ctx, s, admin, storeUp, &p, kvv1.DrainReplace, fmt.Sprintf("its pod spec is stale (%d stale in %s)", len(stale), ds.Name)); err != nil {
			return err
		}
	}

	// Cordoned nodes: drain their members; schedulable again: restart the drained ones.
	if !storeUp {
		return nil
	}
	for i := range s.memberPods {
		p := &s.memberPods[i]
		if !p.DeletionTimestamp.IsZero() || drainOf(b, p.Name) != nil {
			continue
		}
		segs := segmentsOf(s.reading.segments, p)
		if len(segs) == 0 {
			continue
		}
		node := s.nodes[p.Spec.NodeName]
		cordoned := node != nil && node.Spec.Unschedulable
		drained := allDrained(segs)
		switch {
		case cordoned && !drained && !busy[memberGroup(p)] && !s.now.Before(leased):
			busy[memberGroup(p)] = true
			if err := r.startDrain(ctx, s, admin, p, segs, kvv1.DrainCordoned); err != nil {
				return err
			}
		case !cordoned && drained && node != nil:
			if err := r.deleteMember(ctx, s, p, "its node "+p.Spec.NodeName+" is schedulable again and its segment was drained, which takes no writes: it starts again to take them"); err != nil {
				return err
			}
		}
	}
	return nil
}

// drainOrDelete starts the drain of a member about to be replaced, or deletes it at once when
// there is nothing to move (no segment registered, or already drained) or the store cannot be
// asked (a master that does not answer holds nothing to move either way).
func (r *Reconciler) drainOrDelete(ctx context.Context, s *state, admin store.Admin, storeUp bool, p *corev1.Pod, reason, why string) error {
	segs := segmentsOf(s.reading.segments, p)
	if !storeUp || len(segs) == 0 || allDrained(segs) {
		return r.deleteMember(ctx, s, p, why)
	}
	return r.startDrain(ctx, s, admin, p, segs, reason)
}

// startDrain asks the master to move a member's objects to the others and records the job.
func (r *Reconciler) startDrain(ctx context.Context, s *state, admin store.Admin, p *corev1.Pod, segs []store.Segment, reason string) error {
	b := s.backend
	names := store.SegmentNames(segs)
	job, err := admin.CreateDrain(ctx, names, nil, drainConcurrency)
	switch {
	case store.HasCode(err, store.CodeSegmentNotFound):
		if reason == kvv1.DrainReplace {
			return r.deleteMember(ctx, s, p, "its segment is no longer mounted")
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
		Pod: p.Name, Node: p.Spec.NodeName, Segments: names, JobID: job.ID, Reason: reason, StartTime: metav1.Time{Time: s.now.Truncate(time.Second)},
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
func (r *Reconciler) finishDrain(ctx context.Context, s *state, admin store.Admin, d *kvv1.MemberDrain, p *corev1.Pod) (done bool, err error) {
	b := s.backend
	job, err := admin.Drain(ctx, d.JobID)
	if store.HasCode(err, store.CodeJobNotFound) && b.Spec.Connection.Managed.Leader.Warm() {
		if s.now.Before(leasesAfterFailover(s)) || r.restartDrain(ctx, s, admin, d, p) || s.now.Sub(d.StartTime.Time) < drainTimeout(b, p) {
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
		if s.now.Sub(d.StartTime.Time) < timeout {
			return false, nil
		}
		_ = admin.CancelDrain(ctx, d.JobID) // often refused while moves are in flight; the Pod goes either way
		job.Message = fmt.Sprintf("given up after the group's drainTimeout (%s): %s", timeout, job.Message)
	}
	took := s.now.Sub(d.StartTime.Time).Round(time.Second)
	moved := resource.NewQuantity(job.MigratedBytes, resource.BinarySI)
	kind := corev1.EventTypeNormal
	summary := fmt.Sprintf("moved %d object replica(s) (%s) of member %s to the other members in %s", job.SucceededUnits, moved, p.Name, took)
	if job.FailedUnits > 0 || job.Status != store.DrainSucceeded {
		kind = corev1.EventTypeWarning
		summary += fmt.Sprintf("; the job ended %s with %d move(s) failed (%s): what was not moved is lost with the member when it stops (the other members may lack the room)", job.Status, job.FailedUnits, job.Message)
	}
	r.Recorder.Eventf(b, p, kind, "MemberDrained", "Drain", "%s", summary)
	if d.Reason == kvv1.DrainReplace {
		return true, r.deleteMember(ctx, s, p, "its objects were moved to the other members first")
	}
	return true, nil
}

// leasesAfterFailover is when the leases end that the new master of a warm store's last failover
// granted on every object it kept (measured: a drain's units stay blocked for exactly
// default_kv_lease_ttl after it takes over); zero for a store that fails over cold or never did.
func leasesAfterFailover(s *state) time.Time {
	l := s.backend.Status.Leader
	if !s.backend.Spec.Connection.Managed.Leader.Warm() || l == nil || l.LastFailover == nil || l.LastFailover.Mode != kvv1.FailoverWarm {
		return time.Time{}
	}
	return l.LastFailover.Time.Add(leaseTTL(renderedLeader(s)))
}

// leaseTTL is the masters' -default_kv_lease_ttl as rendered (the last one given wins): raw
// milliseconds, or a number with one unit of ms, s, m or h. A leader whose value does not parse
// counts the master's own default, 5 s.
func leaseTTL(d *appsv1.Deployment) time.Duration {
	const flag, masterDefault = "-default_kv_lease_ttl=", 5 * time.Second
	ttl := masterDefault
	if d == nil || len(d.Spec.Template.Spec.Containers) == 0 {
		return ttl
	}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		v, ok := strings.CutPrefix(a, flag)
		if !ok {
			continue
		}
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			ttl = time.Duration(ms) * time.Millisecond
		} else if t, err := time.ParseDuration(v); err == nil {
			ttl = t
		} else {
			ttl = masterDefault
		}
	}
	return ttl
}

// restartDrain drains a member again on a warm store's new master, which kept the member's
// objects through the failover but knows no job of the master before: the record is given the
// new job, and the group's drainTimeout starts over. Until the member's segment is listed on the
// new master again (the members mount theirs again after it serves), or while the master
// refuses the job, nothing is restarted and the record waits.
func (r *Reconciler) restartDrain(ctx context.Context, s *state, admin store.Admin, d *kvv1.MemberDrain, p *corev1.Pod) bool {
	b := s.backend
	segs := segmentsOf(s.reading.segments, p)
	if len(segs) == 0 {
		return false
	}
	names := store.SegmentNames(segs)
	job, err := admin.CreateDrain(ctx, names, nil, drainConcurrency)
	if err != nil {
		r.Metrics.ScrapeFailed(b.Name, "drain", err)
		log.FromContext(ctx).Error(err, "drain of a member could not start again after a failover", "pod", p.Name, "segments", names)
		return false
	}
	d.JobID, d.Segments, d.StartTime = job.ID, names, metav1.Time{Time: s.now.Truncate(time.Second)}
	r.Recorder.Eventf(b, p, corev1.EventTypeNormal, "MemberDraining", "Drain",
		"the store failed over while member %s was drained: the new master kept its objects but not the job, so they are moved again (%s); the new master leases every object it kept for its default_kv_lease_ttl, and a leased object moves only once its lease ended", p.Name, strings.Join(names, ", "))
	return true
}

func (r *Reconciler) deleteMember(ctx context.Context, s *state, p *corev1.Pod, why string) error {
	if err := r.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	now := metav1.NewTime(s.now)
	p.DeletionTimestamp = &now // the rest of this reconcile sees it away
	r.Recorder.Eventf(s.backend, p, corev1.EventTypeNormal, "MemberRestarted", "Delete", "deleted member Pod %s: %s", p.Name, why)
	return nil
}

// drainTimeout is the drainTimeout of the member's group.
func drainTimeout(b *kvv1.KVCacheBackend, p *corev1.Pod) time.Duration {
	i, err := strconv.Atoi(strings.TrimPrefix(memberGroup(p), vocab.MemberComponentPrefix))
	m := b.Spec.Connection.Managed
	if err != nil || m == nil || i < 0 || i >= len(m.Members) {
		return kvv1.DefaultDrainTimeout
	}
	return m.Members[i].DrainTimeoutOrDefault()
}

func memberGroup(p *corev1.Pod) string { return p.Labels[vocab.LabelComponent] }

func podNamed(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

func drainOf(b *kvv1.KVCacheBackend, pod string) *kvv1.MemberDrain {
	for i := range b.Status.Drains {
		if b.Status.Drains[i].Pod == pod {
			return &b.Status.Drains[i]
		}
	}
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
