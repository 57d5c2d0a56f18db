// Package modeldeployment reconciles ModelDeployments: it resolves the cache attachment exactly
// as Pod injection does (Binding, pool, backend, transport), renders each role's Deployment and
// Service through the one generator with the same engine fragments, applies them with
// server-side apply, prunes removed roles, and reports whether the cache is attached from what
// it observes, never from configuration alone: its Pods Ready and writes under its tenant
// seen by the master (the tenant activity the Binding controller records).
package modeldeployment

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/enginestats"
	"github.com/kvcache-operator/kvcache/vocab"
)

// Reconciler reconciles ModelDeployments.
type Reconciler struct {
	Client   client.Client
	Renderer *generator.Renderer
	// Pods is a cache of the Pods rendered for ModelDeployments (their label); nil: no Pod is
	// seen, and CacheAttached never goes past the replicas' readiness.
	Pods cache.Cache
	// Activity is the writes seen per tenant, recorded by the Binding controller.
	Activity *operator.TenantActivity
	// CacheInUseWindow: how long Ready Pods may go without a write before CacheAttached is
	// False; operator.DefaultCacheInUseWindow when zero.
	CacheInUseWindow time.Duration
	// Engines reads the engine Pods' own counters, shared with the Binding controller; nil:
	// status.storeHits is not reported.
	Engines *operator.EngineReader
	// HitRateWindow is how far back status.storeHits reaches; operator.DefaultHitRateWindow
	// when zero.
	HitRateWindow time.Duration
	// UsageRefresh is how often status.storeHits is rewritten while it keeps moving;
	// operator.DefaultUsageRefresh when zero.
	UsageRefresh time.Duration
	// APIReader reads a role's Deployment or Service the cache does not hold (only the
	// operator's own are cached): one of that name that is not this deployment's is never
	// applied over. Nil: only the cached ones are looked at.
	APIReader client.Reader
}

// SetupWithManager registers the controller: deployments, their children, the Bindings they
// attach through (whose status carries the tenant's usage) and InstanceTypes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&kvv1.ModelDeployment{}).
		Named("modeldeployment").
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Watches(&kvv1.KVCachePoolBinding{}, handler.EnqueueRequestsFromMapFunc(r.byBinding)).
		Watches(&kvv1.KVCachePool{}, handler.EnqueueRequestsFromMapFunc(r.byPool)).
		Watches(&kvv1.InstanceType{}, handler.EnqueueRequestsFromMapFunc(r.byInstanceType))
	if r.Pods != nil {
		// A Pod turning Ready starts the window CacheAttached is judged over.
		b = b.WatchesRawSource(source.Kind(r.Pods, &corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, p *corev1.Pod) []reconcile.Request {
			if md := p.Labels[vocab.LabelModelDeployment]; md != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: md}}}
			}
			return nil
		})))
	}
	return b.Complete(r)
}

func (r *Reconciler) byBinding(ctx context.Context, o client.Object) []reconcile.Request {
	mds := &kvv1.ModelDeploymentList{}
	if err := r.Client.List(ctx, mds, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, md := range mds.Items {
		if md.Spec.KVCache != nil && md.Spec.KVCache.PoolRef.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&md)})
		}
	}
	return out
}

// byPool maps a pool to the deployments attached through its Bindings: the pool's status
// (endpoint, ledger) decides whether they can attach.
func (r *Reconciler) byPool(ctx context.Context, o client.Object) []reconcile.Request {
	bindings, err := objects.Cluster{Cached: r.Client}.BindingsOf(ctx, o.GetName())
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range bindings {
		out = append(out, r.byBinding(ctx, &bindings[i])...)
	}
	return out
}

func (r *Reconciler) byInstanceType(ctx context.Context, o client.Object) []reconcile.Request {
	mds := &kvv1.ModelDeploymentList{}
	if err := r.Client.List(ctx, mds); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, md := range mds.Items {
		for _, role := range md.Spec.Roles {
			if role.InstanceType == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&md)})
				break
			}
		}
	}
	return out
}

// takenPoll is how often a deployment whose name another object holds looks again.
const takenPoll = 5 * time.Second

// state is what one reconcile learned.
type state struct {
	md         *kvv1.ModelDeployment
	input      generator.ModelDeploymentInput
	attachment *injection.Attachment
	refusal    *injection.Refusal
	renderErr  error
	// taken says which rendered object's name another object holds (""): none is applied.
	taken    string
	rendered []generator.Object
	deploys  []appsv1.Deployment
	// pods use the cache: the deployment's Pods (nil when none are seen).
	pods []operator.PodUse
	// activity is what the master showed of the tenant's writes (known: it was read).
	activity      operator.Activity
	activityKnown bool
	now           time.Time
	window        time.Duration
	storeImage    string
	// recheck is when CacheAttached can change without an event.
	recheck time.Duration
	// engines is what the Ready Pods counted over the hit-rate window (read: it was).
	engines     enginestats.Window
	enginesRead bool
}

// attachable reports whether the cache attachment (if any) resolved.
func (s *state) attachable() bool { return s.refusal == nil }

// renderable reports whether the roles rendered.
func (s *state) renderable() bool { return s.renderErr == nil && s.taken == "" }

// Reconcile renders and applies one deployment's roles and reports what it observes.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	md := &kvv1.ModelDeployment{}
	if err := r.Client.Get(ctx, req.NamespacedName, md); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !md.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the children go with it (owner references)
	}
	before := md.DeepCopy()
	s := &state{md: md, now: time.Now(), window: operator.CacheInUseWindowOr(r.CacheInUseWindow)}
	defer func() {
		// observedGeneration moves only when this generation was rendered and applied: a
		// deployment whose cache cannot attach, or that cannot render, keeps what runs.
		if retErr == nil && s.attachable() && s.renderable() {
			md.Status.ObservedGeneration = md.Generation
		}
		if !equality.Semantic.DeepEqual(before.Status, md.Status) {
			if err := r.Client.Status().Patch(ctx, md, client.MergeFrom(before)); err != nil && retErr == nil {
				retErr = client.IgnoreNotFound(err)
			}
		}
	}()
	md.Default()
	for _, phase := range []func(context.Context, *state) error{r.resolveCache, r.renderAndApply, r.observe} {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	setStatus(s, operator.UsageRefreshOr(r.UsageRefresh))
	if s.taken != "" {
		// No event says when the name's holder goes (it need not be the operator's).
		return ctrl.Result{RequeueAfter: takenPoll}, nil
	}
	if s.recheck > 0 {
		// Waiting for writes: look again when the window ends, and meanwhile as often as the
		// store is read, since a write does not always move the Binding's status.
		return ctrl.Result{RequeueAfter: min(s.recheck, 30*time.Second)}, nil
	}
	if s.enginesRead {
		// The engines' counters move with every request and no event says so.
		return ctrl.Result{RequeueAfter: r.Engines.ScrapeInterval()}, nil
	}
	return ctrl.Result{}, nil
}

// resolveCache reads the InstanceTypes the roles name and follows spec.kvCache to the store,
// through the one resolution `kvcache render` runs too (injection.ModelDeploymentInput), over
// the manager's cache: the controller runs again whenever a Binding changes.
func (r *Reconciler) resolveCache(ctx context.Context, s *state) error {
	in, att, rf := injection.ModelDeploymentInput(ctx, objects.Cluster{Cached: r.Client}, s.md)
	if rf != nil && rf.Reason == injection.ReasonLookupFailed {
		return errors.New(rf.Message)
	}
	s.input, s.attachment, s.refusal = in, att, rf
	return nil
}

// renderAndApply renders the roles and applies them; a deployment whose cache cannot be
// attached keeps what runs (it is not re-rendered without its cache), and one that cannot be
// rendered says why.
func (r *Reconciler) renderAndApply(ctx context.Context, s *state) error {
	if !s.attachable() {
		return nil
	}
	s.rendered, s.renderErr = r.Renderer.RenderModelDeployment(s.input)
	if !s.renderable() {
		return nil // said in status
	}
	// Two deployments can derive one name (a-b with role c, a with role b-c), and a name may be
	// a Deployment or Service of someone else: applying over it would take it over. Nothing is
	// applied until every name is this deployment's or free.
	for _, o := range s.rendered {
		taken, err := r.takenBy(ctx, s.md, o)
		if err != nil {
			return err
		}
		if taken != "" {
			s.taken = taken
			return nil
		}
	}
	applier := operator.Applier{Client: r.Client, OnDrift: func(o generator.Object, path string) {
		log.FromContext(ctx).Info("applying a child again: a field the operator sets was changed", "kind", o.GetObjectKind().GroupVersionKind().Kind, "name", o.GetName(), "field", operator.FieldPath(path))
	}}
	for _, o := range s.rendered {
		if _, err := applier.Apply(ctx, o); err != nil {
			return err
		}
	}
	return r.prune(ctx, s)
}

// takenBy says who holds the name of rendered object o when it is not md: its controlling owner,
// or that it has none ("" when the name is free or md's).
func (r *Reconciler) takenBy(ctx context.Context, md *kvv1.ModelDeployment, o generator.Object) (string, error) {
	kind := o.GetObjectKind().GroupVersionKind().Kind
	live, ok := o.DeepCopyObject().(client.Object)
	if !ok {
		return "", nil
	}
	key := client.ObjectKeyFromObject(o)
	err := r.Client.Get(ctx, key, live)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, key, live)
	}
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", err
	case metav1.IsControlledBy(live, md):
		return "", nil
	}
	by := "no ModelDeployment (it is not the operator's)"
	if c := metav1.GetControllerOf(live); c != nil {
		by = c.Kind + " " + c.Name
	}
	return fmt.Sprintf("%s %s, which role %s renders, already exists and belongs to %s: nothing of this ModelDeployment is applied until the name is free; rename this ModelDeployment or the role (each role's Deployment and Service are named <name>-<role>)",
		kind, key.Name, o.GetLabels()[vocab.LabelComponent], by), nil
}

// prune deletes the Deployments and Services of roles the spec no longer has.
func (r *Reconciler) prune(ctx context.Context, s *state) error {
	keep := map[string]bool{}
	for _, o := range s.rendered {
		keep[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()] = true
	}
	sel := client.MatchingLabels{vocab.LabelName: vocab.ModelDeploymentName, vocab.LabelInstance: s.md.Name}
	for kind, list := range map[string]client.ObjectList{"Deployment": &appsv1.DeploymentList{}, "Service": &corev1.ServiceList{}} {
		if err := r.Client.List(ctx, list, client.InNamespace(s.md.Namespace), sel); err != nil {
			return err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		for _, ro := range items {
			o := ro.(client.Object)
			if keep[kind+"/"+o.GetName()] || !metav1.IsControlledBy(o, s.md) {
				continue
			}
			if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

// observe reads the roles' Deployments and, with a cache attached, the Pods and what the
// master showed of the tenant's writes.
func (r *Reconciler) observe(ctx context.Context, s *state) error {
	if err := r.observePods(ctx, s); err != nil {
		return err
	}
	for _, role := range s.md.Spec.Roles {
		d := &appsv1.Deployment{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.md.Namespace, Name: generator.RoleObjectName(s.md.Name, role.Name)}, d)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		s.deploys = append(s.deploys, *d)
	}
	return nil
}

func describe(a *injection.Attachment) string {
	return fmt.Sprintf("KVCachePoolBinding %s/%s (pool %s, domain %s)", a.Binding.Namespace, a.Binding.Name, a.Pool.Name, a.Domain)
}

// observePods reads the deployment's Pods and the tenant's activity.
func (r *Reconciler) observePods(ctx context.Context, s *state) error {
	a := s.attachment
	if s.md.Spec.KVCache == nil || a == nil || a.Backend == nil || r.Pods == nil {
		return nil
	}
	pods, err := operator.DeploymentPods(ctx, r.Pods, s.md)
	if err != nil {
		return err
	}
	for i := range pods {
		it := s.input.InstanceTypes[roleInstanceType(s.md, pods[i].Labels[vocab.LabelComponent])]
		s.pods = append(s.pods, operator.DeploymentUse(&pods[i], generator.EngineFor(s.md, it), s.md.Spec.Engine.Version))
	}
	if r.Activity != nil {
		s.activity, s.activityKnown = r.Activity.Get(a.Backend.UID, a.Domain)
	}
	if r.Engines != nil && len(s.pods) > 0 {
		r.Engines.Read(ctx, s.pods, s.now)
		s.engines, s.enginesRead = r.Engines.Window(s.pods, s.now, operator.HitRateWindowOr(r.HitRateWindow)), true
	}
	img, err := objects.StoreImage(ctx, objects.Cluster{Cached: r.Client}, a.Backend)
	if err == nil {
		s.storeImage = img
	}
	return nil
}

func roleInstanceType(md *kvv1.ModelDeployment, role string) string {
	for _, ro := range md.Spec.Roles {
		if ro.Name == role {
			return ro.InstanceType
		}
	}
	return ""
}
