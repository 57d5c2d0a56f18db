package operator

import (
	"context"

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

// BindingsOf lists the Bindings that draw on any of pools, in the order of pools (and within
// a pool in the reader's order).
func BindingsOf(ctx context.Context, r client.Reader, pools ...string) ([]kvv1.KVCachePoolBinding, error) {
	var out []kvv1.KVCachePoolBinding
	for _, p := range pools {
		l := &kvv1.KVCachePoolBindingList{}
		if err := r.List(ctx, l, client.MatchingFields{BindingPoolField: p}); err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
	}
	return out, nil
}
