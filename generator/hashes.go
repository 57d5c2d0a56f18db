package generator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kvcache-operator/kvcache/vocab"
)

// Every hash a rendered object carries is stamped here, inside the render, so `kvcache render`
// prints exactly what the operator applies:
//   - vocab.LabelPodSpecHash on a member DaemonSet's Pod template (the operator replaces member
//     Pods whose hash is stale; node placement is left out, so a widened nodeSelector restarts
//     nobody);
//   - vocab.AnnotationTemplateHash on the leader Deployment (the same hash of its Pod template:
//     a changed template rolls out before the replica count moves);
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

// stampHashes writes the hashes into objs (the store's or a ModelDeployment's), the applied
// hash last, since it covers the others.
func stampHashes(objs []Object) error {
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
