package webhook

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
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
	var re *rules.ReadError
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

// clusterObjects are the objects the rules read, from the API server through r (the manager's
// cache with a live read on a miss).
type clusterObjects struct {
	r client.Reader
}

var _ rules.Objects = clusterObjects{}

func get[T client.Object](ctx context.Context, r client.Reader, key client.ObjectKey, obj T) (T, bool, error) {
	err := r.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		var none T
		return none, false, nil
	}
	if err != nil {
		var none T
		return none, false, err
	}
	return obj, true, nil
}

func (c clusterObjects) Setting(ctx context.Context, name string) (string, bool, error) {
	s, found, err := get(ctx, c.r, client.ObjectKey{Name: name}, &kvv1.Setting{})
	if !found {
		return "", false, err
	}
	return s.Spec.Value, true, nil
}

func (c clusterObjects) Backend(ctx context.Context, name string) (*kvv1.KVCacheBackend, bool, error) {
	return get(ctx, c.r, client.ObjectKey{Name: name}, &kvv1.KVCacheBackend{})
}

func (c clusterObjects) Pool(ctx context.Context, name string) (*kvv1.KVCachePool, bool, error) {
	return get(ctx, c.r, client.ObjectKey{Name: name}, &kvv1.KVCachePool{})
}

func (c clusterObjects) Pools(ctx context.Context) ([]kvv1.KVCachePool, error) {
	l := &kvv1.KVCachePoolList{}
	if err := c.r.List(ctx, l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (c clusterObjects) Binding(ctx context.Context, namespace, name string) (*kvv1.KVCachePoolBinding, bool, error) {
	return get(ctx, c.r, client.ObjectKey{Namespace: namespace, Name: name}, &kvv1.KVCachePoolBinding{})
}

func (c clusterObjects) Bindings(ctx context.Context) ([]kvv1.KVCachePoolBinding, error) {
	l := &kvv1.KVCachePoolBindingList{}
	if err := c.r.List(ctx, l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (c clusterObjects) InstanceType(ctx context.Context, name string) (*kvv1.InstanceType, bool, error) {
	return get(ctx, c.r, client.ObjectKey{Name: name}, &kvv1.InstanceType{})
}
