package objects

import (
	"context"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
)

// StoreInput gathers everything the store render of backend b depends on: the image Setting
// and the tenants its pools' Bindings seed the ledger with. The backend reconciler (over the
// cluster) and `kvcache render` (over its files) both call it, so what the CLI prints is what
// the operator applies.
func StoreInput(ctx context.Context, r Reader, b *kvv1.KVCacheBackend, systemNamespace, operatorImage string) (generator.StoreInput, error) {
	in := generator.StoreInput{Backend: b, SystemNamespace: systemNamespace, OperatorImage: operatorImage}
	setting, err := BackendImageSetting(ctx, r)
	if err != nil {
		return in, err
	}
	in.BackendImageSetting = setting
	bindings, err := BindingsOn(ctx, r, b.Name)
	if err != nil {
		return in, err
	}
	in.Tenants = generator.TenantsFor(bindings)
	return in, nil
}
