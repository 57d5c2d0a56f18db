package rules

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
	"github.com/kvcache-operator/kvcache/objects"
)

// Backend judges a KVCacheBackend created (old nil) or updated. An update that leaves spec
// unchanged (metadata only: labels, annotations, finalizers) is admitted without judging it
// again, so a controller can always remove its finalizer.
func Backend(ctx context.Context, o objects.Reader, old, obj *kvv1.KVCacheBackend) (Verdict, error) {
	var v Verdict
	old, b, unchanged := defaulted(old, obj, func(b *kvv1.KVCacheBackend) any { return b.Spec })
	if unchanged {
		return v, nil
	}
	image, _, err := o.Setting(ctx, kvv1.SettingKVCacheBackendImage)
	if err != nil {
		return v, objects.ReadFailed("the Setting "+kvv1.SettingKVCacheBackendImage, err)
	}
	v.refuse(validation.ValidateBackend(b, validation.BackendContext{BackendImageSetting: image})...)
	if old == nil {
		return v, nil
	}
	v.refuse(validation.ValidateBackendUpdate(old, b)...)
	if om, nm := old.Spec.Connection.Managed, b.Spec.Connection.Managed; om != nil && nm != nil &&
		om.Leader.MultiTenancyEnabled() && !nm.Leader.MultiTenancyEnabled() {
		pools, err := objects.PoolsOn(ctx, o, b.Name)
		if err != nil {
			return v, err
		}
		if len(pools) > 0 {
			v.refuse(field.Forbidden(field.NewPath("spec", "connection", "managed", "leader", "multiTenancy"), multiTenancyOffMessage(pools)))
		}
	}
	return v, nil
}

func multiTenancyOffMessage(pools []kvv1.KVCachePool) string {
	if len(pools) == 1 {
		return fmt.Sprintf("KVCachePool %s uses this backend and its Bindings' tenants live in the ledger; turning multi-tenancy off drops the ledger, so no ceiling would be enforced and every write would land in the store's default tenant; delete the pool first, or keep multiTenancy: true", pools[0].Name)
	}
	return fmt.Sprintf("KVCachePools %s use this backend and their Bindings' tenants live in the ledger; turning multi-tenancy off drops the ledger, so no ceiling would be enforced and every write would land in the store's default tenant; delete those pools first, or keep multiTenancy: true", strings.Join(poolNames(pools), ", "))
}

func poolNames(pools []kvv1.KVCachePool) []string {
	out := make([]string, len(pools))
	for i := range pools {
		out[i] = pools[i].Name
	}
	return out
}
