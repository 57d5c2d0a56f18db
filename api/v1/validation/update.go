package validation

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// ValidateBackendUpdate checks what an update may change on a KVCacheBackend: the
// managed/external branch is frozen, a member group's medium is fixed at its position, and
// groups may be appended or removed from the end but not moved. Call it on defaulted objects,
// together with ValidateBackend on the new one.
func ValidateBackendUpdate(old, new *kvv1.KVCacheBackend) field.ErrorList {
	conn := field.NewPath("spec", "connection")
	was, now := connectionBranch(old), connectionBranch(new)
	if was != "" && now != "" && was != now {
		return field.ErrorList{field.Forbidden(conn, fmt.Sprintf("the managed/external branch cannot change after creation (this backend is %s, the update makes it %s); create a new KVCacheBackend instead", was, now))}
	}
	om, nm := old.Spec.Connection.Managed, new.Spec.Connection.Managed
	if om == nil || nm == nil {
		return nil
	}
	var errs field.ErrorList
	mp := conn.Child("managed", "members")
	for i := range min(len(om.Members), len(nm.Members)) {
		was, now := groupMedium(om.Members[i]), groupMedium(nm.Members[i])
		if was != now {
			errs = append(errs, field.Forbidden(mp.Index(i).Child("medium"), fmt.Sprintf("a member group's medium is immutable (the group at this position is %s; its members registered %s segments with the master); keep %s here and append a new group with medium: %s instead", was, was, was, now)))
		}
	}
	// A move shows as a position whose nodeSelector is the one another position had before the
	// update, while that other position no longer has it (a group that stays where it is may
	// share its nodes with an appended one, e.g. a VRAM group beside a DRAM group).
	reported := map[[2]int]bool{}
	for i, g := range nm.Members {
		if i < len(om.Members) && maps.Equal(g.NodeSelector, om.Members[i].NodeSelector) {
			continue
		}
		for j, o := range om.Members {
			if j == i || !maps.Equal(g.NodeSelector, o.NodeSelector) {
				continue
			}
			if j < len(nm.Members) && maps.Equal(nm.Members[j].NodeSelector, o.NodeSelector) {
				continue
			}
			pair := [2]int{min(i, j), max(i, j)}
			if !reported[pair] {
				reported[pair] = true
				errs = append(errs, field.Forbidden(mp.Index(i).Child("nodeSelector"), fmt.Sprintf("members[%d] had this nodeSelector before the update, so the update moves that group from position %d to position %d: a group's position is its identity: members are matched by index, so moving a group restarts and re-registers every member of both; append instead (only trailing groups may be removed)", j, j, i)))
			}
			break
		}
	}
	return errs
}

// connectionBranch is "managed" or "external" for a backend with exactly one branch, else "".
func connectionBranch(b *kvv1.KVCacheBackend) string {
	m, e := b.Spec.Connection.Managed != nil, b.Spec.Connection.External != nil
	switch {
	case m && !e:
		return "managed"
	case e && !m:
		return "external"
	}
	return ""
}

// groupMedium is a group's medium with the schema default applied.
func groupMedium(g kvv1.MemberGroup) kvv1.Medium {
	if g.Medium == "" {
		return kvv1.MediumDRAM
	}
	return g.Medium
}

// ValidateBindingUpdate checks what an update may change on a KVCachePoolBinding: neither the
// pool nor any field of the domain. The CRD refuses the same through CEL; these messages say
// which field and why.
func ValidateBindingUpdate(old, new *kvv1.KVCachePoolBinding) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if old.Spec.PoolRef.Name != new.Spec.PoolRef.Name {
		errs = append(errs, field.Forbidden(spec.Child("poolRef", "name"), fmt.Sprintf("is immutable (it is %s): a Binding grants access to one pool, and its domain is registered on that pool's master; create a new KVCachePoolBinding for another pool", old.Spec.PoolRef.Name)))
	}
	dp := spec.Child("domain")
	const fix = "create a new KVCachePoolBinding for another domain"
	if was, now := old.DomainName(), new.DomainName(); was != now {
		errs = append(errs, field.Forbidden(dp.Child("name"), fmt.Sprintf("is immutable (it is %s): it is the store tenant this Binding's workloads write under; %s", was, fix)))
	}
	if old.Spec.Domain.BlockSize != new.Spec.Domain.BlockSize {
		errs = append(errs, field.Forbidden(dp.Child("blockSize"), fmt.Sprintf("is immutable (it is %d): workloads sharing the domain read each other's blocks, so they must cut them the same size; %s", old.Spec.Domain.BlockSize, fix)))
	}
	if old.Spec.Domain.Dtype != new.Spec.Domain.Dtype {
		errs = append(errs, field.Forbidden(dp.Child("dtype"), fmt.Sprintf("is immutable (it is %s): workloads sharing the domain read each other's blocks, so they must write the same dtype; %s", old.Spec.Domain.Dtype, fix)))
	}
	return errs
}

// ValidatePoolUpdate checks what an update may change on a KVCachePool: not its backend.
func ValidatePoolUpdate(old, new *kvv1.KVCachePool) field.ErrorList {
	if slices.Equal(old.Spec.Backends, new.Spec.Backends) {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec", "backends"), fmt.Sprintf("is immutable (it is %s): the pool's Bindings registered their domains on that backend's master; create a new KVCachePool for another backend", strings.Join(old.Spec.Backends, ", ")))}
}

const maxRoles = 10

var (
	engineNames = []string{string(kvv1.EngineVLLM), string(kvv1.EngineSGLang)}
	roleKinds   = []string{string(kvv1.RoleServer), string(kvv1.RolePrefill), string(kvv1.RoleDecode)}
)

// ValidateModelDeployment checks a ModelDeployment's shape on its own: the
// model and engine, the roles and their names (each role renders a Deployment and a Service
// named <deployment>-<role>), and the Prefill/Decode pairing. Call it on a defaulted object.
func ValidateModelDeployment(md *kvv1.ModelDeployment) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if md.Spec.Model.Name == "" {
		errs = append(errs, field.Required(spec.Child("model", "name"), "name the model to serve, e.g. Qwen/Qwen2.5-7B-Instruct"))
	}
	ep := spec.Child("engine")
	switch n := string(md.Spec.Engine.Name); {
	case n == "":
		errs = append(errs, field.Required(ep.Child("name"), "name the engine: vLLM or SGLang"))
	case slices.Contains(engineNames, n):
	default:
		e := field.NotSupported(ep.Child("name"), n, engineNames)
		for _, want := range engineNames {
			if strings.EqualFold(want, n) {
				e.Detail += "; the value is case-sensitive: write " + want
			}
		}
		if strings.EqualFold(n, "vLLM-Ascend") {
			e.Detail += "; write vLLM: a role whose InstanceType's accelerator manufacturer is ascend runs vLLM as vLLM-Ascend"
		}
		errs = append(errs, e)
	}
	switch v := md.Spec.Engine.Version; {
	case v == "":
		errs = append(errs, field.Required(ep.Child("version"), "name the engine version, e.g. 0.29.0: it selects the engine image and the store client bundled in it"))
	case !engineVersion.MatchString(v):
		errs = append(errs, field.Invalid(ep.Child("version"), v, "must be a version such as 0.29.0 (letters, digits, '.', '_' and '-'): it becomes the engine image's tag"))
	}
	if c := md.Spec.KVCache; c != nil && c.PoolRef.Name == "" {
		errs = append(errs, field.Required(spec.Child("kvCache", "poolRef", "name"), "name a KVCachePoolBinding in this namespace, or remove spec.kvCache to run without a shared cache"))
	}
	errs = append(errs, validateDeploymentName(md.Name)...)
	errs = append(errs, objectName("", md.Namespace)...)
	errs = append(errs, validateRoles(md, spec.Child("roles"))...)
	return errs
}

// serviceNamePrefixOK reports whether "<name>-<role>" is a DNS-1035 label for every DNS-1123
// label role short enough: name starts with a letter and holds only [-a-z0-9].
func serviceNamePrefixOK(name string) bool {
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// roleNameRoom is how many characters a role name may have after "<name>-".
func roleNameRoom(name string) int {
	return utilvalidation.DNS1035LabelMaxLength - len(name) - len("-")
}

// validateDeploymentName refuses a deployment name no role's Service name can be built from.
// An empty name (generateName, or a unit test) is not judged.
func validateDeploymentName(name string) field.ErrorList {
	np := field.NewPath("metadata", "name")
	switch {
	case name == "":
		return nil
	case !serviceNamePrefixOK(name):
		return field.ErrorList{field.Invalid(np, name, "must start with a letter and hold only lowercase letters, digits and '-': each role's Service is named <name>-<role>, which must be a DNS-1035 label")}
	case roleNameRoom(name) < 1:
		return field.ErrorList{field.Invalid(np, name, fmt.Sprintf("is %d characters and leaves no room for a role name: each role's Service is named <name>-<role>, at most %d characters; shorten the name", len(name), utilvalidation.DNS1035LabelMaxLength))}
	}
	return nil
}

func validateRoles(md *kvv1.ModelDeployment, rp *field.Path) field.ErrorList {
	var errs field.ErrorList
	roles := md.Spec.Roles
	switch n := len(roles); {
	case n == 0:
		errs = append(errs, field.Required(rp, "at least one role is needed, e.g. {name: server, kind: Server}"))
	case n > maxRoles:
		errs = append(errs, field.TooMany(rp, n, maxRoles))
	}
	checkServiceName := serviceNamePrefixOK(md.Name) && roleNameRoom(md.Name) >= 1
	names := map[string]int{}
	halves := map[kvv1.RoleKind]int{}
	for i, r := range roles {
		p := rp.Index(i)
		if r.Image != "" {
			if e := imageReference(p.Child("image"), r.Image); e != nil {
				errs = append(errs, e)
			}
		}
		np := p.Child("name")
		switch {
		case r.Name == "":
			errs = append(errs, field.Required(np, "name the role, e.g. server: its Deployment and Service are named <deployment>-<role>"))
		case len(utilvalidation.IsDNS1123Label(r.Name)) > 0:
			errs = append(errs, field.Invalid(np, r.Name, "must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit): its Deployment and Service are named <deployment>-<role>"))
		default:
			if j, dup := names[r.Name]; dup {
				e := field.Duplicate(np, r.Name)
				e.Detail = fmt.Sprintf("roles[%d] has this name already: each role renders its own Deployment and Service, <deployment>-<role>; rename one", j)
				errs = append(errs, e)
			} else {
				names[r.Name] = i
			}
			if room := roleNameRoom(md.Name); checkServiceName && len(r.Name) > room {
				svc := md.Name + "-" + r.Name
				errs = append(errs, field.Invalid(np, r.Name, fmt.Sprintf("makes the Service name %s %d characters long, over the limit of %d; shorten the role name to at most %d characters", svc, len(svc), utilvalidation.DNS1035LabelMaxLength, room)))
			}
		}
		kp := p.Child("kind")
		switch r.Kind {
		case "", kvv1.RoleServer:
		case kvv1.RolePrefill, kvv1.RoleDecode:
			if j, dup := halves[r.Kind]; dup {
				e := field.Duplicate(kp, string(r.Kind))
				e.Detail = fmt.Sprintf("roles[%d] is already the %s role: a deployment has at most one Prefill role and one Decode role (only Server roles may repeat); scale that role with replicas instead", j, r.Kind)
				errs = append(errs, e)
			} else {
				halves[r.Kind] = i
			}
		default:
			errs = append(errs, field.NotSupported(kp, string(r.Kind), roleKinds))
		}
		if r.Replicas != nil && *r.Replicas < 0 {
			errs = append(errs, field.Invalid(p.Child("replicas"), *r.Replicas, "must not be negative; 0 keeps the role with no Pods"))
		}
		resp := p.Child("resources")
		if r.Resources.Accelerator < 0 {
			errs = append(errs, field.Invalid(resp.Child("accelerator"), r.Resources.Accelerator, "must not be negative: it is the number of accelerator devices each replica requests, e.g. 1"))
		}
		if r.Resources.Interface < 0 {
			errs = append(errs, field.Invalid(resp.Child("interface"), r.Resources.Interface, "must not be negative: it is the number of RDMA or EFA devices each replica requests; 0 requests none"))
		}
		if r.Resources.Interface > 0 && md.Spec.KVCache == nil {
			errs = append(errs, field.Invalid(resp.Child("interface"), r.Resources.Interface, "fabric interfaces follow the cache pool's transport and this deployment attaches to no cache; set spec.kvCache, or set interface to 0"))
		}
	}
	if i, ok := halves[kvv1.RolePrefill]; ok {
		if _, ok := halves[kvv1.RoleDecode]; !ok {
			errs = append(errs, field.Invalid(rp.Index(i).Child("kind"), string(kvv1.RolePrefill), "a Prefill role hands its KV cache to a Decode role and this deployment has none; add a role with kind: Decode, or set kind: Server"))
		}
	}
	if i, ok := halves[kvv1.RoleDecode]; ok {
		if _, ok := halves[kvv1.RolePrefill]; !ok {
			errs = append(errs, field.Invalid(rp.Index(i).Child("kind"), string(kvv1.RoleDecode), "a Decode role receives its KV cache from a Prefill role and this deployment has none; add a role with kind: Prefill, or set kind: Server"))
		}
	}
	return errs
}
