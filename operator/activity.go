package operator

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TenantFigures are what a master's /metrics says about one tenant at one read.
type TenantFigures struct {
	// Charged is the bytes of the tenant's objects (mooncake_tenant_quota_charged_bytes).
	Charged int64
	// Evicted is mooncake_tenant_evict_bytes_total: bytes evicted from the tenant's own objects
	// to admit its writes at its grant.
	Evicted int64
	// Rejected is mooncake_tenant_quota_reject_total over its reasons: puts refused for quota.
	Rejected float64
}

// Activity is what the operator has seen a tenant's writes do on one master.
type Activity struct {
	// Since is when this process first read the tenant's figures from the master (or from the
	// master that replaced it): writes before it are not known here.
	Since time.Time
	// LastWrite is the last read at which a figure showed a write: the charge rose, or the
	// eviction or rejection counter did. Zero when none was seen since Since.
	LastWrite time.Time
	// LastEviction is the last read at which the eviction counter rose; zero when none.
	LastEviction time.Time
	// LastRejection is the last read at which the rejection counter rose; zero when none.
	LastRejection time.Time
	// Figures are the last ones read.
	Figures TenantFigures
}

// TenantActivity remembers, per master and tenant, when writes were last seen. The store keeps
// no per-tenant put count (a put of an existing key, and a put under an unregistered tenant,
// move nothing), so a write is inferred from the figures it moves between two reads: the charge
// rising, or the eviction or rejection counter rising. It is memory only: after a restart of
// the manager the first read is a baseline. Safe for concurrent use; the zero value is ready.
type TenantActivity struct {
	mu sync.Mutex
	m  map[tenantKey]*Activity
}

type tenantKey struct {
	backend types.UID
	tenant  string
}

// Observe records one read of a tenant's figures on backend's master at now and returns the
// tenant's activity after it. Counters lower than the last read mean a new master process
// (they start over, and so does its cache): anything it reports then was written since.
func (a *TenantActivity) Observe(backend types.UID, tenant string, f TenantFigures, now time.Time) Activity {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[tenantKey]*Activity{}
	}
	k := tenantKey{backend, tenant}
	prev, ok := a.m[k]
	if !ok {
		a.m[k] = &Activity{Since: now, Figures: f}
		return *a.m[k]
	}
	base := prev.Figures
	if f.Evicted < base.Evicted || f.Rejected < base.Rejected {
		base = TenantFigures{} // a new master: it started empty
	}
	if f.Charged > base.Charged || f.Evicted > base.Evicted || f.Rejected > base.Rejected {
		prev.LastWrite = now
	}
	if f.Evicted > base.Evicted {
		prev.LastEviction = now
	}
	if f.Rejected > base.Rejected {
		prev.LastRejection = now
	}
	prev.Figures = f
	return *prev
}

// Get returns the tenant's activity, and whether the tenant was ever read on that master.
func (a *TenantActivity) Get(backend types.UID, tenant string) (Activity, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.m[tenantKey{backend, tenant}]; ok {
		return *v, true
	}
	return Activity{}, false
}

// Forget drops what is known of a tenant (its Binding is gone).
func (a *TenantActivity) Forget(backend types.UID, tenant string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, tenantKey{backend, tenant})
}
