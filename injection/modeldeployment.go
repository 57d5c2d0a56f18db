package injection

import (
	"context"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
)

// ModelDeploymentInput is what a ModelDeployment's roles render from: its cache attachment
// resolved through lookup exactly as a Pod's is, and the InstanceTypes its roles name (types;
// a missing one is absent). The operator (lookup over the cluster) and `kvcache render`
// (lookup over its files) both call it, so a rendered role and a live one cannot differ.
// The attachment is nil when the deployment has no spec.kvCache. A refusal says why the cache
// cannot attach, and the input must not be rendered then: a role without its cache is not
// what the user asked for. A failed read is a refusal of reason ReasonLookupFailed.
func ModelDeploymentInput(ctx context.Context, lookup Lookup, md *kvv1.ModelDeployment, types map[string]*kvv1.InstanceType) (generator.ModelDeploymentInput, *Attachment, *Refusal) {
	in := generator.ModelDeploymentInput{Deployment: md, InstanceTypes: types}
	if md.Spec.KVCache == nil {
		return in, nil, nil
	}
	var first *kvv1.InstanceType
	if len(md.Spec.Roles) > 0 {
		first = types[md.Spec.Roles[0].InstanceType]
	}
	att, rf := Resolve(ctx, lookup, md.Namespace, md.Spec.KVCache.PoolRef.Name, generator.EngineFor(md, first), NamedByPoolRef)
	if rf != nil {
		return in, &att, rf
	}
	owned, err := lookup.DtypeOwned(ctx)
	if err != nil {
		return in, &att, lookupFailed("the Setting "+kvv1.SettingKVCacheDtypeOwned, err)
	}
	c := att.CacheInput(owned)
	in.Cache = &c
	return in, &att, nil
}
