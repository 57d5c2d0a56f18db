package webhook

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kvcache-operator/kvcache/internal/promutil"
)

// Metrics count admissions by webhook, outcome and refusal class, and time them.
type Metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the admission metrics with reg (controller-runtime's metrics.Registry in
// the manager).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvcache_admission_total",
			Help: "Admission requests by webhook, outcome (admitted, refused, ignored, error) and refusal reason.",
		}, []string{"webhook", "outcome", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvcache_admission_duration_seconds",
			Help:    "Time to decide one admission request, by webhook.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"webhook"}),
	}
	var err error
	if m.total, err = promutil.Register(reg, m.total); err != nil {
		return nil, err
	}
	if m.duration, err = promutil.Register(reg, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

// Admitter decides a request and says why.
type Admitter interface {
	Admit(ctx context.Context, req admission.Request) Outcome
}

// Instrument wraps an Admitter as an admission.Handler that records the metrics under name.
func (m *Metrics) Instrument(name string, a Admitter) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		start := time.Now()
		o := a.Admit(ctx, req)
		m.duration.WithLabelValues(name).Observe(time.Since(start).Seconds())
		m.total.WithLabelValues(name, o.Result, o.Reason).Inc()
		return o.Response
	})
}

// Validated adapts a validator's webhook to an Admitter so its decisions are counted too.
type Validated struct {
	Handler admission.Handler
}

// Admit implements Admitter: a denial's class is "Invalid".
func (v Validated) Admit(ctx context.Context, req admission.Request) Outcome {
	resp := v.Handler.Handle(ctx, req)
	switch {
	case resp.Allowed:
		return admitted(resp)
	case resp.Result != nil && resp.Result.Code != http.StatusForbidden && resp.Result.Code != http.StatusUnprocessableEntity:
		return Outcome{Response: resp, Result: OutcomeError, Reason: "InternalError"}
	default:
		return Outcome{Response: resp, Result: OutcomeRefused, Reason: "Invalid"}
	}
}
