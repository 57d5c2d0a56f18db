package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/vocab"
)

// A store's cache lives in its master and members: a Pod replaced is a cache lost (or, for a
// member, moved). What a new operator version changes in the store's Pod templates (the
// launcher image the leader copies, a template's own content) is not a reason to replace them.
// deferOperatorUpdates keeps, for each store workload whose spec inputs are unchanged
// (vocab.AnnotationSpecHash, stamped by the render) but whose rendered Pod template differs
// from the one it runs, the Pod template it was last applied with: read back from the API
// server as the fields the operator's apply owns (so the defaults the server filled in are not
// taken over), and applied again with the rest of the render. Everything else of the render
// (replicas, strategy, labels, annotations) still applies. A spec change that does change a
// workload's inputs applies the whole render, the operator's changes included: one restart
// for both, announced at admission.
//
// With spec.connection.managed.operatorUpdates: Immediate nothing is deferred.
func (r *Reconciler) deferOperatorUpdates(ctx context.Context, s *state) error {
	b := s.backend
	m := b.Spec.Connection.Managed
	s.pending = nil
	if m == nil || m.OperatorUpdates == kvv1.OperatorUpdatesImmediate {
		return nil
	}
	for _, o := range s.rendered {
		var kind string
		var desired *corev1.PodTemplateSpec
		switch w := o.(type) {
		case *appsv1.Deployment:
			kind, desired = "Deployment", &w.Spec.Template
		case *appsv1.DaemonSet:
			kind, desired = "DaemonSet", &w.Spec.Template
		default:
			continue
		}
		live := s.children[childKey(kind, o.GetName())]
		if live == nil || !sameSpecInputs(live, o) {
			continue
		}
		if live, want := templateOf(live), desired; live == nil || live.Labels[vocab.LabelPodSpecHash] == want.Labels[vocab.LabelPodSpecHash] {
			continue
		}
		applied, err := r.appliedTemplate(ctx, kind, o)
		if err != nil {
			return err
		}
		if applied == nil {
			// Nothing of the template is recorded as the operator's: it cannot be kept.
			log.FromContext(ctx).Info("no applied Pod template to keep; applying the render", "kind", kind, "name", o.GetName())
			continue
		}
		s.pending = append(s.pending, pendingUpdate{workload: o.GetName(), what: describeTemplateChange(applied, desired)})
		*desired = *applied
		if d, ok := o.(*appsv1.Deployment); ok {
			// The rollout logic compares the live template's hash with the render's.
			d.Annotations[vocab.AnnotationTemplateHash] = applied.Labels[vocab.LabelPodSpecHash]
		}
	}
	sort.Slice(s.pending, func(i, j int) bool { return s.pending[i].workload < s.pending[j].workload })
	return nil
}

// pendingUpdate is a store workload whose Pods keep running what an earlier operator rendered.
type pendingUpdate struct {
	workload string
	what     string
}

// sameSpecInputs reports whether a live workload was applied from the same spec inputs as the
// render. A workload an operator before spec hashes applied carries none: its template is taken
// to differ by the operator's doing, not the spec's (the spec then applied is not recorded).
func sameSpecInputs(live client.Object, desired generator.Object) bool {
	h, ok := live.GetAnnotations()[vocab.AnnotationSpecHash]
	return !ok || h == desired.GetAnnotations()[vocab.AnnotationSpecHash]
}

func templateOf(o client.Object) *corev1.PodTemplateSpec {
	switch w := o.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template
	case *appsv1.DaemonSet:
		return &w.Spec.Template
	}
	return nil
}

// appliedTemplate reads a workload from the API server (the cache keeps no managedFields) and
// returns the Pod template as the operator's field manager last applied it; nil when the
// operator owns no template there.
func (r *Reconciler) appliedTemplate(ctx context.Context, kind string, o generator.Object) (*corev1.PodTemplateSpec, error) {
	if r.APIReader == nil {
		return nil, nil
	}
	key := client.ObjectKeyFromObject(o)
	var raw any
	switch kind {
	case "Deployment":
		d := &appsv1.Deployment{}
		if err := r.APIReader.Get(ctx, key, d); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		ac, err := appsv1ac.ExtractDeployment(d, operator.FieldManager)
		if err != nil {
			return nil, err
		}
		if ac.Spec == nil || ac.Spec.Template == nil {
			return nil, nil
		}
		raw = ac.Spec.Template
	case "DaemonSet":
		d := &appsv1.DaemonSet{}
		if err := r.APIReader.Get(ctx, key, d); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		ac, err := appsv1ac.ExtractDaemonSet(d, operator.FieldManager)
		if err != nil {
			return nil, err
		}
		if ac.Spec == nil || ac.Spec.Template == nil {
			return nil, nil
		}
		raw = ac.Spec.Template
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	t := &corev1.PodTemplateSpec{}
	if err := json.Unmarshal(b, t); err != nil {
		return nil, err
	}
	return t, nil
}

// describeTemplateChange says briefly what the render would change in a Pod template: image
// changes by container, and which containers' other fields (or the Pod's) differ.
func describeTemplateChange(running, rendered *corev1.PodTemplateSpec) string {
	var parts []string
	images := func(cs []corev1.Container) map[string]string {
		m := map[string]string{}
		for _, c := range cs {
			m[c.Name] = c.Image
		}
		return m
	}
	runImg := images(append(append([]corev1.Container(nil), running.Spec.InitContainers...), running.Spec.Containers...))
	for _, c := range append(append([]corev1.Container(nil), rendered.Spec.InitContainers...), rendered.Spec.Containers...) {
		old, ok := runImg[c.Name]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("container %s added (%s)", c.Name, c.Image))
		case old != c.Image:
			parts = append(parts, fmt.Sprintf("container %s image %s -> %s", c.Name, old, c.Image))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "the Pod template's fields")
	}
	return strings.Join(parts, ", ")
}

// setUpdatePending reports the workloads whose operator updates wait.
func setUpdatePending(b *kvv1.KVCacheBackend, pending []pendingUpdate) {
	if b.Spec.Connection.Managed == nil {
		removeCondition(b, kvv1.ConditionUpdatePending)
		return
	}
	if len(pending) == 0 {
		set(b, kvv1.ConditionUpdatePending, metav1.ConditionFalse, kvv1.ReasonUpToDate, "the store's Pods run what this operator renders")
		return
	}
	parts := make([]string, len(pending))
	for i, p := range pending {
		parts[i] = p.workload + ": " + p.what
	}
	set(b, kvv1.ConditionUpdatePending, metav1.ConditionTrue, kvv1.ReasonOperatorUpdateDeferred,
		fmt.Sprintf("this operator renders the store's Pods differently from what they run, and the spec did not change, so they keep running as they are (a replaced Pod loses the cache on it): %s. They take it with the next spec change that restarts them; set spec.connection.managed.operatorUpdates: Immediate to take it now (the leader hands over once to an updated standby, or restarts with one replica; members are replaced one at a time)",
			strings.Join(parts, "; ")))
}
