package injection

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// ClientLookup resolves through the API server: every object from the manager's cache, with a
// live read when the cache has not seen it (yet), so a Binding created a moment ago admits the
// Pods that name it and steady state costs no API reads.
//
// What injection reads from a Binding is immutable (spec.poolRef, spec.domain) except its
// deletionTimestamp, so the cache can be behind only on a deletion. A deleting Binding is
// refused once the cache has the update that set deletionTimestamp. Between that update
// committing and this replica's watch delivering it (milliseconds on a healthy watch; while the
// watch is broken, until the informer re-lists) the cache holds the Binding as it was and a Pod
// naming it is admitted, like one whose live read ran just before the delete call; the same
// window applies after a Binding is deleted outright, or deleted and created again with another
// domain. Once the cache has dropped it, the live read finds it gone (or the new one).
type ClientLookup struct {
	// Cached is the manager's cached client.
	Cached client.Reader
	// Live reads the API server directly (the manager's APIReader).
	Live client.Reader
}

var _ Lookup = ClientLookup{}

// Binding implements Lookup: from the cache, live on a miss.
func (l ClientLookup) Binding(ctx context.Context, ns, name string) (*kvv1.KVCachePoolBinding, error) {
	b := &kvv1.KVCachePoolBinding{}
	if err := l.getCachedThenLive(ctx, client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
		return nil, err
	}
	return b, nil
}

// CachedThenLive is a reader that serves Gets from the cache and reads the API server only when
// the cache has not seen the object (yet): an object created a moment ago resolves, and steady
// state costs no API reads. Lists come from the cache.
type CachedThenLive struct {
	Cached client.Reader
	Live   client.Reader
}

var _ client.Reader = CachedThenLive{}

// Get implements client.Reader.
func (r CachedThenLive) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := r.Cached.Get(ctx, key, obj, opts...)
	if apierrors.IsNotFound(err) {
		return r.Live.Get(ctx, key, obj, opts...)
	}
	return err
}

// List implements client.Reader.
func (r CachedThenLive) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.Cached.List(ctx, list, opts...)
}

func (l ClientLookup) getCachedThenLive(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	return CachedThenLive(l).Get(ctx, key, obj)
}

// Pool implements Lookup.
func (l ClientLookup) Pool(ctx context.Context, name string) (*kvv1.KVCachePool, error) {
	p := &kvv1.KVCachePool{}
	if err := l.getCachedThenLive(ctx, client.ObjectKey{Name: name}, p); err != nil {
		return nil, err
	}
	return p, nil
}

// Backend implements Lookup.
func (l ClientLookup) Backend(ctx context.Context, name string) (*kvv1.KVCacheBackend, error) {
	b := &kvv1.KVCacheBackend{}
	if err := l.getCachedThenLive(ctx, client.ObjectKey{Name: name}, b); err != nil {
		return nil, err
	}
	return b, nil
}

// DtypeOwned implements Lookup: the Setting's value, true when absent.
func (l ClientLookup) DtypeOwned(ctx context.Context) (bool, error) {
	s := &kvv1.Setting{}
	err := l.Cached.Get(ctx, client.ObjectKey{Name: kvv1.SettingKVCacheDtypeOwned}, s)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	return kvv1.DtypeOwned(s.Spec.Value), nil
}
