package injection

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// ClientLookup resolves through the API server: the Binding live through an uncached reader
// (a Binding created a moment ago must admit the Pods naming it), pools, backends and Settings
// from the manager's cache with a live read when the cache has not seen the object yet.
type ClientLookup struct {
	// Cached is the manager's cached client.
	Cached client.Reader
	// Live reads the API server directly (the manager's APIReader).
	Live client.Reader
}

var _ Lookup = ClientLookup{}

// Binding implements Lookup: always live.
func (l ClientLookup) Binding(ctx context.Context, ns, name string) (*kvv1.KVCachePoolBinding, error) {
	b := &kvv1.KVCachePoolBinding{}
	if err := l.Live.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
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
