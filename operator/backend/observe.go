package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/controller-runtime/pkg/log"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/store"
	"github.com/kvcache-operator/kvcache/values"
)

// observeStore reads the store through its admin API: health decides LeaderAvailable, the
// metrics give the capacity (only while the leader says it serves, and only from the master
// that serves now; absent, not zero, otherwise), the segment listing gives the members. A
// master whose counters started over is a restarted one: cold cache.
func (r *Reconciler) observeStore(ctx context.Context, s *state) error {
	b := s.backend
	b.Status.Endpoints = r.endpoints(b)
	admin := r.Admin(b)
	if admin == nil {
		set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionUnknown, kvv1.ReasonNoAdminEndpoint, "the backend names no Admin endpoint")
		set(b, kvv1.ConditionCapacityObserved, metav1.ConditionUnknown, kvv1.ReasonNoAdminEndpoint, "the backend names no Admin endpoint to read the capacity from")
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonNoAdminEndpoint, "the backend names no Admin endpoint to list segments from")
		b.Status.Capacity, b.Status.Members = nil, nil
		return nil
	}
	h, err := admin.Health(ctx)
	if err != nil {
		r.Metrics.ScrapeFailed(b.Name, "health", err)
		log.FromContext(ctx).V(1).Info("store health unreadable", "error", err.Error())
		set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionFalse, kvv1.ReasonUnreachable, operator.Describe(err))
		r.capacityLost(b)
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonLeaderUnavailable, "the leader does not answer")
		return nil
	}
	if !h.ServiceReady {
		set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionFalse, kvv1.ReasonNotServing, fmt.Sprintf("the master answers but is not serving (role %q, ha_state %q)", h.Role, h.HAState))
		r.capacityLost(b)
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonLeaderUnavailable, "the leader is not serving")
		return nil
	}

	// The metrics first: their counters tell which master answers.
	m, err := admin.Metrics(ctx)
	if err != nil {
		r.Metrics.ScrapeFailed(b.Name, "metrics", err)
		s.figures.Up = true
		set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionTrue, kvv1.ReasonServing, describeRole(h))
		b.Status.Capacity = nil
		set(b, kvv1.ConditionCapacityObserved, metav1.ConditionUnknown, kvv1.ReasonScrapeFailed, operator.Describe(err))
		segments, segErr := r.segments(ctx, b, admin)
		r.setMembers(b, s.memberPods, segments, segErr)
		return nil
	}
	switch r.masters.observe(b.UID, m.CounterSum, s.now) {
	case previousMaster:
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
	case newMaster:
		r.coldCache(s, kvv1.ColdCacheMasterRestarted, metav1.Time{Time: s.now},
			fmt.Sprintf("the master answering at %s is a new process (its counters started over): it holds none of the objects cached before, so each of them misses (cold cache)", s.now.UTC().Format(time.RFC3339)))
	}
	set(b, kvv1.ConditionLeaderAvailable, metav1.ConditionTrue, kvv1.ReasonServing, describeRole(h))
	segments, segErr := r.segments(ctx, b, admin)
	r.setCapacity(b, m, len(segments), s.now)
	r.setMembers(b, s.memberPods, segments, segErr)
	s.figures.Up = true
	s.figures.CapacityBytes, s.figures.UsedBytes = ptr.To(m.TotalCapacityBytes), ptr.To(m.AllocatedBytes)
	if segErr == nil {
		s.figures.MembersRegistered, s.figures.MembersExpected = membersFigures(b, s.memberPods)
	}
	r.setWritesAttributed(s, m)
	return nil
}

// membersFigures counts the registered members and, for a managed store, the member Pods
// that should be (from the members setMembers joined to Pods).
func membersFigures(b *kvv1.KVCacheBackend, pods []corev1.Pod) (registered, expected *int64) {
	if b.Spec.Connection.Managed == nil {
		return ptr.To(int64(len(b.Status.Members))), nil
	}
	var n, want int64
	for _, m := range b.Status.Members {
		if m.Pod != "" {
			n++
		}
	}
	for _, p := range pods {
		if p.DeletionTimestamp.IsZero() {
			want++
		}
	}
	return &n, &want
}

// setWritesAttributed reports writes under the tenant default on a multi-tenant master whose
// Bindings all name other domains: injection never writes that tenant for them, so an engine
// ignores the tenant it was given (vLLM-Ascend never passes it; an older image may not read it).
func (r *Reconciler) setWritesAttributed(s *state, m store.Metrics) {
	b := s.backend
	if len(m.Tenants) == 0 {
		removeCondition(b, kvv1.ConditionWritesAttributed)
		return
	}
	def, ok := m.Tenants[kvv1.DefaultDomainName]
	if !ok || def.ChargedBytes == 0 && def.EvictedBytes == 0 {
		set(b, kvv1.ConditionWritesAttributed, metav1.ConditionTrue, kvv1.ReasonAttributed, "no object on the master is under the tenant default unless a Binding names it")
		return
	}
	for _, bd := range s.on.Bindings {
		if bd.DomainName() == kvv1.DefaultDomainName && bd.DeletionTimestamp.IsZero() {
			set(b, kvv1.ConditionWritesAttributed, metav1.ConditionTrue, kvv1.ReasonAttributed,
				fmt.Sprintf("the objects under the tenant default are KVCachePoolBinding %s/%s's domain", bd.Namespace, bd.Name))
			return
		}
	}
	msg := "the master holds objects under the tenant default, and no KVCachePoolBinding on this backend names the domain default: an engine is ignoring the tenant injection gave it (vLLM-Ascend never passes it to the store; an engine image that does not read the injected tenant writes there too). Those writes share nothing with the Binding they were meant for: check the Pods whose Binding's CacheInUse is False"
	if c := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionWritesAttributed); c == nil || c.Status != metav1.ConditionFalse {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "DefaultTenantWrites", "Observe", "%s", msg)
	}
	set(b, kvv1.ConditionWritesAttributed, metav1.ConditionFalse, kvv1.ReasonDefaultTenantWrites, msg)
	return
}

func (r *Reconciler) segments(ctx context.Context, b *kvv1.KVCacheBackend, admin store.Admin) ([]store.Segment, error) {
	segments, err := admin.Segments(ctx)
	if err != nil && !errors.Is(err, store.ErrNotSupported) {
		r.Metrics.ScrapeFailed(b.Name, "segments", err)
	}
	return segments, err
}

// setCapacity publishes what the master reports. Total is written whenever it changes; used
// moves with every write an engine makes, so it is rate-limited (operator.RefreshUsage).
func (r *Reconciler) setCapacity(b *kvv1.KVCacheBackend, m store.Metrics, segments int, now time.Time) {
	total := resource.NewQuantity(m.TotalCapacityBytes, resource.BinarySI)
	read := resource.NewQuantity(m.AllocatedBytes, resource.BinarySI)
	prev := operator.Usage{}
	if c := b.Status.Capacity; c != nil && c.Total.Cmp(*total) == 0 {
		prev = operator.Usage{Bytes: c.Used, At: c.ObservedTime}
	}
	u := operator.RefreshUsage(prev, read, now, operator.UsageRefreshOr(r.UsageRefresh))
	b.Status.Capacity = &kvv1.Capacity{Total: *total, Used: u.Bytes, ObservedTime: u.At}
	set(b, kvv1.ConditionCapacityObserved, metav1.ConditionTrue, kvv1.ReasonObserved,
		fmt.Sprintf("the master reports %s across %d segment(s)", total.String(), segments))
}

// capacityLost drops the capacity: it is published only while the leader serves.
func (r *Reconciler) capacityLost(b *kvv1.KVCacheBackend) {
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
// Pods that have not registered.
func (r *Reconciler) setMembers(b *kvv1.KVCacheBackend, pods []corev1.Pod, segments []store.Segment, segErr error) {
	byIP := map[string]*corev1.Pod{}
	for i := range pods {
		if ip := pods[i].Status.PodIP; ip != "" && pods[i].DeletionTimestamp.IsZero() {
			byIP[ip] = &pods[i]
		}
	}
	b.Status.Members = nil
	mounted := map[string]bool{}
	for _, seg := range segments {
		m := kvv1.MemberStatus{Segment: seg.Name, Protocol: seg.Protocol, Status: seg.Status, Capacity: resource.NewQuantity(seg.SizeBytes, resource.BinarySI)}
		host := seg.Name
		if i := strings.LastIndex(host, ":"); i >= 0 {
			host = host[:i]
		}
		if p, ok := byIP[host]; ok {
			m.Pod, m.Node = p.Name, p.Spec.NodeName
			mounted[p.Name] = true
		}
		b.Status.Members = append(b.Status.Members, m)
	}
	switch {
	case errors.Is(segErr, store.ErrNotSupported):
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonSegmentsUnsupported, "the master does not list segments (Mooncake before 0.3.12)")
		return
	case segErr != nil:
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionUnknown, kvv1.ReasonScrapeFailed, operator.Describe(segErr))
		return
	}
	if b.Spec.Connection.Managed == nil {
		if len(segments) == 0 {
			set(b, kvv1.ConditionMembersMounted, metav1.ConditionFalse, kvv1.ReasonNoSegments, "the store lists no mounted segment")
			return
		}
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionTrue, kvv1.ReasonMounted, fmt.Sprintf("%d segment(s) mounted", len(segments)))
		return
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
			fmt.Sprintf("no member Pod runs in %s: check that the member groups' nodeSelectors match nodes", r.SystemNamespace))
	case len(missing) > 0:
		prev := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionMembersMounted)
		msg := fmt.Sprintf("member Pods not registered with the master: %s (%d of %d mounted)", strings.Join(missing, ", "), len(pods)-len(missing), len(pods))
		if prev == nil || prev.Message != msg {
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "MemberNotRegistered", "Observe", "%s", msg)
		}
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionFalse, kvv1.ReasonNotRegistered, msg)
	default:
		set(b, kvv1.ConditionMembersMounted, metav1.ConditionTrue, kvv1.ReasonAllMounted, fmt.Sprintf("all %d member Pod(s) registered their segments", len(pods)))
	}
}

// endpoints are the store's addresses: derived for a managed store, declared for an external
// one.
func (r *Reconciler) endpoints(b *kvv1.KVCacheBackend) []kvv1.Endpoint {
	if e := b.Spec.Connection.External; e != nil {
		out := append([]kvv1.Endpoint(nil), e.Endpoints...)
		return out
	}
	d := r.Renderer.Defaults()
	return []kvv1.Endpoint{
		{Name: kvv1.EndpointClient, Address: generator.ClientEndpoint(b.Name, r.SystemNamespace, d)},
		{Name: kvv1.EndpointAdmin, Address: generator.AdminEndpoint(b.Name, r.SystemNamespace, d)},
	}
}

// AdminAddress is the host:port of a backend's admin API.
func AdminAddress(b *kvv1.KVCacheBackend, systemNamespace string, d values.Defaults) string {
	if e := b.Spec.Connection.External; e != nil {
		for _, ep := range e.Endpoints {
			if ep.Name == kvv1.EndpointAdmin {
				return ep.Address
			}
		}
		return ""
	}
	return generator.AdminEndpoint(b.Name, systemNamespace, d)
}
