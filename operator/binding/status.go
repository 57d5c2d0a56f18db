package binding

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/enginestats"
	"github.com/kvcache-operator/kvcache/store"
)

// A Binding's status is computed here by pure functions from what the reconcile read: nothing
// is fetched and nothing written; what is to be announced (an event) is returned. A condition
// that speaks of the store is Unknown until the store answered.

// grant is what a reconcile read that the grant conditions are computed from.
type grant struct {
	now time.Time
	// pool is the Binding's pool; backend the KVCacheBackend it resolves to ("" when none).
	pool, backend string
	// holder is the Binding that holds the domain on the backend's master (the first claim).
	holder types.NamespacedName
	// ledger is the master's ledger; nil when it could not be read or the store keeps none
	// (noLedger).
	ledger   map[string]store.Tenant
	noLedger bool
	refresh  time.Duration
}

func (g grant) holds(b *kvv1.KVCachePoolBinding) bool {
	return g.holder == types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
}

// setGrant reports what the ledger granted a live Binding: DomainExclusive, QuotaGranted,
// effectiveQuota and usage (rate-limited: operator.RefreshUsage).
func setGrant(b *kvv1.KVCachePoolBinding, g grant) {
	st := &b.Status
	c := &st.Conditions
	gen := b.Generation
	meta.RemoveStatusCondition(c, kvv1.ConditionReleasable)
	setDomainExclusive(b, g)
	st.EffectiveQuota = nil
	var usage *resource.Quantity
	t, ok := g.ledger[b.DomainName()]
	switch {
	case g.backend == "":
		operator.SetCondition(c, gen, kvv1.ConditionQuotaGranted, metav1.ConditionUnknown, kvv1.ReasonBackendNotFound, "the pool's backend does not exist")
	case g.noLedger:
		operator.SetCondition(c, gen, kvv1.ConditionQuotaGranted, metav1.ConditionTrue, kvv1.ReasonUnenforced,
			fmt.Sprintf("KVCacheBackend %s keeps no tenant ledger: the ceiling is not enforced and writes land in the default tenant", g.backend))
	case g.ledger == nil:
		operator.SetConditionOnce(c, gen, kvv1.ConditionQuotaGranted, metav1.ConditionUnknown, kvv1.ReasonLedgerUnreachable,
			fmt.Sprintf("the tenant ledger behind KVCachePool %s cannot be read; its QuotaLedgerAvailable condition says why", g.pool))
	case !g.holds(b):
		operator.SetCondition(c, gen, kvv1.ConditionQuotaGranted, metav1.ConditionFalse, kvv1.ReasonNoLedgerEntry, "the domain is held by another Binding")
	case !ok:
		operator.SetCondition(c, gen, kvv1.ConditionQuotaGranted, metav1.ConditionFalse, kvv1.ReasonNoLedgerEntry, fmt.Sprintf("the master's ledger has no entry for tenant %s yet", b.DomainName()))
	default:
		st.EffectiveQuota, usage = quantity(t.EffectiveQuotaBytes), quantity(t.ChargedBytes)
		if t.EffectiveQuotaBytes == 0 {
			operator.SetCondition(c, gen, kvv1.ConditionQuotaGranted, metav1.ConditionFalse, kvv1.ReasonZeroGranted,
				fmt.Sprintf("the store grants tenant %s nothing (requested %s): no member segment is mounted, or the ceilings oversubscribe the store", b.DomainName(), quantity(t.RequestedQuotaBytes).String()))
		} else {
			operator.SetCondition(c, gen, kvv1.ConditionQuotaGranted, metav1.ConditionTrue, kvv1.ReasonGranted,
				fmt.Sprintf("the store grants %s of the requested %s", st.EffectiveQuota.String(), quantity(t.RequestedQuotaBytes).String()))
		}
	}
	u := operator.RefreshUsage(operator.Usage{Bytes: st.Usage, At: st.UsageObservedTime}, usage, g.now, g.refresh)
	st.Usage, st.UsageObservedTime = u.Bytes, u.At
}

// setDomainExclusive says whether the Binding's domain is its own on the backend's master.
// Which Binding holds a domain is decided from the Bindings themselves (the first claim); that
// the master registered it is a claim about the store, made only once its ledger answered.
func setDomainExclusive(b *kvv1.KVCachePoolBinding, g grant) {
	c, gen, d := &b.Status.Conditions, b.Generation, b.DomainName()
	switch {
	case g.backend == "":
		operator.SetCondition(c, gen, kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, kvv1.ReasonBackendNotFound, "the pool's backend does not exist, so there is no master to hold the domain")
		return
	case !g.holds(b):
		operator.SetCondition(c, gen, kvv1.ConditionDomainExclusive, metav1.ConditionFalse, kvv1.ReasonDomainConflict,
			fmt.Sprintf("domain %s on KVCacheBackend %s is claimed by KVCachePoolBinding %s/%s, which claimed it first; this Binding is left out of the ledger: delete it or use another domain", d, g.backend, g.holder.Namespace, g.holder.Name))
		return
	}
	const claimed = "domain %s is claimed by no other Binding on KVCacheBackend %s"
	_, registered := g.ledger[d]
	switch {
	case g.noLedger:
		operator.SetCondition(c, gen, kvv1.ConditionDomainExclusive, metav1.ConditionTrue, kvv1.ReasonUnregistered,
			fmt.Sprintf(claimed+"; the backend keeps no tenant ledger, so its master registers no domain", d, g.backend))
	case g.ledger == nil:
		operator.SetConditionOnce(c, gen, kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, kvv1.ReasonLedgerUnreachable,
			fmt.Sprintf(claimed+"; whether its master registered it is unknown until the ledger answers (KVCachePool %s's QuotaLedgerAvailable says why)", d, g.backend, g.pool))
	case !registered:
		operator.SetCondition(c, gen, kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, kvv1.ReasonNotRegistered,
			fmt.Sprintf(claimed+"; its master's ledger has no entry for it yet", d, g.backend))
	default:
		operator.SetCondition(c, gen, kvv1.ConditionDomainExclusive, metav1.ConditionTrue, kvv1.ReasonRegistered,
			fmt.Sprintf("domain %s is this Binding's on the master of KVCacheBackend %s", d, g.backend))
	}
}

// use is what a reconcile read that the use conditions are computed from.
type use struct {
	now             time.Time
	window, refresh time.Duration
	// backend is the KVCacheBackend's name ("" when none resolves), storeImage the image its
	// master runs ("" when unknown).
	backend, storeImage string
	pods                []operator.PodUse
	// held: the Binding holds its tenant on a master; noLedger: the master keeps no ledger.
	held, noLedger bool
	// observed: the master's per-tenant figures were read and name the tenant (figure).
	observed bool
	figure   store.TenantMetrics
	activity operator.Activity
	// defaultWrites: the master holds objects under the tenant default and no Binding on it
	// holds that domain.
	defaultWrites bool
	// engines is what the Ready engine Pods counted over the hit-rate window.
	engines enginestats.Window
}

// enginesRead is the engines' window, nil when no engine Pod was read.
func (u use) enginesRead() *enginestats.Window {
	if u.engines.Pods == 0 {
		return nil
	}
	return &u.engines
}

// setStoreHits publishes what the engines counted (rate-limited as usage is).
func setStoreHits(b *kvv1.KVCachePoolBinding, u use) {
	b.Status.StoreHits = operator.RefreshStoreHits(b.Status.StoreHits, operator.StoreHitsOf(u.engines, u.now), u.now, u.refresh)
}

// setCacheInUse decides CacheInUse and returns what to announce when it turns False ("" for
// nothing), with the event's reason: CacheNotWritten, or CacheNotRead for a tenant written and
// never read back.
func setCacheInUse(b *kvv1.KVCachePoolBinding, u use) (event, announce string) {
	st := &b.Status
	prev := meta.FindStatusCondition(st.Conditions, kvv1.ConditionCacheInUse)
	wasFalse := prev != nil && prev.Status == metav1.ConditionFalse
	v := operator.CacheUse(operator.CacheUseInput{
		Now: u.now, Window: u.window, Tenant: b.DomainName(), Backend: u.backend, StoreImage: u.storeImage,
		Pods: u.pods, NoLedger: u.noLedger, Observed: u.held && u.observed, Activity: u.activity,
		DefaultWrites: u.defaultWrites, Prev: prev, Engines: u.enginesRead(), BlockSize: b.Spec.Domain.BlockSize,
	})
	if !u.held && !u.noLedger && len(u.pods) > 0 {
		// No tenant of its own on the master (the domain is another Binding's, or no backend):
		// nothing it writes can be told apart.
		v = operator.ConditionVerdict{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonNotObserved,
			Message: "the Binding holds no tenant on a master (see QuotaGranted and DomainExclusive), so writes under its domain are not its own"}
	}
	if v.Keep {
		return "", ""
	}
	operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionCacheInUse, v.Status, v.Reason, v.Message)
	if v.Status == metav1.ConditionFalse && (!wasFalse || prev.Reason != v.Reason) {
		if v.Reason == kvv1.ReasonNoStoreHits {
			return "CacheNotRead", v.Message
		}
		return "CacheNotWritten", v.Message
	}
	return "", ""
}

// setEvicting decides EvictingOwnObjects and returns what to announce: loud when it starts,
// and when evictions turn into refused writes ("" for nothing).
func setEvicting(b *kvv1.KVCachePoolBinding, u use) (announce string) {
	st := &b.Status
	prev := meta.FindStatusCondition(st.Conditions, kvv1.ConditionEvictingOwnObjects)
	evictReason := ""
	if prev != nil && prev.Status == metav1.ConditionTrue {
		evictReason = prev.Reason
	}
	ev, ok := operator.Eviction(operator.EvictionInput{
		Now: u.now, Hold: u.window, Tenant: b.DomainName(), Grant: st.EffectiveQuota,
		NoLedger: u.noLedger || !u.held, Observed: u.held && u.observed, Activity: u.activity, Prev: prev,
	})
	switch {
	case ok:
		operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionEvictingOwnObjects, ev.Status, ev.Reason, ev.Message)
		if ev.Status == metav1.ConditionTrue && ev.Reason != evictReason && (evictReason == "" || ev.Reason == kvv1.ReasonWritesRefused) {
			return ev.Message
		}
	case !ev.Keep:
		meta.RemoveStatusCondition(&st.Conditions, kvv1.ConditionEvictingOwnObjects)
	}
	return ""
}

// setEvicted reports the tenant's eviction counter (rate-limited as usage is): absent when
// the master reports nothing for the Binding, kept when it was not read.
func setEvicted(b *kvv1.KVCachePoolBinding, u use) {
	st := &b.Status
	switch {
	case u.held && u.observed:
		e := operator.RefreshUsage(operator.Usage{Bytes: st.Evicted, At: st.EvictedObservedTime}, quantity(u.figure.EvictedBytes), u.now, u.refresh)
		st.Evicted, st.EvictedObservedTime = e.Bytes, e.At
	case u.noLedger || !u.held:
		st.Evicted, st.EvictedObservedTime = nil, nil
	}
}

// maxDriftNames bounds the Pods status.drift names.
const maxDriftNames = 10

// staleFinding is one injected Pod whose configuration injection no longer writes.
type staleFinding struct{ pod, what string }

// setDrift reports the injected Pods judged stale (sorted by name): InjectionCurrent and
// status.drift.
func setDrift(b *kvv1.KVCachePoolBinding, stale []staleFinding) {
	st := &b.Status
	if len(stale) == 0 {
		st.Drift = nil
		operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionInjectionCurrent, metav1.ConditionTrue, kvv1.ReasonCurrent,
			"every Pod injected through this Binding runs what injection writes now")
		return
	}
	drift := &kvv1.BindingDrift{Pods: int32(len(stale))}
	var parts []string
	for i, f := range stale {
		if i < maxDriftNames {
			drift.Names = append(drift.Names, f.pod)
		}
		if i < 3 {
			parts = append(parts, f.pod+" ("+f.what+")")
		}
	}
	if len(stale) > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", len(stale)-3))
	}
	st.Drift = drift
	operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionInjectionCurrent, metav1.ConditionFalse, kvv1.ReasonPodsDrifted,
		fmt.Sprintf("%d Pod(s) run a configuration injection no longer writes for this Binding: %s. Injection runs only when a Pod is created: roll their workloads (kubectl -n %s rollout restart deployment/<name>, or delete a bare Pod and create it again); status.drift names them and kvcache check lists each",
			len(stale), strings.Join(parts, "; "), b.Namespace))
}

// setPhase summarises a live Binding's conditions.
func setPhase(b *kvv1.KVCachePoolBinding) {
	c := b.Status.Conditions
	if meta.IsStatusConditionTrue(c, kvv1.ConditionQuotaGranted) && meta.IsStatusConditionTrue(c, kvv1.ConditionDomainExclusive) {
		b.Status.Phase = kvv1.PhaseReady
	} else {
		b.Status.Phase = kvv1.PhasePending
	}
}

// figures are a live Binding's series after its use was judged (u): its CacheInUse verdict,
// the tenant's figures when observed, its drifted Pods.
func figures(b *kvv1.KVCachePoolBinding, pool string, u use) operator.BindingFigures {
	fig := bareFigures(b, pool)
	if c := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionCacheInUse); c != nil && c.Status != metav1.ConditionUnknown {
		fig.CacheInUse = ptr.To(c.Status == metav1.ConditionTrue)
	}
	if u.held && u.observed {
		fig.UsedBytes, fig.EffectiveBytes, fig.EvictedBytes = ptr.To(u.figure.ChargedBytes), ptr.To(u.figure.EffectiveBytes), ptr.To(u.figure.EvictedBytes)
	}
	if b.Status.Drift != nil {
		fig.DriftedPods = int(b.Status.Drift.Pods)
	}
	if w := u.engines; w.Pods > 0 {
		fig.PromptTokens, fig.StoreTokens = ptr.To(w.PromptTokens), ptr.To(w.StoreTokens)
		if r, ok := w.HitRatio(); ok {
			fig.HitRatio = ptr.To(r)
		}
	}
	return fig
}

// bareFigures are a Binding's series labels alone: nothing is known of its use.
func bareFigures(b *kvv1.KVCachePoolBinding, pool string) operator.BindingFigures {
	return operator.BindingFigures{Namespace: b.Namespace, Name: b.Name, Pool: pool, Domain: b.DomainName()}
}

// setPoolDeletingStatus reports a live Binding whose pool is being deleted: nothing is granted
// through it any more. A deleted one keeps what it said.
func setPoolDeletingStatus(b *kvv1.KVCachePoolBinding, pool string) {
	if b.DeletionTimestamp.IsZero() {
		setPoolGoneStatus(b, kvv1.ReasonPoolDeleting, fmt.Sprintf("KVCachePool %s is being deleted: its tenants are released from the ledger", pool))
	}
}

// setOrphanStatus reports a Binding whose pool does not exist.
func setOrphanStatus(b *kvv1.KVCachePoolBinding) {
	setPoolGoneStatus(b, kvv1.ReasonPoolNotFound, fmt.Sprintf("KVCachePool %s does not exist: nothing is granted through this Binding", b.Spec.PoolRef.Name))
}

func setPoolGoneStatus(b *kvv1.KVCachePoolBinding, reason, msg string) {
	st := &b.Status
	st.EffectiveQuota, st.Usage, st.UsageObservedTime, st.Evicted, st.EvictedObservedTime = nil, nil, nil, nil, nil
	meta.RemoveStatusCondition(&st.Conditions, kvv1.ConditionEvictingOwnObjects)
	operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionQuotaGranted, metav1.ConditionFalse, reason, msg)
	operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, reason, msg)
	st.Phase = kvv1.PhasePending
}

// setReleasableLedgerUnreachable reports a deleted Binding held because the ledger its tenant
// is released from cannot be read.
func setReleasableLedgerUnreachable(b *kvv1.KVCachePoolBinding, pool string) {
	operator.SetConditionOnce(&b.Status.Conditions, b.Generation, kvv1.ConditionReleasable, metav1.ConditionFalse, kvv1.ReasonLedgerUnreachable,
		fmt.Sprintf("the tenant ledger behind KVCachePool %s cannot be read, so the tenant cannot be released yet (its QuotaLedgerAvailable condition says why); the Binding waits at most %s for it", pool, releaseBound))
}

func quantity(bytes int64) *resource.Quantity { return resource.NewQuantity(bytes, resource.BinarySI) }
