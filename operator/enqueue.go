package operator

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// AllBackends maps any event to a request for every KVCacheBackend the reader lists: for what
// concerns every store at once (a Setting, a Node's schedulability). A failed list maps to none.
func AllBackends(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := &kvv1.KVCacheBackendList{}
		if err := c.List(ctx, list); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, b := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: b.Name}})
		}
		return out
	}
}
