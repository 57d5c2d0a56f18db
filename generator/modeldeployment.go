package generator

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/values"
	"github.com/kvcache-operator/kvcache/vocab"
)

// CacheInput is a resolved cache attachment, a Pod's or a ModelDeployment's: what its Binding,
// pool and backend resolve to (injection.Resolve, for both).
type CacheInput struct {
	// Master is the pool's clientEndpoint.
	Master string
	// Protocol is the pool's transport in store spelling.
	Protocol string
	// Tenant is the Binding's domain (a master without a tenant ledger ignores it).
	Tenant string
	// Dtype is the Binding's dtype; "" when the Setting leaves the dtype to containers.
	Dtype string
}

// ModelDeploymentInput is everything a ModelDeployment's rendered workloads depend on.
type ModelDeploymentInput struct {
	// Deployment, defaulted.
	Deployment *kvv1.ModelDeployment
	// InstanceTypes by name (the roles' instanceType references).
	InstanceTypes map[string]*kvv1.InstanceType
	// Cache is nil when the deployment runs with no shared cache.
	Cache *CacheInput
}

type mdValues struct {
	Names     vocab.Names
	Name      string
	Namespace string
	Owner     metav1.OwnerReference
	Roles     []roleValues
}

type roleValues struct {
	Name         string
	ObjectName   string
	Kind         kvv1.RoleKind
	Replicas     int32
	Image        string
	Command      []string
	Args         []string
	Env          []corev1.EnvVar
	Port         int32
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Resources    *corev1.ResourceRequirements
	Volumes      []corev1.Volume
	VolumeMounts []corev1.VolumeMount

	engine engines.Engine
	role   engines.Role
}

// RoleObjectName is the Deployment and Service name of a role.
func RoleObjectName(md, role string) string { return md + "-" + role }

// EngineFor is the engine a role runs: vLLM on an ascend InstanceType is vLLM-Ascend.
func EngineFor(md *kvv1.ModelDeployment, it *kvv1.InstanceType) engines.Engine {
	if md.Spec.Engine.Name == kvv1.EngineSGLang {
		return engines.SGLang
	}
	if it != nil && it.Spec.Accelerator != nil && strings.EqualFold(it.Spec.Accelerator.Manufacturer, kvv1.ManufacturerAscend) {
		return engines.VLLMAscend
	}
	return engines.VLLM
}

// RoleOf is the engines' name for a role kind.
func RoleOf(k kvv1.RoleKind) engines.Role {
	switch k {
	case kvv1.RolePrefill:
		return engines.RolePrefill
	case kvv1.RoleDecode:
		return engines.RoleDecode
	}
	return engines.RoleNone
}

// FabricResource is the device-plugin resource and count that give a Pod n fabric interfaces
// of a transport: rdma (one shared device, or n exclusive ones) or efa. ok is false for other
// transports, which need no grant.
func FabricResource(protocol string, n int32, d values.Store) (string, int32, bool) {
	switch protocol {
	case "rdma":
		if n > 1 {
			return d.RDMAResource, n, true
		}
		return d.RDMASharedResource, 1, true
	case "efa":
		return d.EFAResource, n, true
	}
	return "", 0, false
}

// RenderModelDeployment renders a Deployment and a Service per role. With a cache attachment,
// each role's container receives its engine's fragment through the same generator template and
// merge rules Pod injection uses.
func (r *Renderer) RenderModelDeployment(in ModelDeploymentInput) ([]Object, error) {
	md := in.Deployment
	v := mdValues{
		Names: vocab.TemplateNames(), Name: md.Name, Namespace: md.Namespace,
		Owner: metav1.OwnerReference{APIVersion: kvv1.GroupVersion.String(), Kind: "ModelDeployment", Name: md.Name, UID: md.UID,
			Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)},
	}
	for _, role := range md.Spec.Roles {
		rv, err := r.roleValues(in, role)
		if err != nil {
			return nil, fmt.Errorf("ModelDeployment %s/%s: role %s: %w", md.Namespace, md.Name, role.Name, err)
		}
		v.Roles = append(v.Roles, rv)
	}
	stream, err := r.templates.ExecuteDir("modeldeployment", v)
	if err != nil {
		return nil, fmt.Errorf("render ModelDeployment %s/%s: %w", md.Namespace, md.Name, err)
	}
	objs, err := r.decoder.decodeAll("ModelDeployment "+md.Namespace+"/"+md.Name, stream)
	if err != nil {
		return nil, err
	}
	if in.Cache != nil {
		for _, o := range objs {
			d, ok := o.(*appsv1.Deployment)
			if !ok {
				continue
			}
			if err := r.attachCache(d, v.Roles, in.Cache); err != nil {
				return nil, err
			}
		}
	}
	if err := stampHashes(objs, nil); err != nil {
		return nil, err
	}
	SortObjects(objs)
	return objs, nil
}

func (r *Renderer) roleValues(in ModelDeploymentInput, role kvv1.Role) (roleValues, error) {
	md := in.Deployment
	d := r.defaults.ModelDeployment
	var it *kvv1.InstanceType
	if role.InstanceType != "" {
		var ok bool
		if it, ok = in.InstanceTypes[role.InstanceType]; !ok {
			return roleValues{}, fmt.Errorf("InstanceType %q does not exist", role.InstanceType)
		}
	}
	e := EngineFor(md, it)
	rv := roleValues{
		Name: role.Name, ObjectName: RoleObjectName(md.Name, role.Name), Kind: role.Kind,
		Replicas: 1, engine: e, role: RoleOf(role.Kind),
		Env: role.Env,
	}
	if role.Replicas != nil {
		rv.Replicas = *role.Replicas
	}
	ed, ok := d.Engines[e.ID]
	if !ok {
		return roleValues{}, fmt.Errorf("values/defaults.yaml has no modelDeployment.engines.%s", e.ID)
	}
	rv.Image, rv.Port = fmt.Sprintf(ed.Image, strings.TrimPrefix(md.Spec.Engine.Version, "v")), ed.Port
	rv.Command, rv.Args = e.ServeArgv(md.Spec.Model.Name, rv.Port)
	if role.Image != "" {
		rv.Image = role.Image
	}
	// A prefill or decode half is selected by its own flag on SGLang, with or without a store:
	// SGLang's disaggregation transfers KV between the halves itself.
	rv.Args = append(rv.Args, e.DisaggregationArgs(rv.role)...)
	rv.Args = append(rv.Args, role.ExtraArgs...)

	res := corev1.ResourceRequirements{}
	if it != nil {
		rv.NodeSelector, rv.Tolerations = it.Spec.NodeSelector, it.Spec.Tolerations
		if a := it.Spec.Accelerator; a != nil && role.Resources.Accelerator > 0 {
			n := int64(role.Resources.Accelerator)
			addQuantity(&res.Limits, corev1.ResourceName(a.ResourceName), *resource.NewQuantity(n, resource.DecimalSI))
			if q := it.Spec.CPUPerAccelerator; q != nil {
				addQuantity(&res.Requests, corev1.ResourceCPU, times(*q, n))
			}
			if q := it.Spec.MemoryPerAccelerator; q != nil {
				addQuantity(&res.Requests, corev1.ResourceMemory, times(*q, n))
			}
		}
	}
	if n := role.Resources.Interface; n > 0 {
		protocol := ""
		if in.Cache != nil {
			protocol = in.Cache.Protocol
		}
		name, count, ok := FabricResource(protocol, n, r.defaults.Store)
		if !ok {
			return roleValues{}, fmt.Errorf("resources.interface is %d but the cache's transport is %q: fabric interfaces are RDMA or EFA devices, so the pool must offer rdma or efa", n, protocol)
		}
		addQuantity(&res.Limits, corev1.ResourceName(name), *resource.NewQuantity(int64(count), resource.DecimalSI))
	}
	// The store client stages transfers in host memory no resources field shows; where the
	// role's memory is sized, make room for it (in the request as well as the limit, or the
	// scheduler's bookkeeping undercounts every replica).
	if in.Cache != nil {
		buf := *resource.NewQuantity(e.StagingBuffer, resource.BinarySI)
		for _, l := range []corev1.ResourceList{res.Requests, res.Limits} {
			if q, ok := l[corev1.ResourceMemory]; ok {
				q.Add(buf)
				l[corev1.ResourceMemory] = q
			}
		}
	}
	if len(res.Limits) > 0 || len(res.Requests) > 0 {
		rv.Resources = &res
	}
	if m := ed.DisaggregationHostMount; m != nil && rv.role != engines.RoleNone {
		rv.Volumes = append(rv.Volumes, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: m.Path}}})
		rv.VolumeMounts = append(rv.VolumeMounts, corev1.VolumeMount{Name: m.Name, MountPath: m.Path, ReadOnly: true})
	}
	return rv, nil
}

// attachCache gives a role's container the engine fragment through the edits Pod injection
// makes (engines.Edits), the managed tail included (SGLang's host-tier flag, or the retraction
// flag on the decode half its --disaggregation-mode selects).
func (r *Renderer) attachCache(d *appsv1.Deployment, roles []roleValues, c *CacheInput) error {
	var rv *roleValues
	for i := range roles {
		if roles[i].ObjectName == d.Name {
			rv = &roles[i]
		}
	}
	if rv == nil {
		return fmt.Errorf("rendered Deployment %s matches no role", d.Name)
	}
	frag, err := r.RenderFragment(FragmentInput{Engine: rv.engine, CacheInput: *c, Role: rv.role})
	if err != nil {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: d.Spec.Template.Spec}
	pod, err = rv.engine.Edits(pod, 0, frag, nil).ApplyToPod(pod)
	if err != nil {
		return fmt.Errorf("attach the cache to role %s: %w", rv.Name, err)
	}
	d.Spec.Template.ObjectMeta, d.Spec.Template.Spec = pod.ObjectMeta, pod.Spec
	return nil
}

func addQuantity(l *corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	if *l == nil {
		*l = corev1.ResourceList{}
	}
	(*l)[name] = q
}

func times(q resource.Quantity, n int64) resource.Quantity {
	out := resource.NewMilliQuantity(q.MilliValue()*n, q.Format)
	return *out
}

// RolesSummary is the ROLES column: replicas by kind, e.g. 2S or 1P2D.
func RolesSummary(md *kvv1.ModelDeployment) string {
	counts := map[kvv1.RoleKind]int32{}
	for _, r := range md.Spec.Roles {
		n := int32(1)
		if r.Replicas != nil {
			n = *r.Replicas
		}
		k := r.Kind
		if k == "" {
			k = kvv1.RoleServer
		}
		counts[k] += n
	}
	var b strings.Builder
	for _, k := range []struct {
		kind   kvv1.RoleKind
		letter string
	}{{kvv1.RoleServer, "S"}, {kvv1.RolePrefill, "P"}, {kvv1.RoleDecode, "D"}} {
		if c := counts[k.kind]; c > 0 {
			fmt.Fprintf(&b, "%d%s", c, k.letter)
		}
	}
	return b.String()
}
