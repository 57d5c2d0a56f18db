package operator

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// BackendFigures are what the last read of a backend's store showed. A nil figure is unknown
// (not read, or not reported): its series is absent rather than zero.
type BackendFigures struct {
	// Up: the master answered and serves.
	Up bool
	// CapacityBytes and UsedBytes are master_total_capacity_bytes and master_allocated_bytes.
	CapacityBytes, UsedBytes *int64
	// MembersRegistered of MembersExpected member Pods have a segment on the master (a managed
	// store; an external one reports registered segments only).
	MembersRegistered, MembersExpected *int64
	// Conditions are the backend's status conditions by type, as True, False or Unknown.
	Conditions map[string]string
}

// BindingFigures are a Binding's last observed figures.
type BindingFigures struct {
	Namespace, Name, Pool, Domain string
	// UsedBytes and EffectiveBytes are the tenant's charge and grant; EvictedBytes its
	// eviction counter. Nil: not reported (no ledger, or not read).
	UsedBytes, EffectiveBytes, EvictedBytes *int64
	// CacheInUse is the condition's verdict; nil while it is Unknown.
	CacheInUse *bool
	// DriftedPods is how many injected Pods run a stale configuration.
	DriftedPods int
	// PromptTokens and StoreTokens are what the engines using the Binding were asked and
	// loaded from the store over the hit-rate window, HitRatio the second of the first; nil:
	// no engine Pod was read (nil ratio: no prompt token was asked).
	PromptTokens, StoreTokens, HitRatio *float64
}

// Observations export the figures the controllers read on every poll as Prometheus series.
// Status carries the same figures rate-limited (writing them on every poll would write every
// object every poll); the series move with each read. Each poll replaces what it owns, so a
// deleted object's series go with it. Safe for concurrent use.
type Observations struct {
	mu       sync.Mutex
	backends map[string]BackendFigures
	bindings map[bindingKey]BindingFigures

	up, capacity, used, registered, expected, condition         *prometheus.Desc
	bindingUsed, bindingEffective, bindingEvicted, inUse, drift *prometheus.Desc
	promptTokens, storeTokens, hitRatio                         *prometheus.Desc
}

var _ prometheus.Collector = (*Observations)(nil)

// bindingKey names a Binding's figures: each Binding's controller replaces its own.
type bindingKey struct{ namespace, name string }

func newObservations() *Observations {
	backend := []string{"backend"}
	binding := []string{"namespace", "binding", "pool", "domain"}
	return &Observations{
		backends: map[string]BackendFigures{},
		bindings: map[bindingKey]BindingFigures{},
		up: prometheus.NewDesc("kvcache_store_up",
			"1 when the backend's master answered its last read and serves, 0 when it did not answer or does not serve.", backend, nil),
		capacity: prometheus.NewDesc("kvcache_backend_capacity_bytes",
			"Bytes the backend's members registered with the master (master_total_capacity_bytes), as last read.", backend, nil),
		used: prometheus.NewDesc("kvcache_backend_used_bytes",
			"Bytes allocated to objects on the backend's master (master_allocated_bytes), as last read.", backend, nil),
		registered: prometheus.NewDesc("kvcache_backend_members_registered",
			"Member segments registered with the master (of a managed store: member Pods whose segment the master lists).", backend, nil),
		expected: prometheus.NewDesc("kvcache_backend_members_expected",
			"Member Pods of a managed store, each of which should register a segment.", backend, nil),
		condition: prometheus.NewDesc("kvcache_backend_condition",
			"1 for the status (True, False, Unknown) each condition of the backend has, 0 for the other two, as of its last reconcile: an alert asks for == 1.", []string{"backend", "condition", "status"}, nil),
		bindingUsed: prometheus.NewDesc("kvcache_binding_used_bytes",
			"Bytes the Binding's domain holds in the store (the tenant's charge), as last read.", binding, nil),
		bindingEffective: prometheus.NewDesc("kvcache_binding_effective_quota_bytes",
			"The grant the store computed for the Binding's domain (the ceiling, cut in proportion when ceilings oversubscribe the store).", binding, nil),
		bindingEvicted: prometheus.NewDesc("kvcache_binding_evicted_bytes_total",
			"Bytes the store evicted from the Binding's domain to admit the domain's own writes at its grant (the master's counter: it starts over with a new master).", binding, nil),
		inUse: prometheus.NewDesc("kvcache_binding_cache_in_use",
			"1 while the Binding's CacheInUse condition is True, 0 while it is False (absent while Unknown: no Pod Ready, or nothing observable).", binding, nil),
		drift: prometheus.NewDesc("kvcache_binding_drifted_pods",
			"Running Pods injected through the Binding whose configuration is no longer what injection writes now.", binding, nil),
		promptTokens: prometheus.NewDesc("kvcache_binding_engine_prompt_tokens",
			"Prompt tokens the engines using the Binding were asked over the last hit-rate window (the manager's --hit-rate-window), from the engines' own counters.", binding, nil),
		storeTokens: prometheus.NewDesc("kvcache_binding_engine_store_tokens",
			"Prompt tokens the engines using the Binding loaded from the store instead of computing them over the last hit-rate window, from the engines' own counters.", binding, nil),
		hitRatio: prometheus.NewDesc("kvcache_binding_store_hit_ratio",
			"kvcache_binding_engine_store_tokens of kvcache_binding_engine_prompt_tokens (0 to 1): the share of the prompt the store served (absent while no prompt token was asked).", binding, nil),
	}
}

// SetBackend records a backend's figures.
func (o *Observations) SetBackend(name string, f BackendFigures) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.backends[name] = f
}

// ForgetBackend drops a deleted backend's series.
func (o *Observations) ForgetBackend(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.backends, name)
}

// SetBinding replaces a Binding's figures.
func (o *Observations) SetBinding(f BindingFigures) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bindings[bindingKey{f.Namespace, f.Name}] = f
}

// ForgetBinding drops the series of a Binding that is gone, or granted nothing.
func (o *Observations) ForgetBinding(namespace, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.bindings, bindingKey{namespace, name})
}

// Describe implements prometheus.Collector.
func (o *Observations) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{o.up, o.capacity, o.used, o.registered, o.expected, o.condition, o.bindingUsed, o.bindingEffective, o.bindingEvicted, o.inUse, o.drift, o.promptTokens, o.storeTokens, o.hitRatio} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (o *Observations) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	defer o.mu.Unlock()
	gauge := func(d *prometheus.Desc, v *int64, labels ...string) {
		if v != nil {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(*v), labels...)
		}
	}
	names := make([]string, 0, len(o.backends))
	for n := range o.backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := o.backends[n]
		up := int64(0)
		if f.Up {
			up = 1
		}
		gauge(o.up, &up, n)
		gauge(o.capacity, f.CapacityBytes, n)
		gauge(o.used, f.UsedBytes, n)
		gauge(o.registered, f.MembersRegistered, n)
		gauge(o.expected, f.MembersExpected, n)
		types := make([]string, 0, len(f.Conditions))
		for t := range f.Conditions {
			types = append(types, t)
		}
		sort.Strings(types)
		for _, t := range types {
			for _, st := range []string{"True", "False", "Unknown"} {
				v := int64(0)
				if f.Conditions[t] == st {
					v = 1
				}
				gauge(o.condition, &v, n, t, st)
			}
		}
	}
	for _, b := range o.bindings {
		l := []string{b.Namespace, b.Name, b.Pool, b.Domain}
		gauge(o.bindingUsed, b.UsedBytes, l...)
		gauge(o.bindingEffective, b.EffectiveBytes, l...)
		if b.EvictedBytes != nil {
			ch <- prometheus.MustNewConstMetric(o.bindingEvicted, prometheus.CounterValue, float64(*b.EvictedBytes), l...)
		}
		if b.CacheInUse != nil {
			v := int64(0)
			if *b.CacheInUse {
				v = 1
			}
			gauge(o.inUse, &v, l...)
		}
		d := int64(b.DriftedPods)
		gauge(o.drift, &d, l...)
		for desc, v := range map[*prometheus.Desc]*float64{o.promptTokens: b.PromptTokens, o.storeTokens: b.StoreTokens, o.hitRatio: b.HitRatio} {
			if v != nil {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, *v, l...)
			}
		}
	}
}
