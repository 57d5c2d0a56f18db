package binding

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator/storeview"
)

// The Binding's tenant in the master's ledger: registered once the finalizer is on, converged to
// the ceiling, released when the Binding goes (storeview.Release: closed to writes, emptied,
// deleted). What a release leaves (objects a reader leases, which the master removes only once
// the lease ends) is handed to the pool, which records it in status.releasing and removes it
// then; the Binding keeps its finalizer until the pool's status holds the tenant, so the
// hand-over survives a restart of the manager. Nothing else waits for it.

// releaseBound is how long a deleted Binding waits for a ledger it cannot read, and a Binding
// of a deleted pool for its tenant's leased objects, before it goes.
const releaseBound = storeview.ReleaseBound

// converge writes the live Binding's requested figure where the ledger differs. Only a Binding
// that carries the finalizer gets an entry: its release is then certain.
func (r *Reconciler) converge(ctx context.Context, s *state) error {
	b := s.b
	if s.ledger == nil || !s.holds() || !controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) {
		return nil
	}
	d, want := b.DomainName(), b.Spec.Quota.Ceiling.Value()
	if t, ok := s.ledger[d]; ok && t.RequestedQuotaBytes == want {
		return nil
	}
	t, err := r.view().Put(ctx, s.master, d, want)
	if err != nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "LedgerWriteFailed", "Register", "registering tenant %s on KVCacheBackend %s failed: %v", d, s.backend.Name, err)
		// The pool's QuotaLedgerAvailable says the last write failed.
		r.view().Note(s.master, d, storeview.Note{Op: storeview.OpRegister, Binding: s.key(), Pool: s.pool.Name, Err: err, At: s.now})
		return nil
	}
	r.clearNote(s)
	s.ledger[t.ID] = t
	return nil
}

// reconcileDelete releases a deleted Binding's tenant, then lets it go. A tenant whose release
// fails is retried every poll; an unreadable ledger holds the Binding (Releasable False) for
// releaseBound at most.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *state) (ctrl.Result, error) {
	b := s.b
	r.forget(s.key())
	b.Status.Phase = kvv1.PhaseDeleting
	if !controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) {
		return ctrl.Result{}, nil
	}
	switch {
	case s.storeGoing():
		// The master goes with its backend, ledger and objects included: a tenant still
		// owning objects would otherwise hold its Binding, the pool and so the backend.
	case s.ledger != nil && s.holds():
		if !r.releaseOwn(ctx, s) {
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
	case s.ledger == nil && !s.noLedger && s.backend != nil:
		// The ledger cannot be read: wait rather than leave an entry behind, for a while.
		if s.now.Sub(b.DeletionTimestamp.Time) < releaseBound {
			setReleasableLedgerUnreachable(b, s.pool.Name)
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "TenantLeft", "Release",
			"the tenant ledger behind KVCachePool %s stayed unreadable for %s: the Binding goes, and tenant %s with its objects stays on the master of KVCacheBackend %s until it restarts (its ledger seed holds no entry for it then)", s.pool.Name, releaseBound, b.DomainName(), s.backend.Name)
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, s)
}

// releaseOwn releases a deleted Binding's tenant and says what it did, naming the Pods that
// still write under it. It reports whether the Binding may go: not after a failed store call
// (retried with the next poll), nor while the leased rest waits for the pool to take it over.
func (r *Reconciler) releaseOwn(ctx context.Context, s *state) bool {
	b, tenant := s.b, s.b.DomainName()
	n, noted := r.view().Notes(s.master)[tenant]
	if !noted || n.Op != storeview.OpRelease || !n.Left || n.Binding != s.key() {
		rel, err := r.view().Release(ctx, s.master, s.ledger, tenant)
		if err != nil {
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "LedgerWriteFailed", "Release", "releasing tenant %s on KVCacheBackend %s failed: %v; retried every %s", tenant, s.backend.Name, err, r.PollInterval)
			return false
		}
		msg := fmt.Sprintf("removed %d object(s) (%s) of tenant %s from KVCacheBackend %s", rel.Removed, bytesOf(rel.RemovedBytes), tenant, s.backend.Name)
		if rel.Left {
			msg += fmt.Sprintf("; %s that readers hold a lease on stay until the lease ends (default_kv_lease_ttl after their last read): KVCachePool %s removes them and the tenant then (status.releasing)", bytesOf(rel.LeftBytes), s.pool.Name)
			r.view().Note(s.master, tenant, storeview.Note{Op: storeview.OpRelease, Binding: s.key(), Pool: s.pool.Name, Left: true, At: s.now})
		} else {
			msg += " and its ledger entry"
		}
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "TenantReleased", "Release", "%s", msg)
		r.tellUsers(ctx, b, tenant)
		if !rel.Left {
			return true
		}
	}
	if _, ok := s.ledger[tenant]; !ok {
		return true // gone from the master since (the pool took it over and removed the rest)
	}
	if slices.ContainsFunc(s.pool.Status.Releasing, func(rt kvv1.ReleasingTenant) bool { return rt.Tenant == tenant }) {
		return true // the pool has it
	}
	if r.WakePool != nil {
		r.WakePool(s.pool.Name)
	}
	return false
}

// releaseWithPool releases the tenant of a Binding whose pool is being deleted and reports
// whether the Binding may go. What stays (leased objects, a failed call) is noted in the store
// view for the pool, which says what it waits for; the release is retried every poll.
func (r *Reconciler) releaseWithPool(ctx context.Context, s *state) bool {
	switch {
	case s.backend == nil || s.noLedger || s.storeGoing():
		return true // no master, one that keeps no ledger, or one going away with its ledger
	case s.ledger == nil:
		return false // the pool says the ledger cannot be read
	case !s.holds():
		return true // only entries the operator registered
	}
	tenant := s.b.DomainName()
	if _, ok := s.ledger[tenant]; !ok {
		return true
	}
	rel, err := r.view().Release(ctx, s.master, s.ledger, tenant)
	if err != nil || rel.Left {
		r.view().Note(s.master, tenant, storeview.Note{Op: storeview.OpRelease, Binding: s.key(), Pool: s.pool.Name, Err: err, Left: rel.Left, At: s.now})
		return false
	}
	return true
}

// clearNote drops the store view's note of the Binding's tenant, when it is this Binding's.
func (r *Reconciler) clearNote(s *state) {
	if !s.hasAdmin {
		return
	}
	if n, ok := r.view().Notes(s.master)[s.b.DomainName()]; ok && n.Binding == s.key() {
		r.view().Clear(s.master, s.b.DomainName())
	}
}

// tellUsers names, on the Binding and on each injected one, the Pods that still use a released
// tenant: their writes fail from now on. The deletion goes on regardless: the user asked for it.
func (r *Reconciler) tellUsers(ctx context.Context, b *kvv1.KVCachePoolBinding, tenant string) {
	mds, err := r.attached(ctx, b)
	if err != nil {
		return
	}
	u, err := r.podsOf(ctx, b, mds)
	if err != nil || len(u.pods) == 0 {
		return
	}
	names := make([]string, 0, len(u.pods))
	for _, p := range u.pods {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	shown := names
	if len(shown) > 5 {
		shown = append(slices.Clone(names[:5]), fmt.Sprintf("and %d more", len(names)-5))
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "TenantInUse", "Release",
		"Pods still use tenant %s through this Binding: %s; with the tenant gone from the master their writes fail with TENANT_NOT_REGISTERED (-1701) and they cache nothing: roll their workloads onto another Binding, or take them out of the cache (kvcache.gpustack.ai/inject: \"false\")",
		tenant, strings.Join(shown, ", "))
	for i := range u.injected {
		p := &u.injected[i]
		r.Recorder.Eventf(p, b, corev1.EventTypeWarning, "BindingDeleted", "Release",
			"KVCachePoolBinding %s/%s, which this Pod's cache writes under (tenant %s), was deleted: its writes fail with TENANT_NOT_REGISTERED from now on", b.Namespace, b.Name, tenant)
	}
}

func bytesOf(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }
