// Package pool reconciles KVCachePools and the KVCachePoolBindings that divide them: it
// resolves the pool's backend, converges the backend master's tenant ledger from the pool's
// Bindings (a finalizer on each Binding before its first ledger write; PUT where the requested
// figure differs; DELETE only the entries of Bindings being released, or of every Binding of a
// pool being deleted, never foreign ones), and reports pool and Binding status from what the
// ledger says, and whether each Binding's tenant is used: the Pods that use it, the writes the
// master sees under it (CacheInUse), its evictions at its grant (EvictingOwnObjects), and the
// injected Pods whose configuration is stale (InjectionCurrent).
package pool

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/kvcache-operator/kvcache/operator/store"
)

// DefaultPollInterval is how often a pool's ledger is read when nothing else happens.
const DefaultPollInterval = 15 * time.Second

// FinalizerPool holds a pool until the ledger entries of its Bindings are deleted from the
// backend's master: a deleted pool's tenants must not stay in the ledger, where they would
// keep taking part in the proportional cut of every other tenant's grant.
const FinalizerPool = "worker.gpustack.ai/pool-ledger"

// Reconciler reconciles KVCachePools and their Bindings.
type Reconciler struct {
	Client client.Client
	// Admin returns the admin client of a backend's store.
	Admin    func(b *kvv1.KVCacheBackend) store.Admin
	Recorder events.EventRecorder
	Metrics  *operator.Metrics
	// PollInterval between ledger reads; DefaultPollInterval when zero.
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

	activityOnce sync.Once
	drift        driftMemo
}

// SetupWithManager registers the controller: pools, their Bindings, their backends, and the
// ModelDeployments that use the Bindings.
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
		// The Bindings' status is this controller's own writing: only their spec, finalizers
		// and deletion matter here.
		Watches(&kvv1.KVCachePoolBinding{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			b := o.(*kvv1.KVCachePoolBinding)
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: b.Spec.PoolRef.Name}}}
		}), builder.WithPredicates(operator.IgnoreStatusUpdates())).
		Watches(&kvv1.KVCacheBackend{}, handler.EnqueueRequestsFromMapFunc(r.poolsOfBackend)).
		Watches(&kvv1.ModelDeployment{}, handler.EnqueueRequestsFromMapFunc(r.poolOfDeployment)).
		Complete(r)
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

func (r *Reconciler) poolOfDeployment(ctx context.Context, o client.Object) []reconcile.Request {
	md := o.(*kvv1.ModelDeployment)
	if md.Spec.KVCache == nil {
		return nil
	}
	b := &kvv1.KVCachePoolBinding{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: md.Spec.KVCache.PoolRef.Name}, b); err != nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: b.Spec.PoolRef.Name}}}
}

// state is what one reconcile learned.
type state struct {
	pool     *kvv1.KVCachePool
	backend  *kvv1.KVCacheBackend
	admin    store.Admin
	bindings []*kvv1.KVCachePoolBinding
	before   map[types.NamespacedName]*kvv1.KVCachePoolBinding
	// ledger is nil when it could not be read; noLedger when the store keeps none.
	ledger    map[string]store.Tenant
	noLedger  bool
	ledgerErr error
	// holders maps a domain on this pool's backend to the Binding that holds it.
	holders map[string]types.NamespacedName
	// pending says what a pool being deleted still waits for ("" once its tenants are gone).
	pending string
	now     time.Time
	// figures are the master's per-tenant figures of the held domains (figuresRead: this
	// reconcile read them), activity the writes seen per domain, defaultWrites whether the
	// master holds objects under the tenant default.
	figures       map[string]store.TenantMetrics
	figuresRead   bool
	activity      map[string]operator.Activity
	defaultWrites bool
	drift         *driftRound
}

// Reconcile converges one pool's ledger entries and reports pool and Binding status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	s := &state{pool: &kvv1.KVCachePool{}, before: map[types.NamespacedName]*kvv1.KVCachePoolBinding{}, now: time.Now(), figures: map[string]store.TenantMetrics{}}
	poolErr := r.Client.Get(ctx, req.NamespacedName, s.pool)
	if err := client.IgnoreNotFound(poolErr); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.listBindings(ctx, req.Name, s); err != nil {
		return ctrl.Result{}, err
	}
	if apierrors.IsNotFound(poolErr) {
		// The pool is gone (its finalizer released its tenants first): nothing holds its
		// Bindings, and nothing grants them anything.
		r.Metrics.PoolObserved(req.Name, nil)
		r.drift.forget(req.Name)
		return ctrl.Result{}, r.orphans(ctx, s)
	}
	beforePool := s.pool.DeepCopy()
	// Statuses are patched whatever happened; observedGeneration moves only on success.
	defer func() {
		if err := r.patchStatuses(ctx, beforePool, s, retErr == nil); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if !s.pool.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if wrote, err := operator.AddFinalizer(ctx, r.Client, s.pool, FinalizerPool); err != nil {
		return ctrl.Result{}, err
	} else if wrote {
		beforePool = s.pool.DeepCopy() // the patch read the object back, status included
	}
	for _, phase := range []func(context.Context, *state) error{
		r.resolveBackend,
		r.ensureFinalizers,
		r.readLedger,
		r.convergeLedger,
		r.releaseBindings,
		r.finishReleases,
		r.readTenantFigures,
	} {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.setStatuses(ctx, s)
	return ctrl.Result{RequeueAfter: r.PollInterval, Priority: ptr.To(handler.LowPriority)}, nil
}

// reconcileDelete releases a deleted pool: the ledger entry of every Binding it registered is
// deleted from the backend's master (a tenant still owning objects holds the pool until it is
// empty; an unreadable ledger holds it until it answers), then its Bindings' ledger finalizers
// and its own are removed. New Pods may not attach meanwhile (QuotaLedgerAvailable False).
func (r *Reconciler) reconcileDelete(ctx context.Context, s *state) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s.pool, FinalizerPool) {
		return ctrl.Result{}, nil
	}
	for _, phase := range []func(context.Context, *state) error{r.resolveBackend, r.readLedger, r.releasePool} {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.setDeletingStatuses(s)
	r.Metrics.PoolObserved(s.pool.Name, nil)
	if s.pending != "" {
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	for _, b := range s.bindings {
		if err := r.removeFinalizer(ctx, b); err != nil {
			return ctrl.Result{}, err
		}
	}
	if _, err := operator.RemoveFinalizer(ctx, r.Client, s.pool, FinalizerPool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// releasePool releases the tenants of the pool's Bindings from the backend's master (closed,
// emptied and deleted as a deleted Binding's are; see releaseTenant), and the tenants left
// releasing, recording in s.pending what still holds the pool. Every wait ends: after
// poolReleaseBound the pool goes, saying what it leaves on the master.
func (r *Reconciler) releasePool(ctx context.Context, s *state) error {
	if s.backend == nil || s.noLedger || s.storeGoing() {
		return nil // no master, one that keeps no ledger, or one going away with its ledger
	}
	var tenants []string
	for _, b := range s.bindings {
		// Only entries the operator registered: a Binding holding its domain, with the finalizer
		// put on before its first ledger write.
		if s.holds(b) && controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) {
			tenants = append(tenants, b.DomainName())
		}
	}
	for _, rt := range s.pool.Status.Releasing {
		tenants = append(tenants, rt.Tenant)
	}
	if len(tenants) == 0 {
		return nil
	}
	waited := s.now.Sub(s.pool.DeletionTimestamp.Time)
	var waitingFor string
	if s.ledger == nil {
		waitingFor = fmt.Sprintf("the tenant ledger of KVCacheBackend %s cannot be read (%s), so the pool's tenants cannot be released yet", s.backend.Name, errString(s.ledgerErr))
	} else {
		var leased, failed []string
		for _, t := range tenants {
			rel, err := r.releaseTenant(ctx, s, t)
			switch {
			case err != nil:
				failed = append(failed, fmt.Sprintf("%s (%s)", t, operator.Describe(err)))
			case rel.left:
				leased = append(leased, t)
			}
		}
		switch {
		case len(failed) > 0:
			waitingFor = "releasing tenants failed: " + strings.Join(failed, ", ")
		case len(leased) > 0:
			waitingFor = fmt.Sprintf("tenant(s) %s: their objects were removed but those readers hold a lease on, which the master removes once the lease ends (default_kv_lease_ttl after the last read)", strings.Join(leased, ", "))
		}
	}
	if waitingFor == "" {
		s.pool.Status.Releasing = nil
		return nil
	}
	if waited < poolReleaseBound {
		// The deadline, not the time waited: a condition that changes every poll is a write per poll.
		deadline := s.pool.DeletionTimestamp.Add(poolReleaseBound).UTC().Format(time.RFC3339)
		s.pending = fmt.Sprintf("%s; the pool waits for it until %s at the latest (%s after its deletion), retried every %s", waitingFor, deadline, poolReleaseBound, r.PollInterval)
		return nil
	}
	r.Recorder.Eventf(s.pool, nil, corev1.EventTypeWarning, "TenantsLeft", "Release",
		"gave up after %s: %s; what stays on the master of KVCacheBackend %s (closed to writes) goes when it restarts", poolReleaseBound, waitingFor, s.backend.Name)
	return nil
}

// listBindings reads the pool's Bindings and keeps a copy of each for the status patch.
func (r *Reconciler) listBindings(ctx context.Context, pool string, s *state) error {
	all, err := objects.Cluster{Cached: r.Client}.BindingsOf(ctx, pool)
	if err != nil {
		return err
	}
	for i := range all {
		b := &all[i]
		s.bindings = append(s.bindings, b)
		s.before[client.ObjectKeyFromObject(b)] = b.DeepCopy()
	}
	sort.Slice(s.bindings, func(i, j int) bool { return key(s.bindings[i]) < key(s.bindings[j]) })
	return nil
}

func key(b *kvv1.KVCachePoolBinding) string { return b.Namespace + "/" + b.Name }

// orphans handles the Bindings of a pool that does not exist: a deleted one is let go (the
// pool released their entries before it went, and without it there is no master to ask), and
// the status of the others says the pool is missing rather than keep a grant nobody observes
// any more.
func (r *Reconciler) orphans(ctx context.Context, s *state) error {
	for _, b := range s.bindings {
		if !b.DeletionTimestamp.IsZero() {
			if err := r.removeFinalizer(ctx, b); err != nil {
				return err
			}
			continue
		}
		before := s.before[client.ObjectKeyFromObject(b)]
		setOrphanStatus(b)
		if equality.Semantic.DeepEqual(before.Status, b.Status) {
			continue
		}
		if err := r.Client.Status().Patch(ctx, b, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func (r *Reconciler) resolveBackend(ctx context.Context, s *state) error {
	p := s.pool
	if len(p.Spec.Backends) != 1 {
		operator.SetCondition(&p.Status.Conditions, p.Generation, kvv1.ConditionBackendResolved, metav1.ConditionFalse, kvv1.ReasonInvalidSpec, "a pool names exactly one backend")
		return nil
	}
	b := &kvv1.KVCacheBackend{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: p.Spec.Backends[0]}, b)
	if apierrors.IsNotFound(err) {
		operator.SetCondition(&p.Status.Conditions, p.Generation, kvv1.ConditionBackendResolved, metav1.ConditionFalse, kvv1.ReasonBackendNotFound,
			fmt.Sprintf("KVCacheBackend %s does not exist", p.Spec.Backends[0]))
		return nil
	}
	if err != nil {
		return err
	}
	s.backend = b
	operator.SetCondition(&p.Status.Conditions, p.Generation, kvv1.ConditionBackendResolved, metav1.ConditionTrue, kvv1.ReasonResolved, "KVCacheBackend "+b.Name)
	p.Status.ClientEndpoint = ""
	for _, e := range b.Status.Endpoints {
		if e.Name == kvv1.EndpointClient {
			p.Status.ClientEndpoint = e.Address
		}
	}
	s.admin = r.Admin(b)
	// Domains held on this backend across all of its pools, first registration first.
	return r.domainHolders(ctx, s)
}

// domainHolders decides, for every domain on the backend, which Binding holds it
// (generator.DomainHolders, the rule the ledger seed follows too).
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

// domainHeld reports whether any Binding on the backend holds domain d.
func (s *state) domainHeld(d string) bool {
	_, ok := s.holders[d]
	return ok
}

// ensureFinalizers puts the ledger finalizer on every live Binding before the ledger is
// written for it, so no entry can outlive its Binding unnoticed. A Binding that vanished since
// the list was read is dropped from this reconcile (no entry is written for it) and the others
// are still handled; a Binding changed meanwhile (Conflict) fails the reconcile, which retries
// on a fresh read.
func (r *Reconciler) ensureFinalizers(ctx context.Context, s *state) error {
	kept := s.bindings[:0]
	for _, b := range s.bindings {
		if !b.DeletionTimestamp.IsZero() {
			kept = append(kept, b)
			continue
		}
		wrote, err := operator.AddFinalizer(ctx, r.Client, b, kvv1.FinalizerBinding)
		switch {
		case apierrors.IsNotFound(err):
			delete(s.before, client.ObjectKeyFromObject(b))
			continue
		case err != nil:
			return err
		case wrote:
			s.before[client.ObjectKeyFromObject(b)] = b.DeepCopy() // read back, status included
		}
		kept = append(kept, b)
	}
	s.bindings = kept
	return nil
}

// readLedger lists the master's tenant ledger. A managed backend declared without
// multi-tenancy keeps none and is not asked.
func (r *Reconciler) readLedger(ctx context.Context, s *state) error {
	if s.backend == nil {
		return nil
	}
	if m := s.backend.Spec.Connection.Managed; m != nil && !m.Leader.MultiTenancyEnabled() {
		s.noLedger = true
		return nil
	}
	if s.admin == nil {
		s.ledgerErr = fmt.Errorf("KVCacheBackend %s names no Admin endpoint", s.backend.Name)
		return nil
	}
	tenants, err := s.admin.Tenants(ctx)
	switch {
	case store.HasCode(err, store.CodeUnavailableInCurrentMode):
		s.noLedger = true
	case err != nil:
		r.Metrics.ScrapeFailed(s.backend.Name, "tenant_quotas", err)
		s.ledgerErr = err
	default:
		s.ledger = map[string]store.Tenant{}
		for _, t := range tenants {
			s.ledger[t.ID] = t
		}
	}
	return nil
}

// convergeLedger writes each live Binding's requested figure where the ledger differs.
func (r *Reconciler) convergeLedger(ctx context.Context, s *state) error {
	if s.ledger == nil {
		return nil
	}
	for _, b := range s.bindings {
		// Only a Binding that carries the finalizer gets an entry: its release is then certain.
		if !b.DeletionTimestamp.IsZero() || !s.holds(b) || !controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) {
			continue
		}
		want := b.Spec.Quota.Ceiling.Value()
		if t, ok := s.ledger[b.DomainName()]; ok && t.RequestedQuotaBytes == want {
			continue
		}
		t, err := s.admin.PutTenant(ctx, b.DomainName(), want)
		r.Metrics.LedgerWrite(s.backend.Name, "put", err)
		if err != nil {
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "LedgerWriteFailed", "Register", "registering tenant %s on KVCacheBackend %s failed: %v", b.DomainName(), s.backend.Name, err)
			s.ledgerErr = err
			continue
		}
		s.ledger[t.ID] = t
	}
	return nil
}

// releaseBindings deletes the ledger entry of every Binding being deleted, then lets it go. A
// tenant that still owns objects cannot be deleted: the Binding waits, Releasable False.
func (r *Reconciler) releaseBindings(ctx context.Context, s *state) error {
	for _, b := range s.bindings {
		if b.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) {
			continue
		}
		if s.storeGoing() {
			// The master goes with its backend, ledger and objects included: a tenant still
			// owning objects would otherwise hold its Binding, the pool and so the backend.
		} else if s.ledger != nil && s.holds(b) {
			if !r.releaseBinding(ctx, s, b) {
				continue
			}
		} else if s.ledger == nil && !s.noLedger && s.backend != nil {
			// The ledger cannot be read: wait rather than leave an entry behind, for a while.
			if waited := s.now.Sub(b.DeletionTimestamp.Time); waited < poolReleaseBound {
				operator.SetConditionOnce(&b.Status.Conditions, b.Generation, kvv1.ConditionReleasable, metav1.ConditionFalse, kvv1.ReasonLedgerUnreachable,
					fmt.Sprintf("the tenant ledger behind KVCachePool %s cannot be read, so the tenant cannot be released yet (its QuotaLedgerAvailable condition says why); the Binding waits at most %s for it", s.pool.Name, poolReleaseBound))
				continue
			}
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "TenantLeft", "Release",
				"the tenant ledger behind KVCachePool %s stayed unreadable for %s: the Binding goes, and tenant %s with its objects stays on the master of KVCacheBackend %s until it restarts (its ledger seed holds no entry for it then)", s.pool.Name, poolReleaseBound, b.DomainName(), s.backend.Name)
		}
		if err := r.removeFinalizer(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// storeGoing reports whether the pool's backend is being deleted: its master, and the ledger and
// objects it keeps, go with it, so nothing needs releasing there.
func (s *state) storeGoing() bool { return s.backend != nil && !s.backend.DeletionTimestamp.IsZero() }

// errString is a ledger error in words that stay the same while its cause does (status is not
// rewritten by every poll of an unreachable store).
func errString(err error) string {
	if err == nil {
		return "the ledger could not be read"
	}
	return operator.Describe(err)
}

func (r *Reconciler) removeFinalizer(ctx context.Context, b *kvv1.KVCachePoolBinding) error {
	_, err := operator.RemoveFinalizer(ctx, r.Client, b, kvv1.FinalizerBinding)
	return client.IgnoreNotFound(err)
}

// patchStatuses writes the pool's and each Binding's status where it changed, and only there.
// observedGeneration is set only when the reconcile succeeded.
func (r *Reconciler) patchStatuses(ctx context.Context, beforePool *kvv1.KVCachePool, s *state, done bool) error {
	if done {
		s.pool.Status.ObservedGeneration = s.pool.Generation
	}
	if !equality.Semantic.DeepEqual(beforePool.Status, s.pool.Status) {
		if err := r.Client.Status().Patch(ctx, s.pool, client.MergeFrom(beforePool)); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	for _, b := range s.bindings {
		before := s.before[client.ObjectKeyFromObject(b)]
		if done {
			b.Status.ObservedGeneration = b.Generation
		}
		if equality.Semantic.DeepEqual(before.Status, b.Status) || !controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) && !b.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Client.Status().Patch(ctx, b, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func quantity(bytes int64) *resource.Quantity { return resource.NewQuantity(bytes, resource.BinarySI) }
