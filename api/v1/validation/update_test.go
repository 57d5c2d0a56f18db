package validation

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// The reorder message, spelled out so that a changed message fails a test.
const moveMsg = "a group's position is its identity: members are matched by index, so moving a group restarts and re-registers every member of both; append instead (only trailing groups may be removed)"

func moved(at, from int) string {
	return membersPath + "[" + itoa(at) + "].nodeSelector: Forbidden: members[" + itoa(from) + "] had this nodeSelector before the update, so the update moves that group from position " + itoa(from) + " to position " + itoa(at) + ": " + moveMsg
}

func itoa(i int) string { return strconv.Itoa(i) }

// threeGroups is the walkthrough backend with three groups selecting pools a, b and c.
func threeGroups() *kvv1.KVCacheBackend {
	b := walkthroughBackend()
	addGroups(b, 2)
	for i, pool := range []string{"a", "b", "c"} {
		group(b, i).NodeSelector = map[string]string{"pool": pool}
	}
	return b
}

func TestValidateBackendUpdate(t *testing.T) {
	const (
		branchToExternal = "spec.connection: Forbidden: the managed/external branch cannot change after creation (this backend is managed, the update makes it external); create a new KVCacheBackend instead"
		branchToManaged  = "spec.connection: Forbidden: the managed/external branch cannot change after creation (this backend is external, the update makes it managed); create a new KVCacheBackend instead"
		mediumDRAMToVRAM = membersPath + "[0].medium: Forbidden: a member group's medium is immutable (the group at this position is DRAM; its members registered DRAM segments with the master); keep DRAM here and append a new group with medium: VRAM instead"
		mediumVRAMToDRAM = membersPath + "[1].medium: Forbidden: a member group's medium is immutable (the group at this position is VRAM; its members registered VRAM segments with the master); keep VRAM here and append a new group with medium: DRAM instead"
	)
	tests := []struct {
		name string
		old  func() *kvv1.KVCacheBackend
		// mutate turns a copy of old into the updated object.
		mutate func(b *kvv1.KVCacheBackend)
		want   []string
	}{
		{
			name:   "an unchanged backend passes",
			old:    threeGroups,
			mutate: func(*kvv1.KVCacheBackend) {},
		},
		{
			name: "appending a group passes",
			old:  walkthroughBackend,
			mutate: func(b *kvv1.KVCacheBackend) {
				addGroups(b, 1)
				group(b, 1).NodeSelector = map[string]string{"pool": "gpu"}
			},
		},
		{
			name: "removing trailing groups passes",
			old:  threeGroups,
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.Managed.Members = b.Spec.Connection.Managed.Members[:1]
			},
		},
		{
			name: "widening a group's nodeSelector in place passes",
			old:  threeGroups,
			mutate: func(b *kvv1.KVCacheBackend) {
				group(b, 1).NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
			},
		},
		{
			name: "changing a group's capacity and transport passes",
			old:  walkthroughBackend,
			mutate: func(b *kvv1.KVCacheBackend) {
				group(b, 0).CapacityPerMember = resource.MustParse("16Gi")
				group(b, 0).Transport = &kvv1.Transport{Protocol: kvv1.ProtocolRDMA}
			},
		},
		{
			name: "appending a VRAM group on the nodes of the DRAM group passes: the DRAM group stays where it is",
			old:  walkthroughBackend,
			mutate: func(b *kvv1.KVCacheBackend) {
				addGroups(b, 1)
				group(b, 1).Medium = kvv1.MediumVRAM
			},
		},
		{
			name:   "a medium left empty is DRAM, so DRAM to empty passes",
			old:    walkthroughBackend,
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).Medium = "" },
		},
		{
			name:   "turning multi-tenancy off is not judged here (the webhook reads the pools)",
			old:    walkthroughBackend,
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).MultiTenancy = ptr.To(false) },
		},
		{
			name: "managed to external is refused",
			old:  walkthroughBackend,
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, clientEP(), adminEP())
			},
			want: []string{branchToExternal},
		},
		{
			name: "external to managed is refused",
			old: func() *kvv1.KVCacheBackend {
				b := walkthroughBackend()
				external(b, clientEP(), adminEP())
				return b
			},
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.External = nil
				b.Spec.Connection.Managed = walkthroughBackend().Spec.Connection.Managed
			},
			want: []string{branchToManaged},
		},
		{
			name: "an update setting both branches is left to ValidateBackend",
			old:  walkthroughBackend,
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.External = &kvv1.ExternalConnection{Endpoints: []kvv1.Endpoint{clientEP(), adminEP()}}
			},
		},
		{
			name:   "DRAM to VRAM at the same position is refused, saying to append a group",
			old:    walkthroughBackend,
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).Medium = kvv1.MediumVRAM },
			want:   []string{mediumDRAMToVRAM},
		},
		{
			name: "VRAM to DRAM at the same position is refused, saying to append a group",
			old: func() *kvv1.KVCacheBackend {
				b := threeGroups()
				group(b, 1).Medium = kvv1.MediumVRAM
				return b
			},
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 1).Medium = kvv1.MediumDRAM },
			want:   []string{mediumVRAMToDRAM},
		},
		{
			name: "swapping two groups is refused once, naming both positions",
			old:  threeGroups,
			mutate: func(b *kvv1.KVCacheBackend) {
				m := b.Spec.Connection.Managed
				m.Members[0], m.Members[1] = m.Members[1], m.Members[0]
			},
			want: []string{moved(0, 1)},
		},
		{
			name: "rotating three groups is refused at every position",
			old:  threeGroups,
			mutate: func(b *kvv1.KVCacheBackend) {
				m := b.Spec.Connection.Managed
				m.Members = append(m.Members[1:], m.Members[0])
			},
			want: []string{moved(0, 1), moved(1, 2), moved(2, 0)},
		},
		{
			name: "removing a group from the middle is refused: the groups after it move",
			old:  threeGroups,
			mutate: func(b *kvv1.KVCacheBackend) {
				m := b.Spec.Connection.Managed
				m.Members = append(m.Members[:1], m.Members[2])
			},
			want: []string{moved(1, 2)},
		},
		{
			name: "removing the first group is refused",
			old:  threeGroups,
			mutate: func(b *kvv1.KVCacheBackend) {
				m := b.Spec.Connection.Managed
				m.Members = m.Members[1:]
			},
			want: []string{moved(0, 1), moved(1, 2)},
		},
		{
			name: "inserting a group before the others is refused",
			old:  threeGroups,
			mutate: func(b *kvv1.KVCacheBackend) {
				m := b.Spec.Connection.Managed
				g := *m.Members[0].DeepCopy()
				g.NodeSelector = map[string]string{"pool": "new"}
				m.Members = append([]kvv1.MemberGroup{g}, m.Members...)
			},
			want: []string{moved(1, 0), moved(2, 1), moved(3, 2)},
		},
		{
			name: "a swap of groups with different media reports the move and both media",
			old: func() *kvv1.KVCacheBackend {
				b := threeGroups()
				group(b, 1).Medium = kvv1.MediumVRAM
				return b
			},
			mutate: func(b *kvv1.KVCacheBackend) {
				m := b.Spec.Connection.Managed
				m.Members[0], m.Members[1] = m.Members[1], m.Members[0]
			},
			want: []string{
				membersPath + "[0].medium: Forbidden: a member group's medium is immutable (the group at this position is DRAM; its members registered DRAM segments with the master); keep DRAM here and append a new group with medium: VRAM instead",
				mediumVRAMToDRAM,
				moved(0, 1),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := tt.old()
			b := old.DeepCopy()
			tt.mutate(b)
			assert.Equal(t, tt.want, errStrings(ValidateBackendUpdate(old, b)))
		})
	}
}

func TestValidateBindingUpdate(t *testing.T) {
	const fix = "create a new KVCachePoolBinding for another domain"
	tests := []struct {
		name   string
		old    func(b *kvv1.KVCachePoolBinding)
		mutate func(b *kvv1.KVCachePoolBinding)
		want   []string
	}{
		{
			name:   "raising the ceiling passes",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.MustParse("12Gi") },
		},
		{
			name:   "an omitted domain name equals default",
			old:    func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Name = "" },
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Name = "default" },
		},
		{
			name:   "another pool is refused, saying to create a new Binding",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.PoolRef.Name = "shared-vram" },
			want:   []string{"spec.poolRef.name: Forbidden: is immutable (it is shared-dram): a Binding grants access to one pool, and its domain is registered on that pool's master; create a new KVCachePoolBinding for another pool"},
		},
		{
			name:   "another domain name is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Name = "llama" },
			want:   []string{"spec.domain.name: Forbidden: is immutable (it is default): it is the store tenant this Binding's workloads write under; " + fix},
		},
		{
			name:   "another blockSize is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.BlockSize = 128 },
			want:   []string{"spec.domain.blockSize: Forbidden: is immutable (it is 64): workloads sharing the domain read each other's blocks, so they must cut them the same size; " + fix},
		},
		{
			name:   "another dtype is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Dtype = "fp8" },
			want:   []string{"spec.domain.dtype: Forbidden: is immutable (it is bfloat16): workloads sharing the domain read each other's blocks, so they must write the same dtype; " + fix},
		},
		{
			name: "every changed field is reported",
			mutate: func(b *kvv1.KVCachePoolBinding) {
				b.Spec.PoolRef.Name = "other"
				b.Spec.Domain = kvv1.Domain{Name: "x", BlockSize: 16, Dtype: "fp8"}
			},
			want: []string{
				"spec.poolRef.name: Forbidden: is immutable (it is shared-dram): a Binding grants access to one pool, and its domain is registered on that pool's master; create a new KVCachePoolBinding for another pool",
				"spec.domain.name: Forbidden: is immutable (it is default): it is the store tenant this Binding's workloads write under; " + fix,
				"spec.domain.blockSize: Forbidden: is immutable (it is 64): workloads sharing the domain read each other's blocks, so they must cut them the same size; " + fix,
				"spec.domain.dtype: Forbidden: is immutable (it is bfloat16): workloads sharing the domain read each other's blocks, so they must write the same dtype; " + fix,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := walkthroughBinding()
			if tt.old != nil {
				tt.old(old)
			}
			b := old.DeepCopy()
			tt.mutate(b)
			assert.Equal(t, tt.want, errStrings(ValidateBindingUpdate(old, b)))
		})
	}
}

func TestValidatePoolUpdate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *kvv1.KVCachePool)
		want   []string
	}{
		{
			name:   "raising the total passes",
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Quota.Total = resource.MustParse("32Gi") },
		},
		{
			name:   "another backend is refused, saying to create a new pool",
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Backends = []string{"mooncake-vram"} },
			want:   []string{"spec.backends: Forbidden: is immutable (it is mooncake-dram): the pool's Bindings registered their domains on that backend's master; create a new KVCachePool for another backend"},
		},
		{
			name:   "adding a second backend is refused as a change",
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Backends = append(p.Spec.Backends, "mooncake-vram") },
			want:   []string{"spec.backends: Forbidden: is immutable (it is mooncake-dram): the pool's Bindings registered their domains on that backend's master; create a new KVCachePool for another backend"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := walkthroughPool()
			p := old.DeepCopy()
			tt.mutate(p)
			assert.Equal(t, tt.want, errStrings(ValidatePoolUpdate(old, p)))
		})
	}
}

// walkthroughDeployment is the walkthrough's ModelDeployment (qwen-chat in team-a), defaulted.
func walkthroughDeployment() *kvv1.ModelDeployment {
	md := &kvv1.ModelDeployment{}
	md.Name, md.Namespace = "qwen-chat", "team-a"
	md.Spec.Model.Name = "Qwen/Qwen2.5-7B-Instruct"
	md.Spec.Engine = kvv1.Engine{Name: kvv1.EngineVLLM, Version: "0.29.0"}
	md.Spec.KVCache = &kvv1.KVCacheAttachment{PoolRef: kvv1.LocalReference{Name: "team-a"}}
	md.Spec.Roles = []kvv1.Role{{Name: "server", Resources: kvv1.RoleResources{Accelerator: 1}}}
	md.Default()
	return md
}

func role(name string, kind kvv1.RoleKind) kvv1.Role {
	return kvv1.Role{Name: name, Kind: kind, Replicas: ptr.To[int32](1)}
}

func TestValidateModelDeployment(t *testing.T) {
	const (
		roleNameMsg = "must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit): its Deployment and Service are named <deployment>-<role>"
		prefillOnly = `spec.roles[0].kind: Invalid value: "Prefill": a Prefill role hands its KV cache to a Decode role and this deployment has none; add a role with kind: Decode, or set kind: Server`
		decodeOnly  = `spec.roles[0].kind: Invalid value: "Decode": a Decode role receives its KV cache from a Prefill role and this deployment has none; add a role with kind: Prefill, or set kind: Server`
	)
	tests := []struct {
		name   string
		mutate func(md *kvv1.ModelDeployment)
		want   []string
	}{
		// Passing deployments.
		{
			name:   "the walkthrough deployment has no errors",
			mutate: func(*kvv1.ModelDeployment) {},
		},
		{
			name:   "a deployment without kvCache passes",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.KVCache = nil },
		},
		{
			name: "a Prefill and a Decode role pass",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.Roles = []kvv1.Role{role("prefill", kvv1.RolePrefill), role("decode", kvv1.RoleDecode)}
			},
		},
		{
			name: "several Server roles beside one Prefill/Decode pair pass",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.Roles = []kvv1.Role{role("a", kvv1.RoleServer), role("b", kvv1.RoleServer), role("p", kvv1.RolePrefill), role("d", kvv1.RoleDecode)}
			},
		},
		{
			name: "ten roles pass",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.Roles = nil
				for i := range 10 {
					md.Spec.Roles = append(md.Spec.Roles, role("r"+itoa(i), kvv1.RoleServer))
				}
			},
		},
		{
			name:   "zero replicas pass",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Replicas = ptr.To[int32](0) },
		},
		{
			name: "SGLang passes",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.Engine = kvv1.Engine{Name: kvv1.EngineSGLang, Version: "0.5.18"}
			},
		},
		{
			name:   "a role name that makes a 63-character Service name passes",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Name = strings.Repeat("s", 63-len("qwen-chat-")) },
		},
		{
			name:   "a role name that starts with a digit passes: the Service name starts with the deployment's",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Name = "0p" },
		},
		{
			name: "an unnamed deployment (generateName) is not judged on Service name length",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Name = ""
				md.Spec.Roles[0].Name = strings.Repeat("s", 63)
			},
		},

		// Model and engine.
		{
			name:   "a missing model name is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Model.Name = "" },
			want:   []string{"spec.model.name: Required value: name the model to serve, e.g. Qwen/Qwen2.5-7B-Instruct"},
		},
		{
			name:   "a missing engine name is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Engine.Name = "" },
			want:   []string{"spec.engine.name: Required value: name the engine: vLLM or SGLang"},
		},
		{
			name:   "an unknown engine is refused, listing the engines",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Engine.Name = "TensorRT-LLM" },
			want:   []string{`spec.engine.name: Unsupported value: "TensorRT-LLM": supported values: "vLLM", "SGLang"`},
		},
		{
			name:   "engine vllm is refused with the case-sensitive spelling",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Engine.Name = "vllm" },
			want:   []string{`spec.engine.name: Unsupported value: "vllm": supported values: "vLLM", "SGLang"; the value is case-sensitive: write vLLM`},
		},
		{
			name:   "engine vLLM-Ascend is refused, saying an ascend InstanceType selects it",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Engine.Name = "vLLM-Ascend" },
			want:   []string{`spec.engine.name: Unsupported value: "vLLM-Ascend": supported values: "vLLM", "SGLang"; write vLLM: a role whose InstanceType's accelerator manufacturer is ascend runs vLLM as vLLM-Ascend`},
		},
		{
			name:   "a missing engine version is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Engine.Version = "" },
			want:   []string{"spec.engine.version: Required value: name the engine version, e.g. 0.29.0: it selects the engine image and the store client bundled in it"},
		},
		{
			name:   "kvCache without a Binding name is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.KVCache.PoolRef.Name = "" },
			want:   []string{"spec.kvCache.poolRef.name: Required value: name a KVCachePoolBinding in this namespace, or remove spec.kvCache to run without a shared cache"},
		},

		// Roles.
		{
			name:   "no roles are refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles = nil },
			want:   []string{"spec.roles: Required value: at least one role is needed, e.g. {name: server, kind: Server}"},
		},
		{
			name: "eleven roles are refused",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.Roles = nil
				for i := range 11 {
					md.Spec.Roles = append(md.Spec.Roles, role("r"+string(rune('a'+i)), kvv1.RoleServer))
				}
			},
			want: []string{"spec.roles: Too many: 11: must have at most 10 items"},
		},
		{
			name:   "a role without a name is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Name = "" },
			want:   []string{"spec.roles[0].name: Required value: name the role, e.g. server: its Deployment and Service are named <deployment>-<role>"},
		},
		{
			name:   "a role name with uppercase letters is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Name = "Server" },
			want:   []string{`spec.roles[0].name: Invalid value: "Server": ` + roleNameMsg},
		},
		{
			name:   "a role name ending in a dash is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Name = "server-" },
			want:   []string{`spec.roles[0].name: Invalid value: "server-": ` + roleNameMsg},
		},
		{
			name:   "a role name that makes a 64-character Service name is refused with the room left",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Name = strings.Repeat("s", 54) },
			want:   []string{`spec.roles[0].name: Invalid value: "` + strings.Repeat("s", 54) + `": makes the Service name qwen-chat-` + strings.Repeat("s", 54) + ` 64 characters long, over the limit of 63; shorten the role name to at most 53 characters`},
		},
		{
			name: "two roles with one name are refused, naming the first",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.Roles = []kvv1.Role{role("server", kvv1.RoleServer), role("server", kvv1.RoleServer)}
			},
			want: []string{`spec.roles[1].name: Duplicate value: "server": roles[0] has this name already: each role renders its own Deployment and Service, <deployment>-<role>; rename one`},
		},
		{
			name:   "an unknown role kind is refused, listing the kinds",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Kind = "Both" },
			want:   []string{`spec.roles[0].kind: Unsupported value: "Both": supported values: "Server", "Prefill", "Decode"`},
		},
		{
			name:   "a role kind in lowercase is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Kind = "prefill" },
			want:   []string{`spec.roles[0].kind: Unsupported value: "prefill": supported values: "Server", "Prefill", "Decode"`},
		},
		{
			name: "a second Prefill role is refused, naming the first",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.Roles = []kvv1.Role{role("p1", kvv1.RolePrefill), role("d", kvv1.RoleDecode), role("p2", kvv1.RolePrefill)}
			},
			want: []string{`spec.roles[2].kind: Duplicate value: "Prefill": roles[0] is already the Prefill role: a deployment has at most one Prefill role and one Decode role (only Server roles may repeat); scale that role with replicas instead`},
		},
		{
			name: "a second Decode role is refused, naming the first",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.Roles = []kvv1.Role{role("p", kvv1.RolePrefill), role("d1", kvv1.RoleDecode), role("d2", kvv1.RoleDecode)}
			},
			want: []string{`spec.roles[2].kind: Duplicate value: "Decode": roles[1] is already the Decode role: a deployment has at most one Prefill role and one Decode role (only Server roles may repeat); scale that role with replicas instead`},
		},
		{
			name:   "a Prefill role without a Decode role is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Kind = kvv1.RolePrefill },
			want:   []string{prefillOnly},
		},
		{
			name:   "a Decode role without a Prefill role is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Kind = kvv1.RoleDecode },
			want:   []string{decodeOnly},
		},
		{
			name:   "negative replicas are refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Replicas = ptr.To[int32](-1) },
			want:   []string{"spec.roles[0].replicas: Invalid value: -1: must not be negative; 0 keeps the role with no Pods"},
		},
		{
			name:   "a negative accelerator count is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Resources.Accelerator = -1 },
			want:   []string{"spec.roles[0].resources.accelerator: Invalid value: -1: must not be negative: it is the number of accelerator devices each replica requests, e.g. 1"},
		},
		{
			name:   "a negative interface count is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Spec.Roles[0].Resources.Interface = -2 },
			want:   []string{"spec.roles[0].resources.interface: Invalid value: -2: must not be negative: it is the number of RDMA or EFA devices each replica requests; 0 requests none"},
		},
		{
			name: "fabric interfaces without a cache are refused: they follow the pool's transport",
			mutate: func(md *kvv1.ModelDeployment) {
				md.Spec.KVCache = nil
				md.Spec.Roles[0].Resources.Interface = 1
			},
			want: []string{"spec.roles[0].resources.interface: Invalid value: 1: fabric interfaces follow the cache pool's transport and this deployment attaches to no cache; set spec.kvCache, or set interface to 0"},
		},

		// The deployment's own name, which every Service name starts with.
		{
			name:   "a deployment name starting with a digit is refused once, not per role",
			mutate: func(md *kvv1.ModelDeployment) { md.Name = "7b-chat" },
			want:   []string{`metadata.name: Invalid value: "7b-chat": must start with a letter and hold only lowercase letters, digits and '-': each role's Service is named <name>-<role>, which must be a DNS-1035 label`},
		},
		{
			name:   "a deployment name with a dot is refused",
			mutate: func(md *kvv1.ModelDeployment) { md.Name = "qwen2.5" },
			want:   []string{`metadata.name: Invalid value: "qwen2.5": must start with a letter and hold only lowercase letters, digits and '-': each role's Service is named <name>-<role>, which must be a DNS-1035 label`},
		},
		{
			name:   "a deployment name of 62 characters leaves no room for a role",
			mutate: func(md *kvv1.ModelDeployment) { md.Name = strings.Repeat("q", 62) },
			want:   []string{`metadata.name: Invalid value: "` + strings.Repeat("q", 62) + `": is 62 characters and leaves no room for a role name: each role's Service is named <name>-<role>, at most 63 characters; shorten the name`},
		},
		{
			name:   "a deployment name of 61 characters leaves room for a one-letter role",
			mutate: func(md *kvv1.ModelDeployment) { md.Name = strings.Repeat("q", 61); md.Spec.Roles[0].Name = "s" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := walkthroughDeployment()
			require.Empty(t, ValidateModelDeployment(md), "the walkthrough deployment must start valid")
			tt.mutate(md)
			assert.Equal(t, tt.want, errStrings(ValidateModelDeployment(md)))
		})
	}
}
