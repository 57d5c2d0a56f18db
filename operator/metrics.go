package operator

import (
	"context"
	"errors"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/internal/promutil"
	"github.com/kvcache-operator/kvcache/store"
)

// Metrics are the operator's own series (controller-runtime already counts reconcile errors
// per controller as controller_runtime_reconcile_errors_total): store read failures, ledger
// writes, and the figures each poll reads (Observations).
type Metrics struct {
	scrapeFailures *prometheus.CounterVec
	ledgerWrites   *prometheus.CounterVec
	lostObjects    *prometheus.CounterVec
	lostBytes      *prometheus.CounterVec
	failovers      *prometheus.CounterVec
	failoverKept   *prometheus.CounterVec
	observations   *Observations
}

// NewMetrics registers the series with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		scrapeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvcache_store_scrape_failures_total",
			Help: "Failed reads of a store's admin API, by backend, endpoint and reason (Unreachable, Timeout, StoreError, HTTPError).",
		}, []string{"backend", "endpoint", "reason"}),
		ledgerWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvcache_ledger_writes_total",
			Help: "Tenant ledger writes by backend, operation (put, delete) and result (ok, error).",
		}, []string{"backend", "operation", "result"}),
		lostObjects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvcache_backend_lost_objects_total",
			Help: "Objects a store lost without their removal being asked for, by backend and cause (MasterRestarted, MemberLost), as the master's figures showed them.",
		}, []string{"backend", "cause"}),
		lostBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvcache_backend_lost_bytes_total",
			Help: "Bytes of the objects a store lost, by backend and cause.",
		}, []string{"backend", "cause"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvcache_backend_failovers_total",
			Help: "New master processes a store's operator read, by backend and mode (Warm: it kept the objects of the one before; Cold: it started empty).",
		}, []string{"backend", "mode"}),
		failoverKept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvcache_backend_failover_kept_objects_total",
			Help: "Objects a new master process kept of those the one before it held, by backend (for a warm store, counted once its members mounted their segments on it again: what a member that never did held is lost).",
		}, []string{"backend"}),
		observations: newObservations(),
	}
	var err error
	if m.scrapeFailures, err = promutil.Register(reg, m.scrapeFailures); err != nil {
		return nil, err
	}
	if m.ledgerWrites, err = promutil.Register(reg, m.ledgerWrites); err != nil {
		return nil, err
	}
	if m.lostObjects, err = promutil.Register(reg, m.lostObjects); err != nil {
		return nil, err
	}
	if m.lostBytes, err = promutil.Register(reg, m.lostBytes); err != nil {
		return nil, err
	}
	if m.failovers, err = promutil.Register(reg, m.failovers); err != nil {
		return nil, err
	}
	if m.failoverKept, err = promutil.Register(reg, m.failoverKept); err != nil {
		return nil, err
	}
	if m.observations, err = promutil.Register(reg, m.observations); err != nil {
		return nil, err
	}
	return m, nil
}

// Observed records a backend's figures (nothing without Metrics).
func (m *Metrics) Observed(backend string, f BackendFigures) {
	if m != nil {
		m.observations.SetBackend(backend, f)
		m.backendSeen(backend)
	}
}

// BackendGone drops a deleted backend's series.
func (m *Metrics) BackendGone(backend string) {
	if m == nil {
		return
	}
	m.observations.ForgetBackend(backend)
	for _, c := range []*prometheus.CounterVec{m.lostObjects, m.lostBytes, m.failovers, m.failoverKept} {
		c.DeletePartialMatch(prometheus.Labels{"backend": backend})
	}
}

// lossCauses and failoverModes are the label values the loss and failover counters start at 0
// with, so that a rate or increase over them sees the first loss or failover (a series that
// appears with its first count shows no increase).
var (
	lossCauses    = []string{kvv1.LossMasterRestarted, kvv1.LossMemberLost}
	failoverModes = []string{string(kvv1.FailoverWarm), string(kvv1.FailoverCold)}
)

// backendSeen starts a backend's loss and failover counters at 0.
func (m *Metrics) backendSeen(backend string) {
	for _, c := range lossCauses {
		m.lostObjects.WithLabelValues(backend, c)
		m.lostBytes.WithLabelValues(backend, c)
	}
	for _, mode := range failoverModes {
		m.failovers.WithLabelValues(backend, mode)
	}
	m.failoverKept.WithLabelValues(backend)
}

// BindingObserved replaces a Binding's figures.
func (m *Metrics) BindingObserved(f BindingFigures) {
	if m != nil {
		m.observations.SetBinding(f)
	}
}

// BindingGone drops a Binding's series: it is gone, being deleted, or its pool is.
func (m *Metrics) BindingGone(namespace, name string) {
	if m != nil {
		m.observations.ForgetBinding(namespace, name)
	}
}

// Lost counts objects a store lost.
func (m *Metrics) Lost(backend, cause string, objects, bytes int64) {
	if m == nil {
		return
	}
	m.lostObjects.WithLabelValues(backend, cause).Add(float64(objects))
	m.lostBytes.WithLabelValues(backend, cause).Add(float64(bytes))
}

// Failover counts a new master process.
func (m *Metrics) Failover(backend, mode string) {
	if m == nil {
		return
	}
	m.failovers.WithLabelValues(backend, mode).Inc()
}

// FailoverKept counts the objects a new master process kept, once that is known (for a warm
// store: once the members mounted their segments on it again, or did not in time).
func (m *Metrics) FailoverKept(backend string, kept int64) {
	if m == nil {
		return
	}
	m.failoverKept.WithLabelValues(backend).Add(float64(kept))
}

// ScrapeFailed counts a failed read of endpoint ("health", "metrics", ...).
func (m *Metrics) ScrapeFailed(backend, endpoint string, err error) {
	if m == nil {
		return
	}
	m.scrapeFailures.WithLabelValues(backend, endpoint, FailureReason(err)).Inc()
}

// LedgerWrite counts one ledger write.
func (m *Metrics) LedgerWrite(backend, op string, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.ledgerWrites.WithLabelValues(backend, op, result).Inc()
}

// FailureReason classifies an admin API error for metrics.
func FailureReason(err error) string {
	var se *store.Error
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "Timeout"
	case errors.As(err, &se) && se.Code != 0:
		return "StoreError"
	case errors.As(err, &se):
		return "HTTPError"
	case errors.As(err, &ne) && ne.Timeout():
		return "Timeout"
	default:
		return "Unreachable"
	}
}
