package objects

import (
	"context"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
)

// OnBackend is what uses a backend: the pools on it (sorted by name) and their Bindings.
type OnBackend struct {
	Pools    []kvv1.KVCachePool
	Bindings []kvv1.KVCachePoolBinding
}

// ReadOnBackend reads the pools on backend and their Bindings.
func ReadOnBackend(ctx context.Context, r Reader, backend string) (OnBackend, error) {
	pools, err := PoolsOn(ctx, r, backend)
	if err != nil {
		return OnBackend{}, err
	}
	bindings, err := BindingsOfPools(ctx, r, pools)
	if err != nil {
		return OnBackend{}, err
	}
	return OnBackend{Pools: pools, Bindings: bindings}, nil
}

// StoreInput gathers everything the store render of backend b depends on: the image Setting
// and the tenants its pools' Bindings seed the ledger with. The backend reconciler (over the
// cluster) and `kvcache render` (over its files) both call it, so what the CLI prints is what
// the operator applies. on is what ReadOnBackend read for b.
func StoreInput(ctx context.Context, r Reader, b *kvv1.KVCacheBackend, on OnBackend, systemNamespace, operatorImage string) (generator.StoreInput, error) {
	in := generator.StoreInput{Backend: b, SystemNamespace: systemNamespace, OperatorImage: operatorImage}
	setting, err := BackendImageSetting(ctx, r)
	if err != nil {
		return in, err
	}
	in.BackendImageSetting = setting
	in.Tenants = generator.TenantsFor(on.Bindings)
	return in, nil
}
