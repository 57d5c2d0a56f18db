package backend

import (
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/store"
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

// note is an Event a status function asks for: something the operator must notice, said once
// when it starts (or changes), not on every read.
type note struct {
	kind, reason, message string
}

// storeContext is what the store's status depends on besides the reading.
type storeContext struct {
	systemNamespace string
	now             time.Time
	usageRefresh    time.Duration
}

// setStoreStatus sets LeaderAvailable, CapacityObserved, MembersMounted and WritesAttributed
// and the capacity and members from one reading of the store, the member Pods and the Bindings
// on the backend, and returns the Events that are due.
func setStoreStatus(b *kvv1.KVCacheBackend, rd storeReading, pods []corev1.Pod, bindings []kvv1.KVCachePoolBinding, c storeContext) []note {
	switch {
	case rd.noAdmin:
		set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionUnknown, kvv1.ReasonNoAdminEndpoint, "the backend names no Admin endpoint")
		set(b, kvv1.ConditionCapacityObserved, metav1.ConditionUnknown, kvv1.ReasonNoAdminEndpoint, "the backend names no Admin endpoint to read the capacity from")
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonNoAdminEndpoint, "the backend names no Admin endpoint to list segments from")
		b.Status.Capacity, b.Status.Members = nil, nil
		return nil
	case rd.healthErr != nil:
		operator.SetConditionOnce(&b.Status.Conditions, b.Generation, kvv1.ConditionLeaderAvailable, metav1.ConditionFalse, kvv1.ReasonUnreachable, operator.Describe(rd.healthErr))
		capacityLost(b)
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonLeaderUnavailable, "the leader does not answer")
		return nil
	case !rd.health.ServiceReady:
		set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionFalse, kvv1.ReasonNotServing, fmt.Sprintf("the master answers but is not serving (role %q, ha_state %q)", rd.health.Role, rd.health.HAState))
		capacityLost(b)
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonLeaderUnavailable, "the leader is not serving")
		return nil
	case rd.metricsErr != nil:
		set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionTrue, kvv1.ReasonServing, describeRole(rd.health))
		b.Status.Capacity = nil
		set(b, kvv1.ConditionCapacityObserved, metav1.ConditionUnknown, kvv1.ReasonScrapeFailed, operator.Describe(rd.metricsErr))
		return setMembers(b, pods, rd.segments, rd.segErr, c.systemNamespace)
	case rd.master == previousMaster:
		const why = "the master answering has served since before the election Lease moved to %s, so what it reports is the previous leader's: capacity and members are withheld until the new leader answers"
		holder := ""
		if b.Status.Leader != nil {
			holder = b.Status.Leader.Holder
		}
		set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionUnknown, kvv1.ReasonPreviousLeaderAnswers, fmt.Sprintf(why, holder))
		set(b, kvv1.ConditionCapacityObserved, metav1.ConditionUnknown, kvv1.ReasonPreviousLeaderAnswers, fmt.Sprintf(why, holder))
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonPreviousLeaderAnswers, fmt.Sprintf(why, holder))
		b.Status.Capacity, b.Status.Members = nil, nil
		return nil
	}
	set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionTrue, kvv1.ReasonServing, describeRole(rd.health))
	setCapacity(b, rd.metrics, len(rd.segments), c.now, c.usageRefresh)
	notes := setMembers(b, pods, rd.segments, rd.segErr, c.systemNamespace)
	return append(notes, setWritesAttributed(b, rd.metrics, bindings)...)
}

// setCapacity publishes what the master reports. Total is written whenever it changes; used
// moves with every write an engine makes, so it is rate-limited (operator.RefreshUsage).
func setCapacity(b *kvv1.KVCacheBackend, m store.Metrics, segments int, now time.Time, refresh time.Duration) {
	total := resource.NewQuantity(m.TotalCapacityBytes, resource.BinarySI)
	read := resource.NewQuantity(m.AllocatedBytes, resource.BinarySI)
	prev := operator.Usage{}
	if c := b.Status.Capacity; c != nil && c.Total.Cmp(*total) == 0 {
		prev = operator.Usage{Bytes: c.Used, At: c.ObservedTime}
	}
	u := operator.RefreshUsage(prev, read, now, refresh)
	b.Status.Capacity = &kvv1.Capacity{Total: *total, Used: u.Bytes, ObservedTime: u.At}
	set(b, kvv1.ConditionCapacityObserved, metav1.ConditionTrue, kvv1.ReasonObserved,
		fmt.Sprintf("the master reports %s across %d segment(s)", total.String(), segments))
}

// capacityLost drops the capacity: it is published only while the leader serves.
func capacityLost(b *kvv1.KVCacheBackend) {
	b.Status.Capacity, b.Status.Members = nil, nil
	if wasObserved(b) {
		set(b, kvv1.ConditionCapacityObserved, metav1.ConditionFalse, kvv1.ReasonLeaderUnavailable,
			"the leader does not serve: capacity is unknown until it answers again")
		return
	}
	set(b, kvv1.ConditionCapacityObserved, metav1.ConditionFalse, kvv1.ReasonNotObserved, "the store has not reported its capacity yet")
}

func describeRole(h store.Health) string {
	if h.Role == "" {
		return "the master serves"
	}
	return fmt.Sprintf("the master serves (role %s, ha_state %s)", h.Role, h.HAState)
}

// setMembers joins the master's segments to member Pods by address (a segment is named
// <MOONCAKE_LOCAL_HOSTNAME>:<port>, and members set that to the Pod IP) and reports the member
// Pods that have not registered; a change in which ones is an Event.
func setMembers(b *kvv1.KVCacheBackend, pods []corev1.Pod, segments []store.Segment, segErr error, systemNamespace string) []note {
	byIP := map[string]*corev1.Pod{}
	for i := range pods {
		if ip := pods[i].Status.PodIP; ip != "" && pods[i].DeletionTimestamp.IsZero() {
			byIP[store.HostKey(ip)] = &pods[i]
		}
	}
	b.Status.Members = nil
	mounted := map[string]bool{}
	for _, seg := range segments {
		m := kvv1.MemberStatus{Segment: seg.Name, Protocol: seg.Protocol, Status: seg.Status, Capacity: resource.NewQuantity(seg.SizeBytes, resource.BinarySI)}
		if p, ok := byIP[store.HostKey(store.SegmentHost(seg))]; ok {
			m.Pod, m.Node = p.Name, p.Spec.NodeName
			mounted[p.Name] = true
		}
		b.Status.Members = append(b.Status.Members, m)
	}
	switch {
	case errors.Is(segErr, store.ErrNotSupported):
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonSegmentsUnsupported, "the master does not list segments (Mooncake before 0.3.12)")
		return nil
	case segErr != nil:
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonScrapeFailed, operator.Describe(segErr))
		return nil
	}
	if b.Spec.Connection.Managed == nil {
		if len(segments) == 0 {
			set(b, kvv1.ConditionMembersMounted, metav1.ConditionFalse, kvv1.ReasonNoSegments, "the store lists no mounted segment")
			return nil
		}
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionTrue, kvv1.ReasonMounted, fmt.Sprintf("%d segment(s) mounted", len(segments)))
		return nil
	}
	var missing []string
	for _, p := range pods {
		if p.DeletionTimestamp.IsZero() && !mounted[p.Name] {
			missing = append(missing, p.Name)
		}
	}
	switch {
	case len(pods) == 0:
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionFalse, kvv1.ReasonNoMemberPods,
			fmt.Sprintf("no member Pod runs in %s: check that the member groups' nodeSelectors match nodes", systemNamespace))
	case len(missing) > 0:
		prev := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionMembersMounted)
		msg := fmt.Sprintf("member Pods not registered with the master: %s (%d of %d mounted)", strings.Join(missing, ", "), len(pods)-len(missing), len(pods))
		var notes []note
		if prev == nil || prev.Message != msg {
			notes = append(notes, note{corev1.EventTypeWarning, "MemberNotRegistered", msg})
		}
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionFalse, kvv1.ReasonNotRegistered, msg)
		return notes
	default:
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionTrue, kvv1.ReasonAllMounted, fmt.Sprintf("all %d member Pod(s) registered their segments", len(pods)))
	}
	return nil
}

// setWritesAttributed reports writes under the tenant default on a multi-tenant master whose
// Bindings all name other domains: injection never writes that tenant for them, so an engine
// ignores the tenant it was given (vLLM-Ascend never passes it; an older image may not read it).
func setWritesAttributed(b *kvv1.KVCacheBackend, m store.Metrics, bindings []kvv1.KVCachePoolBinding) []note {
	if len(m.Tenants) == 0 {
		removeCondition(b, kvv1.ConditionWritesAttributed)
		return nil
	}
	def, ok := m.Tenants[kvv1.DefaultDomainName]
	if !ok || def.ChargedBytes == 0 && def.EvictedBytes == 0 {
		set(b, kvv1.ConditionWritesAttributed, metav1.ConditionTrue, kvv1.ReasonAttributed, "no object on the master is under the tenant default unless a Binding names it")
		return nil
	}
	for _, bd := range bindings {
		if bd.DomainName() == kvv1.DefaultDomainName && bd.DeletionTimestamp.IsZero() {
			set(b, kvv1.ConditionWritesAttributed, metav1.ConditionTrue, kvv1.ReasonAttributed,
				fmt.Sprintf("the objects under the tenant default are KVCachePoolBinding %s/%s's domain", bd.Namespace, bd.Name))
			return nil
		}
	}
	msg := "the master holds objects under the tenant default, and no KVCachePoolBinding on this backend names the domain default: an engine is ignoring the tenant injection gave it (vLLM-Ascend never passes it to the store; an engine image that does not read the injected tenant writes there too). Those writes share nothing with the Binding they were meant for: check the Pods whose Binding's CacheInUse is False"
	var notes []note
	if c := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionWritesAttributed); c == nil || c.Status != metav1.ConditionFalse {
		notes = append(notes, note{corev1.EventTypeWarning, "DefaultTenantWrites", msg})
	}
	set(b, kvv1.ConditionWritesAttributed, metav1.ConditionFalse, kvv1.ReasonDefaultTenantWrites, msg)
	return notes
}
