package webhook

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
)

// The validators of this API's kinds, one file each. Each is thin: it hands the object to its
// rule in package rules (which `kvcache render` calls with its files) with the cluster as the
// objects the rule reads, and translates the verdict:
//   - an invalid object is refused with apierrors.NewInvalid, so the API server shows
//     `<Kind>.worker.gpustack.ai "<name>" is invalid: <field>: <message>`;
//   - warnings are returned either way (kubectl prints them);
//   - a read that fails for any reason other than NotFound refuses the request (fail closed)
//     with an InternalError naming what could not be read;
//   - deletes are admitted.
var (
	_ admission.Validator[*kvv1.KVCacheBackend]     = &BackendValidator{}
	_ admission.Validator[*kvv1.KVCachePool]        = &PoolValidator{}
	_ admission.Validator[*kvv1.KVCachePoolBinding] = &BindingValidator{}
	_ admission.Validator[*kvv1.ModelDeployment]    = &ModelDeploymentValidator{}
	_ admission.Validator[*kvv1.Setting]            = &SettingValidator{}
)

// answer translates a rule's verdict into the admission answer for an object of kind.
func answer(kind, name string, v rules.Verdict, err error) (admission.Warnings, error) {
	var re *objects.ReadError
	if errors.As(err, &re) {
		return nil, apierrors.NewInternalError(re)
	}
	if err != nil {
		return nil, err
	}
	return v.Warnings, invalidObject(kind, name, v.Errors)
}

// invalidObject is the error for an object that breaks rules; nil when errs is empty.
func invalidObject(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: kvv1.GroupVersion.Group, Kind: kind}, name, errs)
}
