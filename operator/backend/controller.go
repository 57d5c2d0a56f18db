// Package backend reconciles KVCacheBackends: it renders the managed store through the one
// generator, applies the children with server-side apply (and applies again what someone else
// changed), prunes what the render no longer produces once nothing still references it, rolls
// the leader out and hands it over, and reports the store's state as the store itself reports
// it (never derived from the spec), a failover or restart of its master and the objects lost
// included. It writes every field of a backend's status but two: NetworkPolicyEnforced is
// operator/policyprobe's, a question about the cluster rather than the store, and
// status.drains is operator/members', which replaces and drains member Pods on the drains'
// schedule from what this reconciler applies and publishes.
package backend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/storeview"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
)

// DefaultPollInterval is how often a backend's store is read when nothing else happens.
const DefaultPollInterval = 15 * time.Second

// Reconciler reconciles KVCacheBackends.
type Reconciler struct {
	Client   client.Client
	Renderer *generator.Renderer
	// SystemNamespace is where managed stores run.
	SystemNamespace string
	// OperatorImage is the operator's own image, which electing leader Pods copy the launcher
	// from ("" renders the default).
	OperatorImage string
	// OperatorNamespace is the manager's own namespace, which the store's NetworkPolicy admits
	// the manager from ("" renders the default, the chart's).
	OperatorNamespace string
	// MetricsFrom are the peers the store's NetworkPolicy admits to scrape the master.
	MetricsFrom []networkingv1.NetworkPolicyPeer
	// APIReader reads the API server directly: a workload's managed fields (the cache keeps
	// none) when an operator update is deferred, and the leader's ReplicaSets at a handover.
	// Nil: neither is done (every render applies as is).
	APIReader client.Reader
	// Admin returns the admin client of a backend's store (tests point it elsewhere).
	Admin func(b *kvv1.KVCacheBackend) store.Admin
	// View, when set, is handed each read of a master's /metrics, which answers the pool and
	// Binding controllers' reads of the tenants' figures for its freshness.
	View *storeview.View
	// Recorder emits the events an operator must notice.
	Recorder events.EventRecorder
	// Metrics counts store scrape failures.
	Metrics *operator.Metrics
	// PollInterval between store reads; DefaultPollInterval when zero.
	PollInterval time.Duration
	// UsageRefresh is how often a capacity.used that keeps changing is rewritten;
	// operator.DefaultUsageRefresh when zero.
	UsageRefresh time.Duration

	// masters remembers the master process each backend's last read came from, and seen what
	// that read showed (objects lost are told from two reads).
	masters masters
	seen    snapshots
}

// childKinds are the kinds the store render produces, for pruning.
var childKinds = []struct {
	kind string
	list func() client.ObjectList
}{
	{"Deployment", func() client.ObjectList { return &appsv1.DeploymentList{} }},
	{"DaemonSet", func() client.ObjectList { return &appsv1.DaemonSetList{} }},
	{"Service", func() client.ObjectList { return &corev1.ServiceList{} }},
	{"ConfigMap", func() client.ObjectList { return &corev1.ConfigMapList{} }},
	{"ServiceAccount", func() client.ObjectList { return &corev1.ServiceAccountList{} }},
	{"Role", func() client.ObjectList { return &rbacv1.RoleList{} }},
	{"RoleBinding", func() client.ObjectList { return &rbacv1.RoleBindingList{} }},
	{"NetworkPolicy", func() client.ObjectList { return &networkingv1.NetworkPolicyList{} }},
}

// SetupWithManager registers the controller: backends, their children, the pools and Bindings
// that seed their ledgers and use them, the store's Pods, the election Lease and the Setting that
// supplies the default image.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.PollInterval == 0 {
		r.PollInterval = DefaultPollInterval
	}
	owned := builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})
	return ctrl.NewControllerManagedBy(mgr).
		// Status is this controller's own writing: only spec, finalizers and deletion count.
		For(&kvv1.KVCacheBackend{}, builder.WithPredicates(operator.IgnoreStatusUpdates())).
		Named("kvcachebackend").
		// A reconcile can wait seconds on an unreachable store: several workers keep one slow
		// store from holding up the rest.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Owns(&appsv1.Deployment{}, owned).
		Owns(&appsv1.DaemonSet{}, owned).
		Owns(&corev1.Service{}, owned).
		Owns(&corev1.ConfigMap{}, owned).
		Owns(&corev1.ServiceAccount{}, owned).
		Owns(&rbacv1.Role{}, owned).
		Owns(&rbacv1.RoleBinding{}, owned).
		Owns(&networkingv1.NetworkPolicy{}, owned).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(byInstanceLabel)).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.byLease)).
		Watches(&kvv1.KVCachePool{}, handler.EnqueueRequestsFromMapFunc(byPoolBackend)).
		// Only a Binding's spec and lifetime change the render (the ledger seed, the namespaces
		// the NetworkPolicy admits).
		Watches(&kvv1.KVCachePoolBinding{}, handler.EnqueueRequestsFromMapFunc(r.byBindingPool), builder.WithPredicates(operator.IgnoreStatusUpdates())).
		Watches(&kvv1.Setting{}, handler.EnqueueRequestsFromMapFunc(operator.AllBackends(r.Client))).
		Complete(r)
}

func byInstanceLabel(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[vocab.LabelName] != vocab.StoreName || l[vocab.LabelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: l[vocab.LabelInstance]}}}
}

func (r *Reconciler) byLease(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.SystemNamespace {
		return nil
	}
	name, ok := generator.BackendOfLeader(o.GetName())
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

func byPoolBackend(_ context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*kvv1.KVCachePool)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	for _, b := range p.Spec.Backends {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: b}})
	}
	return out
}

func (r *Reconciler) byBindingPool(ctx context.Context, o client.Object) []reconcile.Request {
	b, ok := o.(*kvv1.KVCachePoolBinding)
	if !ok {
		return nil
	}
	p := &kvv1.KVCachePool{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: b.Spec.PoolRef.Name}, p); err != nil {
		return nil
	}
	return byPoolBackend(ctx, p)
}

// Reconcile brings one backend's store to its spec and reports what the store says.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	b := &kvv1.KVCacheBackend{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.BackendGone(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := b.DeepCopy()
	s := &state{backend: b, now: time.Now()}
	// One status patch, always attempted, with whatever the phases found; observedGeneration
	// moves only when the reconcile put this generation into effect.
	defer func() {
		done := retErr == nil && s.renderErr == nil && b.DeletionTimestamp.IsZero()
		if err := r.patchStatus(ctx, before, b, done); err != nil && retErr == nil {
			retErr = err
		}
	}()

	// The finalizer first: the patch reads the object back into b, status included, so
	// anything set on b before it would be lost.
	if b.DeletionTimestamp.IsZero() {
		if wrote, err := operator.AddFinalizer(ctx, r.Client, b, kvv1.FinalizerBackend); err != nil {
			return ctrl.Result{}, err
		} else if wrote {
			before = b.DeepCopy()
		}
	}
	if err := r.read(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	setUsedBy(b, s.on.Pools)
	if !b.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	for _, phase := range []func(context.Context, *state) error{
		r.renderAndApply,
		r.observeWorkloads,
		r.completeHandover,
		r.observeStore,
	} {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	setPhase(b)
	s.figures.Conditions = map[string]string{}
	for _, c := range b.Status.Conditions {
		s.figures.Conditions[c.Type] = string(c.Status)
	}
	r.Metrics.Observed(b.Name, s.figures)
	// Periodic polls yield to events: a store that changes is read before one that is polled.
	return ctrl.Result{RequeueAfter: nextPoll(b, s.now, r.PollInterval), Priority: ptr.To(handler.LowPriority)}, nil
}

// After a leader change the members re-register with the new master within seconds, and
// nothing the operator watches says when: the store is read every settlePoll until it serves
// with every member mounted, for at most settleWindow after the change.
const (
	settlePoll   = 2 * time.Second
	settleWindow = 2 * time.Minute
)

// nextPoll is when the store is read again: sooner while it settles after a cold cache or a warm
// failover, and while members are drained.
func nextPoll(b *kvv1.KVCacheBackend, now time.Time, every time.Duration) time.Duration {
	if len(b.Status.Drains) > 0 && every > settlePoll {
		return settlePoll
	}
	// The change is a cold cache or, for a warm store, the failover it kept the cache through.
	var changed time.Time
	if l := b.Status.Leader; l != nil {
		if l.ColdCacheSince != nil {
			changed = l.ColdCacheSince.Time
		}
		if l.LastFailover != nil && l.LastFailover.Time.After(changed) {
			changed = l.LastFailover.Time.Time
		}
	}
	if changed.IsZero() || now.Sub(changed) > settleWindow || every <= settlePoll {
		return every
	}
	serving := meta.IsStatusConditionTrue(b.Status.Conditions, kvv1.ConditionLeaderAvailable)
	mounted := meta.IsStatusConditionTrue(b.Status.Conditions, kvv1.ConditionMembersMounted)
	if serving && mounted && b.Status.Capacity != nil {
		return every
	}
	return settlePoll
}

// state is what one reconcile read and learned, handed from phase to phase: each object is
// read once, by read, and every later phase works from it.
type state struct {
	backend *kvv1.KVCacheBackend
	now     time.Time
	// on are the pools on the backend and their Bindings (its consumers, and its ledger seed).
	on objects.OnBackend
	// children are the live objects the operator owns for the store, by kind/name.
	children map[string]client.Object
	// pods are the store's Pods (leader and members); memberPods the members among them,
	// sorted by name.
	pods       []corev1.Pod
	memberPods []corev1.Pod
	// lease is the election Lease (nil: absent, or not electing).
	lease *coordinationv1.Lease
	// reading is what this reconcile read from the store's admin API.
	reading storeReading

	rendered  []generator.Object
	renderErr error
	// leader is the leader Deployment as it runs (nil before it exists).
	leader *appsv1.Deployment
	// replicasHeld is the leader replica count waiting for a template rollout (0: none).
	replicasHeld int32
	// pending are the workloads whose Pods keep what an earlier operator rendered.
	pending []pendingUpdate
	// leaseChanged: this reconcile saw the election Lease move to another holder.
	leaseChanged bool
	// figures are what this reconcile read from the store, for the metrics.
	figures operator.BackendFigures
}

func childKey(kind, name string) string { return kind + "/" + name }

// read reads what the reconcile works from: the pools and Bindings on the backend and, for a
// managed store, the children the operator owns, the store's Pods and the election Lease.
func (r *Reconciler) read(ctx context.Context, s *state) error {
	b := s.backend
	on, err := objects.ReadOnBackend(ctx, objects.Cluster{Cached: r.Client}, b.Name)
	if err != nil {
		return err
	}
	s.on = on
	if b.Spec.Connection.Managed == nil {
		return nil
	}
	s.children = map[string]client.Object{}
	sel := client.MatchingLabels{vocab.LabelName: vocab.StoreName, vocab.LabelInstance: b.Name, vocab.LabelManagedBy: vocab.ManagedBy}
	for _, ck := range childKinds {
		l := ck.list()
		if err := r.Client.List(ctx, l, client.InNamespace(r.SystemNamespace), sel); err != nil {
			return err
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return err
		}
		for _, ro := range items {
			o := ro.(client.Object)
			s.children[childKey(ck.kind, o.GetName())] = o
		}
	}
	if d, ok := s.children[childKey("Deployment", generator.LeaderName(b.Name))].(*appsv1.Deployment); ok {
		s.leader = d
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(r.SystemNamespace), client.MatchingLabels{vocab.LabelName: vocab.StoreName, vocab.LabelInstance: b.Name}); err != nil {
		return err
	}
	s.pods = pods.Items
	for _, p := range s.pods {
		if c := p.Labels[vocab.LabelComponent]; c != vocab.ComponentLeader && c != "" {
			s.memberPods = append(s.memberPods, p)
		}
	}
	slices.SortFunc(s.memberPods, func(a, b corev1.Pod) int { return compareStrings(a.Name, b.Name) })
	lease := &coordinationv1.Lease{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.SystemNamespace, Name: generator.LeaderName(b.Name)}, lease); {
	case err == nil:
		s.lease = lease
	case !apierrors.IsNotFound(err):
		return err
	}
	return nil
}

// reconcileDelete holds the backend while a pool uses it; then the children go with it
// (owner references) and the finalizer is released.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *state) (ctrl.Result, error) {
	b := s.backend
	b.Status.Phase = kvv1.PhaseDeleting
	if len(b.Status.UsedBy) > 0 {
		b.Status.PhaseMessage = fmt.Sprintf("waiting for %s to be deleted", refNames(b.Status.UsedBy))
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if b.Spec.Connection.Managed != nil {
		if waiting, err := r.stopStoreAndReleaseLease(ctx, b); err != nil || waiting != "" {
			b.Status.PhaseMessage = waiting
			return ctrl.Result{RequeueAfter: time.Second}, err
		}
	}
	b.Status.PhaseMessage = "no pool uses the backend; releasing it"
	if _, err := operator.RemoveFinalizer(ctx, r.Client, b, kvv1.FinalizerBackend); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	r.masters.forget(b.UID)
	r.seen.forget(b.UID)
	r.Metrics.BackendGone(b.Name)
	return ctrl.Result{}, nil
}

// memberStopGrace is the grace period of a member stopped with its whole store: enough for the
// member process to exit on SIGTERM, too short for a drain that has nowhere to go.
const memberStopGrace = 2

// memberStopping says whether the Pod is already stopping within memberStopGrace.
func memberStopping(p *corev1.Pod) bool {
	return p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds <= memberStopGrace
}

// stopStoreAndReleaseLease deletes the store's workloads, then removes the election Lease <backend>-leader, which the leader Pods' launchers
// create and the operator does not own (so no owner reference takes it away). A launcher still
// running would create it again, so the store's workloads go first (the members with the
// leader, so that they stop side by side) and the Lease only once no leader Pod is left; until
// then it says what it waits for.
func (r *Reconciler) stopStoreAndReleaseLease(ctx context.Context, b *kvv1.KVCacheBackend) (waiting string, err error) {
	name := generator.LeaderName(b.Name)
	workloads := []client.Object{&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: r.SystemNamespace, Name: name}}}
	members := &appsv1.DaemonSetList{}
	if err := r.Client.List(ctx, members, client.InNamespace(r.SystemNamespace), client.MatchingLabels{vocab.LabelInstance: b.Name}); err != nil {
		return "", err
	}
	for i := range members.Items {
		if metav1.IsControlledBy(&members.Items[i], b) {
			workloads = append(workloads, &members.Items[i])
		}
	}
	for _, o := range workloads {
		if err := r.Client.Delete(ctx, o, client.PropagationPolicy("Background")); err != nil && !apierrors.IsNotFound(err) {
			return "", err
		}
	}
	// The whole store goes: a member's preStop drain would only move its objects to members
	// that are stopping too, for up to its drainTimeout. They stop at once instead.
	storePods := &corev1.PodList{}
	if err := r.Client.List(ctx, storePods, client.InNamespace(r.SystemNamespace), client.MatchingLabels{
		vocab.LabelName: vocab.StoreName, vocab.LabelInstance: b.Name,
	}); err != nil {
		return "", err
	}
	for i := range storePods.Items {
		p := &storePods.Items[i]
		if !strings.HasPrefix(p.Labels[vocab.LabelComponent], vocab.MemberComponentPrefix) || memberStopping(p) {
			continue
		}
		if err := r.Client.Delete(ctx, p, client.GracePeriodSeconds(memberStopGrace)); err != nil && !apierrors.IsNotFound(err) {
			return "", err
		}
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(r.SystemNamespace), client.MatchingLabels{
		vocab.LabelName: vocab.StoreName, vocab.LabelInstance: b.Name, vocab.LabelComponent: vocab.ComponentLeader,
	}); err != nil {
		return "", err
	}
	if n := len(pods.Items); n > 0 {
		return fmt.Sprintf("waiting for %d leader Pod(s) to stop before the election Lease %s is removed", n, name), nil
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.SystemNamespace, Name: name}}
	if err := r.Client.Delete(ctx, lease); err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	return "", nil
}

// renderAndApply renders the store through the generator and applies every child; children
// the render no longer produces (a removed group, HA turned off) are deleted. A render that
// fails (no image resolves, say) leaves the running store alone and reports Degraded.
func (r *Reconciler) renderAndApply(ctx context.Context, s *state) error {
	b := s.backend
	if b.Spec.Connection.Managed == nil {
		return nil
	}
	in, err := objects.StoreInput(ctx, objects.Cluster{Cached: r.Client}, b, s.on, objects.StoreOptions{
		SystemNamespace: r.SystemNamespace, OperatorImage: r.OperatorImage, OperatorNamespace: r.OperatorNamespace, MetricsFrom: r.MetricsFrom,
	})
	if err == nil {
		s.rendered, err = r.Renderer.RenderStore(in)
	}
	if err != nil {
		s.renderErr = err
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "RenderFailed", "Render", "%v", err)
		return nil
	}
	if err := r.deferOperatorUpdates(ctx, s); err != nil {
		return err
	}
	applier := operator.Applier{Client: r.Client, OnDrift: func(o generator.Object, path string) {
		// The child is the event's related object: events of one reason about one backend are
		// folded into one series (and its first note) unless their related objects differ.
		r.Recorder.Eventf(b, o, corev1.EventTypeNormal, "DriftReverted", "Apply",
			"%s %s: %s was changed outside the operator; applied the rendered value again", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), operator.FieldPath(path))
	}}
	for _, o := range s.rendered {
		if d, ok := o.(*appsv1.Deployment); ok {
			holdReplicasForTemplate(s, d)
		}
		live := s.children[childKey(o.GetObjectKind().GroupVersionKind().Kind, o.GetName())]
		if _, err := applier.ApplyOver(ctx, o, live); err != nil {
			return err
		}
	}
	return r.prune(ctx, s)
}

// holdReplicasForTemplate keeps a leader Deployment at its live replica count while a new pod
// template rolls out or the live one is not rolled out yet: the template first, at the count
// it has, then the count. Raising 1 -> N with an unchanged template (the electing template
// exists at one replica already) only scales, and the first leader Pod stays. The template's
// hash is the render's (vocab.AnnotationTemplateHash).
func holdReplicasForTemplate(s *state, d *appsv1.Deployment) {
	live := s.leader
	if live == nil || live.Name != d.Name || live.Spec.Replicas == nil || d.Spec.Replicas == nil {
		return
	}
	// A leader scaled to 0 by hand comes back at one replica at once: holding it at 0 would
	// keep the store down.
	hold := max(*live.Spec.Replicas, 1)
	if *d.Spec.Replicas <= hold {
		return
	}
	if live.Annotations[vocab.AnnotationTemplateHash] != d.Annotations[vocab.AnnotationTemplateHash] || !rolledOut(live) {
		s.replicasHeld = *d.Spec.Replicas
		*d.Spec.Replicas = hold
	}
}

// rolledOut reports whether a Deployment's current template runs on every replica and one is
// available (only one leader replica is ever ready).
func rolledOut(d *appsv1.Deployment) bool {
	return d.Spec.Replicas != nil && d.Status.ObservedGeneration >= d.Generation &&
		d.Status.UpdatedReplicas >= *d.Spec.Replicas && d.Status.AvailableReplicas >= 1
}

// prune deletes this backend's children that the render no longer produces, except what a
// live child still references: a ServiceAccount a workload or Pod runs as, a ConfigMap one
// mounts, a Role a kept RoleBinding grants. Deleting those would leave the workload unable to
// create Pods (the API server refuses a Pod whose account does not exist); they go in a later
// reconcile, once the applied render (or the restarted Pods) no longer name them, which the
// watches on the workloads and Pods trigger.
func (r *Reconciler) prune(ctx context.Context, s *state) error {
	b := s.backend
	keep := map[string]bool{}
	for _, o := range s.rendered {
		keep[childKey(o.GetObjectKind().GroupVersionKind().Kind, o.GetName())] = true
	}
	type child struct {
		kind string
		obj  client.Object
	}
	var stale []child
	var live []client.Object
	for k, o := range s.children {
		kind, _, _ := strings.Cut(k, "/")
		if keep[k] || !metav1.IsControlledBy(o, b) {
			live = append(live, o)
			continue
		}
		stale = append(stale, child{kind, o})
	}
	slices.SortFunc(stale, func(a, b child) int { return compareStrings(a.kind+"/"+a.obj.GetName(), b.kind+"/"+b.obj.GetName()) })
	for i := range s.pods {
		live = append(live, &s.pods[i])
	}
	refs := references(live)
	for _, c := range stale {
		kind, o := c.kind, c.obj
		if by := refs[kind+"/"+o.GetName()]; by != "" {
			log.FromContext(ctx).V(1).Info("prune waits: still referenced", "kind", kind, "name", o.GetName(), "by", by)
			continue
		}
		if err := r.Client.Delete(ctx, o, client.PropagationPolicy("Background")); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Pruned", "Delete", "deleted %s %s, which the spec no longer produces", kind, o.GetName())
	}
	return nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// observeWorkloads reads the leader Deployment and the election Lease.
func (r *Reconciler) observeWorkloads(_ context.Context, s *state) error {
	b := s.backend
	m := b.Spec.Connection.Managed
	if m == nil {
		return nil
	}
	setRolloutComplete(b, s.leader, s.replicasHeld)
	setUpdatePending(b, s.pending)
	if s.renderErr != nil {
		set(b, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonRenderFailed, renderFailedPrefix+s.renderErr.Error())
	}
	if b.Status.Leader == nil {
		b.Status.Leader = &kvv1.LeaderStatus{}
	}
	b.Status.Leader.Failover = m.Leader.Failover()
	if !m.Leader.LeaseElection() {
		removeCondition(b, kvv1.ConditionElectionObserved)
		l := b.Status.Leader
		l.Holder, l.HolderSince, l.LeaseTransitions = "", nil, nil
		return nil
	}
	r.observeLease(s, s.lease)
	setElectionObserved(b, s.lease)
	return nil
}

// patchStatus writes the status when it changed, and only then: steady state writes nothing.
// observedGeneration is set only when done: the reconcile put this generation into effect.
// NetworkPolicyEnforced is the NetworkPolicy probe's (operator/policyprobe): this reconciler never
// sets it, and when a patch of its own conditions carries a copy the cache had not caught up
// with, the probe, which watches the backend's status, applies its own value again.
func (r *Reconciler) patchStatus(ctx context.Context, before, b *kvv1.KVCacheBackend, done bool) error {
	if done {
		b.Status.ObservedGeneration = b.Generation
	}
	if equality.Semantic.DeepEqual(before.Status, b.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, b, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}
