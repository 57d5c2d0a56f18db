// Package binding reconciles KVCachePoolBindings, one at a time: it owns a Binding's ledger
// finalizer (kvv1.FinalizerBinding), its tenant's entry in the ledger of the backend's master
// (registered with the ceiling once the finalizer is on, PUT again where the requested figure
// differs, released when the Binding or its pool is deleted: closed, emptied, deleted), and
// every field and condition of its status: QuotaGranted, DomainExclusive, CacheInUse,
// EvictingOwnObjects, InjectionCurrent, Releasable, phase, effectiveQuota, usage, evicted,
// drift and usedBy.
//
// The cut is the Binding because all of that is about one tenant: its entry, its grant, the
// Pods that use it and what the master sees them write. The pool's status is operator/pool's.
// Both read the master through one store view (operator/storeview), so they publish the same
// read of the ledger and a store is asked once per poll however many Bindings it serves; what
// outlives a Binding (the leased rest of its tenant) is handed to the pool through that view.
package binding

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/storeview"
	"github.com/kvcache-operator/kvcache/store"
)

// DefaultPollInterval is how often a Binding's tenant is read when nothing else happens.
const DefaultPollInterval = 15 * time.Second

// Reconciler reconciles KVCachePoolBindings.
type Reconciler struct {
	Client client.Client
	// Admin returns the admin client of a backend's store.
	Admin func(b *kvv1.KVCacheBackend) store.Admin
	// View is the store view shared with the pool controller; nil: this reconciler keeps its
	// own, whose reads last PollInterval.
	View     *storeview.View
	Recorder events.EventRecorder
	Metrics  *operator.Metrics
	// PollInterval between reads of the tenant; DefaultPollInterval when zero.
	PollInterval time.Duration
	// UsageRefresh is how often a usage figure that keeps changing is rewritten;
	// operator.DefaultUsageRefresh when zero.
	UsageRefresh time.Duration

	// Pods reads the Pods injected through a Binding (indexed by
	// operator.InjectedBindingField); nil: none are seen.
	Pods client.Reader
	// DeploymentPods reads the Pods rendered for ModelDeployments; nil: none are seen.
	DeploymentPods client.Reader
	// Injector judges injected Pods' drift; nil: drift is not judged.
	Injector *injection.Injector
	// Activity remembers the writes seen per tenant; shared with the ModelDeployment
	// controller. Nil: this reconciler keeps its own.
	Activity *operator.TenantActivity
	// CacheInUseWindow is how long Pods must have been Ready without a write under their
	// tenant before CacheInUse is False, and how long EvictingOwnObjects stays True after the
	// last eviction; operator.DefaultCacheInUseWindow when zero.
	CacheInUseWindow time.Duration
	// Engines reads the engine Pods' own counters (shared with the ModelDeployment
	// controller); nil: this reconciler keeps its own.
	Engines *operator.EngineReader
	// HitRateWindow is how far back status.storeHits reaches; operator.DefaultHitRateWindow
	// when zero.
	HitRateWindow time.Duration
	// WakePool reconciles a pool now: a deleted Binding handed its tenant's leased rest over
	// and waits for the pool's status.releasing to hold it. Nil: the pool's next poll sees it.
	WakePool func(pool string)

	activityOnce sync.Once
	enginesOnce  sync.Once
	viewOnce     sync.Once
	drift        driftMemo
}

// SetupWithManager registers the controller: Bindings, their pools and backends, and the
// ModelDeployments that attach through them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.PollInterval == 0 {
		r.PollInterval = DefaultPollInterval
	}
	return ctrl.NewControllerManagedBy(mgr).
		// Status is this controller's own writing; reacting to it would only reconcile again
		// from a cache that may not have seen the rest of the same reconcile's writes.
		For(&kvv1.KVCachePoolBinding{}, builder.WithPredicates(operator.IgnoreStatusUpdates())).
		Named("kvcachepoolbinding").
		// A reconcile can wait seconds on an unreachable store: several workers keep one slow
		// store from holding up the rest.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		// A pool's status is read here too (its endpoint and QuotaLedgerAvailable are what
		// injection writes, its releasing list what a deleted Binding waits for): every change
		// of a pool counts.
		Watches(&kvv1.KVCachePool{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOfPool)).
		Watches(&kvv1.KVCacheBackend{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOfBackend)).
		Watches(&kvv1.ModelDeployment{}, handler.EnqueueRequestsFromMapFunc(bindingOfDeployment)).
		Complete(r)
}

func (r *Reconciler) bindingsOfPool(ctx context.Context, o client.Object) []reconcile.Request {
	bs, err := objects.Cluster{Cached: r.Client}.BindingsOf(ctx, o.GetName())
	if err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(bs))
	for i := range bs {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&bs[i])})
	}
	return out
}

func (r *Reconciler) bindingsOfBackend(ctx context.Context, o client.Object) []reconcile.Request {
	bs, err := objects.BindingsOn(ctx, objects.Cluster{Cached: r.Client}, o.GetName())
	if err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(bs))
	for i := range bs {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&bs[i])})
	}
	return out
}

func bindingOfDeployment(_ context.Context, o client.Object) []reconcile.Request {
	md := o.(*kvv1.ModelDeployment)
	if md.Spec.KVCache == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: md.Namespace, Name: md.Spec.KVCache.PoolRef.Name}}}
}

func (r *Reconciler) view() *storeview.View {
	if r.View == nil {
		r.viewOnce.Do(func() { r.View = &storeview.View{MaxAge: r.PollInterval, Metrics: r.Metrics} })
	}
	return r.View
}

func (r *Reconciler) engines() *operator.EngineReader {
	if r.Engines == nil {
		r.enginesOnce.Do(func() { r.Engines = &operator.EngineReader{} })
	}
	return r.Engines
}

func (r *Reconciler) activity() *operator.TenantActivity {
	if r.Activity == nil {
		r.activityOnce.Do(func() { r.Activity = &operator.TenantActivity{} })
	}
	return r.Activity
}

// state is what one reconcile learned.
type state struct {
	b *kvv1.KVCachePoolBinding
	// before is the Binding as last read from the API server, for the status patch.
	before   *kvv1.KVCachePoolBinding
	pool     *kvv1.KVCachePool
	backend  *kvv1.KVCacheBackend
	master   storeview.Master
	hasAdmin bool
	// holders maps a domain on the backend to the Binding that holds it.
	holders map[string]types.NamespacedName
	// ledger is nil when it could not be read (ledgerErr says why); noLedger when the store
	// keeps none.
	ledger    map[string]store.Tenant
	noLedger  bool
	ledgerErr error
	// figuresRead: the master's per-tenant figures were read; figure is the tenant's among
	// them (hasFigure), activity what the reads so far showed of its writes, defaultWrites
	// whether the master holds objects under the tenant default.
	figuresRead   bool
	figure        store.TenantMetrics
	hasFigure     bool
	activity      operator.Activity
	defaultWrites bool
	now           time.Time
	// gone: the Binding vanished during the reconcile; nothing is left to write.
	gone bool
}

func (s *state) key() types.NamespacedName { return client.ObjectKeyFromObject(s.b) }

// holds reports whether this Binding holds its domain on the backend's master.
func (s *state) holds() bool { return s.holders[s.b.DomainName()] == s.key() }

// domainHeld reports whether any Binding on the backend holds domain d.
func (s *state) domainHeld(d string) bool {
	_, ok := s.holders[d]
	return ok
}

// storeGoing reports whether the pool's backend is being deleted: its master, and the ledger and
// objects it keeps, go with it, so nothing needs releasing there.
func (s *state) storeGoing() bool { return s.backend != nil && !s.backend.DeletionTimestamp.IsZero() }

// Reconcile converges one Binding's ledger entry and reports its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	s := &state{b: &kvv1.KVCachePoolBinding{}, now: time.Now()}
	if err := r.Client.Get(ctx, req.NamespacedName, s.b); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	s.before = s.b.DeepCopy()
	pool := &kvv1.KVCachePool{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: s.b.Spec.PoolRef.Name}, pool); apierrors.IsNotFound(err) {
		return ctrl.Result{}, r.reconcileOrphan(ctx, s)
	} else if err != nil {
		return ctrl.Result{}, err
	}
	s.pool = pool
	// Status is patched whatever happened; observedGeneration moves only on success.
	defer func() {
		if err := r.patchStatus(ctx, s, retErr == nil); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if !pool.DeletionTimestamp.IsZero() {
		return r.reconcilePoolDeleting(ctx, s)
	}
	for _, phase := range []func(context.Context, *state) error{r.resolveBackend, r.ensureFinalizer, r.readLedger} {
		if err := phase(ctx, s); err != nil || s.gone {
			return ctrl.Result{}, err
		}
	}
	if !s.b.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	for _, phase := range []func(context.Context, *state) error{r.converge, r.readFigures} {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.setStatus(ctx, s)
	return ctrl.Result{RequeueAfter: r.PollInterval, Priority: ptr.To(handler.LowPriority)}, nil
}

// reconcileOrphan handles a Binding whose pool does not exist: a deleted one is let go (its
// pool released its entry before it went, and without it there is no master to ask), and the
// status of a live one says the pool is missing rather than keep a grant nobody observes any
// more.
func (r *Reconciler) reconcileOrphan(ctx context.Context, s *state) error {
	r.forget(s.key())
	if !s.b.DeletionTimestamp.IsZero() {
		_, err := operator.RemoveFinalizer(ctx, r.Client, s.b, kvv1.FinalizerBinding)
		return client.IgnoreNotFound(err)
	}
	setOrphanStatus(s.b)
	if equality.Semantic.DeepEqual(s.before.Status, s.b.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, s.b, client.MergeFrom(s.before)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// reconcilePoolDeleting releases the tenant of a Binding whose pool is being deleted (the pool
// waits for it) and then lets the Binding go, live or not; a live one is granted nothing any
// more. A tenant that keeps leased objects, or a ledger that cannot be read, holds the Binding
// until releaseBound after the pool's deletion, as it holds the pool.
func (r *Reconciler) reconcilePoolDeleting(ctx context.Context, s *state) (ctrl.Result, error) {
	r.forget(s.key())
	if controllerutil.ContainsFinalizer(s.b, kvv1.FinalizerBinding) {
		for _, phase := range []func(context.Context, *state) error{r.resolveBackend, r.readLedger} {
			if err := phase(ctx, s); err != nil {
				return ctrl.Result{}, err
			}
		}
		if !r.releaseWithPool(ctx, s) && s.now.Sub(s.pool.DeletionTimestamp.Time) < releaseBound {
			setPoolDeletingStatus(s.b, s.pool.Name)
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		if err := r.removeFinalizer(ctx, s); err != nil || s.gone {
			return ctrl.Result{}, err
		}
	}
	setPoolDeletingStatus(s.b, s.pool.Name)
	return ctrl.Result{}, nil
}

func (r *Reconciler) resolveBackend(ctx context.Context, s *state) error {
	p := s.pool
	if len(p.Spec.Backends) != 1 {
		return nil // the pool's BackendResolved says so
	}
	b := &kvv1.KVCacheBackend{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: p.Spec.Backends[0]}, b); err != nil {
		return client.IgnoreNotFound(err)
	}
	s.backend = b
	if a := r.Admin(b); a != nil {
		s.master, s.hasAdmin = storeview.Master{Backend: b, Admin: a}, true
	}
	// Domains held on this backend across all of its pools, first registration first
	// (generator.DomainHolders, the rule the pool and the ledger seed follow too).
	onBackend, err := objects.BindingsOn(ctx, objects.Cluster{Cached: r.Client}, b.Name)
	if err != nil {
		return err
	}
	s.holders = map[string]types.NamespacedName{}
	for d, h := range generator.DomainHolders(onBackend) {
		s.holders[d] = client.ObjectKeyFromObject(h)
	}
	return nil
}

// ensureFinalizer puts the ledger finalizer on a live Binding before the ledger is written for
// it, so no entry can outlive its Binding unnoticed. A Binding that vanished since it was read
// gets no entry; one changed meanwhile (Conflict) fails the reconcile, which retries on a fresh
// read.
func (r *Reconciler) ensureFinalizer(ctx context.Context, s *state) error {
	if !s.b.DeletionTimestamp.IsZero() {
		return nil
	}
	wrote, err := operator.AddFinalizer(ctx, r.Client, s.b, kvv1.FinalizerBinding)
	switch {
	case apierrors.IsNotFound(err):
		s.gone = true
		return nil
	case err != nil:
		return err
	case wrote:
		s.before = s.b.DeepCopy() // the patch read the object back, status included
	}
	return nil
}

// removeFinalizer lets the Binding go, and drops what the store view noted of its tenant.
func (r *Reconciler) removeFinalizer(ctx context.Context, s *state) error {
	wrote, err := operator.RemoveFinalizer(ctx, r.Client, s.b, kvv1.FinalizerBinding)
	switch {
	case apierrors.IsNotFound(err):
		s.gone = true
	case err != nil:
		return err
	case wrote:
		s.before = s.b.DeepCopy()
	}
	r.clearNote(s)
	return nil
}

// readLedger takes the master's tenant ledger from the store view. A managed backend declared
// without multi-tenancy keeps no ledger and is not asked.
func (r *Reconciler) readLedger(ctx context.Context, s *state) error {
	if s.backend == nil {
		return nil
	}
	if m := s.backend.Spec.Connection.Managed; m != nil && !m.Leader.MultiTenancyEnabled() {
		s.noLedger = true
		return nil
	}
	if !s.hasAdmin {
		s.ledgerErr = fmt.Errorf("KVCacheBackend %s names no Admin endpoint", s.backend.Name)
		return nil
	}
	l := r.view().Ledger(ctx, s.master)
	s.ledger, s.noLedger, s.ledgerErr = l.Tenants, l.NoLedger, l.Err
	return nil
}

// readFigures reads the master's per-tenant figures (/metrics: the ledger has no eviction
// counter) and records the activity of the tenant this Binding holds.
func (r *Reconciler) readFigures(ctx context.Context, s *state) error {
	if s.ledger == nil || !s.hasAdmin {
		return nil
	}
	f := r.view().Figures(ctx, s.master)
	// Unread, CacheInUse and EvictingOwnObjects keep what they said.
	if s.figuresRead = f.Err == nil; !s.figuresRead {
		return nil
	}
	d := s.b.DomainName()
	if t, ok := f.Tenants[d]; ok && s.holds() {
		s.figure, s.hasFigure = t, true
		// At the read's time: a read shared by several reconciles is one observation.
		s.activity = r.activity().Observe(s.backend.UID, d, operator.TenantFigures{Charged: t.ChargedBytes, Evicted: t.EvictedBytes, Rejected: t.Rejected}, f.At)
	}
	def := f.Tenants[kvv1.DefaultDomainName]
	s.defaultWrites = def.ChargedBytes > 0 || def.EvictedBytes > 0
	return nil
}

// forget drops what is kept in memory of a Binding that is gone or granted nothing: its
// series and its Pods' drift verdicts.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.Metrics.BindingGone(key.Namespace, key.Name)
	r.drift.forget(key)
}

// patchStatus writes the Binding's status where it changed, and only there; observedGeneration
// is set only when the reconcile succeeded. A Binding let go is not written: it is gone.
func (r *Reconciler) patchStatus(ctx context.Context, s *state, done bool) error {
	b := s.b
	if s.gone || !b.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) {
		return nil
	}
	if done {
		b.Status.ObservedGeneration = b.Generation
	}
	if equality.Semantic.DeepEqual(s.before.Status, b.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, b, client.MergeFrom(s.before)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
