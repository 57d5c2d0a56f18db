package binding

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
// injection no longer writes. This file reads; status.go decides.

// setStatus computes a live Binding's status from what the reconcile read and announces what
// changed loudly (events); its figures go to the metrics.
func (r *Reconciler) setStatus(ctx context.Context, s *state) {
	b := s.b
	g := grant{now: s.now, pool: s.pool.Name, ledger: s.ledger, noLedger: s.noLedger, refresh: operator.UsageRefreshOr(r.UsageRefresh)}
	if s.backend != nil {
		g.backend, g.holder = s.backend.Name, s.holders[b.DomainName()]
	}
	setGrant(b, g)
	mds, err := r.attached(ctx, b)
	if err != nil {
		log.FromContext(ctx).Error(err, "list ModelDeployments")
	} else {
		b.Status.UsedBy = consumers(mds)
	}
	r.Metrics.BindingObserved(r.setUse(ctx, s, mds))
	setPhase(b)
}

// setUse sets CacheInUse, EvictingOwnObjects, InjectionCurrent, evicted and drift, emits an
// event when CacheInUse turns False or the domain starts evicting (or having writes refused)
// at its grant, and returns the Binding's figures for the metrics.
func (r *Reconciler) setUse(ctx context.Context, s *state, mds []kvv1.ModelDeployment) operator.BindingFigures {
	b := s.b
	u, err := r.podsOf(ctx, b, mds)
	if err != nil {
		log.FromContext(ctx).Error(err, "list the Pods of a Binding", "binding", s.key().String())
		return bareFigures(b, s.pool.Name)
	}
	// What the engines themselves counted: read from the Ready Pods that are due.
	r.engines().Read(ctx, u.pods, s.now)
	in := use{
		now: s.now, window: operator.CacheInUseWindowOr(r.CacheInUseWindow), refresh: operator.UsageRefreshOr(r.UsageRefresh),
		pods: u.pods, held: s.backend != nil && s.holds(), noLedger: s.noLedger,
		observed: s.figuresRead && s.hasFigure, figure: s.figure, activity: s.activity,
		defaultWrites: s.defaultWrites && !s.domainHeld(kvv1.DefaultDomainName),
		engines:       r.engines().Window(u.pods, s.now, operator.HitRateWindowOr(r.HitRateWindow)),
	}
	if s.backend != nil {
		in.backend, in.storeImage = s.backend.Name, r.storeImage(ctx, s.backend)
	}
	if event, msg := setCacheInUse(b, in); msg != "" {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, event, "Observe", "%s", msg)
	}
	if msg := setEvicting(b, in); msg != "" {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "EvictingOwnObjects", "Observe", "%s", msg)
	}
	setEvicted(b, in)
	setStoreHits(b, in)
	if stale, ok := r.judgeDrift(ctx, s, u.injected); ok {
		setDrift(b, stale)
	}
	return figures(b, s.pool.Name, in)
}

// bindingUse is who uses a Binding's tenant.
type bindingUse struct {
	pods     []operator.PodUse
	injected []corev1.Pod
}

// podsOf lists the Pods that use a Binding's tenant: the injected Pods whose record names it
// and the Pods of the ModelDeployments attached through it.
func (r *Reconciler) podsOf(ctx context.Context, b *kvv1.KVCachePoolBinding, mds []kvv1.ModelDeployment) (bindingUse, error) {
	var u bindingUse
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

// storeImage is the image a managed backend's master runs ("" for an external one, or when the
// Setting cannot be read).
func (r *Reconciler) storeImage(ctx context.Context, b *kvv1.KVCacheBackend) string {
	img, err := objects.StoreImage(ctx, objects.Cluster{Cached: r.Client}, b)
	if err != nil {
		return ""
	}
	return img
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

// judgeDrift judges each injected Pod against what injection writes now for the Binding
// (injection's own Drift, over the pool, backend and Binding this reconcile read) and returns
// the stale ones, sorted by name. ok is false when there is no verdict: no Injector, a Pod that
// could not be judged, or a refusal that says the store is away now (the ledger unreachable, no
// endpoint yet), which is no verdict on the Pods: the drift status stays as it was.
func (r *Reconciler) judgeDrift(ctx context.Context, s *state, pods []corev1.Pod) (stale []staleFinding, ok bool) {
	if r.Injector == nil {
		return nil, false
	}
	b := s.b
	cluster := objects.Cluster{Cached: r.Client}
	lookup := objects.Overlay{Reader: cluster, Held: objects.Held{
		Pools: []*kvv1.KVCachePool{s.pool}, Bindings: []*kvv1.KVCachePoolBinding{b}, Backends: []*kvv1.KVCacheBackend{s.backend},
	}}
	fp := fingerprint(ctx, cluster, s)
	round := r.drift.round(s.key())
	for i := range pods {
		p := &pods[i]
		if p.Annotations[vocab.AnnotationInjected] == "" {
			continue
		}
		what, transient, err := round.judge(ctx, r.Injector, p, lookup, fp)
		if err != nil {
			log.FromContext(ctx).Error(err, "judge a Pod's drift", "pod", p.Namespace+"/"+p.Name)
			return nil, false
		}
		if transient {
			return nil, false
		}
		if what != "" {
			stale = append(stale, staleFinding{p.Name, what})
		}
	}
	round.done()
	sort.Slice(stale, func(i, j int) bool { return stale[i].pod < stale[j].pod })
	return stale, true
}

// driftMemo remembers each Pod's verdict for the configuration it was judged against: the
// Pods' written keys never change (the UPDATE freeze), so a Pod is judged again only when what
// injection would write does. Each reconcile of a Binding starts a new generation from the
// verdicts it reuses, so the Pods that are gone are forgotten with it.
type driftMemo struct {
	mu        sync.Mutex
	byBinding map[types.NamespacedName]map[types.UID]driftVerdict
}

type driftVerdict struct {
	fingerprint string
	what        string
}

// driftRound is one reconcile's use of the memo.
type driftRound struct {
	memo      *driftMemo
	binding   types.NamespacedName
	old, next map[types.UID]driftVerdict
}

func (d *driftMemo) round(binding types.NamespacedName) *driftRound {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &driftRound{memo: d, binding: binding, old: d.byBinding[binding], next: map[types.UID]driftVerdict{}}
}

// done keeps this round's verdicts for the next reconcile of the Binding.
func (r *driftRound) done() {
	r.memo.mu.Lock()
	defer r.memo.mu.Unlock()
	if r.memo.byBinding == nil {
		r.memo.byBinding = map[types.NamespacedName]map[types.UID]driftVerdict{}
	}
	r.memo.byBinding[r.binding] = r.next
}

// forget drops a Binding's verdicts.
func (d *driftMemo) forget(binding types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byBinding, binding)
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
func fingerprint(ctx context.Context, r objects.Reader, s *state) string {
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
	}{Binding: s.b.Spec, Pool: s.pool.Spec, Endpoint: s.pool.Status.ClientEndpoint, DtypeOwned: owned, BackendGone: s.backend == nil}
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
