// Package policyprobe owns one condition of a managed KVCacheBackend, NetworkPolicyEnforced, and
// nothing else: whether the cluster's network plugin enforces the store's NetworkPolicy, measured
// by a connection the policy does not admit. It is its own controller, not a phase of the backend
// reconciler, because it answers a question about the cluster rather than the store, on its own
// schedule: it reads the backend's spec, the store's NetworkPolicy and its leader Pods, dials,
// and applies its one condition with server-side apply under its own field manager
// (FieldManager). The backend reconciler never sets the condition; its status patch can still
// carry a copy its cache had not caught up with (a merge patch replaces the whole list), so this
// controller also watches the backend's status and applies its value again when it differs.
package policyprobe

import (
	"context"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/vocab"
)

// FieldManager owns NetworkPolicyEnforced in a backend's status.
const FieldManager = "kvcache-operator-policyprobe"

// Reconciler measures and reports NetworkPolicyEnforced.
type Reconciler struct {
	Client client.Client
	// SystemNamespace is where managed stores run.
	SystemNamespace string
	// RPCPort is the masters' RPC port, the one the probe dials.
	RPCPort int32
	// Dial opens the probe's connection (nil: a plain TCP dial).
	Dial Dialer
	// Every is how often a backend is measured again; DefaultEvery when zero.
	Every time.Duration

	last probes
}

// SetupWithManager registers the controller: backends (their spec, and their status, where a
// stale copy of the condition is undone), the store NetworkPolicies the backend reconciler
// applies, and leader Pods (the serving master moving is measured anew).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Every == 0 {
		r.Every = DefaultEvery
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kvv1.KVCacheBackend{}).
		Named("networkpolicyprobe").
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.byLeaderPod)).
		Complete(r)
}

func (r *Reconciler) byLeaderPod(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if o.GetNamespace() != r.SystemNamespace || l[vocab.LabelName] != vocab.StoreName || l[vocab.LabelComponent] != vocab.ComponentLeader || l[vocab.LabelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: l[vocab.LabelInstance]}}}
}

// Reconcile measures one backend when a measurement is due and applies the condition when it
// changed; steady state writes nothing.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &kvv1.KVCacheBackend{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			r.last.forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.Spec.Connection.Managed == nil || !b.DeletionTimestamp.IsZero() {
		r.last.forget(b.Name)
		return ctrl.Result{}, nil
	}
	why := generator.WhyNoNetworkPolicy(b)
	var last *probe
	var res ctrl.Result
	if why != "" {
		r.last.forget(b.Name)
	} else {
		p, err := r.measure(ctx, b)
		if err != nil || p == nil {
			return ctrl.Result{}, err
		}
		last = p
		res.RequeueAfter = max(time.Second, r.Every-time.Since(p.at))
	}
	conds := append([]metav1.Condition(nil), b.Status.Conditions...)
	if !setEnforced(&conds, b.Generation, why, last) {
		return res, nil
	}
	want := meta.FindStatusCondition(conds, kvv1.ConditionNetworkPolicyEnforced)
	if have := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionNetworkPolicyEnforced); have != nil && equality.Semantic.DeepEqual(*have, *want) {
		return res, nil
	}
	return res, r.apply(ctx, b.Name, *want)
}

// measure returns the backend's last measurement, dialling again when one is due; nil when
// nothing can be measured yet (the policy not applied, no master serving), which the watches
// on NetworkPolicies and leader Pods end.
func (r *Reconciler) measure(ctx context.Context, b *kvv1.KVCacheBackend) (*probe, error) {
	np := &networkingv1.NetworkPolicy{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.SystemNamespace, Name: generator.NetworkPolicyName(b.Name)}, np); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(r.SystemNamespace), client.MatchingLabels{
		vocab.LabelName: vocab.StoreName, vocab.LabelInstance: b.Name, vocab.LabelComponent: vocab.ComponentLeader,
	}); err != nil {
		return nil, err
	}
	addr := servingMasterAddress(pods.Items, r.RPCPort)
	if addr == "" {
		return nil, nil
	}
	now := time.Now()
	if p, ok := r.last.get(b.Name); ok && !p.due(addr, now, r.Every) {
		return &p, nil
	}
	dial := r.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	conn, err := dial(pctx, "tcp", addr)
	cancel()
	if conn != nil {
		_ = conn.Close()
	}
	v, detail := judgeProbe(err)
	p := probe{at: now, address: addr, verdict: v, detail: detail}
	r.last.put(b.Name, p)
	return &p, nil
}

// apply writes the one condition this controller owns with server-side apply: the backend
// reconciler's conditions and fields are not in the request, so they are neither written nor
// taken over.
func (r *Reconciler) apply(ctx context.Context, backend string, c metav1.Condition) error {
	cond, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kvv1.GroupVersion.String(),
		"kind":       "KVCacheBackend",
		"metadata":   map[string]any{"name": backend},
		"status":     map[string]any{"conditions": []any{cond}},
	}}
	err = r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership)
	return client.IgnoreNotFound(err)
}
