// Package pool reconciles KVCachePools: it owns a pool's status (BackendResolved,
// QuotaLedgerAvailable, QuotaWithinTotal, CapacityAllocatable, phase, clientEndpoint,
// usage.total, domains, usedBy, releasing) and the pool's finalizer. It writes no Binding: each
// KVCachePoolBinding's finalizer, ledger entry and status are operator/binding's.
//
// The cut is where the ledger entries change hands. A Binding registers and releases its own
// tenant; what outlives a Binding is the pool's: the leased rest of a deleted Binding's tenant,
// which the Binding hands over (through the shared store view, storeview) and the pool records
// in status.releasing and releases once the master allows it. A pool being deleted waits for
// its Bindings to release their tenants (each Binding's controller does, seeing its pool
// deleting), releases what it holds itself, and says in QuotaLedgerAvailable what it still
// waits for, at most storeview.ReleaseBound.
package pool

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/storeview"
	"github.com/kvcache-operator/kvcache/store"
)

// DefaultPollInterval is how often a pool's ledger is read when nothing else happens.
const DefaultPollInterval = 15 * time.Second

// Reconciler reconciles KVCachePools.
type Reconciler struct {
	Client client.Client
	// Admin returns the admin client of a backend's store.
	Admin func(b *kvv1.KVCacheBackend) store.Admin
	// View is the store view shared with the Binding controller; nil: this reconciler keeps its
	// own, whose reads last PollInterval.
	View     *storeview.View
	Recorder events.EventRecorder
	Metrics  *operator.Metrics
	// PollInterval between ledger reads; DefaultPollInterval when zero.
	PollInterval time.Duration
	// UsageRefresh is how often a usage figure that keeps changing is rewritten;
	// operator.DefaultUsageRefresh when zero.
	UsageRefresh time.Duration

	viewOnce sync.Once
	wakeOnce sync.Once
	wake     chan event.TypedGenericEvent[*kvv1.KVCachePool]
}

// SetupWithManager registers the controller: pools, their Bindings and their backends.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.PollInterval == 0 {
		r.PollInterval = DefaultPollInterval
	}
	return ctrl.NewControllerManagedBy(mgr).
		// Status is this controller's own writing; reacting to it would only reconcile again
		// from a cache that may not have seen the rest of the same reconcile's writes.
		For(&kvv1.KVCachePool{}, builder.WithPredicates(operator.IgnoreStatusUpdates())).
		Named("kvcachepool").
		// A reconcile can wait seconds on an unreachable store: several workers keep one slow
		// store from holding up the rest.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		// Of a Binding the pool reads its spec (ceiling, domain), finalizer and deletion; its
		// status is the Binding controller's and says nothing the pool reports.
		Watches(&kvv1.KVCachePoolBinding{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			b := o.(*kvv1.KVCachePoolBinding)
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: b.Spec.PoolRef.Name}}}
		}), builder.WithPredicates(operator.IgnoreStatusUpdates())).
		Watches(&kvv1.KVCacheBackend{}, handler.EnqueueRequestsFromMapFunc(r.poolsOfBackend)).
		// A deleted Binding handing its tenant's leased rest over (Wake).
		WatchesRawSource(source.Channel(r.wakeups(), &handler.TypedEnqueueRequestForObject[*kvv1.KVCachePool]{})).
		Complete(r)
}

func (r *Reconciler) wakeups() chan event.TypedGenericEvent[*kvv1.KVCachePool] {
	r.wakeOnce.Do(func() { r.wake = make(chan event.TypedGenericEvent[*kvv1.KVCachePool], 64) })
	return r.wake
}

// Wake reconciles a pool now rather than at its next poll: a deleted Binding of it handed its
// tenant over and waits for status.releasing to hold it. It never blocks (a full queue leaves
// the pool to its poll).
func (r *Reconciler) Wake(pool string) {
	select {
	case r.wakeups() <- event.TypedGenericEvent[*kvv1.KVCachePool]{Object: &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: pool}}}:
	default:
	}
}

func (r *Reconciler) view() *storeview.View {
	if r.View == nil {
		r.viewOnce.Do(func() { r.View = &storeview.View{MaxAge: r.PollInterval, Metrics: r.Metrics} })
	}
	return r.View
}

func (r *Reconciler) poolsOfBackend(ctx context.Context, o client.Object) []reconcile.Request {
	pools, err := objects.PoolsOn(ctx, objects.Cluster{Cached: r.Client}, o.GetName())
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, p := range pools {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
	}
	return out
}

// state is what one reconcile learned.
type state struct {
	pool     *kvv1.KVCachePool
	backend  *kvv1.KVCacheBackend
	master   storeview.Master
	hasAdmin bool
	// bindings are the pool's Bindings, live and deleting, by namespace/name.
	bindings []*kvv1.KVCachePoolBinding
	// holders maps a domain on this pool's backend to the Binding that holds it.
	holders map[string]types.NamespacedName
	// ledger is nil when it could not be read (ledgerErr says why); noLedger when the store
	// keeps none. writeErr is the last failed registration of one of the pool's Bindings.
	ledger    map[string]store.Tenant
	noLedger  bool
	ledgerErr error
	writeErr  error
	// pending: a pool being deleted still waits; waitingFor says for what ("" while it waits
	// only for its Bindings to release their tenants).
	pending    bool
	waitingFor string
	now        time.Time
}

// Reconcile reports one pool's status and releases what its deleted Bindings left.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	s := &state{pool: &kvv1.KVCachePool{}, now: time.Now()}
	if err := r.Client.Get(ctx, req.NamespacedName, s.pool); err != nil {
		// A pool that is gone has nothing left to report; its Bindings say it is missing.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := r.listBindings(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	before := s.pool.DeepCopy()
	// Status is patched whatever happened; observedGeneration moves only on success.
	defer func() {
		if err := r.patchStatus(ctx, before, s.pool, retErr == nil); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if !s.pool.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if wrote, err := operator.AddFinalizer(ctx, r.Client, s.pool, kvv1.FinalizerPool); err != nil {
		return ctrl.Result{}, err
	} else if wrote {
		before = s.pool.DeepCopy() // the patch read the object back, status included
	}
	for _, phase := range []func(context.Context, *state) error{
		r.resolveBackend,
		r.readLedger,
		r.takeOverReleases,
		r.finishReleases,
	} {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	setStatus(s.pool, s.observed(r.UsageRefresh))
	return ctrl.Result{RequeueAfter: r.PollInterval, Priority: ptr.To(handler.LowPriority)}, nil
}

// reconcileDelete releases a deleted pool: its Bindings release their own tenants (each seeing
// the pool deleting), the pool releases the tenants it took over (status.releasing), and waits
// until no Binding holds its ledger finalizer and no tenant is left, at most
// storeview.ReleaseBound. New Pods may not attach meanwhile (QuotaLedgerAvailable False).
func (r *Reconciler) reconcileDelete(ctx context.Context, s *state) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s.pool, kvv1.FinalizerPool) {
		return ctrl.Result{}, nil
	}
	for _, phase := range []func(context.Context, *state) error{r.resolveBackend, r.readLedger, r.releasePool} {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	setDeletingStatus(s.pool, s.waitingFor)
	if s.pending {
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if _, err := operator.RemoveFinalizer(ctx, r.Client, s.pool, kvv1.FinalizerPool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// listBindings reads the pool's Bindings.
func (r *Reconciler) listBindings(ctx context.Context, s *state) error {
	all, err := objects.Cluster{Cached: r.Client}.BindingsOf(ctx, s.pool.Name)
	if err != nil {
		return err
	}
	for i := range all {
		s.bindings = append(s.bindings, &all[i])
	}
	sort.Slice(s.bindings, func(i, j int) bool { return key(s.bindings[i]) < key(s.bindings[j]) })
	return nil
}

func key(b *kvv1.KVCachePoolBinding) string { return b.Namespace + "/" + b.Name }

func (r *Reconciler) resolveBackend(ctx context.Context, s *state) error {
	p := s.pool
	if len(p.Spec.Backends) != 1 {
		setBackendResolved(p, nil)
		return nil
	}
	b := &kvv1.KVCacheBackend{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: p.Spec.Backends[0]}, b)
	if apierrors.IsNotFound(err) {
		setBackendResolved(p, nil)
		return nil
	}
	if err != nil {
		return err
	}
	s.backend = b
	setBackendResolved(p, b)
	if a := r.Admin(b); a != nil {
		s.master, s.hasAdmin = storeview.Master{Backend: b, Admin: a}, true
	}
	// Domains held on this backend across all of its pools, first registration first.
	return r.domainHolders(ctx, s)
}

// domainHolders decides, for every domain on the backend, which Binding holds it
// (generator.DomainHolders, the rule the Binding controller and the ledger seed follow too).
func (r *Reconciler) domainHolders(ctx context.Context, s *state) error {
	onBackend, err := objects.BindingsOn(ctx, objects.Cluster{Cached: r.Client}, s.backend.Name)
	if err != nil {
		return err
	}
	s.holders = map[string]types.NamespacedName{}
	for d, b := range generator.DomainHolders(onBackend) {
		s.holders[d] = client.ObjectKeyFromObject(b)
	}
	return nil
}

func (s *state) holds(b *kvv1.KVCachePoolBinding) bool {
	return s.holders[b.DomainName()] == client.ObjectKeyFromObject(b)
}

// readLedger takes the master's tenant ledger from the store view, and the last failed
// registration of one of the pool's live Bindings whose entry still differs from its ceiling
// (the Binding controller notes it there). A managed backend declared without multi-tenancy
// keeps no ledger and is not asked.
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
	if s.ledger == nil {
		return nil
	}
	notes := r.view().Notes(s.master)
	for _, b := range s.bindings {
		n, ok := notes[b.DomainName()]
		if !ok || n.Op != storeview.OpRegister || n.Err == nil || n.Binding != client.ObjectKeyFromObject(b) || !b.DeletionTimestamp.IsZero() || !s.holds(b) {
			continue
		}
		if t, ok := s.ledger[b.DomainName()]; ok && t.RequestedQuotaBytes == b.Spec.Quota.Ceiling.Value() {
			continue // written since (the write that failed here went through after all)
		}
		s.writeErr = n.Err
	}
	return nil
}

// storeGoing reports whether the pool's backend is being deleted: its master, and the ledger and
// objects it keeps, go with it, so nothing needs releasing there.
func (s *state) storeGoing() bool { return s.backend != nil && !s.backend.DeletionTimestamp.IsZero() }

// observed is what the status setters read.
func (s *state) observed(refresh time.Duration) observed {
	o := observed{backend: s.backend, noLedger: s.noLedger, ledger: s.ledger, ledgerErr: s.ledgerErr, writeErr: s.writeErr, now: s.now, refresh: operator.UsageRefreshOr(refresh)}
	for _, b := range s.bindings {
		if b.DeletionTimestamp.IsZero() {
			o.live = append(o.live, liveBinding{b: b, holds: s.holds(b)})
		}
	}
	return o
}

// patchStatus writes the pool's status where it changed, and only there. observedGeneration
// is set only when the reconcile succeeded.
func (r *Reconciler) patchStatus(ctx context.Context, before, p *kvv1.KVCachePool, done bool) error {
	if done {
		p.Status.ObservedGeneration = p.Generation
	}
	if equality.Semantic.DeepEqual(before.Status, p.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
