package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvcache-operator/kvcache/generator"
)

// FieldManager is the one server-side-apply field manager of everything the operator writes.
const FieldManager = "kvcache-operator"

// AnnotationAppliedHash on a child records a hash of what the operator last applied, so a
// reconcile whose render is unchanged applies nothing: steady state makes no API writes.
const AnnotationAppliedHash = "kvcache.gpustack.ai/applied-hash"

// Applier applies rendered children with server-side apply under FieldManager.
type Applier struct {
	Client client.Client
}

// Hash is a stable digest of a rendered object (its JSON, without the applied-hash annotation).
func Hash(o generator.Object) (string, error) {
	c := o.DeepCopyObject().(generator.Object)
	ann := c.GetAnnotations()
	delete(ann, AnnotationAppliedHash)
	c.SetAnnotations(ann)
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// Apply server-side-applies desired unless the live object (read from the cache) already
// carries the same applied hash. It reports whether it wrote.
func (a Applier) Apply(ctx context.Context, desired generator.Object) (bool, error) {
	h, err := Hash(desired)
	if err != nil {
		return false, err
	}
	gvk := desired.GetObjectKind().GroupVersionKind()
	// Read the typed object, so the cache shares the informer the controller watches with.
	ro, err := a.Client.Scheme().New(gvk)
	if err != nil {
		return false, err
	}
	live := ro.(client.Object)
	err = a.Client.Get(ctx, client.ObjectKeyFromObject(desired), live)
	switch {
	case err == nil && live.GetAnnotations()[AnnotationAppliedHash] == h:
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("read %s %s: %w", gvk.Kind, desired.GetName(), err)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	if err != nil {
		return false, err
	}
	obj := &unstructured.Unstructured{Object: u}
	delete(obj.Object, "status")
	unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationAppliedHash] = h
	obj.SetAnnotations(ann)
	obj.SetGroupVersionKind(gvk)
	if err := a.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, desired.GetNamespace(), desired.GetName(), err)
	}
	return true, nil
}
