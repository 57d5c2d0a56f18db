package pool

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator/store"
)

// A cache entry has no owner but its tenant, and the Binding is the tenant's owner: when the
// Binding goes, its objects go. The master refuses to delete a tenant that owns objects, so the
// release removes them first (remove_all of that tenant), after closing the tenant's admission
// (a quota of one byte: every put is refused, so a writer still running cannot fill it again in
// between; measured). The master removes no object a reader holds a lease on right now: forcing
// it hands a read in flight another key's bytes (measured), so those stay until the lease ends,
// default_kv_lease_ttl after their last read, and the pool removes them, and the tenant, then
// (status.releasing). Nothing waits for that: the Binding is released at once.

// poolReleaseBound is how long a deleted pool waits for its tenants' leased objects before it
// lets them go (they stay on the master, with their ledger entry, until it restarts).
const poolReleaseBound = 10 * time.Minute

// tenantRelease is what releasing a tenant did.
type tenantRelease struct {
	removed      int64 // objects remove_all removed
	removedBytes int64 // the tenant's charged bytes that went
	left         bool  // objects a reader leases remain: the ledger entry stays for now
	leftBytes    int64
}

// releaseTenant closes a tenant's admission, removes its objects and deletes its ledger entry
// (see above). A tenant not in the ledger is already released.
func (r *Reconciler) releaseTenant(ctx context.Context, s *state, tenant string) (tenantRelease, error) {
	var out tenantRelease
	t, ok := s.ledger[tenant]
	if !ok {
		return out, nil
	}
	if t.RequestedQuotaBytes != 1 {
		closed, err := s.admin.PutTenant(ctx, tenant, 1)
		r.Metrics.LedgerWrite(s.backend.Name, "put", err)
		if err != nil {
			return out, err
		}
		s.ledger[tenant] = closed
	}
	n, err := s.admin.RemoveTenantObjects(ctx, tenant)
	if err != nil {
		return out, err
	}
	out.removed = n
	err = s.admin.DeleteTenant(ctx, tenant)
	if !store.HasCode(err, store.CodeObjectNotFound) {
		r.Metrics.LedgerWrite(s.backend.Name, "delete", err)
	}
	switch {
	case err == nil || store.HasCode(err, store.CodeObjectNotFound):
		delete(s.ledger, tenant)
		out.removedBytes = t.ChargedBytes
		return out, nil
	case store.HasCode(err, store.CodeTenantNotEmpty):
		out.left = true
		if ts, err := s.admin.Tenants(ctx); err == nil {
			for _, x := range ts {
				if x.ID == tenant {
					out.leftBytes = x.ChargedBytes
					s.ledger[tenant] = x
				}
			}
		}
		out.removedBytes = max(0, t.ChargedBytes-out.leftBytes)
		return out, nil
	}
	return out, err
}

// releaseBinding releases a deleted Binding's tenant and says what it did, naming the Pods
// that still write under it. It reports whether the Binding may go (a failed store call is
// retried with the next poll).
func (r *Reconciler) releaseBinding(ctx context.Context, s *state, b *kvv1.KVCachePoolBinding) bool {
	tenant := b.DomainName()
	rel, err := r.releaseTenant(ctx, s, tenant)
	if err != nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "LedgerWriteFailed", "Release", "releasing tenant %s on KVCacheBackend %s failed: %v; retried every %s", tenant, s.backend.Name, err, r.PollInterval)
		return false
	}
	msg := fmt.Sprintf("removed %d object(s) (%s) of tenant %s from KVCacheBackend %s", rel.removed, bytesOf(rel.removedBytes), tenant, s.backend.Name)
	if rel.left {
		msg += fmt.Sprintf("; %s that readers hold a lease on stay until the lease ends (default_kv_lease_ttl after their last read): KVCachePool %s removes them and the tenant then (status.releasing)", bytesOf(rel.leftBytes), s.pool.Name)
		s.releasing(tenant, b, s.now)
	} else {
		msg += " and its ledger entry"
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "TenantReleased", "Release", "%s", msg)
	r.tellUsers(ctx, b, tenant)
	return true
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
		rel, err := r.releaseTenant(ctx, s, rt.Tenant)
		if err != nil || rel.left {
			kept = append(kept, rt)
			continue
		}
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, "TenantReleased", "Release",
			"removed the last %d object(s) (%s) of tenant %s (KVCachePoolBinding %s, deleted %s ago) from KVCacheBackend %s, and its ledger entry",
			rel.removed, bytesOf(rel.removedBytes), rt.Tenant, rt.Binding, s.now.Sub(rt.Since.Time).Round(time.Second), s.backend.Name)
	}
	st.Releasing = kept
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
func (s *state) releasing(tenant string, b *kvv1.KVCachePoolBinding, now time.Time) {
	st := &s.pool.Status
	if slices.ContainsFunc(st.Releasing, func(r kvv1.ReleasingTenant) bool { return r.Tenant == tenant }) {
		return
	}
	st.Releasing = append(st.Releasing, kvv1.ReleasingTenant{Tenant: tenant, Binding: b.Namespace + "/" + b.Name, Since: metav1.Time{Time: now.Truncate(time.Second)}})
	slices.SortFunc(st.Releasing, func(a, b kvv1.ReleasingTenant) int { return strings.Compare(a.Tenant, b.Tenant) })
}

func bytesOf(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }
