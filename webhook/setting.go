package webhook

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/rules"
)

// SettingValidator validates Settings with rules.Setting, which reads nothing else.
type SettingValidator struct{}

// ValidateCreate implements admission.Validator.
func (v *SettingValidator) ValidateCreate(_ context.Context, obj *kvv1.Setting) (admission.Warnings, error) {
	return answer("Setting", obj.Name, rules.Setting(nil, obj), nil)
}

// ValidateUpdate implements admission.Validator.
func (v *SettingValidator) ValidateUpdate(_ context.Context, oldObj, newObj *kvv1.Setting) (admission.Warnings, error) {
	return answer("Setting", newObj.Name, rules.Setting(oldObj, newObj), nil)
}

// ValidateDelete implements admission.Validator.
func (v *SettingValidator) ValidateDelete(context.Context, *kvv1.Setting) (admission.Warnings, error) {
	return nil, nil
}
