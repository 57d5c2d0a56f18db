package rules

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
	"github.com/kvcache-operator/kvcache/objects"
)

// Pool judges a KVCachePool created (old nil) or updated. Its backend was checked when the pool
// was created and cannot change, so on update a backend that has gone since is not a reason to
// refuse.
func Pool(ctx context.Context, o objects.Reader, old, obj *kvv1.KVCachePool) (Verdict, error) {
	var v Verdict
	old, p, unchanged := defaulted(old, obj, func(p *kvv1.KVCachePool) any { return p.Spec })
	if unchanged {
		return v, nil
	}
	v.refuse(validation.ValidatePool(p)...)
	if old != nil {
		v.refuse(validation.ValidatePoolUpdate(old, p)...)
	}
	name := p.BackendName()
	if name == "" {
		return v, nil // ValidatePool reports it
	}
	bp := field.NewPath("spec", "backends").Index(0)
	b, found, err := o.Backend(ctx, name)
	if err != nil {
		return v, objects.ReadFailed("KVCacheBackend "+name, err)
	}
	if !found {
		if old == nil {
			e := field.NotFound(bp, name)
			e.Detail = "no KVCacheBackend has this name; create the KVCacheBackend first, then the KVCachePool, then its KVCachePoolBindings"
			v.refuse(e)
		}
		return v, nil
	}
	if old == nil && b.DeletionTimestamp != nil {
		v.refuse(field.Forbidden(bp, fmt.Sprintf("KVCacheBackend %s is being deleted, so no new pool may divide it; name another backend", name)))
	}
	if keepsNoLedger(b) {
		v.warn(fmt.Sprintf("KVCacheBackend %s keeps no tenant ledger (leader.multiTenancy: false): Binding ceilings on this pool are not enforced and every write lands in the store's default tenant", name))
	}
	return v, nil
}
