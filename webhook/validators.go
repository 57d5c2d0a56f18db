package webhook

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/values"
)

// The validators of this API's kinds. Each runs the pure rules of api/v1/validation on a
// defaulted copy of the object and adds the rules that read other objects through Reader.
//
// Common to all of them:
//   - an invalid object is refused with apierrors.NewInvalid, so the API server shows
//     `<Kind>.worker.gpustack.ai "<name>" is invalid: <field>: <message>`;
//   - an update that leaves spec unchanged (metadata only: labels, annotations, finalizers) is
//     admitted without judging it again, so a controller can always remove its finalizer even
//     when an object the rules read is gone or a rule has tightened since the object was
//     admitted;
//   - a read that fails for any reason other than NotFound refuses the request (fail closed)
//     with an InternalError naming what could not be read;
//   - deletes are admitted.
var (
	_ admission.Validator[*kvv1.KVCacheBackend]     = &BackendValidator{}
	_ admission.Validator[*kvv1.KVCachePool]        = &PoolValidator{}
	_ admission.Validator[*kvv1.KVCachePoolBinding] = &BindingValidator{}
	_ admission.Validator[*kvv1.ModelDeployment]    = &ModelDeploymentValidator{}
	_ admission.Validator[*kvv1.Setting]            = &SettingValidator{}
)

// Kinds, as the API server names them in messages.
const (
	kindBackend         = "KVCacheBackend"
	kindPool            = "KVCachePool"
	kindBinding         = "KVCachePoolBinding"
	kindModelDeployment = "ModelDeployment"
	kindSetting         = "Setting"
)

// invalidObject is the error for an object that breaks rules; nil when errs is empty.
func invalidObject(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: kvv1.GroupVersion.Group, Kind: kind}, name, errs)
}

// readFailure is the error for a read that failed for a reason other than NotFound: the
// request is refused, since a rule that cannot be checked cannot be passed.
func readFailure(what string, err error) error {
	return apierrors.NewInternalError(fmt.Errorf("could not read %s: %w; the request is refused until it can be checked, retry when the API server answers", what, err))
}

// readObject reads obj at key; found is false when it does not exist.
func readObject(ctx context.Context, r client.Reader, key client.ObjectKey, obj client.Object) (found bool, err error) {
	err = r.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// settingValue reads a Setting's value; "" when it does not exist.
func settingValue(ctx context.Context, r client.Reader, name string) (string, error) {
	s := &kvv1.Setting{}
	if _, err := readObject(ctx, r, client.ObjectKey{Name: name}, s); err != nil {
		return "", readFailure("the Setting "+name, err)
	}
	return s.Spec.Value, nil
}

// poolBackend is the one backend a pool names, or "" when it does not name exactly one.
func poolBackend(p *kvv1.KVCachePool) string {
	if len(p.Spec.Backends) != 1 {
		return ""
	}
	return p.Spec.Backends[0]
}

// keepsNoLedger reports whether a backend is managed with multi-tenancy off: its master keeps no
// tenant ledger, so ceilings are not enforced and every write lands in the default tenant.
func keepsNoLedger(b *kvv1.KVCacheBackend) bool {
	m := b.Spec.Connection.Managed
	return m != nil && !m.Leader.MultiTenancyEnabled()
}

// BackendValidator validates KVCacheBackends.
type BackendValidator struct {
	Reader client.Reader
}

// ValidateCreate implements admission.Validator.
func (v *BackendValidator) ValidateCreate(ctx context.Context, obj *kvv1.KVCacheBackend) (admission.Warnings, error) {
	b := obj.DeepCopy()
	b.Default()
	errs, err := v.validate(ctx, b)
	if err != nil {
		return nil, err
	}
	return nil, invalidObject(kindBackend, b.Name, errs)
}

// ValidateUpdate implements admission.Validator.
func (v *BackendValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *kvv1.KVCacheBackend) (admission.Warnings, error) {
	old, b := oldObj.DeepCopy(), newObj.DeepCopy()
	old.Default()
	b.Default()
	if equality.Semantic.DeepEqual(old.Spec, b.Spec) {
		return nil, nil
	}
	errs, err := v.validate(ctx, b)
	if err != nil {
		return nil, err
	}
	errs = append(errs, validation.ValidateBackendUpdate(old, b)...)
	if om, nm := old.Spec.Connection.Managed, b.Spec.Connection.Managed; om != nil && nm != nil &&
		om.Leader.MultiTenancyEnabled() && !nm.Leader.MultiTenancyEnabled() {
		pools, err := v.poolsUsing(ctx, b.Name)
		if err != nil {
			return nil, err
		}
		if len(pools) > 0 {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "connection", "managed", "leader", "multiTenancy"), multiTenancyOffMessage(pools)))
		}
	}
	return nil, invalidObject(kindBackend, b.Name, errs)
}

// ValidateDelete implements admission.Validator: deletion is admitted (the backend's finalizer
// and its Deletable condition hold it while it is used).
func (v *BackendValidator) ValidateDelete(context.Context, *kvv1.KVCacheBackend) (admission.Warnings, error) {
	return nil, nil
}

func (v *BackendValidator) validate(ctx context.Context, b *kvv1.KVCacheBackend) (field.ErrorList, error) {
	image, err := settingValue(ctx, v.Reader, kvv1.SettingKVCacheBackendImage)
	if err != nil {
		return nil, err
	}
	return validation.ValidateBackend(b, validation.BackendContext{BackendImageSetting: image}), nil
}

// poolsUsing lists, sorted, the pools that name backend.
func (v *BackendValidator) poolsUsing(ctx context.Context, backend string) ([]string, error) {
	list := &kvv1.KVCachePoolList{}
	if err := v.Reader.List(ctx, list); err != nil {
		return nil, readFailure("the KVCachePools", err)
	}
	var out []string
	for i := range list.Items {
		if slices.Contains(list.Items[i].Spec.Backends, backend) {
			out = append(out, list.Items[i].Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func multiTenancyOffMessage(pools []string) string {
	if len(pools) == 1 {
		return fmt.Sprintf("KVCachePool %s uses this backend and its Bindings' tenants live in the ledger; turning multi-tenancy off drops the ledger, so no ceiling would be enforced and every write would land in the store's default tenant; delete the pool first, or keep multiTenancy: true", pools[0])
	}
	return fmt.Sprintf("KVCachePools %s use this backend and their Bindings' tenants live in the ledger; turning multi-tenancy off drops the ledger, so no ceiling would be enforced and every write would land in the store's default tenant; delete those pools first, or keep multiTenancy: true", strings.Join(pools, ", "))
}

// PoolValidator validates KVCachePools.
type PoolValidator struct {
	Reader client.Reader
}

// ValidateCreate implements admission.Validator.
func (v *PoolValidator) ValidateCreate(ctx context.Context, obj *kvv1.KVCachePool) (admission.Warnings, error) {
	p := obj.DeepCopy()
	p.Default()
	errs := validation.ValidatePool(p)
	warnings, more, err := v.backendRules(ctx, p, true)
	if err != nil {
		return nil, err
	}
	return warnings, invalidObject(kindPool, p.Name, append(errs, more...))
}

// ValidateUpdate implements admission.Validator. The backend was checked when the pool was
// created and cannot change, so a backend that has gone since is not a reason to refuse.
func (v *PoolValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *kvv1.KVCachePool) (admission.Warnings, error) {
	old, p := oldObj.DeepCopy(), newObj.DeepCopy()
	old.Default()
	p.Default()
	if equality.Semantic.DeepEqual(old.Spec, p.Spec) {
		return nil, nil
	}
	errs := append(validation.ValidatePool(p), validation.ValidatePoolUpdate(old, p)...)
	warnings, more, err := v.backendRules(ctx, p, false)
	if err != nil {
		return nil, err
	}
	return warnings, invalidObject(kindPool, p.Name, append(errs, more...))
}

// ValidateDelete implements admission.Validator.
func (v *PoolValidator) ValidateDelete(context.Context, *kvv1.KVCachePool) (admission.Warnings, error) {
	return nil, nil
}

// backendRules reads the pool's backend: on create it must exist and not be going away; a
// backend without a tenant ledger earns a warning.
func (v *PoolValidator) backendRules(ctx context.Context, p *kvv1.KVCachePool, create bool) (admission.Warnings, field.ErrorList, error) {
	name := poolBackend(p)
	if name == "" {
		return nil, nil, nil // ValidatePool reports it
	}
	bp := field.NewPath("spec", "backends").Index(0)
	b := &kvv1.KVCacheBackend{}
	found, err := readObject(ctx, v.Reader, client.ObjectKey{Name: name}, b)
	if err != nil {
		return nil, nil, readFailure("KVCacheBackend "+name, err)
	}
	if !found {
		if !create {
			return nil, nil, nil
		}
		e := field.NotFound(bp, name)
		e.Detail = "no KVCacheBackend has this name; create the KVCacheBackend first, then the KVCachePool, then its KVCachePoolBindings"
		return nil, field.ErrorList{e}, nil
	}
	var errs field.ErrorList
	if create && b.DeletionTimestamp != nil {
		errs = append(errs, field.Forbidden(bp, fmt.Sprintf("KVCacheBackend %s is being deleted, so no new pool may divide it; name another backend", name)))
	}
	var warnings admission.Warnings
	if keepsNoLedger(b) {
		warnings = append(warnings, fmt.Sprintf("KVCacheBackend %s keeps no tenant ledger (leader.multiTenancy: false): Binding ceilings on this pool are not enforced and every write lands in the store's default tenant", name))
	}
	return warnings, errs, nil
}

// BindingValidator validates KVCachePoolBindings.
type BindingValidator struct {
	Reader client.Reader
}

// ValidateCreate implements admission.Validator.
func (v *BindingValidator) ValidateCreate(ctx context.Context, obj *kvv1.KVCachePoolBinding) (admission.Warnings, error) {
	b := obj.DeepCopy()
	b.Default()
	pool, errs, err := v.readPool(ctx, b, true)
	if err != nil {
		return nil, err
	}
	errs = append(validation.ValidateBinding(b, pool), errs...)
	if pool != nil {
		more, err := v.domainRules(ctx, b, pool)
		if err != nil {
			return nil, err
		}
		errs = append(errs, more...)
	}
	return nil, invalidObject(kindBinding, b.Name, errs)
}

// ValidateUpdate implements admission.Validator. The pool and the domain are immutable, so the
// cross-object domain rules, judged when the Binding was created, are not judged again; the
// ceiling is checked against the pool's total when the pool can be read.
func (v *BindingValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *kvv1.KVCachePoolBinding) (admission.Warnings, error) {
	old, b := oldObj.DeepCopy(), newObj.DeepCopy()
	old.Default()
	b.Default()
	if equality.Semantic.DeepEqual(old.Spec, b.Spec) {
		return nil, nil
	}
	pool, _, err := v.readPool(ctx, b, false)
	if err != nil {
		return nil, err
	}
	errs := append(validation.ValidateBinding(b, pool), validation.ValidateBindingUpdate(old, b)...)
	return nil, invalidObject(kindBinding, b.Name, errs)
}

// ValidateDelete implements admission.Validator.
func (v *BindingValidator) ValidateDelete(context.Context, *kvv1.KVCachePoolBinding) (admission.Warnings, error) {
	return nil, nil
}

// readPool reads the pool a Binding names (nil when it names none or it does not exist). On
// create a missing or deleting pool is refused.
func (v *BindingValidator) readPool(ctx context.Context, b *kvv1.KVCachePoolBinding, create bool) (*kvv1.KVCachePool, field.ErrorList, error) {
	name := b.Spec.PoolRef.Name
	if name == "" {
		return nil, nil, nil // ValidateBinding reports it
	}
	pp := field.NewPath("spec", "poolRef", "name")
	p := &kvv1.KVCachePool{}
	found, err := readObject(ctx, v.Reader, client.ObjectKey{Name: name}, p)
	if err != nil {
		return nil, nil, readFailure("KVCachePool "+name, err)
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
func (v *BindingValidator) domainRules(ctx context.Context, b *kvv1.KVCachePoolBinding, pool *kvv1.KVCachePool) (field.ErrorList, error) {
	backend := poolBackend(pool)
	if backend == "" {
		return nil, nil
	}
	pools := &kvv1.KVCachePoolList{}
	if err := v.Reader.List(ctx, pools); err != nil {
		return nil, readFailure("the KVCachePools", err)
	}
	onBackend := map[string]bool{pool.Name: true}
	for i := range pools.Items {
		if poolBackend(&pools.Items[i]) == backend {
			onBackend[pools.Items[i].Name] = true
		}
	}
	bindings := &kvv1.KVCachePoolBindingList{}
	if err := v.Reader.List(ctx, bindings); err != nil {
		return nil, readFailure("the KVCachePoolBindings", err)
	}
	others := make([]kvv1.KVCachePoolBinding, 0, len(bindings.Items))
	for _, o := range bindings.Items {
		if (o.Namespace == b.Namespace && o.Name == b.Name) || !onBackend[o.Spec.PoolRef.Name] {
			continue
		}
		o.Default()
		others = append(others, o)
	}
	sort.Slice(others, func(i, j int) bool {
		return others[i].Namespace+"/"+others[i].Name < others[j].Namespace+"/"+others[j].Name
	})

	dp := field.NewPath("spec", "domain", "name")
	domain := b.Spec.Domain.Name
	var errs field.ErrorList
	for _, o := range others {
		if o.Spec.Domain.Name == domain {
			e := field.Duplicate(dp, domain)
			e.Detail = fmt.Sprintf("already registered on the master of KVCacheBackend %s by KVCachePoolBinding %s/%s; name a different domain", backend, o.Namespace, o.Name)
			errs = append(errs, e)
			break
		}
	}
	i := slices.IndexFunc(others, func(o kvv1.KVCachePoolBinding) bool { return o.Spec.Domain.Name != domain })
	if i < 0 {
		return errs, nil
	}
	be := &kvv1.KVCacheBackend{}
	found, err := readObject(ctx, v.Reader, client.ObjectKey{Name: backend}, be)
	if err != nil {
		return nil, readFailure("KVCacheBackend "+backend, err)
	}
	if found && keepsNoLedger(be) {
		o := others[i]
		errs = append(errs, field.Forbidden(dp, fmt.Sprintf("KVCacheBackend %s keeps no tenant ledger (leader.multiTenancy: false), so every write lands in one default tenant and the backend carries one domain only: domain %q is registered there by KVCachePoolBinding %s/%s; attach through that Binding, or use a backend with multiTenancy: true for a second domain", backend, o.Spec.Domain.Name, o.Namespace, o.Name)))
	}
	return errs, nil
}

// ModelDeploymentValidator validates ModelDeployments.
type ModelDeploymentValidator struct {
	Reader client.Reader
}

// ValidateCreate implements admission.Validator.
func (v *ModelDeploymentValidator) ValidateCreate(ctx context.Context, obj *kvv1.ModelDeployment) (admission.Warnings, error) {
	md := obj.DeepCopy()
	md.Default()
	return nil, v.validate(ctx, md, true)
}

// ValidateUpdate implements admission.Validator.
func (v *ModelDeploymentValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *kvv1.ModelDeployment) (admission.Warnings, error) {
	old, md := oldObj.DeepCopy(), newObj.DeepCopy()
	old.Default()
	md.Default()
	if equality.Semantic.DeepEqual(old.Spec, md.Spec) {
		return nil, nil
	}
	attaching := old.Spec.KVCache == nil || md.Spec.KVCache == nil || old.Spec.KVCache.PoolRef.Name != md.Spec.KVCache.PoolRef.Name
	return nil, v.validate(ctx, md, attaching)
}

// ValidateDelete implements admission.Validator.
func (v *ModelDeploymentValidator) ValidateDelete(context.Context, *kvv1.ModelDeployment) (admission.Warnings, error) {
	return nil, nil
}

// validate runs the shape rules and, with a cache attached, the rules injection applies to a
// Pod: the Binding must exist, the pool's transport must suit every role's engine, and no
// role may carry a key the attachment owns. attaching is true when the deployment newly
// names its Binding (create, or another Binding), when a Binding being deleted is refused.
func (v *ModelDeploymentValidator) validate(ctx context.Context, md *kvv1.ModelDeployment, attaching bool) error {
	errs := validation.ValidateModelDeployment(md)
	if c := md.Spec.KVCache; c != nil && c.PoolRef.Name != "" {
		roleEngines, err := v.roleEngines(ctx, md)
		if err != nil {
			return err
		}
		value, err := settingValue(ctx, v.Reader, kvv1.SettingKVCacheDtypeOwned)
		if err != nil {
			return err
		}
		dtypeOwned := kvv1.DtypeOwned(value)
		more, err := v.attachment(ctx, md, roleEngines, attaching, dtypeOwned)
		if err != nil {
			return err
		}
		errs = append(errs, more...)
		errs = append(errs, ownedKeys(md, roleEngines, dtypeOwned)...)
	}
	return invalidObject(kindModelDeployment, md.Name, errs)
}

// roleEngine is the engine a role runs and, for vLLM-Ascend, the InstanceType that selects it.
type roleEngine struct {
	engine       engines.Engine
	instanceType string
}

// roleEngines resolves each role's engine: SGLang, or vLLM, which runs as vLLM-Ascend on an
// InstanceType whose accelerator manufacturer is ascend. A role whose InstanceType does not
// exist is judged as plain vLLM. nil when the engine name is not one this API knows
// (ValidateModelDeployment reports it).
func (v *ModelDeploymentValidator) roleEngines(ctx context.Context, md *kvv1.ModelDeployment) ([]roleEngine, error) {
	var base engines.Engine
	switch md.Spec.Engine.Name {
	case kvv1.EngineVLLM:
		base = engines.VLLM
	case kvv1.EngineSGLang:
		base = engines.SGLang
	default:
		return nil, nil
	}
	types := map[string]*kvv1.InstanceType{}
	out := make([]roleEngine, len(md.Spec.Roles))
	for i, r := range md.Spec.Roles {
		out[i] = roleEngine{engine: base}
		if base.Name != engines.VLLM.Name || r.InstanceType == "" {
			continue
		}
		it, seen := types[r.InstanceType]
		if !seen {
			it = &kvv1.InstanceType{}
			found, err := readObject(ctx, v.Reader, client.ObjectKey{Name: r.InstanceType}, it)
			if err != nil {
				return nil, readFailure("InstanceType "+r.InstanceType, err)
			}
			if !found {
				it = nil
			}
			types[r.InstanceType] = it
		}
		// The engine the render will run: one rule, generator.EngineFor.
		if e := generator.EngineFor(md, it); e.ID == engines.VLLMAscend.ID {
			out[i] = roleEngine{engine: e, instanceType: r.InstanceType}
		}
	}
	return out, nil
}

// attachment resolves Binding -> pool -> backend and checks that every role's engine can use
// the backend's transport, as injection does for a Pod.
func (v *ModelDeploymentValidator) attachment(ctx context.Context, md *kvv1.ModelDeployment, roleEngines []roleEngine, attaching, dtypeOwned bool) (field.ErrorList, error) {
	bp := field.NewPath("spec", "kvCache", "poolRef", "name")
	name := md.Spec.KVCache.PoolRef.Name
	binding := &kvv1.KVCachePoolBinding{}
	found, err := readObject(ctx, v.Reader, client.ObjectKey{Namespace: md.Namespace, Name: name}, binding)
	if err != nil {
		return nil, readFailure(fmt.Sprintf("KVCachePoolBinding %s/%s", md.Namespace, name), err)
	}
	if !found {
		e := field.NotFound(bp, name)
		e.Detail = fmt.Sprintf("no KVCachePoolBinding of this name in namespace %s; name a KVCachePoolBinding in this namespace (an administrator grants a namespace a pool with one), or remove spec.kvCache", md.Namespace)
		return field.ErrorList{e}, nil
	}
	if attaching && binding.DeletionTimestamp != nil {
		return field.ErrorList{field.Forbidden(bp, fmt.Sprintf("KVCachePoolBinding %s/%s is being deleted, so new workloads may not attach to it; name another Binding", md.Namespace, name))}, nil
	}
	poolName := binding.Spec.PoolRef.Name
	pool := &kvv1.KVCachePool{}
	found, err = readObject(ctx, v.Reader, client.ObjectKey{Name: poolName}, pool)
	if err != nil {
		return nil, readFailure("KVCachePool "+poolName, err)
	}
	if !found {
		return field.ErrorList{field.Invalid(bp, name, fmt.Sprintf("KVCachePool %q, named by KVCachePoolBinding %s/%s, does not exist; ask an administrator to create it or to fix the Binding's spec.poolRef", poolName, md.Namespace, name))}, nil
	}
	backendName := poolBackend(pool)
	if backendName == "" {
		return nil, nil // the pool's own validation refuses this
	}
	backend := &kvv1.KVCacheBackend{}
	found, err = readObject(ctx, v.Reader, client.ObjectKey{Name: backendName}, backend)
	if err != nil {
		return nil, readFailure("KVCacheBackend "+backendName, err)
	}
	if !found {
		return field.ErrorList{field.Invalid(bp, name, fmt.Sprintf("KVCacheBackend %q, the backend of KVCachePool %q, does not exist; ask an administrator to create it", backendName, poolName))}, nil
	}
	backend.Default()

	// One check per distinct engine, in role order; vLLM-Ascend names the roles and the
	// InstanceTypes that select it, since the deployment itself says vLLM.
	var errs field.ErrorList
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
		protocol, rf := injection.Transport(re.engine, backend, poolName)
		if rf == nil {
			errs = append(errs, fabricRules(md, protocol, poolName)...)
			continue
		}
		errs = append(errs, field.Invalid(bp, name, prefix+rf.Message))
	}
	return errs, nil
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

// SettingValidator validates Settings.
type SettingValidator struct {
	Reader client.Reader
}

// ValidateCreate implements admission.Validator.
func (v *SettingValidator) ValidateCreate(_ context.Context, obj *kvv1.Setting) (admission.Warnings, error) {
	s := obj.DeepCopy()
	s.Default()
	return nil, invalidObject(kindSetting, s.Name, validation.ValidateSetting(s))
}

// ValidateUpdate implements admission.Validator.
func (v *SettingValidator) ValidateUpdate(_ context.Context, oldObj, newObj *kvv1.Setting) (admission.Warnings, error) {
	old, s := oldObj.DeepCopy(), newObj.DeepCopy()
	old.Default()
	s.Default()
	if equality.Semantic.DeepEqual(old.Spec, s.Spec) {
		return nil, nil
	}
	return nil, invalidObject(kindSetting, s.Name, validation.ValidateSetting(s))
}

// ValidateDelete implements admission.Validator.
func (v *SettingValidator) ValidateDelete(context.Context, *kvv1.Setting) (admission.Warnings, error) {
	return nil, nil
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
