package webhook

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
)

// PoolValidator validates KVCachePools with rules.Pool.
type PoolValidator struct {
	Reader objects.Reader
}

// ValidateCreate implements admission.Validator.
func (v *PoolValidator) ValidateCreate(ctx context.Context, obj *kvv1.KVCachePool) (admission.Warnings, error) {
	verdict, err := rules.Pool(ctx, v.Reader, nil, obj)
	return answer("KVCachePool", obj.Name, verdict, err)
}

// ValidateUpdate implements admission.Validator.
func (v *PoolValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *kvv1.KVCachePool) (admission.Warnings, error) {
	verdict, err := rules.Pool(ctx, v.Reader, oldObj, newObj)
	return answer("KVCachePool", newObj.Name, verdict, err)
}

// ValidateDelete implements admission.Validator: deletes are admitted (finalizers and the
// Deletable conditions hold what is still used).
func (v *PoolValidator) ValidateDelete(context.Context, *kvv1.KVCachePool) (admission.Warnings, error) {
	return nil, nil
}
