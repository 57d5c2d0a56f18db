package rules

import (
	"context"
	"encoding/json"
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

// ModelDeployment judges a ModelDeployment created (old nil) or updated: the shape rules, a role's
// extraArgs selecting another half than its kind, an accelerator count the render could not
// request, and, with a cache attached, what injection checks for a Pod, judged per role: the
// Binding exists in the deployment's namespace (and, when newly named, is not being deleted),
// every role's engine can use the pool's transport and takes the Binding's dtype, and no role
// carries a key the attachment owns or that would leave it unread, in its extraArgs as the
// kubelet expands them from its env.
func ModelDeployment(ctx context.Context, o objects.Reader, old, obj *kvv1.ModelDeployment) (Verdict, error) {
	var v Verdict
	old, md, unchanged := defaulted(old, obj, func(md *kvv1.ModelDeployment) any { return md.Spec })
	if unchanged {
		return v, nil
	}
	attaching := old == nil || old.Spec.KVCache == nil || md.Spec.KVCache == nil || old.Spec.KVCache.PoolRef.Name != md.Spec.KVCache.PoolRef.Name
	v.refuse(validation.ValidateModelDeployment(md)...)
	v.refuse(kindArgs(md)...)
	errs, err := acceleratorRules(ctx, o, md)
	if err != nil {
		return v, err
	}
	v.refuse(errs...)
	c := md.Spec.KVCache
	if c == nil || c.PoolRef.Name == "" {
		return v, nil
	}
	roleEngines, err := roleEnginesOf(ctx, o, md)
	if err != nil {
		return v, err
	}
	dtypeOwned, err := objects.DtypeOwned(ctx, o)
	if err != nil {
		return v, err
	}
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
		release := re.engine.LookupRelease(md.Spec.Engine.Version)
		w, rf := injection.JudgeRelease(release, "spec.engine.version")
		if rf != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "engine", "version"), md.Spec.Engine.Version, prefix+rf.Message))
		}
		if w != "" {
			warnings = append(warnings, prefix+w)
		}
		if dtypeOwned {
			if rf := injection.Dtype(release, binding); rf != nil {
				errs = append(errs, field.Invalid(bp, name, prefix+rf.Message))
			}
		}
		// A role's own image of one of the engine's published releases is judged as a Pod's
		// image is: it is what runs, whatever spec.engine.version says.
		for i, r := range md.Spec.Roles {
			if r.Image == "" || roleEngines[i].engine.ID != re.engine.ID || re.engine.ImageRelease(r.Image) == "" {
				continue
			}
			ip := field.NewPath("spec", "roles").Index(i).Child("image")
			w, rf := injection.JudgeRelease(re.engine.LookupRelease(re.engine.ImageRelease(r.Image)), ip.String())
			if rf != nil {
				errs = append(errs, field.Invalid(ip, r.Image, prefix+rf.Message))
			}
			if w != "" {
				warnings = append(warnings, prefix+w)
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

// VersionSkew says why an engine release and a store image are on different Mooncake lines, or
// that nothing says which client a release of the table bundles; "" when they are on one line,
// or the store's line or the release itself is not known (the release's own warning says that).
func VersionSkew(e engines.Engine, version, backend, storeImage string) string {
	storeLine, ok := engines.MooncakeLine(engines.ImageTag(storeImage))
	if !ok {
		return ""
	}
	client, ok := e.BundledClient(version)
	if !ok {
		v := e.LookupRelease(version)
		if v.Status != engines.ReleaseSupported || v.Release == nil {
			return ""
		}
		return fmt.Sprintf("which Mooncake client %s %s bundles is not known here (%s), so nothing checks that it is on the line of the master of KVCacheBackend %s (Mooncake %s): a client on another line starts healthy and then fails every write with RPC_FAIL (-900); check it in the image (pip show mooncake-transfer-engine)",
			e.Name, strings.TrimPrefix(version, "v"), v.Release.Client.Source, backend, storeLine)
	}
	clientLine, _ := engines.MooncakeLine(client)
	if storeLine == clientLine {
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

// attachmentSource names, in messages, what writes the variables a role's cache attachment
// owns.
const attachmentSource = "the cache attachment"

// roleArgs is a role's extraArgs as the kubelet hands them to the engine: $(NAME) expanded from
// the role's env. The variables the attachment writes (attached) replace the role's declarations
// and read as the Binding's values, which admission does not render here: never a flag.
func roleArgs(e engines.Engine, r kvv1.Role, attached bool) []engines.Arg {
	env := engines.NewEnvironment(r.Env, nil)
	if attached {
		env = env.WrittenElsewhere(attachmentSource, e.InjectedEnv...)
	}
	return env.Expand(r.ExtraArgs)
}

// ownedKeys refuses, in every role, the flags and variables the cache attachment owns or that
// would leave it unread, in every spelling the role's engine reads and as the kubelet expands
// $(NAME) in them, a file of options (--config) whose keys admission cannot see, a value from
// valueFrom where it could be a flag, and a bare "--", behind which the attachment's flags
// would be read as positionals.
func ownedKeys(md *kvv1.ModelDeployment, roleEngines []roleEngine, dtypeOwned bool) field.ErrorList {
	if roleEngines == nil {
		return nil
	}
	var errs field.ErrorList
	rp := field.NewPath("spec", "roles")
	for i, r := range md.Spec.Roles {
		e := roleEngines[i].engine
		argv := roleArgs(e, r, true)
		for _, f := range engines.Expanded(e.FindRefusedFlags(nil, engines.Texts(argv), dtypeOwned), nil, r.ExtraArgs) {
			errs = append(errs, field.Forbidden(rp.Index(i).Child("extraArgs"), e.Message(f)))
		}
		for _, u := range engines.Unseen(argv, 0) {
			errs = append(errs, field.Forbidden(rp.Index(i).Child("extraArgs").Index(u.Index), e.UnseenMessage("the argument", u)))
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

// kindArgs refuses a role's extraArgs that select another half of a prefill/decode split than
// its kind: SGLang's --disaggregation-mode, which the render writes from the kind too, so the
// engine would be handed both; and, on a deployment without a cache, vLLM's kv_role in a
// --kv-transfer-config of the role's own (with a cache the flag is the attachment's, refused by
// ownedKeys). A mode admission cannot read (a $(NAME) from valueFrom) cannot be judged and is
// refused too.
func kindArgs(md *kvv1.ModelDeployment) field.ErrorList {
	var e engines.Engine
	switch md.Spec.Engine.Name {
	case kvv1.EngineSGLang:
		e = engines.SGLang
	case kvv1.EngineVLLM:
		if md.Spec.KVCache != nil {
			return nil
		}
		e = engines.VLLM
	default:
		return nil
	}
	var errs field.ErrorList
	rp := field.NewPath("spec", "roles")
	for i, r := range md.Spec.Roles {
		kind := r.Kind
		if kind == "" {
			kind = kvv1.RoleServer
		}
		role := generator.RoleOf(kind)
		argv := roleArgs(e, r, false)
		texts := engines.Texts(argv)
		ap := rp.Index(i).Child("extraArgs")
		if !e.VLLMFamily() {
			mode, at := e.DisaggregationMode(texts)
			switch want := engines.DisaggregationModeOf(role); {
			case at < 0:
			case len(argv[at].Refs) > 0:
				errs = append(errs, field.Forbidden(ap.Index(at), fmt.Sprintf("the value of %s, %q, is env %s, whose value comes from %s, which admission cannot read, so whether it matches the role's kind %s cannot be judged; remove it (the kind selects the half)",
					engines.DisaggregationModeFlag, argv[at].Text, argv[at].Refs[0].Name, argv[at].Refs[0].Source, kind)))
			case mode != want && want == "" && halfKind(mode) != kvv1.RoleServer:
				errs = append(errs, field.Forbidden(ap.Index(at), fmt.Sprintf("%s %s makes this role a %s half, and its kind is %s, a plain server, with no other half to pair with; remove the flag and set kind: %s, with a role of the other half, to split the deployment",
					engines.DisaggregationModeFlag, mode, mode, kind, halfKind(mode))))
			case mode != want && want != "":
				errs = append(errs, field.Forbidden(ap.Index(at), fmt.Sprintf("%s %s contradicts the role's kind %s, which renders %s %s, so %s would be handed both; remove it: the kind selects the half",
					engines.DisaggregationModeFlag, modeName(mode), kind, engines.DisaggregationModeFlag, want, e.Name)))
			}
			continue
		}
		want := e.KVRole(role)
		for _, kr := range kvRoles(e, texts) {
			if kr.role != want {
				errs = append(errs, field.Forbidden(ap.Index(kr.at), fmt.Sprintf("kv_role %s in %s contradicts the role's kind %s, whose kv_role is %s; use kind %s, or kv_role %s",
					kr.role, kvTransferConfig, kind, want, kindOf(e, kr.role), want)))
			}
		}
	}
	return errs
}

const kvTransferConfig = "--kv-transfer-config"

// modeName spells an SGLang disaggregation mode for messages.
func modeName(mode string) string {
	if mode == "" {
		return "null"
	}
	return mode
}

// halfKind is the role kind of an SGLang disaggregation mode (Server for anything else).
func halfKind(mode string) kvv1.RoleKind {
	for _, k := range []kvv1.RoleKind{kvv1.RolePrefill, kvv1.RoleDecode} {
		if engines.DisaggregationModeOf(generator.RoleOf(k)) == mode {
			return k
		}
	}
	return kvv1.RoleServer
}

// kindOf is the role kind whose kv_role is role.
func kindOf(e engines.Engine, role string) kvv1.RoleKind {
	for _, k := range []kvv1.RoleKind{kvv1.RoleServer, kvv1.RolePrefill, kvv1.RoleDecode} {
		if e.KVRole(generator.RoleOf(k)) == role {
			return k
		}
	}
	return kvv1.RoleServer
}

type kvRoleAt struct {
	role string
	at   int
}

// kvRoles finds every kv_role argv gives --kv-transfer-config, in any spelling vLLM reads: the
// JSON value (--kv-transfer-config={...} or the next argument) and the dotted member
// (--kv-transfer-config.kv_role=x, or its value in the next argument).
func kvRoles(e engines.Engine, argv []string) []kvRoleAt {
	var out []kvRoleAt
	for _, i := range e.Parser.Find(argv, kvTransferConfig) {
		name, value, hasValue := strings.Cut(argv[i], "=")
		at := i
		if !hasValue {
			if i+1 >= len(argv) {
				continue
			}
			value, at = argv[i+1], i+1
		}
		if _, member, dotted := strings.Cut(name, "."); dotted {
			if member == "kv_role" {
				out = append(out, kvRoleAt{role: value, at: at})
			}
			continue
		}
		var cfg struct {
			KVRole *string `json:"kv_role"`
		}
		if json.Unmarshal([]byte(value), &cfg) == nil && cfg.KVRole != nil {
			out = append(out, kvRoleAt{role: *cfg.KVRole, at: at})
		}
	}
	return out
}

// acceleratorRules refuses resources.accelerator where the render would request no device: on a
// role that names no InstanceType, or whose InstanceType names no accelerator resource. A role
// whose InstanceType does not exist yet is not judged here (the render waits for it).
func acceleratorRules(ctx context.Context, o objects.Reader, md *kvv1.ModelDeployment) (field.ErrorList, error) {
	var errs field.ErrorList
	for i, r := range md.Spec.Roles {
		n := r.Resources.Accelerator
		if n <= 0 {
			continue
		}
		ap := field.NewPath("spec", "roles").Index(i).Child("resources", "accelerator")
		if r.InstanceType == "" {
			errs = append(errs, field.Invalid(ap, n, "the role names no instanceType, so there is no accelerator resource to request and its Pods would get no device; set instanceType to an InstanceType whose spec.accelerator names the device plugin's resource, or set accelerator to 0"))
			continue
		}
		it, found, err := o.InstanceType(ctx, r.InstanceType)
		if err != nil {
			return nil, objects.ReadFailed("InstanceType "+r.InstanceType, err)
		}
		if found && (it.Spec.Accelerator == nil || it.Spec.Accelerator.ResourceName == "") {
			errs = append(errs, field.Invalid(ap, n, fmt.Sprintf("InstanceType %s names no accelerator resource (spec.accelerator.resourceName), so there is nothing to request and the role's Pods would get no device; set spec.accelerator on InstanceType %s, or set accelerator to 0", r.InstanceType, r.InstanceType)))
		}
	}
	return errs, nil
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
