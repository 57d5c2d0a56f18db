package backend

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator"
)

// Each setX computes one condition from what a reconcile observed; they are pure functions of
// their arguments, unit-tested on their own.

func set(b *kvv1.KVCacheBackend, t string, status metav1.ConditionStatus, reason, msg string) {
	operator.SetCondition(&b.Status.Conditions, b.Generation, t, status, reason, msg)
}

func removeCondition(b *kvv1.KVCacheBackend, t string) {
	meta.RemoveStatusCondition(&b.Status.Conditions, t)
}

func refNames(refs []kvv1.ObjectReference) string {
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.Kind + " " + r.Name
		if r.Namespace != "" {
			names[i] = r.Kind + " " + r.Namespace + "/" + r.Name
		}
	}
	return strings.Join(names, ", ")
}

// setUsedBy lists the pools on the backend as its consumers (deletion waits for them).
func setUsedBy(b *kvv1.KVCacheBackend, pools []kvv1.KVCachePool) {
	var refs []kvv1.ObjectReference
	for _, p := range pools {
		refs = append(refs, kvv1.ObjectReference{Kind: "KVCachePool", Name: p.Name})
	}
	b.Status.UsedBy = refs
	setDeletable(b, refs)
}

func setDeletable(b *kvv1.KVCacheBackend, consumers []kvv1.ObjectReference) {
	if len(consumers) == 0 {
		set(b, kvv1.ConditionDeletable, metav1.ConditionTrue, kvv1.ReasonUnused, "no pool uses this backend")
		return
	}
	set(b, kvv1.ConditionDeletable, metav1.ConditionFalse, kvv1.ReasonInUse, fmt.Sprintf("used by %s; deleting the backend waits until they are gone", refNames(consumers)))
}

// setRolloutComplete reads the leader Deployment's observed state. Only one leader replica is
// ever ready, so the Deployment's own progress deadline is disabled and this condition answers
// instead: every replica runs the current template and one serves. held is a replica count
// waiting for a template rollout to finish first.
func setRolloutComplete(b *kvv1.KVCacheBackend, d *appsv1.Deployment, held int32) {
	switch {
	case d == nil:
		set(b, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonNotCreated, "the leader Deployment does not exist yet")
	case held > 0:
		set(b, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonReplicasPending,
			fmt.Sprintf("rolling out the current pod template at %d replica(s) before scaling to %d", ptrValue(d.Spec.Replicas), held))
	case d.Status.ObservedGeneration < d.Generation:
		set(b, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonProgressing, "the Deployment controller has not observed the latest spec")
	case d.Status.UpdatedReplicas < ptrValue(d.Spec.Replicas):
		set(b, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonProgressing,
			fmt.Sprintf("%d of %d leader replicas run the current template", d.Status.UpdatedReplicas, ptrValue(d.Spec.Replicas)))
	case d.Status.AvailableReplicas < 1:
		set(b, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonNoLeaderReady, "no leader replica is ready")
	default:
		set(b, kvv1.ConditionRolloutComplete, metav1.ConditionTrue, kvv1.ReasonComplete,
			fmt.Sprintf("%d desired / %d ready: one serving leader%s", ptrValue(d.Spec.Replicas), d.Status.ReadyReplicas, standbys(ptrValue(d.Spec.Replicas))))
	}
}

func standbys(n int32) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf(" and %d standbys, not ready by design", n-1)
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// setElectionObserved names the Lease's holder and when it acquired the Lease: the message
// changes only when the holder does.
func setElectionObserved(b *kvv1.KVCacheBackend, l *coordinationv1.Lease) {
	switch h := leaseHolder(l); {
	case l == nil:
		set(b, kvv1.ConditionElectionObserved, metav1.ConditionFalse, kvv1.ReasonNoLease, "the leader has not created its Lease yet")
	case h == "":
		set(b, kvv1.ConditionElectionObserved, metav1.ConditionFalse, kvv1.ReasonNoHolder, "the Lease has no holder: no replica leads")
	default:
		since := "at an unrecorded time"
		if l.Spec.AcquireTime != nil {
			since = "since " + l.Spec.AcquireTime.UTC().Format(time.RFC3339)
		}
		set(b, kvv1.ConditionElectionObserved, metav1.ConditionTrue, kvv1.ReasonHeld,
			fmt.Sprintf("held by %s %s (%d holder change(s))", h, since, leaseTransitions(l)))
	}
}

// setPhase summarises the conditions: Ready when the store serves, reports its capacity and
// every member is mounted; Provisioning until the leader first answers; Error when a leader
// that was rolled out does not answer; Degraded for everything short of Ready in between.
func setPhase(b *kvv1.KVCacheBackend) {
	st := &b.Status
	cond := func(t string) *metav1.Condition { return meta.FindStatusCondition(st.Conditions, t) }
	isTrue := func(t string) bool { c := cond(t); return c != nil && c.Status == metav1.ConditionTrue }
	leader, capacity, members := cond(kvv1.ConditionLeaderAvailable), cond(kvv1.ConditionCapacityObserved), cond(kvv1.ConditionMembersMounted)
	managed := b.Spec.Connection.Managed != nil
	rollout := cond(kvv1.ConditionRolloutComplete)
	switch {
	case managed && rollout != nil && rollout.Reason == kvv1.ReasonRenderFailed:
		st.Phase, st.PhaseMessage = kvv1.PhaseDegraded, rollout.Message
	case leader != nil && leader.Status == metav1.ConditionUnknown:
		st.Phase, st.PhaseMessage = kvv1.PhaseDegraded, leader.Message
	case leader != nil && leader.Status != metav1.ConditionTrue:
		if managed && !isTrue(kvv1.ConditionRolloutComplete) && !wasObserved(b) {
			st.Phase, st.PhaseMessage = kvv1.PhaseProvisioning, "waiting for the leader to serve: "+leader.Message
		} else {
			st.Phase, st.PhaseMessage = kvv1.PhaseError, "the store does not answer: "+leader.Message
		}
	case leader == nil:
		st.Phase, st.PhaseMessage = kvv1.PhaseProvisioning, "the store has not been observed yet"
	case capacity == nil || capacity.Status != metav1.ConditionTrue:
		st.Phase, st.PhaseMessage = kvv1.PhaseDegraded, "capacity not observed: "+condMessage(capacity)
	case members != nil && members.Status == metav1.ConditionFalse:
		st.Phase, st.PhaseMessage = kvv1.PhaseDegraded, members.Message
	default:
		st.Phase, st.PhaseMessage = kvv1.PhaseReady, fmt.Sprintf("serving %s", st.Capacity.Total.String())
	}
}

// wasObserved reports whether the store ever reported its capacity: after that, an
// unreachable leader is an error, not a store still coming up.
func wasObserved(b *kvv1.KVCacheBackend) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionCapacityObserved)
	return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == "LeaderUnavailable")
}

func condMessage(c *metav1.Condition) string {
	if c == nil {
		return "no observation yet"
	}
	return c.Message
}

const renderFailedPrefix = "cannot render the store: "
