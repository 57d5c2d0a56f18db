package webhook

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
)

// ModelDeploymentValidator validates ModelDeployments with rules.ModelDeployment.
type ModelDeploymentValidator struct {
	Reader objects.Reader
}

// ValidateCreate implements admission.Validator.
func (v *ModelDeploymentValidator) ValidateCreate(ctx context.Context, obj *kvv1.ModelDeployment) (admission.Warnings, error) {
	verdict, err := rules.ModelDeployment(ctx, v.Reader, nil, obj)
	return answer("ModelDeployment", obj.Name, verdict, err)
}

// ValidateUpdate implements admission.Validator.
func (v *ModelDeploymentValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *kvv1.ModelDeployment) (admission.Warnings, error) {
	verdict, err := rules.ModelDeployment(ctx, v.Reader, oldObj, newObj)
	return answer("ModelDeployment", newObj.Name, verdict, err)
}

// ValidateDelete implements admission.Validator: deletes are admitted (finalizers and the
// Deletable conditions hold what is still used).
func (v *ModelDeploymentValidator) ValidateDelete(context.Context, *kvv1.ModelDeployment) (admission.Warnings, error) {
	return nil, nil
}
