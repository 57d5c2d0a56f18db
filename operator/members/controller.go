// Package members owns the replacement of a managed store's member Pods and one field of a
// KVCacheBackend's status, status.drains: a member whose pod spec is stale is replaced one at a
// time per group, each after the master moved its objects to the other members; the members of
// a cordoned node are drained and left running (a drained segment takes no puts); a drained
// member whose node is schedulable again is restarted to take writes.
//
// It is its own controller, not a phase of the backend reconciler, because it acts on the
// store's data (moving objects, deleting Pods that hold them) on the drains' schedule, where the
// backend reconciler renders, applies and reports. It reads what the backend reconciler applied
// and published (the member DaemonSets and leader Deployment as they run, status.members,
// status.leader.lastFailover), and asks the master itself for the segments only when it has a
// member to act on, so a steady store is never read for it. status.drains is written with a
// merge patch under its own field manager (FieldManager), guarded by the backend's
// resourceVersion; a conflict is resolved by replaying this reconcile's changes on a fresh read,
// so a drain the master started is never left out of status.
package members

import (
	"context"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
)

// FieldManager owns status.drains of a backend.
const FieldManager = "kvcache-operator-members"

// drainPoll is how often a backend with a drain in progress is looked at again.
const drainPoll = 2 * time.Second

// Reconciler replaces and drains the members of managed stores.
type Reconciler struct {
	Client client.Client
	// APIReader reads a backend from the API server when a status patch met a newer version
	// than the cache held (nil: Client).
	APIReader client.Reader
	// SystemNamespace is where managed stores run.
	SystemNamespace string
	// Admin returns the admin client of a backend's store (nil for none).
	Admin func(b *kvv1.KVCacheBackend) store.Admin
	// Recorder emits the drains' events, on the backend.
	Recorder events.EventRecorder
	// Metrics counts failed drain calls.
	Metrics *operator.Metrics
}

// SetupWithManager registers the controller: backends (their spec, and their status, where the
// backend reconciler publishes the segments and failovers this acts on), member Pods, member
// DaemonSets, and Nodes whose schedulability changed.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&kvv1.KVCacheBackend{}, builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})).
		Named("storemembers").
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.byMember)).
		Watches(&appsv1.DaemonSet{}, handler.EnqueueRequestsFromMapFunc(r.byMember)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(operator.AllBackends(r.Client)), builder.WithPredicates(cordonChanged())).
		Complete(r)
}

func (r *Reconciler) byMember(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if o.GetNamespace() != r.SystemNamespace || l[vocab.LabelName] != vocab.StoreName || l[vocab.LabelInstance] == "" ||
		!strings.HasPrefix(l[vocab.LabelComponent], vocab.MemberComponentPrefix) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: l[vocab.LabelInstance]}}}
}

// cordonChanged passes a Node whose schedulability changed (kubectl cordon, uncordon, drain), and
// one that is unschedulable when the cache first sees it (the operator started meanwhile).
func cordonChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			n, ok := e.Object.(*corev1.Node)
			return ok && n.Spec.Unschedulable
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			return ok1 && ok2 && o.Spec.Unschedulable != n.Spec.Unschedulable
		},
	}
}

// Reconcile finishes, starts or waits on the drains and replacements of one backend's members.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &kvv1.KVCacheBackend{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// A backend being deleted stops its whole store at once (the backend reconciler): nothing
	// is drained onto members that are stopping too.
	if b.Spec.Connection.Managed == nil || !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	w, err := r.read(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := slices.Clone(b.Status.Drains)
	next, err := r.act(ctx, w)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.patchDrains(ctx, b, before); err != nil {
		return ctrl.Result{}, err
	}
	if len(b.Status.Drains) > 0 {
		next = minPositive(next, drainPoll)
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || b < a {
		return b
	}
	return a
}

// read reads the backend's member Pods, member DaemonSets, leader Deployment and the Nodes its
// members run on, from the cache.
func (r *Reconciler) read(ctx context.Context, b *kvv1.KVCacheBackend) (world, error) {
	w := world{backend: b, now: time.Now(), nodes: map[string]*corev1.Node{}}
	inStore := client.MatchingLabels{vocab.LabelName: vocab.StoreName, vocab.LabelInstance: b.Name}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(r.SystemNamespace), inStore); err != nil {
		return w, err
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Labels[vocab.LabelComponent], vocab.MemberComponentPrefix) {
			w.pods = append(w.pods, p)
		}
	}
	slices.SortFunc(w.pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	sets := &appsv1.DaemonSetList{}
	if err := r.Client.List(ctx, sets, client.InNamespace(r.SystemNamespace), inStore); err != nil {
		return w, err
	}
	for i := range sets.Items {
		if metav1.IsControlledBy(&sets.Items[i], b) {
			w.groups = append(w.groups, &sets.Items[i])
		}
	}
	slices.SortFunc(w.groups, func(a, b *appsv1.DaemonSet) int { return strings.Compare(a.Name, b.Name) })
	leader := &appsv1.Deployment{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.SystemNamespace, Name: generator.LeaderName(b.Name)}, leader); {
	case err == nil:
		w.leader = leader
	case !apierrors.IsNotFound(err):
		return w, err
	}
	for _, p := range w.pods {
		name := p.Spec.NodeName
		if name == "" || w.nodes[name] != nil {
			continue
		}
		n := &corev1.Node{}
		switch err := r.Client.Get(ctx, client.ObjectKey{Name: name}, n); {
		case err == nil:
			w.nodes[name] = n
		case !apierrors.IsNotFound(err):
			return w, err
		}
	}
	return w, nil
}

// storeView is what the member work reads from the master: its segments, when it serves.
type storeView struct {
	admin    store.Admin
	up       bool
	segments []store.Segment
}

// readStore asks the master whether it serves, and for its segments. A store that cannot be
// asked (no admin endpoint, a master that does not serve, or one the backend reconciler judged
// to be the previous leader's) is not up: its members hold nothing a drain could move.
func (r *Reconciler) readStore(ctx context.Context, b *kvv1.KVCacheBackend) storeView {
	var v storeView
	if r.Admin != nil {
		v.admin = r.Admin(b)
	}
	if v.admin == nil {
		return v
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionLeaderAvailable); c != nil && c.Reason == kvv1.ReasonPreviousLeaderAnswers {
		return v
	}
	h, err := v.admin.Health(ctx)
	if err != nil || !h.ServiceReady {
		return v
	}
	v.segments, err = v.admin.Segments(ctx)
	if err != nil {
		r.Metrics.ScrapeFailed(b.Name, "segments", err)
		return v
	}
	v.up = true
	return v
}

// patchDrains writes status.drains when this reconcile changed it, and only then. The patch is
// guarded by the resourceVersion read; on a conflict the backend is read again from the API
// server and this reconcile's changes (drains added, updated or ended, by Pod) are replayed on
// it: the master already runs a drain this reconcile started, and its record must not be lost.
func (r *Reconciler) patchDrains(ctx context.Context, b *kvv1.KVCacheBackend, before []kvv1.MemberDrain) error {
	after := b.Status.Drains
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	// base is the backend as last read: the cache's copy first, the API server's after a conflict.
	base := b.DeepCopy()
	base.Status.Drains = before
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := base.DeepCopy()
		cur.Status.Drains = replayDrains(base.Status.Drains, before, after)
		err := r.Client.Status().Patch(ctx, cur, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager))
		if apierrors.IsConflict(err) {
			fresh := &kvv1.KVCacheBackend{}
			if gerr := reader.Get(ctx, client.ObjectKeyFromObject(b), fresh); gerr != nil {
				return gerr
			}
			base = fresh
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// replayDrains applies to current the change from before to after, by Pod: records after holds
// that before did not (or held otherwise) are put, records before held that after does not are
// removed, and current's other records are kept. The result is sorted by Pod.
func replayDrains(current, before, after []kvv1.MemberDrain) []kvv1.MemberDrain {
	out := map[string]kvv1.MemberDrain{}
	for _, d := range current {
		out[d.Pod] = d
	}
	for _, d := range before {
		if !slices.ContainsFunc(after, func(a kvv1.MemberDrain) bool { return a.Pod == d.Pod }) {
			delete(out, d.Pod)
		}
	}
	for _, d := range after {
		if i := slices.IndexFunc(before, func(o kvv1.MemberDrain) bool { return o.Pod == d.Pod }); i < 0 || !equality.Semantic.DeepEqual(before[i], d) {
			out[d.Pod] = d
		}
	}
	if len(out) == 0 {
		return nil
	}
	list := make([]kvv1.MemberDrain, 0, len(out))
	for _, d := range out {
		list = append(list, d)
	}
	slices.SortFunc(list, func(a, b kvv1.MemberDrain) int { return strings.Compare(a.Pod, b.Pod) })
	return list
}
