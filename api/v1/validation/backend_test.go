package validation

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Field paths the backend messages are reported under.
const (
	leaderPath  = "spec.connection.managed.leader"
	membersPath = "spec.connection.managed.members"
	externalEPs = "spec.connection.external.endpoints"
)

// The reasons LeaderFlagRefusal gives, spelled out here rather than taken from the package, so a
// changed message fails a test.
const (
	wantReasonPorts    = "the operator sets it: the Service, probes and endpoints depend on the master's ports"
	wantReasonElection = "the operator derives the master's election from leader.electionBackend (Kubernetes: its launcher holds the leader's Lease and the master runs in its plain mode; Etcd: the master's own etcd HA mode at leader.etcd); set leader.electionBackend, leader.etcd and leader.replicas instead"
	wantReasonAlloc    = "the operator derives it from leader.allocationStrategy; set that field instead"
	wantReasonTenancy  = "the operator derives it from leader.multiTenancy and seeds the ledger file itself; set multiTenancy instead"
	wantReasonSnapshot = "the store's snapshot is not offered: restoring a snapshot can make the cache serve another key's bytes instead of a miss"
	wantReasonOplog    = "the operation log is the warm failover's, which the operator configures with every setting it needs to be safe (an early discard that could hand out another key's bytes turned off, no tenants); set leader.electionBackend: Etcd and leader.etcd instead"
	wantReasonDiscard  = "the operator keeps the store's default for a cold store and sets it beyond any object's age for warm failover (electionBackend: Etcd), where the master's early discard of an unfinished put frees memory before the removal is logged, and the next master hands out another key's bytes for it"
	wantReasonConfig   = "a config file would override the flags the operator renders; use extraArgs flags that are allowed"
	wantReasonAllocMem = "member memory is allocated by the store's default allocator; this operator does not offer another"
	wantReasonCXL      = "CXL memory is not a medium this operator provisions; use members[].medium"
	wantReasonOldPort  = "-port is the store's old spelling of -rpc_port, which the operator sets: the Service, probes and endpoints depend on it"
	wantReasonConn     = "the operator's ledger is the policy file it seeds into the leader, and another connector would leave it unread; set leader.multiTenancy instead"
	wantReasonIndirect = "it reads further flags from a file or the environment, past these checks; pass each flag as its own token"
	wantReasonStorage  = "the store's storage is the members' memory; disk offload and file segments are not offered"
)

// refusedLeaderKey is a leader.extraArgs flag key and the reason it is refused.
type refusedLeaderKey struct {
	key, reason string
}

// refusedLeaderKeys lists every refused leader flag key with its reason.
func refusedLeaderKeys() []refusedLeaderKey {
	return []refusedLeaderKey{
		{"rpc_port", wantReasonPorts},
		{"metrics_port", wantReasonPorts},
		{"port", wantReasonOldPort},
		{"enable_ha", wantReasonElection},
		{"ha_backend_type", wantReasonElection},
		{"ha_backend_connstring", wantReasonElection},
		{"rpc_address", wantReasonElection},
		{"cluster_id", wantReasonElection},
		{"pod_name", wantReasonElection},
		{"pod_namespace", wantReasonElection},
		{"allocation_strategy", wantReasonAlloc},
		{"enable_multi_tenants", wantReasonTenancy},
		{"tenant_quota_connector_uri", wantReasonTenancy},
		{"tenant_quota_connector_type", wantReasonConn},
		{"enable_snapshot", wantReasonSnapshot},
		{"enable_snapshot_restore", wantReasonSnapshot},
		{"enable_oplog", wantReasonOplog},
		{"etcd_endpoints", wantReasonOplog},
		{"put_start_discard_timeout_sec", wantReasonDiscard},
		{"put_start_release_timeout_sec", wantReasonDiscard},
		{"config_path", wantReasonConfig},
		{"memory_allocator", wantReasonAllocMem},
		{"enable_cxl", wantReasonCXL},
		{"cxl_path", wantReasonCXL},
		{"cxl_size", wantReasonCXL},
		{"flagfile", wantReasonIndirect},
		{"fromenv", wantReasonIndirect},
		{"tryfromenv", wantReasonIndirect},
		{"enable_offload", wantReasonStorage},
		{"root_fs_dir", wantReasonStorage},
		{"global_file_segment_size", wantReasonStorage},
	}
}

// walkthroughBackend is the walkthrough's KVCacheBackend (values/examples/walkthrough.yaml),
// defaulted as the API server would store it.
func walkthroughBackend() *kvv1.KVCacheBackend {
	b := &kvv1.KVCacheBackend{}
	b.Name = "mooncake-dram"
	b.Spec.Type = kvv1.BackendTypeMooncake
	b.Spec.Connection.Managed = &kvv1.ManagedConnection{
		Members: []kvv1.MemberGroup{{
			NodeSelector:      map[string]string{"kubernetes.io/os": "linux"},
			Medium:            kvv1.MediumDRAM,
			CapacityPerMember: resource.MustParse("8Gi"),
		}},
	}
	b.Default()
	return b
}

// chartContext is the context on a cluster where the chart installed the Setting
// kv-cache-backend-image with its default value.
func chartContext() BackendContext {
	return BackendContext{BackendImageSetting: kvv1.DefaultKVCacheBackendImage}
}

func leader(b *kvv1.KVCacheBackend) *kvv1.Leader { return &b.Spec.Connection.Managed.Leader }

// warm turns on warm failover with the given etcd endpoints, without tenants.
func warm(b *kvv1.KVCacheBackend, endpoints ...string) {
	l := leader(b)
	l.ElectionBackend = kvv1.ElectionEtcd
	l.Etcd = &kvv1.StoreEtcd{Endpoints: endpoints}
	l.MultiTenancy = ptr.To(false)
}

func group(b *kvv1.KVCacheBackend, i int) *kvv1.MemberGroup {
	return &b.Spec.Connection.Managed.Members[i]
}

// addGroups appends n copies of the (defaulted) first member group.
func addGroups(b *kvv1.KVCacheBackend, n int) {
	m := b.Spec.Connection.Managed
	for range n {
		m.Members = append(m.Members, *m.Members[0].DeepCopy())
	}
}

// external replaces the managed connection with an external one holding endpoints.
func external(b *kvv1.KVCacheBackend, endpoints ...kvv1.Endpoint) {
	b.Spec.Connection.Managed = nil
	b.Spec.Connection.External = &kvv1.ExternalConnection{Endpoints: endpoints}
}

func ep(name kvv1.EndpointName, address string) kvv1.Endpoint {
	return kvv1.Endpoint{Name: name, Address: address}
}

func clientEP() kvv1.Endpoint { return ep(kvv1.EndpointClient, "mooncake-master.store.svc:50051") }
func adminEP() kvv1.Endpoint  { return ep(kvv1.EndpointAdmin, "mooncake-master.store.svc:9003") }

// errStrings renders an ErrorList as the exact strings a user reads; nil when there are none.
func errStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func TestValidateBackend(t *testing.T) {
	type tc struct {
		name string
		// mutate changes one thing on the defaulted walkthrough backend.
		mutate func(b *kvv1.KVCacheBackend)
		// noImageSetting validates as if the Setting kv-cache-backend-image did not exist.
		noImageSetting bool
		want           []string
	}
	const (
		nameMsg      = "must be a DNS-1035 label of at most 56 characters (lowercase letters, digits and '-', starting with a letter), because the leader Service is named <name>-leader"
		protocolEnum = `supported values: "Auto", "TCP", "RDMA", "EFA", "CANN", "ROCM", "MUSA", "MACA"`
		tokenMsg     = "each entry is one -flag or -flag=value token, e.g. -default_kv_lease_ttl=10m"
		hostPortMsg  = "must be host:port, e.g. mooncake-master.store.svc:50051"
		portMsg      = "the port must be a number between 1 and 65535"
		leaderImage  = "spec.image: Required value: no store image for the leader: set spec.image, or create the Setting kv-cache-backend-image (the chart installs it)"
		requireAdmin = externalEPs + ": Required value: the Admin endpoint is required: add {name: Admin, address: host:port} (the master HTTP address the operator reads health, capacity and the ledger from, port 9003 by default)"
		requireCl    = externalEPs + ": Required value: the Client endpoint is required: add {name: Client, address: host:port} (the master RPC address engines connect to, port 50051 by default)"
	)

	tests := []tc{
		// Passing backends.
		{
			name:   "the defaulted walkthrough backend has no errors",
			mutate: func(*kvv1.KVCacheBackend) {},
		},
		{
			name:           "a backend that names spec.image needs no Setting",
			mutate:         func(b *kvv1.KVCacheBackend) { b.Spec.Image = "example.com/mooncake:1" },
			noImageSetting: true,
		},
		{
			name:   "a backend name of 56 characters, the longest that leaves room for -leader, passes",
			mutate: func(b *kvv1.KVCacheBackend) { b.Name = strings.Repeat("a", 56) },
		},
		{
			name:   "an imagePullPolicy of IfNotPresent passes",
			mutate: func(b *kvv1.KVCacheBackend) { b.Spec.ImagePullPolicy = corev1.PullIfNotPresent },
		},
		{
			name:   "five electing leader replicas pass",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).Replicas = ptr.To[int32](5) },
		},
		{
			name: "a single leader with electionBackend None passes",
			mutate: func(b *kvv1.KVCacheBackend) {
				leader(b).ElectionBackend = kvv1.ElectionNone
			},
		},
		{
			name: "the allowed leader extraArgs -default_kv_lease_ttl=10m and -metrics_host=0.0.0.0 pass",
			mutate: func(b *kvv1.KVCacheBackend) {
				leader(b).ExtraArgs = []string{"-default_kv_lease_ttl=10m", "-metrics_host=0.0.0.0"}
			},
		},
		{
			name: "a leader extraEnv that names no derived variable passes",
			mutate: func(b *kvv1.KVCacheBackend) {
				leader(b).ExtraEnv = []corev1.EnvVar{{Name: "GLOG_v", Value: "1"}}
			},
		},
		{
			name: "the leader may set MOONCAKE_MASTER, which only members derive",
			mutate: func(b *kvv1.KVCacheBackend) {
				leader(b).ExtraEnv = []corev1.EnvVar{{Name: "MOONCAKE_MASTER", Value: "x"}}
			},
		},
		{
			name: "a VRAM group with an RDMA override, two fabric interfaces and a local buffer passes",
			mutate: func(b *kvv1.KVCacheBackend) {
				g := group(b, 0)
				g.Medium = kvv1.MediumVRAM
				g.Transport = &kvv1.Transport{Protocol: kvv1.ProtocolRDMA}
				g.FabricInterfaceCount = ptr.To[int32](2)
				g.LocalBufferSize = ptr.To(resource.MustParse("512Mi"))
			},
		},
		{
			name:   "a member extraArg other than the port passes",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).ExtraArgs = []string{"--v=1"} },
		},
		{
			name:   "32 member groups, the most allowed, pass",
			mutate: func(b *kvv1.KVCacheBackend) { addGroups(b, 31) },
		},
		{
			name:   "an external backend with a Client and an Admin endpoint passes",
			mutate: func(b *kvv1.KVCacheBackend) { external(b, clientEP(), adminEP()) },
		},
		{
			name: "an external address with port 65535, the highest, passes",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, clientEP(), ep(kvv1.EndpointAdmin, "mooncake-master.store.svc:65535"))
			},
		},
		{
			name: "an external backend at IPv6 addresses passes",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, ep(kvv1.EndpointClient, "[fd00::1]:50051"), ep(kvv1.EndpointAdmin, "[fd00::1]:9003"))
			},
		},

		// metadata.name
		{
			name:   "a backend name of 57 characters is refused, because <name>-leader would pass 63",
			mutate: func(b *kvv1.KVCacheBackend) { b.Name = strings.Repeat("a", 57) },
			want:   []string{`metadata.name: Invalid value: "` + strings.Repeat("a", 57) + `": ` + nameMsg},
		},
		{
			name:   "a backend name starting with a digit is not a DNS-1035 label and is refused",
			mutate: func(b *kvv1.KVCacheBackend) { b.Name = "1mooncake" },
			want:   []string{`metadata.name: Invalid value: "1mooncake": ` + nameMsg},
		},

		// Enums on the spec.
		{
			name:   "a backend type other than Mooncake is refused",
			mutate: func(b *kvv1.KVCacheBackend) { b.Spec.Type = "Redis" },
			want:   []string{`spec.type: Unsupported value: "Redis": supported values: "Mooncake"`},
		},
		{
			name:   "a transport protocol in store spelling (rdma) is refused with the API spellings",
			mutate: func(b *kvv1.KVCacheBackend) { b.Spec.Transport.Protocol = "rdma" },
			want:   []string{`spec.transport.protocol: Unsupported value: "rdma": ` + protocolEnum},
		},
		{
			name:   "an unknown imagePullPolicy is refused",
			mutate: func(b *kvv1.KVCacheBackend) { b.Spec.ImagePullPolicy = "Sometimes" },
			want:   []string{`spec.imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"`},
		},

		// connection
		{
			name:   "a backend with neither managed nor external is refused",
			mutate: func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed = nil },
			want:   []string{"spec.connection: Required value: exactly one of spec.connection.managed (the operator runs the store) or spec.connection.external (an existing store) must be set"},
		},
		{
			name: "a backend with both managed and external is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				b.Spec.Connection.External = &kvv1.ExternalConnection{Endpoints: []kvv1.Endpoint{clientEP(), adminEP()}}
			},
			want: []string{"spec.connection: Forbidden: spec.connection.managed and spec.connection.external are both set; exactly one may be: remove the other"},
		},

		// leader
		{
			name:   "zero leader replicas are refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).Replicas = ptr.To[int32](0) },
			want:   []string{leaderPath + ".replicas: Invalid value: 0: must be between 1 and 5"},
		},
		{
			name:   "six leader replicas are refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).Replicas = ptr.To[int32](6) },
			want:   []string{leaderPath + ".replicas: Invalid value: 6: must be between 1 and 5"},
		},
		{
			name: "three leader replicas with electionBackend None are refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				leader(b).Replicas = ptr.To[int32](3)
				leader(b).ElectionBackend = kvv1.ElectionNone
			},
			want: []string{leaderPath + ".replicas: Invalid value: 3: more than one leader replica needs electionBackend: Kubernetes, because standbys take over through the Lease; set replicas: 1 or electionBackend: Kubernetes"},
		},
		{
			name:   "Lease addressing is refused: no published member reads a k8s:// master address",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).MemberAddressing = kvv1.AddressingLease },
			want:   []string{leaderPath + `.memberAddressing: Invalid value: "Lease": Lease addressing hands members a k8s://<namespace>/<lease> master address, which no published Mooncake member reads (it exits with Invalid HA backend entry); set memberAddressing: Service, the default: members reach whichever master serves through the leader Service and re-register by themselves after a failover`},
		},
		{
			name:   "an unknown electionBackend is refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ElectionBackend = "Raft" },
			want:   []string{leaderPath + `.electionBackend: Unsupported value: "Raft": supported values: "Kubernetes", "None", "Etcd"`},
		},
		{
			name: "warm failover with an etcd, no tenants and standbys passes",
			mutate: func(b *kvv1.KVCacheBackend) {
				warm(b, "store-etcd.gpustack-system.svc:2379", "10.0.0.9:2379")
				leader(b).Replicas = ptr.To[int32](3)
			},
		},
		{
			name:   "warm failover without an etcd is refused",
			mutate: func(b *kvv1.KVCacheBackend) { warm(b); leader(b).Etcd = nil },
			want:   []string{leaderPath + ".etcd.endpoints: Required value: electionBackend: Etcd keeps the masters' election and operation log in an etcd: name its client addresses, e.g. endpoints: [store-etcd.gpustack-system.svc:2379]"},
		},
		{
			name:   "warm failover with tenants is refused, and says why",
			mutate: func(b *kvv1.KVCacheBackend) { warm(b, "etcd:2379"); leader(b).MultiTenancy = ptr.To(true) },
			want:   []string{leaderPath + ".multiTenancy: Invalid value: true: warm failover needs multiTenancy: false: the master evicts a tenant's objects for its quota without logging it, and after a failover the next master hands out another key's bytes for an evicted key (measured on the stock master with etcd healthy); set multiTenancy: false (Bindings' ceilings are then not enforced), or keep electionBackend: Kubernetes"},
		},
		{
			name: "an etcd endpoint with a scheme, a list in one entry, or no port is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				warm(b, "http://etcd:2379", "a:2379;b:2379", "etcd", "etcd:2379", "etcd:2379")
			},
			want: []string{
				leaderPath + `.etcd.endpoints[0]: Invalid value: "http://etcd:2379": one host:port per entry, without a scheme (the store's etcd client speaks plain gRPC), e.g. store-etcd.gpustack-system.svc:2379`,
				leaderPath + `.etcd.endpoints[1]: Invalid value: "a:2379;b:2379": one host:port per entry, without a scheme (the store's etcd client speaks plain gRPC), e.g. store-etcd.gpustack-system.svc:2379`,
				leaderPath + `.etcd.endpoints[2]: Invalid value: "etcd": ` + hostPortMsg,
				leaderPath + `.etcd.endpoints[4]: Duplicate value: "etcd:2379"`,
			},
		},
		{
			name:   "an etcd on a Lease-electing leader is refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).Etcd = &kvv1.StoreEtcd{Endpoints: []string{"etcd:2379"}} },
			want:   []string{leaderPath + ".etcd: Forbidden: only electionBackend: Etcd reads leader.etcd (this leader elects with Kubernetes); remove it, or set electionBackend: Etcd for warm failover"},
		},
		{
			name:   "an unknown memberAddressing is refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).MemberAddressing = "DNS" },
			want:   []string{leaderPath + `.memberAddressing: Unsupported value: "DNS": supported values: "Service", "Lease"`},
		},
		{
			name:   "an allocationStrategy in store spelling (free_ratio_first) is refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).AllocationStrategy = "free_ratio_first" },
			want:   []string{leaderPath + `.allocationStrategy: Unsupported value: "free_ratio_first": supported values: "FreeRatioFirst", "Random"`},
		},
		{
			name:   "a leader extraArg that is not a flag is refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"default_kv_lease_ttl=10m"} },
			want:   []string{leaderPath + `.extraArgs[0]: Invalid value: "default_kv_lease_ttl=10m": ` + tokenMsg},
		},
		{
			name:   "a leader extraArg holding a flag and its value separated by a space is refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"-default_kv_lease_ttl 10m"} },
			want:   []string{leaderPath + `.extraArgs[0]: Invalid value: "-default_kv_lease_ttl 10m": ` + tokenMsg},
		},
		{
			name:   "a leader extraArg of dashes only is refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"--"} },
			want:   []string{leaderPath + `.extraArgs[0]: Invalid value: "--": ` + tokenMsg},
		},
		{
			name: "a refused leader extraArg after an allowed one is reported at its own index",
			mutate: func(b *kvv1.KVCacheBackend) {
				leader(b).ExtraArgs = []string{"-default_kv_lease_ttl=10m", "--rpc_port=50052"}
			},
			want: []string{leaderPath + ".extraArgs[1]: Forbidden: -rpc_port: " + wantReasonPorts},
		},
		{
			name:   "a snapshot_* leader extraArg is refused because a restored snapshot can serve another key's bytes",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"-snapshot_interval=1"} },
			want:   []string{leaderPath + ".extraArgs[0]: Forbidden: -snapshot_interval: " + wantReasonSnapshot},
		},
		{
			name:   "a --double-dash snapshot_* leader extraArg is refused",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"--snapshot_backup_dir=/snap"} },
			want:   []string{leaderPath + ".extraArgs[0]: Forbidden: -snapshot_backup_dir: " + wantReasonSnapshot},
		},

		// Image resolution.
		{
			name:           "a backend with no spec.image and no Setting is refused once, for the leader whose image every group falls back to",
			mutate:         func(*kvv1.KVCacheBackend) {},
			noImageSetting: true,
			want:           []string{leaderImage},
		},
		{
			name: "a member group image does not resolve the leader, which is still refused once",
			mutate: func(b *kvv1.KVCacheBackend) {
				addGroups(b, 1)
				group(b, 0).Image = "example.com/mooncake:1"
			},
			noImageSetting: true,
			want: []string{
				leaderImage,
			},
		},

		// members
		{
			name:   "a managed backend with zero member groups is refused",
			mutate: func(b *kvv1.KVCacheBackend) { b.Spec.Connection.Managed.Members = nil },
			want:   []string{membersPath + ": Required value: at least one member group is needed: members contribute the store's memory"},
		},
		{
			name:   "33 member groups are refused",
			mutate: func(b *kvv1.KVCacheBackend) { addGroups(b, 32) },
			want:   []string{membersPath + ": Too many: 33: must have at most 32 items"},
		},
		{
			name:   "a member group with an empty nodeSelector is refused",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).NodeSelector = map[string]string{} },
			want:   []string{membersPath + "[0].nodeSelector: Required value: a member group selects its nodes; one member Pod runs per matching node"},
		},
		{
			name:   "an unknown medium is refused",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).Medium = "HBM" },
			want:   []string{membersPath + `[0].medium: Unsupported value: "HBM": supported values: "DRAM", "VRAM"`},
		},
		{
			name:   "a zero capacityPerMember is refused",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).CapacityPerMember = resource.MustParse("0") },
			want:   []string{membersPath + `[0].capacityPerMember: Invalid value: "0": must be greater than zero: it is the segment each member registers, e.g. 8Gi`},
		},
		{
			name:   "a negative capacityPerMember is refused",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).CapacityPerMember = resource.MustParse("-8Gi") },
			want:   []string{membersPath + `[0].capacityPerMember: Invalid value: "-8Gi": must be greater than zero: it is the segment each member registers, e.g. 8Gi`},
		},
		{
			name:   "a negative localBufferSize is refused",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).LocalBufferSize = ptr.To(resource.MustParse("-1Mi")) },
			want:   []string{membersPath + `[0].localBufferSize: Invalid value: "-1Mi": must not be negative`},
		},
		{
			name:   "an unknown per-group transport protocol is refused",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).Transport = &kvv1.Transport{Protocol: "NVLink"} },
			want:   []string{membersPath + `[0].transport.protocol: Unsupported value: "NVLink": ` + protocolEnum},
		},
		{
			name:   "a fabricInterfaceCount of 0 is refused",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).FabricInterfaceCount = ptr.To[int32](0) },
			want:   []string{membersPath + "[0].fabricInterfaceCount: Invalid value: 0: must be at least 1"},
		},
		{
			name:   "a drainTimeout under 10s is refused",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).DrainTimeout = &metav1.Duration{Duration: 5 * time.Second} },
			want:   []string{membersPath + `[0].drainTimeout: Invalid value: "5s": must be between 10s and 1h: it is how long a stopping member Pod spends moving its objects to the other members before it stops (its terminationGracePeriodSeconds is this plus 20s), e.g. 5m`},
		},
		{
			name:   "a drainTimeout over 1h is refused",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).DrainTimeout = &metav1.Duration{Duration: 61 * time.Minute} },
			want:   []string{membersPath + `[0].drainTimeout: Invalid value: "1h1m": must be between 10s and 1h: it is how long a stopping member Pod spends moving its objects to the other members before it stops (its terminationGracePeriodSeconds is this plus 20s), e.g. 5m`},
		},
		{
			name: "drainTimeouts of exactly 10s and 1h are allowed",
			mutate: func(b *kvv1.KVCacheBackend) {
				group(b, 0).DrainTimeout = &metav1.Duration{Duration: 10 * time.Second}
				addGroups(b, 1)
				group(b, 1).DrainTimeout = &metav1.Duration{Duration: time.Hour}
			},
		},
		{
			name: "extraEnv may not set the drain's variables",
			mutate: func(b *kvv1.KVCacheBackend) {
				group(b, 0).ExtraEnv = []corev1.EnvVar{{Name: "KVCACHE_MASTER_ADMIN", Value: "x:9003"}}
			},
			want: []string{membersPath + "[0].extraEnv[0].name: Forbidden: KVCACHE_MASTER_ADMIN: the operator sets it for the member's preStop drain (kvcache drain-member), which moves its objects to the other members before it stops; remove it from extraEnv"},
		},
		{
			name:   "a member extraArg --port=9000 is refused because the operator sets the REST port",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).ExtraArgs = []string{"--v=1", "--port=9000"} },
			want:   []string{membersPath + `[0].extraArgs[1]: Invalid value: "--port=9000": the operator sets the member's REST port (8080 + the group's position); remove it`},
		},
		{
			name:   "a member extraArg -port is refused in its single-dash form",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).ExtraArgs = []string{"-port=9000"} },
			want:   []string{membersPath + `[0].extraArgs[0]: Invalid value: "-port=9000": the operator sets the member's REST port (8080 + the group's position); remove it`},
		},

		// external
		{
			name:   "an external backend without an Admin endpoint is refused",
			mutate: func(b *kvv1.KVCacheBackend) { external(b, clientEP()) },
			want:   []string{requireAdmin},
		},
		{
			name:   "an external backend without a Client endpoint is refused",
			mutate: func(b *kvv1.KVCacheBackend) { external(b, adminEP()) },
			want:   []string{requireCl},
		},
		{
			name:   "an external backend without endpoints is refused for both",
			mutate: func(b *kvv1.KVCacheBackend) { external(b) },
			want:   []string{requireCl, requireAdmin},
		},
		{
			name: "an external backend naming Client twice is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, clientEP(), adminEP(), ep(kvv1.EndpointClient, "other.store.svc:50051"))
			},
			want: []string{externalEPs + `[2].name: Duplicate value: "Client"`},
		},
		{
			name: "an external endpoint with an unknown name is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, clientEP(), adminEP(), ep("Metrics", "mooncake-master.store.svc:9003"))
			},
			want: []string{externalEPs + `[2].name: Unsupported value: "Metrics": supported values: "Client", "Admin"`},
		},
		{
			name: "a lowercase client endpoint name is refused and the Client endpoint is then missing",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, ep("client", "mooncake-master.store.svc:50051"), adminEP())
			},
			want: []string{
				externalEPs + `[0].name: Unsupported value: "client": supported values: "Client", "Admin"`,
				requireCl,
			},
		},
		{
			name: "an external address without a port is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, ep(kvv1.EndpointClient, "mooncake-master.store.svc"), adminEP())
			},
			want: []string{externalEPs + `[0].address: Invalid value: "mooncake-master.store.svc": ` + hostPortMsg},
		},
		{
			name:   "an external address without a host is refused",
			mutate: func(b *kvv1.KVCacheBackend) { external(b, ep(kvv1.EndpointClient, ":50051"), adminEP()) },
			want:   []string{externalEPs + `[0].address: Invalid value: ":50051": ` + hostPortMsg},
		},
		{
			name: "an external address written as a URL is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, clientEP(), ep(kvv1.EndpointAdmin, "http://mooncake-master.store.svc:9003"))
			},
			want: []string{externalEPs + `[1].address: Invalid value: "http://mooncake-master.store.svc:9003": ` + hostPortMsg},
		},
		{
			name: "an external address with port 0 is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, ep(kvv1.EndpointClient, "mooncake-master.store.svc:0"), adminEP())
			},
			want: []string{externalEPs + `[0].address: Invalid value: "mooncake-master.store.svc:0": ` + portMsg},
		},
		{
			name: "an external address with port 70000 is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, ep(kvv1.EndpointClient, "mooncake-master.store.svc:70000"), adminEP())
			},
			want: []string{externalEPs + `[0].address: Invalid value: "mooncake-master.store.svc:70000": ` + portMsg},
		},
		{
			name: "an external address with port 65536 is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, ep(kvv1.EndpointClient, "mooncake-master.store.svc:65536"), adminEP())
			},
			want: []string{externalEPs + `[0].address: Invalid value: "mooncake-master.store.svc:65536": ` + portMsg},
		},
		{
			name: "an external address with a named port is refused",
			mutate: func(b *kvv1.KVCacheBackend) {
				external(b, clientEP(), ep(kvv1.EndpointAdmin, "mooncake-master.store.svc:http"))
			},
			want: []string{externalEPs + `[1].address: Invalid value: "mooncake-master.store.svc:http": ` + portMsg},
		},
	}

	// Every refused leader flag key, in the -key=value and --key forms.
	for _, r := range refusedLeaderKeys() {
		for _, tok := range []string{"-" + r.key + "=1", "--" + r.key} {
			tests = append(tests, tc{
				name:   fmt.Sprintf("a leader extraArg %s is refused", tok),
				mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{tok} },
				want:   []string{fmt.Sprintf("%s.extraArgs[0]: Forbidden: -%s: %s", leaderPath, r.key, r.reason)},
			})
		}
	}
	// Every derived variable, in the extraEnv of the container that derives it, with its reason.
	const (
		fromSpec = "the operator sets it from the backend's spec"
		fromPod  = "the operator sets it from the Pod itself (the downward API)"
	)
	for _, name := range []string{"POD_NAME", "POD_NAMESPACE"} {
		tests = append(tests, tc{
			name:   fmt.Sprintf("a leader extraEnv naming the launcher's %s is refused", name),
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraEnv = []corev1.EnvVar{{Name: name, Value: "x"}} },
			want:   []string{fmt.Sprintf("%s.extraEnv[0].name: Forbidden: %s: the operator sets it from the Pod itself (the downward API): the launcher names the Lease holder by it; remove it from extraEnv", leaderPath, name)},
		})
	}
	for name, why := range map[string]string{
		"MOONCAKE_MASTER": fromSpec, "MOONCAKE_TE_META_DATA_SERVER": fromSpec, "MOONCAKE_PROTOCOL": fromSpec,
		"MOONCAKE_LOCAL_HOSTNAME": fromPod, "MOONCAKE_GLOBAL_SEGMENT_SIZE": fromSpec, "MOONCAKE_LOCAL_BUFFER_SIZE": fromSpec,
		"MC_TE_METRIC":         "the operator turns transfer-engine metrics on for every member",
		"MOONCAKE_DEVICE":      "the operator leaves it unset on purpose: empty means every device, the only value right for every host of a group, since device names differ per host",
		"MOONCAKE_CONFIG_PATH": "a configuration file would replace every MOONCAKE_* variable the operator sets",
	} {
		tests = append(tests, tc{
			name: fmt.Sprintf("a member extraEnv naming the derived %s is refused", name),
			mutate: func(b *kvv1.KVCacheBackend) {
				group(b, 0).ExtraEnv = []corev1.EnvVar{{Name: "GLOG_v", Value: "1"}, {Name: name, Value: "x"}}
			},
			want: []string{fmt.Sprintf("%s[0].extraEnv[1].name: Forbidden: %s: %s; remove it from extraEnv", membersPath, name, why)},
		})
	}
	// gflags reads -noX as X=false, so a refused boolean cannot be switched off behind "no".
	for _, key := range []string{"enable_ha", "enable_multi_tenants"} {
		tests = append(tests, tc{
			name:   fmt.Sprintf("a leader extraArg -no%s is refused like -%s", key, key),
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"-no" + key} },
			want:   []string{fmt.Sprintf("%s.extraArgs[0]: Forbidden: -no%s: %s", leaderPath, key, LeaderFlagRefusal(key))},
		})
	}
	// gflags reads a dash in a flag name as an underscore: every refused key is refused in its
	// dashed spelling too, with one or two leading dashes, and named as the master reads it.
	for _, r := range refusedLeaderKeys() {
		dashed := strings.ReplaceAll(r.key, "_", "-")
		if dashed == r.key {
			continue
		}
		for _, tok := range []string{"-" + dashed + "=true", "--" + dashed} {
			tests = append(tests, tc{
				name:   fmt.Sprintf("a leader extraArg %s is refused as the master reads it, -%s", tok, r.key),
				mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{tok} },
				want:   []string{fmt.Sprintf("%s.extraArgs[0]: Forbidden: %s (read by the master as -%s): %s", leaderPath, tok, r.key, r.reason)},
			})
		}
	}
	tests = append(tests,
		tc{
			name:   "a dashed snapshot flag -snapshot-interval=1 is refused as -snapshot_interval",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"-snapshot-interval=1"} },
			want:   []string{leaderPath + ".extraArgs[0]: Forbidden: -snapshot-interval=1 (read by the master as -snapshot_interval): " + wantReasonSnapshot},
		},
		tc{
			name:   "a dashed negation --no-enable-multi-tenants is refused as -enable_multi_tenants=false",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"--no-enable-multi-tenants"} },
			want:   []string{leaderPath + ".extraArgs[0]: Forbidden: --no-enable-multi-tenants (read by the master as -enable_multi_tenants=false): " + wantReasonTenancy},
		},
		tc{
			name:   "a negation spelled --noenable-snapshot is refused as -enable_snapshot=false",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"--noenable-snapshot"} },
			want:   []string{leaderPath + ".extraArgs[0]: Forbidden: --noenable-snapshot (read by the master as -enable_snapshot=false): " + wantReasonSnapshot},
		},
		tc{
			name:   "an allowed flag in its dashed spelling, -default-kv-lease-ttl=10m, passes",
			mutate: func(b *kvv1.KVCacheBackend) { leader(b).ExtraArgs = []string{"-default-kv-lease-ttl=10m"} },
			want:   nil,
		},
		tc{
			name:   "a member --por=9000 is refused: argparse reads a unique prefix as --port",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).ExtraArgs = []string{"--por=9000"} },
			want:   []string{membersPath + `[0].extraArgs[0]: Invalid value: "--por=9000": the operator sets the member's REST port (8080 + the group's position); remove it`},
		},
		tc{
			name:   "a member --conf with its value in the next token is refused as --config",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).ExtraArgs = []string{"--conf", "/etc/m.json"} },
			want:   []string{membersPath + `[0].extraArgs[0]: Invalid value: "--conf": a configuration file would replace every MOONCAKE_* variable the operator sets; remove it`},
		},
		tc{
			name:   "a member --max-wait-time=5 passes",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).ExtraArgs = []string{"--max-wait-time=5"} },
			want:   nil,
		},
		tc{
			name:   "a member extraArg --config is refused because a file replaces the operator's variables",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).ExtraArgs = []string{"--config=/etc/m.json"} },
			want:   []string{membersPath + `[0].extraArgs[0]: Invalid value: "--config=/etc/m.json": a configuration file would replace every MOONCAKE_* variable the operator sets; remove it`},
		},
		tc{
			name: "a member -D override of an attribute the operator sets is refused, in one token or two",
			mutate: func(b *kvv1.KVCacheBackend) {
				group(b, 0).ExtraArgs = []string{"-Dprotocol=rdma", "-D", "master_server_address=x:1"}
			},
			want: []string{
				membersPath + `[0].extraArgs[0]: Invalid value: "-Dprotocol=rdma": protocol is set by the operator through the environment; remove the override`,
				membersPath + `[0].extraArgs[1]: Invalid value: "-D": master_server_address is set by the operator through the environment; remove the override`,
			},
		},
		tc{
			name:   "a member -D override of another attribute is allowed",
			mutate: func(b *kvv1.KVCacheBackend) { group(b, 0).ExtraArgs = []string{"-Denable_offload=false"} },
			want:   nil,
		},
	)

	seen := map[string]bool{}
	for _, tt := range tests {
		require.False(t, seen[tt.name], "duplicate case name %q", tt.name)
		seen[tt.name] = true
		t.Run(tt.name, func(t *testing.T) {
			b := walkthroughBackend()
			require.Empty(t, ValidateBackend(b, chartContext()), "the walkthrough backend must start valid")
			tt.mutate(b)
			ctx := chartContext()
			if tt.noImageSetting {
				ctx = BackendContext{}
			}
			assert.Equal(t, tt.want, errStrings(ValidateBackend(b, ctx)))
		})
	}
}

func TestLeaderFlagRefusal(t *testing.T) {
	type tc struct {
		name string
		key  string
		want string
	}
	tests := []tc{
		{name: "default_kv_lease_ttl is allowed, so a user can override the template's 5m", key: "default_kv_lease_ttl", want: ""},
		{name: "metrics_host is allowed", key: "metrics_host", want: ""},
		{name: "a flag the template does not know is allowed", key: "eviction_ratio", want: ""},
		{name: "an empty key is not refused by name", key: "", want: ""},
		{name: "snapshot without an underscore is not a snapshot_* flag", key: "snapshot", want: ""},
		{name: "keys are matched case-sensitively, as the store's flags are", key: "RPC_PORT", want: ""},
		{name: "a dashed key is read as its underscore name", key: "enable-snapshot-restore", want: wantReasonSnapshot},
		{name: "a dashed negation is read as the negated flag", key: "no-enable-ha", want: wantReasonElection},
		{name: "snapshot_interval is refused because restoring a snapshot can make the cache serve another key's bytes", key: "snapshot_interval", want: wantReasonSnapshot},
		{name: "any other snapshot_* key is refused for the snapshot reason", key: "snapshot_backup_dir", want: wantReasonSnapshot},
	}
	for _, r := range refusedLeaderKeys() {
		tests = append(tests, tc{name: fmt.Sprintf("%s is refused", r.key), key: r.key, want: r.reason})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LeaderFlagRefusal(tt.key)
			assert.Equal(t, tt.want, got)
			if tt.want == wantReasonSnapshot {
				assert.Contains(t, got, "restoring a snapshot can make the cache serve another key's bytes")
			}
		})
	}
}

// A key added to refusedLeaderFlags without a case above would go untested.
func TestRefusedLeaderKeysCoverTheImplementation(t *testing.T) {
	var listed []string
	for _, r := range refusedLeaderKeys() {
		listed = append(listed, r.key)
	}
	var impl []string
	for k := range refusedLeaderFlags {
		impl = append(impl, k)
	}
	slices.Sort(listed)
	slices.Sort(impl)
	assert.Equal(t, impl, listed)
}
