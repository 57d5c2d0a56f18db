package injection

import (
	"context"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
)

// ModelDeploymentInput is what a ModelDeployment's roles render from: the InstanceTypes its
// roles name (a missing one is absent) and its cache attachment, resolved through r exactly as
// a Pod's is. The operator (reading the cluster) and `kvcache render` (reading its files) both
// call it, so a rendered role and a live one cannot differ. The attachment is nil when the
// deployment has no spec.kvCache. A refusal says why the cache cannot attach, and the input must
// not be rendered then: a role without its cache is not what the user asked for. A failed read
// is a refusal of reason ReasonLookupFailed.
func ModelDeploymentInput(ctx context.Context, r objects.Reader, md *kvv1.ModelDeployment) (generator.ModelDeploymentInput, *Attachment, *Refusal) {
	in := generator.ModelDeploymentInput{Deployment: md, InstanceTypes: map[string]*kvv1.InstanceType{}}
	for _, role := range md.Spec.Roles {
		if role.InstanceType == "" || in.InstanceTypes[role.InstanceType] != nil {
			continue
		}
		it, found, err := r.InstanceType(ctx, role.InstanceType)
		if err != nil {
			return in, nil, readFailed(objects.ReadFailed("InstanceType "+role.InstanceType, err))
		}
		if found {
			in.InstanceTypes[role.InstanceType] = it
		}
	}
	if md.Spec.KVCache == nil {
		return in, nil, nil
	}
	var first *kvv1.InstanceType
	if len(md.Spec.Roles) > 0 {
		first = in.InstanceTypes[md.Spec.Roles[0].InstanceType]
	}
	att, rf := Resolve(ctx, r, md.Namespace, md.Spec.KVCache.PoolRef.Name, generator.EngineFor(md, first), NamedByPoolRef)
	if rf != nil {
		return in, &att, rf
	}
	owned, err := objects.DtypeOwned(ctx, r)
	if err != nil {
		return in, &att, readFailed(err)
	}
	c := att.CacheInput(owned)
	in.Cache = &c
	return in, &att, nil
}
