package generator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/vocab"
)

// Every hash a rendered object carries is stamped here, inside the render, so `kvcache render`
// prints exactly what the operator applies:
//   - vocab.LabelPodSpecHash on a member DaemonSet's Pod template (the operator replaces member
//     Pods whose hash is stale; node placement is left out, so a widened nodeSelector restarts
//     nobody);
//   - vocab.AnnotationTemplateHash on the leader Deployment and the same hash as the
//     vocab.LabelPodSpecHash of its Pod template (a changed template rolls out before the
//     replica count moves; a Pod tells by its label which template it runs);
//   - vocab.AnnotationSpecHash on the leader Deployment and each member DaemonSet: a hash of
//     what of the user's objects reaches that workload (the backend's fields it reads, the
//     image Setting), so the operator can tell a template that changed because the spec did
//     from one that changed because the operator did (spec.connection.managed.operatorUpdates);
//   - vocab.AnnotationAppliedHash on every object (the whole render: the operator applies
//     again when it changed, a field dropped from it included, and sends nothing when it did
//     not).

// PodSpecHash hashes a Pod template without its node placement (nodeSelector, affinity, and the
// hash label itself), so that only changes that alter what a Pod runs mark it stale.
func PodSpecHash(t *corev1.PodTemplateSpec) (string, error) {
	c := t.DeepCopy()
	delete(c.Labels, vocab.LabelPodSpecHash)
	c.Spec.NodeSelector = nil
	c.Spec.Affinity = nil
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}

// AppliedHash is a stable digest of a rendered object: its JSON without the applied-hash
// annotation.
func AppliedHash(o Object) (string, error) {
	c := o.DeepCopyObject().(Object)
	ann := c.GetAnnotations()
	delete(ann, vocab.AnnotationAppliedHash)
	c.SetAnnotations(ann)
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// hashOf is a short digest of v's JSON.
func hashOf(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}

// storeSpecHashes are the spec hashes of a store's workloads, by object name: for each, the
// inputs of the user's objects its Pod template is built from, and nothing the operator's
// version decides (the launcher image, ports, the templates themselves). The leader's replica
// count is left out: it changes no Pod template. A field added to the API later must leave every
// hash stamped before it unchanged while it is unset: an omitempty field that defaults to
// nothing, as leader.etcd.
func storeSpecHashes(in StoreInput) (map[string]string, error) {
	b := in.Backend
	m := b.Spec.Connection.Managed
	ns := in.SystemNamespace
	if ns == "" {
		ns = DefaultSystemNamespace
	}
	leader := m.Leader.DeepCopy()
	leader.Replicas = nil
	common := struct {
		Name, Namespace, Image, Setting string
		PullPolicy                      corev1.PullPolicy
		PullSecrets                     []corev1.LocalObjectReference
	}{b.Name, ns, b.Spec.Image, in.BackendImageSetting, b.Spec.ImagePullPolicy, b.Spec.ImagePullSecrets}
	out := map[string]string{}
	h, err := hashOf(struct {
		Common any
		Leader *kvv1.Leader
	}{common, leader})
	if err != nil {
		return nil, err
	}
	out[LeaderName(b.Name)] = h
	for i := range m.Members {
		// Fields added after the first hashes were stamped are left out at their zero value,
		// so that an upgrade that adds one leaves every existing store's hash as it was.
		h, err := hashOf(struct {
			Common    any
			Transport kvv1.Transport
			Group     kvv1.MemberGroup
			Electing  bool // LeaseElection, under the name the first hashes were stamped with
			Warm      bool `json:",omitempty"`
		}{common, b.Spec.Transport, m.Members[i], m.Leader.LeaseElection(), m.Leader.Warm()})
		if err != nil {
			return nil, err
		}
		out[MemberName(b.Name, i)] = h
	}
	return out, nil
}

// stampHashes writes the hashes into objs (the store's or a ModelDeployment's; specHashes by
// workload name, nil for a ModelDeployment), the applied hash last, since it covers the others.
func stampHashes(objs []Object, specHashes map[string]string) error {
	for _, o := range objs {
		switch w := o.(type) {
		case *appsv1.DaemonSet:
			h, err := PodSpecHash(&w.Spec.Template)
			if err != nil {
				return err
			}
			setLabel(&w.Spec.Template.Labels, vocab.LabelPodSpecHash, h)
		case *appsv1.Deployment:
			if w.Labels[vocab.LabelName] != vocab.StoreName {
				break
			}
			h, err := PodSpecHash(&w.Spec.Template)
			if err != nil {
				return err
			}
			setLabel(&w.Annotations, vocab.AnnotationTemplateHash, h)
			setLabel(&w.Spec.Template.Labels, vocab.LabelPodSpecHash, h)
		}
		if h, ok := specHashes[o.GetName()]; ok && isWorkload(o) {
			ann := o.GetAnnotations()
			setLabel(&ann, vocab.AnnotationSpecHash, h)
			o.SetAnnotations(ann)
		}
		h, err := AppliedHash(o)
		if err != nil {
			return err
		}
		ann := o.GetAnnotations()
		setLabel(&ann, vocab.AnnotationAppliedHash, h)
		o.SetAnnotations(ann)
	}
	return nil
}

func setLabel(m *map[string]string, k, v string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
}

func isWorkload(o Object) bool {
	switch o.(type) {
	case *appsv1.Deployment, *appsv1.DaemonSet:
		return true
	}
	return false
}
