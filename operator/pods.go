package operator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/operator/enginestats"
	"github.com/kvcache-operator/kvcache/vocab"
)

// InjectedBindingField indexes opted-in Pods by the Binding their injection record names, as
// "<namespace>/<name>". The manager's cache holds opted-in Pods only (and the stores' own), so
// a Binding's Pods are found without reading any other Pod.
const InjectedBindingField = "kvcache.gpustack.ai/injected-binding"

// IndexPodsByInjectedBinding registers InjectedBindingField with a cache.
func IndexPodsByInjectedBinding(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, InjectedBindingField, func(o client.Object) []string {
		if b := injectedBinding(o.(*corev1.Pod)); b != "" {
			return []string{o.GetNamespace() + "/" + b}
		}
		return nil
	})
}

// injectedBinding is the Binding an opted-in Pod's injection record names ("" for any other).
func injectedBinding(p *corev1.Pod) string {
	if p.Labels[vocab.LabelInject] != "true" {
		return ""
	}
	rec, _ := injection.RecordOf(p)
	return rec.Binding
}

// InjectedPods lists the running Pods injected through Binding namespace/name.
func InjectedPods(ctx context.Context, r client.Reader, namespace, name string) ([]corev1.Pod, error) {
	l := &corev1.PodList{}
	if err := r.List(ctx, l, client.InNamespace(namespace), client.MatchingFields{InjectedBindingField: namespace + "/" + name}); err != nil {
		return nil, err
	}
	return running(l.Items), nil
}

// DeploymentPods lists the running Pods rendered for a ModelDeployment.
func DeploymentPods(ctx context.Context, r client.Reader, md *kvv1.ModelDeployment) ([]corev1.Pod, error) {
	l := &corev1.PodList{}
	if err := r.List(ctx, l, client.InNamespace(md.Namespace), client.MatchingLabels{vocab.LabelModelDeployment: md.Name}); err != nil {
		return nil, err
	}
	return running(l.Items), nil
}

// running drops Pods that are going or gone: being deleted, or finished.
func running(pods []corev1.Pod) []corev1.Pod {
	out := pods[:0]
	for _, p := range pods {
		if p.DeletionTimestamp.IsZero() && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// InjectedUse describes an injected Pod: its engine from the injection record, the engine's
// release from its container's image tag when the image is the engine's published one and the
// support table holds that release.
func InjectedUse(p *corev1.Pod) PodUse {
	u := podUse(p)
	if rec, ok := injection.RecordOf(p); ok {
		u.Engine, _ = engines.ByID(rec.Engine)
	}
	c := engineContainer(p)
	if c != nil && u.Engine.ID != "" {
		if v := injection.ContainerRelease(u.Engine, c); v.Release != nil && v.Status != engines.ReleaseNewer {
			u.EngineVersion = v.Version
		}
	}
	u.target(p, c)
	return u
}

// DeploymentUse describes a Pod rendered for a ModelDeployment, whose engine and release the
// ModelDeployment declares; its engine is the role's one container.
func DeploymentUse(p *corev1.Pod, e engines.Engine, version string) PodUse {
	u := podUse(p)
	u.Engine, u.EngineVersion = e, version
	var c *corev1.Container
	if len(p.Spec.Containers) > 0 {
		c = &p.Spec.Containers[0]
	}
	u.target(p, c)
	return u
}

// target fills in where the engine container c of p publishes its counters, and since when.
func (u *PodUse) target(p *corev1.Pod, c *corev1.Container) {
	if c == nil || u.Engine.ID == "" {
		u.MetricsErr = fmt.Sprintf("pod %s/%s: the engine container is not known", p.Namespace, p.Name)
		return
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == c.Name && cs.State.Running != nil {
			u.EngineStarted = cs.State.Running.StartedAt.Time
		}
	}
	url, err := enginestats.Target(p, u.Engine, c.Name)
	if err != nil {
		u.MetricsErr = err.Error()
		return
	}
	u.MetricsURL = url
}

func podUse(p *corev1.Pod) PodUse {
	u := PodUse{Namespace: p.Namespace, Name: p.Name, Created: p.CreationTimestamp.Time, UID: p.UID}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			u.Ready, u.ReadySince = true, c.LastTransitionTime.Time
		}
	}
	if u.Ready && u.ReadySince.IsZero() {
		u.ReadySince = p.CreationTimestamp.Time
	}
	return u
}

// engineContainer is the container injection wrote into: the one the container annotation
// names, or the only one.
func engineContainer(p *corev1.Pod) *corev1.Container {
	name := p.Annotations[vocab.AnnotationContainer]
	for i := range p.Spec.Containers {
		if name == "" && len(p.Spec.Containers) == 1 || p.Spec.Containers[i].Name == name {
			return &p.Spec.Containers[i]
		}
	}
	return nil
}
