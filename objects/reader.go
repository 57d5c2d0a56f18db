package objects

import (
	"context"
	"fmt"
	"slices"
	"sort"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Reader is what this project reads of its own API. A getter's found is false when the object
// does not exist; err is a read that failed for another reason, which the caller must not take
// for absence (a rule that cannot be checked cannot be passed).
type Reader interface {
	Setting(ctx context.Context, name string) (value string, found bool, err error)
	Backend(ctx context.Context, name string) (*kvv1.KVCacheBackend, bool, error)
	Pool(ctx context.Context, name string) (*kvv1.KVCachePool, bool, error)
	Pools(ctx context.Context) ([]kvv1.KVCachePool, error)
	Binding(ctx context.Context, namespace, name string) (*kvv1.KVCachePoolBinding, bool, error)
	Bindings(ctx context.Context) ([]kvv1.KVCachePoolBinding, error)
	// BindingsOf lists the Bindings that draw on one pool.
	BindingsOf(ctx context.Context, pool string) ([]kvv1.KVCachePoolBinding, error)
	InstanceType(ctx context.Context, name string) (*kvv1.InstanceType, bool, error)
}

// ReadError is a read that failed: admission answers it as an internal error naming what could
// not be read, and injection fails closed.
type ReadError struct {
	What string
	Err  error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("could not read %s: %v; the request is refused until it can be checked, retry when the API server answers", e.What, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// ReadFailed wraps err as a ReadError of what.
func ReadFailed(what string, err error) error { return &ReadError{What: what, Err: err} }

// PoolsOn lists the pools that name backend, sorted by name: its consumers, whose Bindings
// register their domains on its master.
func PoolsOn(ctx context.Context, r Reader, backend string) ([]kvv1.KVCachePool, error) {
	pools, err := r.Pools(ctx)
	if err != nil {
		return nil, ReadFailed("the KVCachePools", err)
	}
	out := slices.DeleteFunc(pools, func(p kvv1.KVCachePool) bool { return !p.IsOn(backend) })
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// BindingsOn lists the Bindings of every pool on backend, pool by pool in name order.
func BindingsOn(ctx context.Context, r Reader, backend string) ([]kvv1.KVCachePoolBinding, error) {
	on, err := ReadOnBackend(ctx, r, backend)
	return on.Bindings, err
}

// BindingsOfPools lists the Bindings of the given pools, in their order.
func BindingsOfPools(ctx context.Context, r Reader, pools []kvv1.KVCachePool) ([]kvv1.KVCachePoolBinding, error) {
	var out []kvv1.KVCachePoolBinding
	for _, p := range pools {
		l, err := r.BindingsOf(ctx, p.Name)
		if err != nil {
			return nil, ReadFailed("the KVCachePoolBindings of KVCachePool "+p.Name, err)
		}
		out = append(out, l...)
	}
	return out, nil
}

// DtypeOwned is the Setting model-deployment-kv-cache-dtype-owned: true unless it says false.
func DtypeOwned(ctx context.Context, r Reader) (bool, error) {
	v, _, err := r.Setting(ctx, kvv1.SettingKVCacheDtypeOwned)
	if err != nil {
		return false, ReadFailed("the Setting "+kvv1.SettingKVCacheDtypeOwned, err)
	}
	return kvv1.DtypeOwned(v), nil
}

// BackendImageSetting is the Setting kv-cache-backend-image ("" when absent).
func BackendImageSetting(ctx context.Context, r Reader) (string, error) {
	v, _, err := r.Setting(ctx, kvv1.SettingKVCacheBackendImage)
	if err != nil {
		return "", ReadFailed("the Setting "+kvv1.SettingKVCacheBackendImage, err)
	}
	return v, nil
}

// StoreImage is the image a managed backend's master runs (spec.image, else the Setting
// kv-cache-backend-image); "" for an external backend, whose image this project cannot see.
func StoreImage(ctx context.Context, r Reader, b *kvv1.KVCacheBackend) (string, error) {
	if b.Spec.Connection.Managed == nil {
		return "", nil
	}
	setting, err := BackendImageSetting(ctx, r)
	if err != nil {
		return "", err
	}
	return b.StoreImage(-1, setting), nil
}
