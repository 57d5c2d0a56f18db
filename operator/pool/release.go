package pool

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/storeview"
)

// What of a tenant outlives its Binding is the pool's: a deleted Binding releases its own
// tenant (operator/binding), and when objects a reader leases stay, it hands the tenant over
// through the store view and waits, holding its finalizer, until status.releasing holds it. So
// the hand-over survives a restart of the manager: until the pool has recorded the tenant, the
// Binding is still there to release it again.

// poolReleaseBound is how long a deleted pool waits for its tenants before it lets them go.
const poolReleaseBound = storeview.ReleaseBound

// takeOverReleases records in status.releasing the tenants this pool's deleted Bindings handed
// over (noted in the store view by the Binding controller).
func (r *Reconciler) takeOverReleases(_ context.Context, s *state) error {
	if !s.hasAdmin || s.storeGoing() {
		return nil
	}
	notes := r.view().Notes(s.master)
	for _, b := range s.bindings {
		if b.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) {
			continue
		}
		n, ok := notes[b.DomainName()]
		if ok && n.Op == storeview.OpRelease && n.Left && n.Err == nil && n.Binding == client.ObjectKeyFromObject(b) && n.Pool == s.pool.Name {
			s.releasing(b.DomainName(), b, n.At)
		}
	}
	return nil
}

// finishReleases retries the tenants of deleted Bindings whose leased objects stayed: each goes
// once the master removes its last objects, or once a live Binding on the backend holds the
// domain again (its objects are that Binding's then), the deleted one created again under its
// own name included: releasing on would close the new Binding's tenant to writes (a quota of
// one byte) and remove what it writes.
func (r *Reconciler) finishReleases(ctx context.Context, s *state) error {
	if s.backend == nil || s.ledger == nil || s.storeGoing() {
		return nil
	}
	st := &s.pool.Status
	kept := st.Releasing[:0:0]
	for _, rt := range st.Releasing {
		if s.heldByLive(rt.Tenant) {
			continue
		}
		rel, err := r.view().Release(ctx, s.master, s.ledger, rt.Tenant)
		if err != nil || rel.Left {
			kept = append(kept, rt)
			continue
		}
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, "TenantReleased", "Release",
			"removed the last %d object(s) (%s) of tenant %s (KVCachePoolBinding %s, deleted %s ago) from KVCacheBackend %s, and its ledger entry",
			rel.Removed, bytesOf(rel.RemovedBytes), rt.Tenant, rt.Binding, s.now.Sub(rt.Since.Time).Round(time.Second), s.backend.Name)
	}
	st.Releasing = kept
	return nil
}

// releasePool decides what a pool being deleted still waits for: its Bindings that hold the
// ledger finalizer (their controller releases each one's tenant and notes in the store view
// what stays), and the tenants of status.releasing, which the pool releases itself. It records
// in s.pending whether the pool waits, and in s.waitingFor what for. Every wait ends: after
// poolReleaseBound the pool goes, saying what it leaves on the master.
func (r *Reconciler) releasePool(ctx context.Context, s *state) error {
	type claim struct {
		tenant string
		by     client.ObjectKey
	}
	var held []claim
	bindingsWait := false
	for _, b := range s.bindings {
		if !controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding) {
			continue
		}
		bindingsWait = true
		// Only entries the operator registered: a Binding holding its domain, with the finalizer
		// put on before its first ledger write.
		if s.backend != nil && s.holds(b) {
			held = append(held, claim{b.DomainName(), client.ObjectKeyFromObject(b)})
		}
	}
	var waitingFor string
	switch {
	case s.backend == nil || s.noLedger || s.storeGoing():
		// No master, one that keeps no ledger, or one going away with its ledger: nothing is
		// released there, and the Bindings let go at once.
	case s.ledger == nil:
		if len(held) > 0 || len(s.pool.Status.Releasing) > 0 {
			waitingFor = fmt.Sprintf("the tenant ledger of KVCacheBackend %s cannot be read (%s), so the pool's tenants cannot be released yet", s.backend.Name, errString(s.ledgerErr))
		}
	default:
		var leased, failed []string
		notes := r.view().Notes(s.master)
		for _, c := range held {
			if _, ok := s.ledger[c.tenant]; !ok {
				continue // released
			}
			// Not noted yet: its Binding's controller has not released it (the pool waits for
			// its finalizer, saying nothing it does not know).
			n, ok := notes[c.tenant]
			switch {
			case !ok || n.Op != storeview.OpRelease || n.Binding != c.by:
			case n.Err != nil:
				failed = append(failed, fmt.Sprintf("%s (%s)", c.tenant, operator.Describe(n.Err)))
			case n.Left:
				leased = append(leased, c.tenant)
			}
		}
		for _, rt := range s.pool.Status.Releasing {
			rel, err := r.view().Release(ctx, s.master, s.ledger, rt.Tenant)
			switch {
			case err != nil:
				failed = append(failed, fmt.Sprintf("%s (%s)", rt.Tenant, operator.Describe(err)))
			case rel.Left:
				leased = append(leased, rt.Tenant)
			}
		}
		switch {
		case len(failed) > 0:
			waitingFor = "releasing tenants failed: " + strings.Join(failed, ", ")
		case len(leased) > 0:
			waitingFor = fmt.Sprintf("tenant(s) %s: their objects were removed but those readers hold a lease on, which the master removes once the lease ends (default_kv_lease_ttl after the last read)", strings.Join(leased, ", "))
		}
	}
	if waitingFor == "" && !bindingsWait {
		s.pool.Status.Releasing = nil
		return nil
	}
	if s.now.Sub(s.pool.DeletionTimestamp.Time) < poolReleaseBound {
		s.pending = true
		if waitingFor != "" {
			// The deadline, not the time waited: a condition that changes every poll is a write per poll.
			deadline := s.pool.DeletionTimestamp.Add(poolReleaseBound).UTC().Format(time.RFC3339)
			s.waitingFor = fmt.Sprintf("%s; the pool waits for it until %s at the latest (%s after its deletion), retried every %s", waitingFor, deadline, poolReleaseBound, r.PollInterval)
		}
		return nil
	}
	if waitingFor != "" {
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeWarning, "TenantsLeft", "Release",
			"gave up after %s: %s; what stays on the master of KVCacheBackend %s (closed to writes) goes when it restarts", poolReleaseBound, waitingFor, s.backend.Name)
	}
	return nil
}

// heldByLive reports whether a Binding that is not being deleted holds domain d.
func (s *state) heldByLive(d string) bool {
	h, ok := s.holders[d]
	if !ok {
		return false
	}
	for _, b := range s.bindings {
		if client.ObjectKeyFromObject(b) == h {
			return b.DeletionTimestamp.IsZero()
		}
	}
	return false
}

// releasing records a tenant whose leased objects stay (once per tenant).
func (s *state) releasing(tenant string, b *kvv1.KVCachePoolBinding, since time.Time) {
	st := &s.pool.Status
	if slices.ContainsFunc(st.Releasing, func(r kvv1.ReleasingTenant) bool { return r.Tenant == tenant }) {
		return
	}
	st.Releasing = append(st.Releasing, kvv1.ReleasingTenant{Tenant: tenant, Binding: b.Namespace + "/" + b.Name, Since: metav1.Time{Time: since.Truncate(time.Second)}})
	slices.SortFunc(st.Releasing, func(a, b kvv1.ReleasingTenant) int { return strings.Compare(a.Tenant, b.Tenant) })
}

func bytesOf(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }
