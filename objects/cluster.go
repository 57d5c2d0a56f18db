package objects

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// BindingPoolField selects KVCachePoolBindings by the pool they draw on. The manager's cache
// indexes it (IndexBindingsByPool) and the CRD declares it selectable, so the same List works
// through the cache and against the API server (`kubectl get kvcpb -A --field-selector
// spec.poolRef.name=shared-dram`).
const BindingPoolField = "spec.poolRef.name"

// IndexBindingsByPool registers BindingPoolField with a manager's cache. Without it a pool's
// reconcile would copy every Binding in the cluster to find its own: at 100 pools and 1000
// Bindings, 100,000 copies per resync.
func IndexBindingsByPool(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &kvv1.KVCachePoolBinding{}, BindingPoolField, func(o client.Object) []string {
		return []string{o.(*kvv1.KVCachePoolBinding).Spec.PoolRef.Name}
	})
}

// Cluster reads the objects of a cluster: every Get from Cached, and from Live when Cached has
// not seen the object (yet), so an object created a moment ago resolves and steady state costs
// no API reads; every List from Cached. The manager passes its cache and its API reader; a
// caller without a cache (`kvcache check`) passes one client as Cached and leaves Live nil.
//
// What injection reads from a Binding is immutable (spec.poolRef, spec.domain) except its
// deletionTimestamp, so the cache can be behind only on a deletion. A deleting Binding is
// refused once the cache has the update that set deletionTimestamp. Between that update
// committing and this replica's watch delivering it (milliseconds on a healthy watch; while the
// watch is broken, until the informer re-lists) the cache holds the Binding as it was and a Pod
// naming it is admitted, like one whose live read ran just before the delete call; the same
// window applies after a Binding is deleted outright, or deleted and created again with another
// domain. Once the cache has dropped it, the live read finds it gone (or the new one).
type Cluster struct {
	Cached client.Reader
	Live   client.Reader
}

var _ Reader = Cluster{}

// Get implements client.Reader the same way, for callers that read other kinds through it.
func (c Cluster) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := c.Cached.Get(ctx, key, obj, opts...)
	if apierrors.IsNotFound(err) && c.Live != nil {
		return c.Live.Get(ctx, key, obj, opts...)
	}
	return err
}

// List implements client.Reader: from Cached.
func (c Cluster) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.Cached.List(ctx, list, opts...)
}

var _ client.Reader = Cluster{}

func get[T client.Object](ctx context.Context, c Cluster, key client.ObjectKey, obj T) (T, bool, error) {
	var none T
	err := c.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return none, false, nil
	}
	if err != nil {
		return none, false, err
	}
	return obj, true, nil
}

// Setting implements Reader.
func (c Cluster) Setting(ctx context.Context, name string) (string, bool, error) {
	s, found, err := get(ctx, c, client.ObjectKey{Name: name}, &kvv1.Setting{})
	if !found {
		return "", false, err
	}
	return s.Spec.Value, true, nil
}

// Backend implements Reader.
func (c Cluster) Backend(ctx context.Context, name string) (*kvv1.KVCacheBackend, bool, error) {
	return get(ctx, c, client.ObjectKey{Name: name}, &kvv1.KVCacheBackend{})
}

// Pool implements Reader.
func (c Cluster) Pool(ctx context.Context, name string) (*kvv1.KVCachePool, bool, error) {
	return get(ctx, c, client.ObjectKey{Name: name}, &kvv1.KVCachePool{})
}

// Pools implements Reader.
func (c Cluster) Pools(ctx context.Context) ([]kvv1.KVCachePool, error) {
	l := &kvv1.KVCachePoolList{}
	if err := c.List(ctx, l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Binding implements Reader.
func (c Cluster) Binding(ctx context.Context, namespace, name string) (*kvv1.KVCachePoolBinding, bool, error) {
	return get(ctx, c, client.ObjectKey{Namespace: namespace, Name: name}, &kvv1.KVCachePoolBinding{})
}

// Bindings implements Reader.
func (c Cluster) Bindings(ctx context.Context) ([]kvv1.KVCachePoolBinding, error) {
	l := &kvv1.KVCachePoolBindingList{}
	if err := c.List(ctx, l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// BindingsOf implements Reader, through the BindingPoolField index (or field selector).
func (c Cluster) BindingsOf(ctx context.Context, pool string) ([]kvv1.KVCachePoolBinding, error) {
	l := &kvv1.KVCachePoolBindingList{}
	if err := c.List(ctx, l, client.MatchingFields{BindingPoolField: pool}); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// InstanceType implements Reader.
func (c Cluster) InstanceType(ctx context.Context, name string) (*kvv1.InstanceType, bool, error) {
	return get(ctx, c, client.ObjectKey{Name: name}, &kvv1.InstanceType{})
}
