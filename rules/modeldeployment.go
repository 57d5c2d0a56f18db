package rules

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/values"
)

// ModelDeployment judges a ModelDeployment created (old nil) or updated: the shape rules and,
// with a cache attached, what injection checks for a Pod, judged per role: the Binding exists in
// the deployment's namespace (and, when newly named, is not being deleted), every role's engine
// can use the pool's transport and takes the Binding's dtype, and no role carries a key the
// attachment owns or that would leave it unread.
func ModelDeployment(ctx context.Context, o objects.Reader, old, obj *kvv1.ModelDeployment) (Verdict, error) {
	var v Verdict
	old, md, unchanged := defaulted(old, obj, func(md *kvv1.ModelDeployment) any { return md.Spec })
	if unchanged {
		return v, nil
	}
	attaching := old == nil || old.Spec.KVCache == nil || md.Spec.KVCache == nil || old.Spec.KVCache.PoolRef.Name != md.Spec.KVCache.PoolRef.Name
	v.refuse(validation.ValidateModelDeployment(md)...)
	c := md.Spec.KVCache
	if c == nil || c.PoolRef.Name == "" {
		return v, nil
	}
	roleEngines, err := roleEnginesOf(ctx, o, md)
	if err != nil {
		return v, err
	}
	value, _, err := o.Setting(ctx, kvv1.SettingKVCacheDtypeOwned)
	if err != nil {
		return v, objects.ReadFailed("the Setting "+kvv1.SettingKVCacheDtypeOwned, err)
	}
	dtypeOwned := kvv1.DtypeOwned(value)
	errs, warnings, err := attachment(ctx, o, md, roleEngines, attaching, dtypeOwned)
	if err != nil {
		return v, err
	}
	v.refuse(errs...)
	v.warn(warnings...)
	v.refuse(ownedKeys(md, roleEngines, dtypeOwned)...)
	return v, nil
}

// roleEngine is the engine a role runs and, for vLLM-Ascend, the InstanceType that selects it.
type roleEngine struct {
	engine       engines.Engine
	instanceType string
}

// roleEnginesOf resolves each role's engine with the render's own rule (generator.EngineFor):
// SGLang, or vLLM, which runs as vLLM-Ascend on an InstanceType whose accelerator manufacturer
// is ascend. A role whose InstanceType does not exist is judged as plain vLLM. nil when the
// engine name is not one this API knows (ValidateModelDeployment reports it).
func roleEnginesOf(ctx context.Context, o objects.Reader, md *kvv1.ModelDeployment) ([]roleEngine, error) {
	switch md.Spec.Engine.Name {
	case kvv1.EngineVLLM, kvv1.EngineSGLang:
	default:
		return nil, nil
	}
	types := map[string]*kvv1.InstanceType{}
	out := make([]roleEngine, len(md.Spec.Roles))
	for i, r := range md.Spec.Roles {
		var it *kvv1.InstanceType
		if r.InstanceType != "" && md.Spec.Engine.Name == kvv1.EngineVLLM {
			var seen bool
			if it, seen = types[r.InstanceType]; !seen {
				var found bool
				var err error
				it, found, err = o.InstanceType(ctx, r.InstanceType)
				if err != nil {
					return nil, objects.ReadFailed("InstanceType "+r.InstanceType, err)
				}
				if !found {
					it = nil
				}
				types[r.InstanceType] = it
			}
		}
		e := generator.EngineFor(md, it)
		out[i] = roleEngine{engine: e}
		if e.ID == engines.VLLMAscend.ID {
			out[i].instanceType = r.InstanceType
		}
	}
	return out, nil
}

// attachment resolves Binding -> pool -> backend and checks every role's engine against the
// backend's transport and the Binding's dtype, as injection does for a Pod. Messages speak of
// the deployment's own fields.
func attachment(ctx context.Context, o objects.Reader, md *kvv1.ModelDeployment, roleEngines []roleEngine, attaching, dtypeOwned bool) (field.ErrorList, []string, error) {
	bp := field.NewPath("spec", "kvCache", "poolRef", "name")
	name := md.Spec.KVCache.PoolRef.Name
	chain, br, err := objects.Walk(ctx, o, md.Namespace, name, injection.NamedByPoolRef+" (or remove spec.kvCache)", attaching)
	if err != nil {
		return nil, nil, err
	}
	if attaching && chain.Binding != nil && chain.Binding.DeletionTimestamp != nil {
		return field.ErrorList{field.Forbidden(bp, fmt.Sprintf("KVCachePoolBinding %s/%s is being deleted, so new workloads may not attach to it; name another Binding", md.Namespace, name))}, nil, nil
	}
	if br != nil {
		if br.Link == objects.LinkBinding {
			e := field.NotFound(bp, name)
			e.Detail = br.Message
			return field.ErrorList{e}, nil, nil
		}
		return field.ErrorList{field.Invalid(bp, name, br.Message)}, nil, nil
	}
	binding, poolName, backend := chain.Binding, chain.Pool.Name, chain.Backend
	backend.Default()
	storeImage, err := objects.StoreImage(ctx, o, backend)
	if err != nil {
		return nil, nil, err
	}

	// One check per distinct engine, in role order; vLLM-Ascend names the roles and the
	// InstanceTypes that select it, since the deployment itself says vLLM.
	var errs field.ErrorList
	var warnings []string
	var checked []string
	for _, re := range roleEngines {
		if slices.Contains(checked, re.engine.ID) {
			continue
		}
		checked = append(checked, re.engine.ID)
		prefix := ""
		if re.engine.ID == engines.VLLMAscend.ID {
			prefix = ascendRoles(md, roleEngines)
		}
		if dtypeOwned {
			if rf := injection.Dtype(re.engine, binding); rf != nil {
				errs = append(errs, field.Invalid(bp, name, prefix+rf.Message))
			}
		}
		if w := VersionSkew(re.engine, md.Spec.Engine.Version, backend.Name, storeImage); w != "" {
			warnings = append(warnings, prefix+w)
		}
		protocol, rf := injection.Transport(re.engine, backend, poolName)
		if rf == nil {
			errs = append(errs, fabricRules(md, protocol, poolName)...)
			continue
		}
		errs = append(errs, field.Invalid(bp, name, prefix+rf.Message))
	}
	return errs, warnings, nil
}

// VersionSkew says why an engine release and a store image are on different Mooncake lines, ""
// when they are on one or either is unknown.
func VersionSkew(e engines.Engine, version, backend, storeImage string) string {
	client, ok := e.BundledClient(version)
	if !ok {
		return ""
	}
	clientLine, _ := engines.MooncakeLine(client)
	storeLine, ok := engines.MooncakeLine(engines.ImageTag(storeImage))
	if !ok || storeLine == clientLine {
		return ""
	}
	return fmt.Sprintf("%s %s bundles the Mooncake client %s, and the master of KVCacheBackend %s runs %s (Mooncake %s): a client and a master on different lines start healthy and then fail every write with RPC_FAIL (-900); use an engine release on the store's line, or a store image of Mooncake %s",
		e.Name, strings.TrimPrefix(version, "v"), client, backend, storeImage, storeLine, clientLine)
}

// ascendRoles says which roles run vLLM as vLLM-Ascend and why, as a message prefix.
func ascendRoles(md *kvv1.ModelDeployment, roleEngines []roleEngine) string {
	var idx []int
	for i, re := range roleEngines {
		if re.engine.ID == engines.VLLMAscend.ID {
			idx = append(idx, i)
		}
	}
	if len(idx) == 1 {
		return fmt.Sprintf("role %s runs on InstanceType %s, whose accelerator manufacturer is ascend, so vLLM runs there as vLLM-Ascend: ", md.Spec.Roles[idx[0]].Name, roleEngines[idx[0]].instanceType)
	}
	parts := make([]string, len(idx))
	for k, i := range idx {
		parts[k] = fmt.Sprintf("%s (InstanceType %s)", md.Spec.Roles[i].Name, roleEngines[i].instanceType)
	}
	return fmt.Sprintf("roles %s run on InstanceTypes whose accelerator manufacturer is ascend, so vLLM runs there as vLLM-Ascend: ", strings.Join(parts, ", "))
}

// ownedKeys refuses, in every role, the flags and variables the cache attachment owns or that
// would leave it unread, in every spelling the role's engine reads, and a bare "--", behind
// which the attachment's flags would be read as positionals.
func ownedKeys(md *kvv1.ModelDeployment, roleEngines []roleEngine, dtypeOwned bool) field.ErrorList {
	if roleEngines == nil {
		return nil
	}
	var errs field.ErrorList
	rp := field.NewPath("spec", "roles")
	for i, r := range md.Spec.Roles {
		e := roleEngines[i].engine
		for _, f := range e.FindRefusedFlags(nil, r.ExtraArgs, dtypeOwned) {
			errs = append(errs, field.Forbidden(rp.Index(i).Child("extraArgs"), e.Message(f)))
		}
		for j, a := range r.ExtraArgs {
			if a == "--" {
				errs = append(errs, field.Forbidden(rp.Index(i).Child("extraArgs").Index(j), fmt.Sprintf(`a bare "--" makes %s read every argument after it as a positional argument, so the flags the cache attachment appends would not be read as flags; remove it`, e.Name)))
			}
		}
		for j, env := range r.Env {
			if slices.Contains(e.OverrideEnv, env.Name) {
				errs = append(errs, field.Forbidden(rp.Index(i).Child("env").Index(j).Child("name"), e.OverrideEnvMessage(env.Name)))
			}
			if slices.Contains(e.SourceEnv, env.Name) {
				errs = append(errs, field.Forbidden(rp.Index(i).Child("env").Index(j).Child("name"), fmt.Sprintf("%s selects where %s reads its store configuration from, which would leave every value the Binding configures unread; remove it and let the Binding configure the store", env.Name, e.Name)))
			}
		}
	}
	return errs
}

// fabricRules refuses fabric interfaces on a transport that has none: resources.interface
// requests RDMA or EFA devices of the pool's transport.
func fabricRules(md *kvv1.ModelDeployment, protocol, pool string) field.ErrorList {
	var errs field.ErrorList
	for i, r := range md.Spec.Roles {
		if r.Resources.Interface == 0 {
			continue
		}
		if _, _, ok := generator.FabricResource(protocol, r.Resources.Interface, values.Store{}); !ok {
			errs = append(errs, field.Invalid(field.NewPath("spec", "roles").Index(i).Child("resources", "interface"), r.Resources.Interface,
				fmt.Sprintf("fabric interfaces are RDMA or EFA devices, and KVCachePool %s offers %s; set interface to 0, or attach through a pool whose backend offers RDMA or EFA", pool, protocol)))
		}
	}
	return errs
}
