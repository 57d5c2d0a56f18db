package rules

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
	"github.com/kvcache-operator/kvcache/objects"
)

// Binding judges a KVCachePoolBinding created (old nil) or updated. The pool and the domain are
// immutable, so the domain rules, judged when the Binding was created, are not judged again on
// update; the ceiling is checked against the pool's total whenever the pool can be read.
func Binding(ctx context.Context, o objects.Reader, old, obj *kvv1.KVCachePoolBinding) (Verdict, error) {
	var v Verdict
	old, b, unchanged := defaulted(old, obj, func(b *kvv1.KVCachePoolBinding) any { return b.Spec })
	if unchanged {
		return v, nil
	}
	pool, refusal, err := bindingPool(ctx, o, b, old == nil)
	if err != nil {
		return v, err
	}
	v.refuse(validation.ValidateBinding(b, pool)...)
	if old != nil {
		v.refuse(validation.ValidateBindingUpdate(old, b)...)
		return v, nil
	}
	v.refuse(refusal...)
	if pool != nil {
		errs, err := domainRules(ctx, o, b, pool)
		if err != nil {
			return v, err
		}
		v.refuse(errs...)
	}
	return v, nil
}

// bindingPool reads the pool a Binding names (nil when it names none or it does not exist). On
// create a missing or deleting pool is refused.
func bindingPool(ctx context.Context, o objects.Reader, b *kvv1.KVCachePoolBinding, create bool) (*kvv1.KVCachePool, field.ErrorList, error) {
	name := b.Spec.PoolRef.Name
	if name == "" {
		return nil, nil, nil // ValidateBinding reports it
	}
	pp := field.NewPath("spec", "poolRef", "name")
	p, found, err := o.Pool(ctx, name)
	if err != nil {
		return nil, nil, objects.ReadFailed("KVCachePool "+name, err)
	}
	if !found {
		if !create {
			return nil, nil, nil
		}
		e := field.NotFound(pp, name)
		e.Detail = "names no KVCachePool; create the pool first (KVCacheBackend, then KVCachePool, then KVCachePoolBinding)"
		return nil, field.ErrorList{e}, nil
	}
	if create && p.DeletionTimestamp != nil {
		return p, field.ErrorList{field.Forbidden(pp, fmt.Sprintf("KVCachePool %s is being deleted, so no new Binding may grant it; name another pool", name))}, nil
	}
	return p, nil, nil
}

// domainRules are the rules over every Binding on the same store master: a domain name is
// registered once per master, and a master without a tenant ledger carries one domain. The
// Bindings considered are those of every pool over pool's backend, in every namespace,
// including Bindings being deleted (they hold their domain until they are gone).
func domainRules(ctx context.Context, o objects.Reader, b *kvv1.KVCachePoolBinding, pool *kvv1.KVCachePool) (field.ErrorList, error) {
	backend := pool.BackendName()
	if backend == "" {
		return nil, nil
	}
	pools, err := objects.PoolsOn(ctx, o, backend)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(pools, func(p kvv1.KVCachePool) bool { return p.Name == pool.Name }) {
		pools = append(pools, *pool)
	}
	bindings, err := objects.BindingsOfPools(ctx, o, pools)
	if err != nil {
		return nil, err
	}
	others := make([]kvv1.KVCachePoolBinding, 0, len(bindings))
	for _, x := range bindings {
		if x.Namespace == b.Namespace && x.Name == b.Name {
			continue
		}
		x.Default()
		others = append(others, x)
	}
	sort.Slice(others, func(i, j int) bool {
		return others[i].Namespace+"/"+others[i].Name < others[j].Namespace+"/"+others[j].Name
	})

	dp := field.NewPath("spec", "domain", "name")
	domain := b.Spec.Domain.Name
	var errs field.ErrorList
	for _, x := range others {
		if x.Spec.Domain.Name == domain {
			e := field.Duplicate(dp, domain)
			e.Detail = fmt.Sprintf("already registered on the master of KVCacheBackend %s by KVCachePoolBinding %s/%s; name a different domain", backend, x.Namespace, x.Name)
			errs = append(errs, e)
			break
		}
	}
	i := slices.IndexFunc(others, func(x kvv1.KVCachePoolBinding) bool { return x.Spec.Domain.Name != domain })
	if i < 0 {
		return errs, nil
	}
	be, found, err := o.Backend(ctx, backend)
	if err != nil {
		return nil, objects.ReadFailed("KVCacheBackend "+backend, err)
	}
	if found && keepsNoLedger(be) {
		x := others[i]
		errs = append(errs, field.Forbidden(dp, fmt.Sprintf("KVCacheBackend %s keeps no tenant ledger (leader.multiTenancy: false), so every write lands in one default tenant and the backend carries one domain only: domain %q is registered there by KVCachePoolBinding %s/%s; attach through that Binding, or use a backend with multiTenancy: true for a second domain", backend, x.Spec.Domain.Name, x.Namespace, x.Name)))
	}
	return errs, nil
}
