package rules

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Cluster are the objects of a cluster, read through Reader (the webhooks pass the manager's
// cache with a live read on a miss; `kvcache check` an uncached client).
type Cluster struct {
	Reader client.Reader
}

var _ Objects = Cluster{}

func get[T client.Object](ctx context.Context, r client.Reader, key client.ObjectKey, obj T) (T, bool, error) {
	var none T
	err := r.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return none, false, nil
	}
	if err != nil {
		return none, false, err
	}
	return obj, true, nil
}

// Setting implements Objects.
func (c Cluster) Setting(ctx context.Context, name string) (string, bool, error) {
	s, found, err := get(ctx, c.Reader, client.ObjectKey{Name: name}, &kvv1.Setting{})
	if !found {
		return "", false, err
	}
	return s.Spec.Value, true, nil
}

// Backend implements Objects.
func (c Cluster) Backend(ctx context.Context, name string) (*kvv1.KVCacheBackend, bool, error) {
	return get(ctx, c.Reader, client.ObjectKey{Name: name}, &kvv1.KVCacheBackend{})
}

// Pool implements Objects.
func (c Cluster) Pool(ctx context.Context, name string) (*kvv1.KVCachePool, bool, error) {
	return get(ctx, c.Reader, client.ObjectKey{Name: name}, &kvv1.KVCachePool{})
}

// Pools implements Objects.
func (c Cluster) Pools(ctx context.Context) ([]kvv1.KVCachePool, error) {
	l := &kvv1.KVCachePoolList{}
	if err := c.Reader.List(ctx, l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Binding implements Objects.
func (c Cluster) Binding(ctx context.Context, namespace, name string) (*kvv1.KVCachePoolBinding, bool, error) {
	return get(ctx, c.Reader, client.ObjectKey{Namespace: namespace, Name: name}, &kvv1.KVCachePoolBinding{})
}

// Bindings implements Objects.
func (c Cluster) Bindings(ctx context.Context) ([]kvv1.KVCachePoolBinding, error) {
	l := &kvv1.KVCachePoolBindingList{}
	if err := c.Reader.List(ctx, l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// InstanceType implements Objects.
func (c Cluster) InstanceType(ctx context.Context, name string) (*kvv1.InstanceType, bool, error) {
	return get(ctx, c.Reader, client.ObjectKey{Name: name}, &kvv1.InstanceType{})
}
