package pool

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/store"
)

// The pool's status is computed here by pure functions from what the reconcile read (observed):
// nothing is fetched and nothing written. A condition that speaks of the store is Unknown until
// the store answered.

// observed is what a reconcile read that the pool's status is computed from.
type observed struct {
	// backend is nil when none resolved.
	backend *kvv1.KVCacheBackend
	// ledger is nil when it could not be read (ledgerErr) or the store keeps none (noLedger);
	// writeErr is the last failed registration of one of the pool's Bindings.
	ledger              map[string]store.Tenant
	noLedger            bool
	ledgerErr, writeErr error
	// live are the pool's Bindings not being deleted, by namespace/name.
	live    []liveBinding
	now     time.Time
	refresh time.Duration
}

// liveBinding is a Binding of the pool not being deleted, and whether it holds its domain on
// the backend's master.
type liveBinding struct {
	b     *kvv1.KVCachePoolBinding
	holds bool
}

// setStatus computes a live pool's status (BackendResolved is set when the backend is looked
// up, setBackendResolved).
func setStatus(p *kvv1.KVCachePool, o observed) {
	setLedgerAvailable(p, o)
	setQuotaWithinTotal(p, o.live)
	setCapacityAllocatable(p, o.backend)
	setUse(p, o)
	setPoolPhase(p)
}

// setBackendResolved reports the backend the pool names (b, nil when it does not exist) and
// publishes its Client endpoint.
func setBackendResolved(p *kvv1.KVCachePool, b *kvv1.KVCacheBackend) {
	c := &p.Status.Conditions
	switch {
	case len(p.Spec.Backends) != 1:
		operator.SetCondition(c, p.Generation, kvv1.ConditionBackendResolved, metav1.ConditionFalse, kvv1.ReasonInvalidSpec, "a pool names exactly one backend")
	case b == nil:
		operator.SetCondition(c, p.Generation, kvv1.ConditionBackendResolved, metav1.ConditionFalse, kvv1.ReasonBackendNotFound,
			fmt.Sprintf("KVCacheBackend %s does not exist", p.Spec.Backends[0]))
	default:
		operator.SetCondition(c, p.Generation, kvv1.ConditionBackendResolved, metav1.ConditionTrue, kvv1.ReasonResolved, "KVCacheBackend "+b.Name)
		p.Status.ClientEndpoint = ""
		for _, e := range b.Status.Endpoints {
			if e.Name == kvv1.EndpointClient {
				p.Status.ClientEndpoint = e.Address
			}
		}
	}
}

// setUse lists the pool's domains and Bindings and sums what the ledger charges the domains
// they hold (usage.total, rate-limited as every usage figure is).
func setUse(p *kvv1.KVCachePool, o observed) {
	p.Status.Domains, p.Status.UsedBy = nil, nil
	var usage int64
	for _, l := range o.live {
		b := l.b
		p.Status.Domains = append(p.Status.Domains, b.DomainName())
		p.Status.UsedBy = append(p.Status.UsedBy, kvv1.ObjectReference{Kind: "KVCachePoolBinding", Namespace: b.Namespace, Name: b.Name})
		if t, ok := o.ledger[b.DomainName()]; ok && l.holds {
			usage += t.ChargedBytes
		}
	}
	sort.Strings(p.Status.Domains)
	var read *resource.Quantity
	if o.ledger != nil {
		read = quantity(usage)
	}
	u := operator.RefreshUsage(operator.Usage{Bytes: p.Status.Usage.Total, At: p.Status.Usage.ObservedTime}, read, o.now, o.refresh)
	p.Status.Usage = kvv1.PoolUsage{Total: u.Bytes, ObservedTime: u.At}
}

// setDeletingStatus reports a pool being deleted: new Pods may not attach, and what the
// release still waits for ("" when nothing, or only its Bindings' own releases).
func setDeletingStatus(p *kvv1.KVCachePool, waitingFor string) {
	p.Status.Phase = kvv1.PhaseDeleting
	msg := "the pool is being deleted; its tenants are released from the ledger and new Pods may not attach"
	if waitingFor != "" {
		msg = "the pool is being deleted and waits: " + waitingFor
	}
	operator.SetCondition(&p.Status.Conditions, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionFalse, kvv1.ReasonPoolDeleting, msg)
	p.Status.Usage = kvv1.PoolUsage{}
}

func setLedgerAvailable(p *kvv1.KVCachePool, o observed) {
	c := &p.Status.Conditions
	switch {
	case o.backend == nil:
		operator.SetCondition(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionUnknown, kvv1.ReasonBackendNotFound, "the pool's backend does not exist")
	case o.noLedger:
		operator.SetCondition(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionFalse, kvv1.ReasonMultiTenancyDisabled,
			objects.NoLedgerMessage(o.backend.Name))
	case o.ledger == nil:
		operator.SetConditionOnce(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionFalse, kvv1.ReasonLedgerUnreachable,
			fmt.Sprintf("the tenant ledger of KVCacheBackend %s cannot be read: %s", o.backend.Name, errString(o.ledgerErr)))
	case o.writeErr != nil:
		operator.SetCondition(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionTrue, kvv1.ReasonLedgerObserved,
			"the master keeps a tenant ledger; the last write failed: "+operator.Describe(o.writeErr))
	default:
		operator.SetCondition(c, p.Generation, kvv1.ConditionQuotaLedgerAvailable, metav1.ConditionTrue, kvv1.ReasonLedgerObserved,
			fmt.Sprintf("the master of KVCacheBackend %s keeps a tenant ledger", o.backend.Name))
	}
}

// setQuotaWithinTotal reports whether the Bindings' ceilings together fit the pool's total. A
// ceiling is a request, not a reservation: oversubscription is a report. Whether the store cuts
// grants depends on every ceiling on its master against what is mounted there, which is the
// ledger's to say (each Binding's QuotaGranted), not this spec comparison's.
func setQuotaWithinTotal(p *kvv1.KVCachePool, live []liveBinding) {
	sum := resource.NewQuantity(0, resource.BinarySI)
	for _, l := range live {
		sum.Add(l.b.Spec.Quota.Ceiling)
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

// errString is a ledger error in words that stay the same while its cause does (status is not
// rewritten by every poll of an unreachable store).
func errString(err error) string {
	if err == nil {
		return "the ledger could not be read"
	}
	return operator.Describe(err)
}

func quantity(bytes int64) *resource.Quantity { return resource.NewQuantity(bytes, resource.BinarySI) }
