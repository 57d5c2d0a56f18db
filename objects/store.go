package objects

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"

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

// StoreOptions are what the store render needs to know of the operator that applies it: the
// manager's flags, or `kvcache render`'s flags of the same names.
type StoreOptions struct {
	// SystemNamespace the store runs in ("" means the generator's default).
	SystemNamespace string
	// OperatorImage the store's Pods copy the launcher and the drain from ("" means the chart's).
	OperatorImage string
	// OperatorNamespace is the manager's own namespace ("" means the chart's default).
	OperatorNamespace string
	// MetricsFrom are the peers the store's NetworkPolicy admits to scrape the master.
	MetricsFrom []networkingv1.NetworkPolicyPeer
}

// StoreInput gathers everything the store render of backend b depends on: the image Setting,
// the tenants its pools' Bindings seed the ledger with and the namespaces they grant the store
// to. The backend reconciler (over the cluster) and `kvcache render` (over its files) both call
// it, so what the CLI prints is what the operator applies. on is what ReadOnBackend read for b.
func StoreInput(ctx context.Context, r Reader, b *kvv1.KVCacheBackend, on OnBackend, o StoreOptions) (generator.StoreInput, error) {
	in := generator.StoreInput{
		Backend: b, SystemNamespace: o.SystemNamespace, OperatorImage: o.OperatorImage,
		OperatorNamespace: o.OperatorNamespace, MetricsFrom: o.MetricsFrom,
	}
	setting, err := BackendImageSetting(ctx, r)
	if err != nil {
		return in, err
	}
	in.BackendImageSetting = setting
	in.Tenants = generator.TenantsFor(on.Bindings)
	in.BoundNamespaces = generator.BoundNamespaces(on.Bindings)
	return in, nil
}
