// Package storeview is the operator's one view of each master's tenant ledger, shared by the
// pool controller and the Binding controller: the ledger (GET tenant_quotas) and the per-tenant
// figures (GET /metrics) are read at most once per MaxAge per master, whichever controller asks
// first, and every other reader is answered from that read. The backend reconciler reads
// /metrics every poll for the store's own figures and hands its read over (BeginRead, Saw), so a
// master's /metrics is read once per poll for all three. A master is named by its backend's
// UID and its admin endpoint, so a backend created again under its name, or one whose endpoint
// moved, is never answered with the other master's figures.
//
// The operator's own ledger writes go through the view too (Put, Release): each one drops what
// was read of that master, so the next reader sees the write. What a write did is kept for the
// controller that did not make it (Note): the pool reports its Bindings' failed registrations
// and takes the leased rest of a deleted Binding's tenant over from there.
//
// Without it, a controller per Binding would ask a store once per Binding per poll, and the
// pool and its Bindings could each publish a different read of the same ledger.
package storeview

import (
	"context"
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/store"
)

// DefaultMaxAge is how long a read answers other readers when View.MaxAge is zero: the poll
// interval of the controllers that read it.
const DefaultMaxAge = 15 * time.Second

// failedMaxAge is how long a failed read answers other readers: long enough that the Bindings
// of a store that does not answer, reconciled together, ask it once, and short enough that a
// store that just came up (its backend turning Ready wakes every reader) is read again at once
// instead of being reported unreachable for a whole poll (measured on the playground: the pool
// read "does not resolve" once before the leader Service's name existed, and Pods created
// right after the backend was Ready were refused for the rest of the poll).
const failedMaxAge = 2 * time.Second

// Master is the master a reader asks: the backend it serves (its name labels the metrics, its
// UID names the master with the admin endpoint) and the client of its admin API.
type Master struct {
	Backend *kvv1.KVCacheBackend
	Admin   store.Admin
}

type key struct {
	backend  types.UID
	endpoint string
}

func (m Master) key() key { return key{m.Backend.UID, m.Admin.Endpoint()} }

// Ledger is one read of a master's tenant ledger.
type Ledger struct {
	// Tenants by tenant_id; nil when the ledger could not be read (Err) or the master keeps
	// none (NoLedger). Each reader gets its own copy.
	Tenants map[string]store.Tenant
	// NoLedger: the master answered that it runs without multi-tenancy (-1011).
	NoLedger bool
	Err      error
	// At is when the master answered.
	At time.Time
}

// Figures is one read of a master's per-tenant figures (/metrics).
type Figures struct {
	// Tenants by tenant_id; nil when /metrics could not be read (Err).
	Tenants map[string]store.TenantMetrics
	Err     error
	At      time.Time
}

// View holds the last reads of each master. Safe for concurrent use; the zero value is ready.
type View struct {
	// MaxAge is how long a read answers other readers; DefaultMaxAge when zero.
	MaxAge time.Duration
	// Metrics counts failed reads and ledger writes (nothing when nil).
	Metrics *operator.Metrics
	// Clock is the view's time; time.Now when nil.
	Clock func() time.Time

	mu      sync.Mutex
	masters map[key]*master
}

// master is what is known of one master. reading serialises its reads: readers arriving during
// a read wait for it and take its answer instead of asking again.
type master struct {
	reading sync.Mutex

	// Guarded by View.mu.
	gen      uint64 // moved by every write: a read begun before it is not kept
	ledger   *Ledger
	figures  *Figures
	notes    map[string]Note
	lastUsed time.Time
}

func (v *View) now() time.Time {
	if v.Clock != nil {
		return v.Clock()
	}
	return time.Now()
}

func (v *View) maxAge() time.Duration {
	if v.MaxAge > 0 {
		return v.MaxAge
	}
	return DefaultMaxAge
}

// entry returns the master's record, and drops the records of masters nobody asked for a long
// while (a deleted backend) that hold no note.
func (v *View) entry(m Master) *master {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	if v.masters == nil {
		v.masters = map[key]*master{}
	}
	k := m.key()
	e, ok := v.masters[k]
	if !ok {
		for ok, old := range v.masters {
			if len(old.notes) == 0 && now.Sub(old.lastUsed) > 10*v.maxAge() {
				delete(v.masters, ok)
			}
		}
		e = &master{}
		v.masters[k] = e
	}
	e.lastUsed = now
	return e
}

// fresh reports whether a read taken at at still answers readers; a failed one only for
// failedMaxAge.
func (v *View) fresh(at time.Time, failed bool) bool {
	age := v.maxAge()
	if failed {
		age = min(age, failedMaxAge)
	}
	return v.now().Sub(at) < age
}

// Ledger returns the master's tenant ledger as last read, reading it when no read is fresh.
func (v *View) Ledger(ctx context.Context, m Master) Ledger {
	e := v.entry(m)
	if l, ok := v.cachedLedger(e); ok {
		return l
	}
	e.reading.Lock()
	defer e.reading.Unlock()
	if l, ok := v.cachedLedger(e); ok {
		return l // read by the reader this one waited for
	}
	return v.readLedger(ctx, m, e)
}

func (v *View) cachedLedger(e *master) (Ledger, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.ledger == nil || !v.fresh(e.ledger.At, e.ledger.Err != nil) {
		return Ledger{}, false
	}
	return e.ledger.copy(), true
}

// readLedger asks the master (the caller holds e.reading) and keeps the answer unless a write
// went to the master meanwhile.
func (v *View) readLedger(ctx context.Context, m Master, e *master) Ledger {
	gen := v.generation(e)
	tenants, err := m.Admin.Tenants(ctx)
	l := Ledger{At: v.now()}
	switch {
	case store.HasCode(err, store.CodeUnavailableInCurrentMode):
		l.NoLedger = true
	case err != nil:
		v.Metrics.ScrapeFailed(m.Backend.Name, "tenant_quotas", err)
		l.Err = err
	default:
		l.Tenants = make(map[string]store.Tenant, len(tenants))
		for _, t := range tenants {
			l.Tenants[t.ID] = t
		}
	}
	v.mu.Lock()
	if e.gen == gen {
		e.ledger = &l
	}
	v.mu.Unlock()
	return l.copy()
}

func (l Ledger) copy() Ledger {
	l.Tenants = maps.Clone(l.Tenants)
	return l
}

// Figures returns the master's per-tenant figures as last read, reading them when no read is
// fresh.
func (v *View) Figures(ctx context.Context, m Master) Figures {
	e := v.entry(m)
	if f, ok := v.cachedFigures(e); ok {
		return f
	}
	e.reading.Lock()
	defer e.reading.Unlock()
	if f, ok := v.cachedFigures(e); ok {
		return f
	}
	gen := v.generation(e)
	mt, err := m.Admin.Metrics(ctx)
	f := Figures{At: v.now(), Err: err}
	if err != nil {
		v.Metrics.ScrapeFailed(m.Backend.Name, "metrics", err)
		log.FromContext(ctx).V(1).Info("per-tenant figures unreadable", "backend", m.Backend.Name, "error", err.Error())
	} else {
		f.Tenants = mt.Tenants
		if f.Tenants == nil {
			f.Tenants = map[string]store.TenantMetrics{}
		}
	}
	v.mu.Lock()
	if e.gen == gen {
		e.figures = &f
	}
	v.mu.Unlock()
	return f.copy()
}

// Reading is a read of a master's /metrics that another controller makes for its own ends (the
// backend reconciler, every poll): begun with BeginRead, handed over with Saw, so the pool and
// Binding controllers take the tenants' figures from it instead of asking the master again.
type Reading struct {
	m   Master
	e   *master
	gen uint64
}

// BeginRead marks the start of a read of m's /metrics by its caller.
func (v *View) BeginRead(m Master) Reading {
	e := v.entry(m)
	return Reading{m: m, e: e, gen: v.generation(e)}
}

// Saw keeps what the read returned as the master's per-tenant figures, read at at, unless the
// operator wrote the master's ledger since the read began (what it read may predate the write)
// or a later read is kept already. A failed read is not kept: the readers ask again themselves.
func (v *View) Saw(r Reading, mt store.Metrics, at time.Time) {
	f := Figures{At: at, Tenants: mt.Tenants}
	if f.Tenants == nil {
		f.Tenants = map[string]store.TenantMetrics{}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if r.e.gen != r.gen || (r.e.figures != nil && r.e.figures.At.After(at)) {
		return
	}
	r.e.figures = &f
}

func (v *View) cachedFigures(e *master) (Figures, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.figures == nil || !v.fresh(e.figures.At, e.figures.Err != nil) {
		return Figures{}, false
	}
	return e.figures.copy(), true
}

func (f Figures) copy() Figures {
	f.Tenants = maps.Clone(f.Tenants)
	return f
}

func (v *View) generation(e *master) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return e.gen
}

// Wrote drops what was read of the master: the operator wrote its ledger, and the next reader
// must see that write (a read in flight meanwhile is not kept either).
func (v *View) Wrote(m Master) {
	e := v.entry(m)
	v.mu.Lock()
	defer v.mu.Unlock()
	e.gen++
	e.ledger, e.figures = nil, nil
}
