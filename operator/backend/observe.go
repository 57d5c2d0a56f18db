package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/controller-runtime/pkg/log"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/storeview"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/values"
)

// observeStore reads the store through its admin API (readStore) and reports it
// (setStoreStatus, a pure function of the reading): health decides LeaderAvailable, the metrics
// give the capacity (only while the leader says it serves, and only from the master that
// serves now; absent, not zero, otherwise), the segment listing gives the members. A master
// whose counters started over is a restarted one: cold cache.
func (r *Reconciler) observeStore(ctx context.Context, s *state) error {
	b := s.backend
	b.Status.Endpoints = r.endpoints(b)
	rd := r.readStore(ctx, s)
	s.reading = rd
	// A warm store's new master replayed the operation log: countLoss says what it kept.
	if rd.master == newMaster && !warm(b) {
		r.coldCache(s, kvv1.ColdCacheMasterRestarted, metav1.Time{Time: s.now},
			fmt.Sprintf("the master answering at %s is a new process (its counters started over): it holds none of the objects cached before, so each of them misses (cold cache)", s.now.UTC().Format(time.RFC3339)))
	}
	notes := setStoreStatus(b, rd, s.memberPods, s.on.Bindings, storeContext{
		systemNamespace: r.SystemNamespace, now: s.now, usageRefresh: operator.UsageRefreshOr(r.UsageRefresh),
	})
	for _, n := range notes {
		r.Recorder.Eventf(b, nil, n.kind, n.reason, "Observe", "%s", n.message)
	}
	s.figures = figuresOf(b, rd, s.memberPods)
	r.countLoss(s)
	return nil
}

// warm reports whether b's masters keep their index through a change of leader.
func warm(b *kvv1.KVCacheBackend) bool {
	m := b.Spec.Connection.Managed
	return m != nil && m.Leader.Warm()
}

// storeReading is what one read of a store's admin API returned.
type storeReading struct {
	// noAdmin: the backend names no Admin endpoint, so nothing was read.
	noAdmin   bool
	health    store.Health
	healthErr error
	metrics   store.Metrics
	// metricsErr is set when the metrics could not be read; metricsRead when they were asked.
	metricsErr  error
	metricsRead bool
	// master says which master process answered (its counters against the last read's).
	master   masterRead
	segments []store.Segment
	// segErr is set when the segments could not be listed; segmentsRead when they were asked.
	segErr       error
	segmentsRead bool
}

// readStore asks the store, in order, for its health, its metrics (their counters tell which
// master answers) and its segments, stopping where an answer makes the rest meaningless.
func (r *Reconciler) readStore(ctx context.Context, s *state) storeReading {
	b := s.backend
	var rd storeReading
	admin := r.Admin(b)
	if admin == nil {
		rd.noAdmin = true
		return rd
	}
	if rd.health, rd.healthErr = admin.Health(ctx); rd.healthErr != nil {
		r.Metrics.ScrapeFailed(b.Name, "health", rd.healthErr)
		log.FromContext(ctx).V(1).Info("store health unreadable", "error", rd.healthErr.Error())
		return rd
	}
	if !rd.health.ServiceReady {
		return rd
	}
	rd.metricsRead = true
	var shared storeview.Reading
	if r.View != nil {
		shared = r.View.BeginRead(storeview.Master{Backend: b, Admin: admin})
	}
	if rd.metrics, rd.metricsErr = admin.Metrics(ctx); rd.metricsErr == nil && r.View != nil {
		// The pool and Binding controllers take their tenants' figures from this read.
		r.View.Saw(shared, rd.metrics, time.Now())
	}
	if rd.metricsErr != nil {
		r.Metrics.ScrapeFailed(b.Name, "metrics", rd.metricsErr)
	} else if rd.master = r.masters.observe(b.UID, rd.metrics.CounterSum, rd.health.ViewVersion, s.now); rd.master == previousMaster {
		return rd
	}
	rd.segmentsRead = true
	rd.segments, rd.segErr = admin.Segments(ctx)
	if rd.segErr != nil && !errors.Is(rd.segErr, store.ErrNotSupported) {
		r.Metrics.ScrapeFailed(b.Name, "segments", rd.segErr)
	}
	return rd
}

// figuresOf are a reading's figures for the metrics.
func figuresOf(b *kvv1.KVCacheBackend, rd storeReading, pods []corev1.Pod) operator.BackendFigures {
	var f operator.BackendFigures
	if rd.noAdmin || rd.healthErr != nil || !rd.health.ServiceReady || rd.master == previousMaster {
		return f
	}
	f.Up = true
	if rd.metricsErr != nil {
		return f
	}
	f.CapacityBytes, f.UsedBytes = ptr.To(rd.metrics.TotalCapacityBytes), ptr.To(rd.metrics.AllocatedBytes)
	if rd.segErr == nil {
		f.MembersRegistered, f.MembersExpected = membersFigures(b, pods)
	}
	return f
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
