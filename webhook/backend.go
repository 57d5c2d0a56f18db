package webhook

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
)

// BackendValidator validates KVCacheBackends with rules.Backend: the spec's refusals, and on an
// update the restarts of the store's master or members it warns of.
type BackendValidator struct {
	Reader objects.Reader
	// Renderer renders the store before and after an update; nil: no restart warnings.
	Renderer *generator.Renderer
}

// ValidateCreate implements admission.Validator.
func (v *BackendValidator) ValidateCreate(ctx context.Context, obj *kvv1.KVCacheBackend) (admission.Warnings, error) {
	verdict, err := rules.Backend(ctx, v.Reader, v.Renderer, nil, obj)
	return answer("KVCacheBackend", obj.Name, verdict, err)
}

// ValidateUpdate implements admission.Validator.
func (v *BackendValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *kvv1.KVCacheBackend) (admission.Warnings, error) {
	verdict, err := rules.Backend(ctx, v.Reader, v.Renderer, oldObj, newObj)
	return answer("KVCacheBackend", newObj.Name, verdict, err)
}

// ValidateDelete implements admission.Validator: deletes are admitted (finalizers and the
// Deletable conditions hold what is still used).
func (v *BackendValidator) ValidateDelete(context.Context, *kvv1.KVCacheBackend) (admission.Warnings, error) {
	return nil, nil
}
