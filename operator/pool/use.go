package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/vocab"
)

// What a Binding's tenant is used for: which Pods use it, whether the store sees it written,
// whether it evicts its own objects at its grant, and which injected Pods run a configuration
// injection no longer writes.

// maxDriftNames bounds the Pods status.drift names.
const maxDriftNames = 10

// readTenantFigures reads the master's per-tenant figures (/metrics: the ledger has no eviction
// counter) and records the activity of every tenant this pool's Bindings hold.
func (r *Reconciler) readTenantFigures(ctx context.Context, s *state) error {
	if s.ledger == nil || s.admin == nil {
		return nil
	}
	m, err := s.admin.Metrics(ctx)
	if err != nil {
		r.Metrics.ScrapeFailed(s.backend.Name, "metrics", err)
		log.FromContext(ctx).V(1).Info("per-tenant figures unreadable", "error", err.Error())
		return nil
	}
	s.figuresRead = true
	s.activity = map[string]operator.Activity{}
	for _, b := range s.bindings {
		if !b.DeletionTimestamp.IsZero() || !s.holds(b) {
			continue
		}
		d := b.DomainName()
		t, ok := m.Tenants[d]
		if !ok {
			continue // not in the ledger yet
		}
		s.figures[d] = t
		s.activity[d] = r.activity().Observe(s.backend.UID, d, operator.TenantFigures{Charged: t.ChargedBytes, Evicted: t.EvictedBytes, Rejected: t.Rejected}, s.now)
	}
	def := m.Tenants[kvv1.DefaultDomainName]
	s.defaultWrites = def.ChargedBytes > 0 || def.EvictedBytes > 0
	return nil
}

func (r *Reconciler) activity() *operator.TenantActivity {
	if r.Activity == nil {
		r.activityOnce.Do(func() { r.Activity = &operator.TenantActivity{} })
	}
	return r.Activity
}

// bindingUse is what setUse found for one Binding.
type bindingUse struct {
	pods     []operator.PodUse
	injected []corev1.Pod
	// mds are the ModelDeployments attached through the Binding.
	mds []kvv1.ModelDeployment
}

// podsOf lists the Pods that use a Binding's tenant: the injected Pods whose record names it
// and the Pods of the ModelDeployments attached through it.
func (r *Reconciler) podsOf(ctx context.Context, b *kvv1.KVCachePoolBinding, mds []kvv1.ModelDeployment) (bindingUse, error) {
	var u bindingUse
	u.mds = mds
	if r.Pods != nil {
		pods, err := operator.InjectedPods(ctx, r.Pods, b.Namespace, b.Name)
		if err != nil {
			return u, err
		}
		u.injected = pods
		for i := range pods {
			u.pods = append(u.pods, operator.InjectedUse(&pods[i]))
		}
	}
	if r.DeploymentPods == nil {
		return u, nil
	}
	for i := range mds {
		md := &mds[i]
		pods, err := operator.DeploymentPods(ctx, r.DeploymentPods, md)
		if err != nil {
			return u, err
		}
		for j := range pods {
			e := generator.EngineFor(md, r.instanceTypeOf(ctx, md, &pods[j]))
			u.pods = append(u.pods, operator.DeploymentUse(&pods[j], e, md.Spec.Engine.Version))
		}
	}
	return u, nil
}

// instanceTypeOf is the InstanceType of the role a ModelDeployment's Pod runs (nil when none
// resolves): on an Ascend one, vLLM runs as vLLM-Ascend.
func (r *Reconciler) instanceTypeOf(ctx context.Context, md *kvv1.ModelDeployment, p *corev1.Pod) *kvv1.InstanceType {
	role := p.Labels[vocab.LabelComponent]
	for _, ro := range md.Spec.Roles {
		if ro.Name != role || ro.InstanceType == "" {
			continue
		}
		it := &kvv1.InstanceType{}
		if r.Client.Get(ctx, client.ObjectKey{Name: ro.InstanceType}, it) == nil {
			return it
		}
	}
	return nil
}

// setUse sets CacheInUse, EvictingOwnObjects, InjectionCurrent, evicted and drift on a live
// Binding, emits an event when CacheInUse turns False or the domain starts evicting (or having
// writes refused) at its grant, and returns the Binding's figures for the metrics.
func (r *Reconciler) setUse(ctx context.Context, s *state, b *kvv1.KVCachePoolBinding, mds []kvv1.ModelDeployment) operator.BindingFigures {
	st := &b.Status
	d := b.DomainName()
	fig := operator.BindingFigures{Namespace: b.Namespace, Name: b.Name, Pool: s.pool.Name, Domain: d}
	u, err := r.podsOf(ctx, b, mds)
	if err != nil {
		log.FromContext(ctx).Error(err, "list the Pods of a Binding", "binding", key(b))
		return fig
	}
	held := s.backend != nil && s.holds(b)
	act := s.activity[d]
	t, read := s.figures[d]
	observed := held && s.figuresRead && read
	storeImage := ""
	if s.backend != nil {
		storeImage = r.storeImage(ctx, s.backend)
	}
	backendName := ""
	if s.backend != nil {
		backendName = s.backend.Name
	}

	prev := meta.FindStatusCondition(st.Conditions, kvv1.ConditionCacheInUse)
	wasFalse := prev != nil && prev.Status == metav1.ConditionFalse
	v := operator.CacheUse(operator.CacheUseInput{
		Now: s.now, Window: operator.CacheInUseWindowOr(r.CacheInUseWindow), Tenant: d, Backend: backendName, StoreImage: storeImage,
		Pods: u.pods, NoLedger: s.noLedger, Observed: observed, Activity: act,
		DefaultWrites: s.defaultWrites && !s.domainHeld(kvv1.DefaultDomainName), Prev: prev,
	})
	if !held && !s.noLedger && len(u.pods) > 0 {
		// No tenant of its own on the master (the domain is another Binding's, or no backend):
		// nothing it writes can be told apart.
		v = operator.Verdict{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonNotObserved,
			Message: "the Binding holds no tenant on a master (see QuotaGranted and DomainExclusive), so writes under its domain are not its own"}
	}
	if !v.Keep {
		operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionCacheInUse, v.Status, v.Reason, v.Message)
		if v.Status == metav1.ConditionFalse && !wasFalse {
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "CacheNotWritten", "Observe", "%s", v.Message)
		}
	}
	if c := meta.FindStatusCondition(st.Conditions, kvv1.ConditionCacheInUse); c != nil && c.Status != metav1.ConditionUnknown {
		in := c.Status == metav1.ConditionTrue
		fig.CacheInUse = &in
	}

	// (read before set, which updates the condition in place)
	evictReason := ""
	if c := meta.FindStatusCondition(st.Conditions, kvv1.ConditionEvictingOwnObjects); c != nil && c.Status == metav1.ConditionTrue {
		evictReason = c.Reason
	}
	ev, ok := operator.Eviction(operator.EvictionInput{
		Now: s.now, Hold: operator.CacheInUseWindowOr(r.CacheInUseWindow), Tenant: d, Grant: st.EffectiveQuota,
		NoLedger: s.noLedger || !held, Observed: observed, Activity: act,
		Prev: meta.FindStatusCondition(st.Conditions, kvv1.ConditionEvictingOwnObjects),
	})
	switch {
	case ok:
		operator.SetCondition(&st.Conditions, b.Generation, kvv1.ConditionEvictingOwnObjects, ev.Status, ev.Reason, ev.Message)
		// Loud when it starts, and when evictions turn into refused writes.
		if ev.Status == metav1.ConditionTrue && ev.Reason != evictReason && (evictReason == "" || ev.Reason == kvv1.ReasonWritesRefused) {
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "EvictingOwnObjects", "Observe", "%s", ev.Message)
		}
	case !ev.Keep:
		meta.RemoveStatusCondition(&st.Conditions, kvv1.ConditionEvictingOwnObjects)
	}

	switch {
	case observed:
		e := operator.RefreshUsage(operator.Usage{Bytes: st.Evicted, At: st.EvictedObservedTime}, quantity(t.EvictedBytes), s.now, operator.UsageRefreshOr(r.UsageRefresh))
		st.Evicted, st.EvictedObservedTime = e.Bytes, e.At
		fig.UsedBytes, fig.EffectiveBytes, fig.EvictedBytes = ptr.To(t.ChargedBytes), ptr.To(t.EffectiveBytes), ptr.To(t.EvictedBytes)
	case s.noLedger || !held:
		st.Evicted, st.EvictedObservedTime = nil, nil
	}

	r.setDrift(ctx, s, b, u.injected)
	if st.Drift != nil {
		fig.DriftedPods = int(st.Drift.Pods)
	}
	return fig
}

// storeImage is the image a managed backend's master runs ("" for an external one, or when the
// Setting cannot be read).
func (r *Reconciler) storeImage(ctx context.Context, b *kvv1.KVCacheBackend) string {
	img, err := objects.StoreImage(ctx, objects.Cluster{Cached: r.Client}, b)
	if err != nil {
		return ""
	}
	return img
}

// setDrift judges each injected Pod against what injection writes now for the Binding
// (injection's own Drift, over what this reconcile computed), and reports the stale ones.
// A refusal that says the store is away now (the ledger unreachable, no endpoint yet) is no
// verdict on the Pods: the drift status stays as it was.
func (r *Reconciler) setDrift(ctx context.Context, s *state, b *kvv1.KVCachePoolBinding, pods []corev1.Pod) {
	if r.Injector == nil || s.drift == nil {
		return
	}
	st := &b.Status
	// What this reconcile computed (the pool with the status about to be published, the
	// backend, the Binding), so a change it just observed (a new endpoint) is judged now rather
	// than one poll later.
	cluster := objects.Cluster{Cached: r.Client}
	lookup := objects.Overlay{Reader: cluster, Held: objects.Held{
		Pools: []*kvv1.KVCachePool{s.pool}, Bindings: []*kvv1.KVCachePoolBinding{b}, Backends: []*kvv1.KVCacheBackend{s.backend},
	}}
	fp := fingerprint(ctx, cluster, s, b)
	type finding struct{ pod, what string }
	var stale []finding
	for i := range pods {
		p := &pods[i]
		if p.Annotations[vocab.AnnotationInjected] == "" {
			continue
		}
		what, transient, err := s.drift.judge(ctx, r.Injector, p, lookup, fp)
		if err != nil {
			log.FromContext(ctx).Error(err, "judge a Pod's drift", "pod", p.Namespace+"/"+p.Name)
			return
		}
		if transient {
			return
		}
		if what != "" {
			stale = append(stale, finding{p.Name, what})
		}
	}
	sort.Slice(stale, func(i, j int) bool { return stale[i].pod < stale[j].pod })
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

// driftMemo remembers each Pod's verdict for the configuration it was judged against: the
// Pods' written keys never change (the UPDATE freeze), so a Pod is judged again only when what
// injection would write does. Each reconcile of a pool starts a new generation from the
// verdicts it reuses, so the Pods and Bindings that are gone are forgotten with it.
type driftMemo struct {
	mu     sync.Mutex
	byPool map[string]map[types.UID]driftVerdict
}

type driftVerdict struct {
	fingerprint string
	what        string
}

// driftRound is one reconcile's use of the memo.
type driftRound struct {
	memo      *driftMemo
	pool      string
	old, next map[types.UID]driftVerdict
}

func (d *driftMemo) round(pool string) *driftRound {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &driftRound{memo: d, pool: pool, old: d.byPool[pool], next: map[types.UID]driftVerdict{}}
}

// done keeps this round's verdicts for the next reconcile of the pool.
func (r *driftRound) done() {
	r.memo.mu.Lock()
	defer r.memo.mu.Unlock()
	if r.memo.byPool == nil {
		r.memo.byPool = map[string]map[types.UID]driftVerdict{}
	}
	r.memo.byPool[r.pool] = r.next
}

// forget drops a deleted pool's verdicts.
func (d *driftMemo) forget(pool string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byPool, pool)
}

// judge returns what is stale in a Pod ("" when nothing), or transient when injection would
// refuse it for a reason that is the store's state now, not the Pod's.
func (r *driftRound) judge(ctx context.Context, inj *injection.Injector, p *corev1.Pod, lookup objects.Reader, fp string) (what string, transient bool, err error) {
	if v, ok := r.old[p.UID]; ok && v.fingerprint == fp && fp != "" {
		r.next[p.UID] = v
		return v.what, false, nil
	}
	diffs, err := inj.Drift(ctx, p, p.Namespace, lookup)
	var rf *injection.Refusal
	switch {
	case errors.As(err, &rf):
		switch rf.Reason {
		case injection.ReasonLedgerNotAvailable, injection.ReasonNoEndpoint, injection.ReasonLookupFailed:
			return "", true, nil
		}
		what = "injection would refuse it now: " + rf.Message
	case err != nil:
		return "", false, err
	default:
		what = strings.Join(diffs, "; ")
	}
	r.next[p.UID] = driftVerdict{fingerprint: fp, what: what}
	return what, false, nil
}

// fingerprint is everything injection reads through the lookup, so a Pod's verdict is reused
// while it is unchanged.
func fingerprint(ctx context.Context, r objects.Reader, s *state, b *kvv1.KVCachePoolBinding) string {
	owned, err := objects.DtypeOwned(ctx, r)
	if err != nil {
		return "" // judged again every time until the Setting reads
	}
	cond := meta.FindStatusCondition(s.pool.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable)
	fp := struct {
		Binding     kvv1.KVCachePoolBindingSpec
		Pool        kvv1.KVCachePoolSpec
		Endpoint    string
		Ledger      *metav1.Condition
		Backend     *kvv1.KVCacheBackendSpec
		DtypeOwned  bool
		BackendGone bool
	}{Binding: b.Spec, Pool: s.pool.Spec, Endpoint: s.pool.Status.ClientEndpoint, DtypeOwned: owned, BackendGone: s.backend == nil}
	if cond != nil {
		c := *cond
		c.LastTransitionTime, c.ObservedGeneration = metav1.Time{}, 0
		fp.Ledger = &c
	}
	if s.backend != nil {
		fp.Backend = &s.backend.Spec
	}
	out, err := json.Marshal(fp)
	if err != nil {
		return ""
	}
	return string(out)
}
