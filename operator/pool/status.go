package pool

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator"
)

// Each setX computes conditions from what the reconcile observed. A condition that speaks of
// the store is Unknown until the store answered.

// setStatuses computes the pool's and its Bindings' status from what the reconcile found.
func (r *Reconciler) setStatuses(ctx context.Context, s *state) {
	p := s.pool
	setLedgerAvailable(p, s)
	var live []*kvv1.KVCachePoolBinding
	for _, b := range s.bindings {
		if b.DeletionTimestamp.IsZero() {
			live = append(live, b)
		}
	}
	setQuotaWithinTotal(p, live)
	setCapacityAllocatable(p, s.backend)

	p.Status.Domains, p.Status.UsedBy = nil, nil
	var usage int64
	for _, b := range live {
		p.Status.Domains = append(p.Status.Domains, b.DomainName())
		p.Status.UsedBy = append(p.Status.UsedBy, kvv1.ObjectReference{Kind: "KVCachePoolBinding", Namespace: b.Namespace, Name: b.Name})
		if t, ok := s.ledger[b.DomainName()]; ok && s.holds(b) {
			usage += t.ChargedBytes
		}
	}
	sort.Strings(p.Status.Domains)
	var read *resource.Quantity
	if s.ledger != nil {
		read = quantity(usage)
	}
	u := operator.RefreshUsage(operator.Usage{Bytes: p.Status.Usage.Total, At: p.Status.Usage.ObservedTime}, read, s.now, operator.UsageRefreshOr(r.UsageRefresh))
	p.Status.Usage = kvv1.PoolUsage{Total: u.Bytes, ObservedTime: u.At}
	setPoolPhase(p)

	s.drift = r.drift.round(p.Name)
	var figures []operator.BindingFigures
	for _, b := range s.bindings {
		if f, ok := r.setBindingStatus(ctx, s, b); ok {
			figures = append(figures, f)
		}
	}
	s.drift.done()
	r.Metrics.PoolObserved(p.Name, figures)
}

// setDeletingStatuses reports a pool being deleted: new Pods may not attach, and what the
// release still waits for; its Bindings are granted nothing any more.
func (r *Reconciler) setDeletingStatuses(s *state) {
	p := s.pool
	p.Status.Phase = kvv1.PhaseDeleting
	msg := "the pool is being deleted; its tenants are released from the ledger and new Pods may not attach"
	if s.pending != "" {
		msg = "the pool is being deleted and waits: " + s.pending
	}
	operator.SetCondition(&p.Status.Conditions, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionFalse, kvv1.ReasonPoolDeleting, msg)
	p.Status.Usage = kvv1.PoolUsage{}
	for _, b := range s.bindings {
		if b.DeletionTimestamp.IsZero() {
			setPoolGoneStatus(b, "PoolDeleting", fmt.Sprintf("KVCachePool %s is being deleted: its tenants are released from the ledger", p.Name))
		}
	}
}

// setOrphanStatus reports a Binding whose pool does not exist.
func setOrphanStatus(b *kvv1.KVCachePoolBinding) {
	setPoolGoneStatus(b, "PoolNotFound", fmt.Sprintf("KVCachePool %s does not exist: nothing is granted through this Binding", b.Spec.PoolRef.Name))
}

func setPoolGoneStatus(b *kvv1.KVCachePoolBinding, reason, msg string) {
	st := &b.Status
	st.EffectiveQuota, st.Usage, st.UsageObservedTime, st.Evicted, st.EvictedObservedTime = nil, nil, nil, nil, nil
	meta.RemoveStatusCondition(&st.Conditions, kvv1.ConditionEvictingOwnObjects)
	operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionQuotaGranted, metav1.ConditionFalse, reason, msg)
	operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, reason, msg)
	st.Phase = kvv1.PhasePending
}

func setLedgerAvailable(p *kvv1.KVCachePool, s *state) {
	c := &p.Status.Conditions
	switch {
	case s.backend == nil:
		operator.SetCondition(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionUnknown, kvv1.ReasonBackendNotFound, "the pool's backend does not exist")
	case s.noLedger:
		operator.SetCondition(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionFalse, kvv1.ReasonMultiTenancyDisabled,
			fmt.Sprintf("KVCacheBackend %s keeps no tenant ledger: ceilings are not enforced, engines get no tenant and every write lands in the store's default tenant", s.backend.Name))
	case s.ledger == nil:
		operator.SetConditionOnce(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionFalse, kvv1.ReasonLedgerUnreachable,
			fmt.Sprintf("the tenant ledger of KVCacheBackend %s cannot be read: %s", s.backend.Name, errString(s.ledgerErr)))
	case s.ledgerErr != nil:
		operator.SetCondition(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionTrue, kvv1.ReasonLedgerObserved,
			"the master keeps a tenant ledger; the last write failed: "+operator.Describe(s.ledgerErr))
	default:
		operator.SetCondition(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionTrue, kvv1.ReasonLedgerObserved,
			fmt.Sprintf("the master of KVCacheBackend %s keeps a tenant ledger", s.backend.Name))
	}
}

// setQuotaWithinTotal reports whether the Bindings' ceilings together fit the pool's total. A
// ceiling is a request, not a reservation: oversubscription is a report. Whether the store cuts
// grants depends on every ceiling on its master against what is mounted there, which is the
// ledger's to say (each Binding's QuotaGranted), not this spec comparison's.
func setQuotaWithinTotal(p *kvv1.KVCachePool, live []*kvv1.KVCachePoolBinding) {
	sum := resource.NewQuantity(0, resource.BinarySI)
	for _, b := range live {
		sum.Add(b.Spec.Quota.Ceiling)
	}
	total := p.Spec.Quota.Total
	if sum.Cmp(total) > 0 {
		operator.SetCondition(&p.Status.Conditions, p.Generation, kvv1.ConditionQuotaWithinTotal, metav1.ConditionFalse, kvv1.ReasonOversubscribed,
			fmt.Sprintf("the Bindings' ceilings sum to %s, more than the pool's total %s; each Binding's QuotaGranted says what the store grants it", sum.String(), total.String()))
		return
	}
	operator.SetCondition(&p.Status.Conditions, p.Generation, kvv1.ConditionQuotaWithinTotal, metav1.ConditionTrue, kvv1.ReasonWithinTotal,
		fmt.Sprintf("the Bindings' ceilings sum to %s of the pool's total %s", sum.String(), total.String()))
}

// setCapacityAllocatable compares the pool's total with what the store reports it holds.
func setCapacityAllocatable(p *kvv1.KVCachePool, b *kvv1.KVCacheBackend) {
	c := &p.Status.Conditions
	switch {
	case b == nil || b.Status.Capacity == nil:
		operator.SetCondition(c, p.Generation, kvv1.ConditionCapacityAllocatable, metav1.ConditionUnknown, kvv1.ReasonCapacityNotObserved, "the backend has not reported its capacity")
	case b.Status.Capacity.Total.Cmp(p.Spec.Quota.Total) < 0:
		operator.SetCondition(c, p.Generation, kvv1.ConditionCapacityAllocatable, metav1.ConditionFalse, kvv1.ReasonCapacityShort,
			fmt.Sprintf("KVCacheBackend %s reports %s, less than the pool's total %s", b.Name, b.Status.Capacity.Total.String(), p.Spec.Quota.Total.String()))
	default:
		operator.SetCondition(c, p.Generation, kvv1.ConditionCapacityAllocatable, metav1.ConditionTrue, kvv1.ReasonAllocatable,
			fmt.Sprintf("KVCacheBackend %s reports %s for the pool's total %s", b.Name, b.Status.Capacity.Total.String(), p.Spec.Quota.Total.String()))
	}
}

func setPoolPhase(p *kvv1.KVCachePool) {
	isTrue := func(t string) bool { return meta.IsStatusConditionTrue(p.Status.Conditions, t) }
	ledger := meta.FindStatusCondition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable)
	switch {
	case !isTrue(kvv1.ConditionBackendResolved):
		p.Status.Phase = kvv1.PhasePending
	case ledger != nil && (ledger.Status == metav1.ConditionTrue || ledger.Reason == kvv1.ReasonMultiTenancyDisabled):
		p.Status.Phase = kvv1.PhaseReady
	default:
		p.Status.Phase = kvv1.PhaseDegraded
	}
}

// setBindingStatus reports what the ledger granted one Binding and how its tenant is used,
// and returns its figures for the metrics (ok false for a Binding being deleted).
func (r *Reconciler) setBindingStatus(ctx context.Context, s *state, b *kvv1.KVCachePoolBinding) (operator.BindingFigures, bool) {
	st := &b.Status
	c := &st.Conditions
	g := b.Generation
	if !b.DeletionTimestamp.IsZero() {
		st.Phase = kvv1.PhaseDeleting
		return operator.BindingFigures{}, false
	}
	meta.RemoveStatusCondition(c, kvv1.ConditionReleasable)
	setDomainExclusive(s, b)
	st.EffectiveQuota = nil
	var usage *resource.Quantity
	t, ok := s.ledger[b.DomainName()]
	switch {
	case s.backend == nil:
		operator.SetCondition(c, g, kvv1.ConditionQuotaGranted, metav1.ConditionUnknown, kvv1.ReasonBackendNotFound, "the pool's backend does not exist")
	case s.noLedger:
		operator.SetCondition(c, g, kvv1.ConditionQuotaGranted, metav1.ConditionTrue, kvv1.ReasonUnenforced,
			fmt.Sprintf("KVCacheBackend %s keeps no tenant ledger: the ceiling is not enforced and writes land in the default tenant", s.backend.Name))
	case s.ledger == nil:
		operator.SetConditionOnce(c, g, kvv1.ConditionQuotaGranted, metav1.ConditionUnknown, kvv1.ReasonLedgerUnreachable,
			fmt.Sprintf("the tenant ledger behind KVCachePool %s cannot be read; its QuotaLedgerAvailable condition says why", s.pool.Name))
	case !s.holds(b):
		operator.SetCondition(c, g, kvv1.ConditionQuotaGranted, metav1.ConditionFalse, kvv1.ReasonNoLedgerEntry, "the domain is held by another Binding")
	case !ok:
		operator.SetCondition(c, g, kvv1.ConditionQuotaGranted, metav1.ConditionFalse, kvv1.ReasonNoLedgerEntry, fmt.Sprintf("the master's ledger has no entry for tenant %s yet", b.DomainName()))
	default:
		st.EffectiveQuota, usage = quantity(t.EffectiveQuotaBytes), quantity(t.ChargedBytes)
		if t.EffectiveQuotaBytes == 0 {
			operator.SetCondition(c, g, kvv1.ConditionQuotaGranted, metav1.ConditionFalse, kvv1.ReasonZeroGranted,
				fmt.Sprintf("the store grants tenant %s nothing (requested %s): no member segment is mounted, or the ceilings oversubscribe the store", b.DomainName(), quantity(t.RequestedQuotaBytes).String()))
		} else {
			operator.SetCondition(c, g, kvv1.ConditionQuotaGranted, metav1.ConditionTrue, kvv1.ReasonGranted,
				fmt.Sprintf("the store grants %s of the requested %s", st.EffectiveQuota.String(), quantity(t.RequestedQuotaBytes).String()))
		}
	}
	u := operator.RefreshUsage(operator.Usage{Bytes: st.Usage, At: st.UsageObservedTime}, usage, s.now, operator.UsageRefreshOr(r.UsageRefresh))
	st.Usage, st.UsageObservedTime = u.Bytes, u.At
	mds, err := r.attached(ctx, b)
	if err != nil {
		log.FromContext(ctx).Error(err, "list ModelDeployments")
	} else {
		st.UsedBy = consumers(mds)
	}
	fig := r.setUse(ctx, s, b, mds)
	if meta.IsStatusConditionTrue(*c, kvv1.ConditionQuotaGranted) && meta.IsStatusConditionTrue(*c, kvv1.ConditionDomainExclusive) {
		st.Phase = kvv1.PhaseReady
	} else {
		st.Phase = kvv1.PhasePending
	}
	return fig, true
}

// setDomainExclusive says whether the Binding's domain is its own on the backend's master.
// Which Binding holds a domain is decided from the Bindings themselves (the first claim); that
// the master registered it is a claim about the store, made only once its ledger answered.
func setDomainExclusive(s *state, b *kvv1.KVCachePoolBinding) {
	c, g, d := &b.Status.Conditions, b.Generation, b.DomainName()
	switch {
	case s.backend == nil:
		operator.SetCondition(c, g, kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, kvv1.ReasonBackendNotFound, "the pool's backend does not exist, so there is no master to hold the domain")
		return
	case !s.holds(b):
		h := s.holders[d]
		operator.SetCondition(c, g, kvv1.ConditionDomainExclusive, metav1.ConditionFalse, kvv1.ReasonDomainConflict,
			fmt.Sprintf("domain %s on KVCacheBackend %s is claimed by KVCachePoolBinding %s/%s, which claimed it first; this Binding is left out of the ledger: delete it or use another domain", d, s.backend.Name, h.Namespace, h.Name))
		return
	}
	const claimed = "domain %s is claimed by no other Binding on KVCacheBackend %s"
	_, registered := s.ledger[d]
	switch {
	case s.noLedger:
		operator.SetCondition(c, g, kvv1.ConditionDomainExclusive, metav1.ConditionTrue, kvv1.ReasonUnregistered,
			fmt.Sprintf(claimed+"; the backend keeps no tenant ledger, so its master registers no domain", d, s.backend.Name))
	case s.ledger == nil:
		operator.SetConditionOnce(c, g, kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, kvv1.ReasonLedgerUnreachable,
			fmt.Sprintf(claimed+"; whether its master registered it is unknown until the ledger answers (KVCachePool %s's QuotaLedgerAvailable says why)", d, s.backend.Name, s.pool.Name))
	case !registered:
		operator.SetCondition(c, g, kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, kvv1.ReasonNotRegistered,
			fmt.Sprintf(claimed+"; its master's ledger has no entry for it yet", d, s.backend.Name))
	default:
		operator.SetCondition(c, g, kvv1.ConditionDomainExclusive, metav1.ConditionTrue, kvv1.ReasonRegistered,
			fmt.Sprintf("domain %s is this Binding's on the master of KVCacheBackend %s", d, s.backend.Name))
	}
}

// attached lists the live ModelDeployments attached through a Binding, by name.
func (r *Reconciler) attached(ctx context.Context, b *kvv1.KVCachePoolBinding) ([]kvv1.ModelDeployment, error) {
	mds := &kvv1.ModelDeploymentList{}
	if err := r.Client.List(ctx, mds, client.InNamespace(b.Namespace)); err != nil {
		return nil, err
	}
	var out []kvv1.ModelDeployment
	for _, md := range mds.Items {
		if md.Spec.KVCache != nil && md.Spec.KVCache.PoolRef.Name == b.Name && md.DeletionTimestamp.IsZero() {
			out = append(out, md)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// consumers are the usedBy entries of the ModelDeployments attached through a Binding.
func consumers(mds []kvv1.ModelDeployment) []kvv1.ObjectReference {
	var out []kvv1.ObjectReference
	for _, md := range mds {
		out = append(out, kvv1.ObjectReference{Kind: "ModelDeployment", Namespace: md.Namespace, Name: md.Name})
	}
	return out
}
