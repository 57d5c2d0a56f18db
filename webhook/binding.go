package webhook

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
)

// BindingValidator validates KVCachePoolBindings with rules.Binding.
type BindingValidator struct {
	Reader objects.Reader
}

// ValidateCreate implements admission.Validator.
func (v *BindingValidator) ValidateCreate(ctx context.Context, obj *kvv1.KVCachePoolBinding) (admission.Warnings, error) {
	verdict, err := rules.Binding(ctx, v.Reader, nil, obj)
	return answer("KVCachePoolBinding", obj.Name, verdict, err)
}

// ValidateUpdate implements admission.Validator.
func (v *BindingValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *kvv1.KVCachePoolBinding) (admission.Warnings, error) {
	verdict, err := rules.Binding(ctx, v.Reader, oldObj, newObj)
	return answer("KVCachePoolBinding", newObj.Name, verdict, err)
}

// ValidateDelete implements admission.Validator: deletes are admitted (finalizers and the
// Deletable conditions hold what is still used).
func (v *BindingValidator) ValidateDelete(context.Context, *kvv1.KVCachePoolBinding) (admission.Warnings, error) {
	return nil, nil
}
