package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackendType names the store implementation behind a KVCacheBackend.
// +kubebuilder:validation:Enum=Mooncake
type BackendType string

// BackendTypeMooncake is the Mooncake store, the only implementation today.
const BackendTypeMooncake BackendType = "Mooncake"

// TransportProtocol is the API spelling of a transfer-engine protocol. The store spells each
// differently (see StoreSpelling): users write the API value, engines read the store value.
// +kubebuilder:validation:Enum=Auto;TCP;RDMA;EFA;CANN;ROCM;MUSA;MACA
type TransportProtocol string

// Transport protocols in their API spelling.
const (
	ProtocolAuto TransportProtocol = "Auto"
	ProtocolTCP  TransportProtocol = "TCP"
	ProtocolRDMA TransportProtocol = "RDMA"
	ProtocolEFA  TransportProtocol = "EFA"
	ProtocolCANN TransportProtocol = "CANN"
	ProtocolROCM TransportProtocol = "ROCM"
	ProtocolMUSA TransportProtocol = "MUSA"
	ProtocolMACA TransportProtocol = "MACA"
)

// storeSpelling maps each API protocol to the value the store and its clients read.
// Auto is tcp: it is a default, not a probe.
var storeSpelling = map[TransportProtocol]string{
	ProtocolAuto: "tcp",
	ProtocolTCP:  "tcp",
	ProtocolRDMA: "rdma",
	ProtocolEFA:  "efa",
	ProtocolCANN: "ascend",
	ProtocolROCM: "hip",
	ProtocolMUSA: "musa",
	ProtocolMACA: "maca",
}

// StoreSpelling returns the store (artifact) spelling of p: tcp, rdma, efa, ascend, hip, musa
// or maca. An empty protocol is Auto. An unknown protocol returns "".
func (p TransportProtocol) StoreSpelling() string {
	if p == "" {
		p = ProtocolAuto
	}
	return storeSpelling[p]
}

// APIProtocolFor returns the API value that resolves to a store spelling, preferring the
// explicit value over Auto (tcp -> TCP). It is how a message tells a user what to set.
func APIProtocolFor(store string) TransportProtocol {
	for _, p := range []TransportProtocol{ProtocolTCP, ProtocolRDMA, ProtocolEFA, ProtocolCANN, ProtocolROCM, ProtocolMUSA, ProtocolMACA} {
		if storeSpelling[p] == store {
			return p
		}
	}
	return ""
}

// Transport selects the transfer-engine protocol.
type Transport struct {
	// Protocol in API spelling. Auto resolves to the store's tcp; it does not probe the fabric.
	// +kubebuilder:default=Auto
	// +optional
	Protocol TransportProtocol `json:"protocol,omitempty"`
}

// ElectionBackend selects how leader replicas elect the serving master.
// +kubebuilder:validation:Enum=Kubernetes;None;Etcd
type ElectionBackend string

// Election backends.
const (
	// ElectionKubernetes elects through a coordination.k8s.io Lease: the operator's launcher runs
	// the stock master only in the Pod that holds it.
	ElectionKubernetes ElectionBackend = "Kubernetes"
	// ElectionNone runs a single master with no election.
	ElectionNone ElectionBackend = "None"
	// ElectionEtcd is warm failover: every leader replica runs the stock master in its etcd HA
	// mode with the operation log, so a standby keeps the index of the objects through a
	// change of leader. It needs leader.etcd and multiTenancy: false.
	ElectionEtcd ElectionBackend = "Etcd"
)

// MemberAddressing selects how members find the serving master.
// +kubebuilder:validation:Enum=Service;Lease
type MemberAddressing string

// Member addressing modes.
const (
	// AddressingService points members at the leader Service, which only ever has the ready
	// (serving) leader behind it.
	AddressingService MemberAddressing = "Service"
	// AddressingLease would hand members a k8s:// master address, which only store builds with a
	// Kubernetes HA backend read; no published build has one, so admission refuses it.
	AddressingLease MemberAddressing = "Lease"
)

// AllocationStrategy selects how the master places new objects on member segments.
// +kubebuilder:validation:Enum=FreeRatioFirst;Random
type AllocationStrategy string

// Allocation strategies.
const (
	AllocationFreeRatioFirst AllocationStrategy = "FreeRatioFirst"
	AllocationRandom         AllocationStrategy = "Random"
)

// Medium is the memory a member group contributes.
// +kubebuilder:validation:Enum=DRAM;VRAM
type Medium string

// Media.
const (
	MediumDRAM Medium = "DRAM"
	MediumVRAM Medium = "VRAM"
)

// EndpointName names a store endpoint.
// +kubebuilder:validation:Enum=Client;Admin
type EndpointName string

// Endpoint names.
const (
	// EndpointClient is the master RPC address engines and members connect to.
	EndpointClient EndpointName = "Client"
	// EndpointAdmin is the master HTTP address serving health, metrics and the tenant ledger.
	EndpointAdmin EndpointName = "Admin"
)

// KVCacheBackendSpec declares a KV cache store.
// +kubebuilder:validation:XValidation:rule="has(self.connection.managed) == has(oldSelf.connection.managed)",message="spec.connection: the managed/external branch cannot change after creation; create a new KVCacheBackend instead"
type KVCacheBackendSpec struct {
	// Type of the store.
	// +kubebuilder:default=Mooncake
	// +optional
	Type BackendType `json:"type,omitempty"`

	// Image of the store processes (leader and members). Resolution order:
	// members[].image, then this field, then the cluster Setting kv-cache-backend-image.
	// Leave it unset to follow the Setting, which names a build that can elect a leader.
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the store containers.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// ImagePullSecrets for the store Pods, in the system namespace.
	// +optional
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Transport is the protocol every member group offers unless the group overrides it.
	// +kubebuilder:default={}
	// +optional
	Transport Transport `json:"transport,omitempty"`

	// Connection says whether the operator runs the store (managed) or only observes one that
	// runs elsewhere (external). Exactly one of the two.
	Connection Connection `json:"connection"`
}

// Connection holds exactly one of managed or external.
// +kubebuilder:validation:XValidation:rule="has(self.managed) != has(self.external)",message="exactly one of spec.connection.managed or spec.connection.external must be set"
type Connection struct {
	// Managed: the operator runs a leader Deployment and member DaemonSets.
	// +optional
	Managed *ManagedConnection `json:"managed,omitempty"`

	// External: an existing store the operator only observes.
	// +optional
	External *ExternalConnection `json:"external,omitempty"`
}

// ManagedConnection describes the store processes the operator runs.
type ManagedConnection struct {
	// Leader configures the master Deployment. `leader: {}` takes every default.
	// +kubebuilder:default={}
	// +optional
	Leader Leader `json:"leader,omitempty"`

	// Members are the groups of nodes that contribute memory; one DaemonSet per group. A group's
	// position is its identity: appending a group is allowed, reordering or removing one from
	// the middle is refused.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Members []MemberGroup `json:"members"`

	// OperatorUpdates says when what a new operator version changes in the store's Pods (the
	// launcher it copies into the leader, the rendered Pod templates) reaches Pods that run.
	// Deferred (the default) keeps each Pod as it runs until a change of this spec restarts it
	// anyway (the UpdatePending condition says what waits); Immediate applies it at once: the
	// leader rolls (one graceful handover with standbys, a restart with one replica) and the
	// members are replaced one at a time. A store's cache is lost with its master, so an
	// operator upgrade must not restart every store in the cluster at the same moment.
	// +kubebuilder:default=Deferred
	// +optional
	OperatorUpdates OperatorUpdates `json:"operatorUpdates,omitempty"`

	// NetworkPolicy narrows who can reach the store's Pods (leader and members). Mooncake has
	// no authentication: any Pod that reaches the master or a member can name any tenant and
	// read, write or evict under it. With the policy (the default) the operator renders a
	// NetworkPolicy in the system namespace that admits only the Pods of namespaces holding a
	// KVCachePoolBinding on a pool of this backend (the list follows the Bindings), the store's
	// own Pods, the operator's manager (the master's admin port) and the metrics scraper the
	// chart names (networkPolicy.metricsFrom; the admin port only). It is enforced only where
	// the cluster's network plugin enforces NetworkPolicy. Two bound namespaces can still name
	// each other's tenant: put teams that must not share a store on backends of their own. A
	// backend with an rdma or efa member group gets no policy: those members run on the host
	// network, which a NetworkPolicy can neither select nor admit by Pod.
	// +kubebuilder:default={}
	// +optional
	NetworkPolicy StoreNetworkPolicy `json:"networkPolicy,omitempty"`
}

// StoreNetworkPolicy switches the store's NetworkPolicy.
type StoreNetworkPolicy struct {
	// Enabled renders the NetworkPolicy (true, the default); false removes it, and every Pod
	// that the cluster's network lets through can reach the store again.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// OperatorUpdates is when a new operator version's changes reach a store's running Pods.
// +kubebuilder:validation:Enum=Deferred;Immediate
type OperatorUpdates string

// OperatorUpdates values.
const (
	OperatorUpdatesDeferred  OperatorUpdates = "Deferred"
	OperatorUpdatesImmediate OperatorUpdates = "Immediate"
)

// Leader configures the store master (mooncake_master).
type Leader struct {
	// Replicas of the master. 1 runs a single master; more run standbys that take over through
	// the Lease election. Only one replica is ever ready, so 3 desired / 1 ready is healthy.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// ElectionBackend: Kubernetes (the default: the operator's launcher, copied into the leader
	// Pod from the operator's image, holds a Lease and runs the stock master only while it
	// leads; a change of leader empties the cache), Etcd (warm failover: every replica runs the
	// master, which elect through leader.etcd and log every change of the index there, so the
	// next leader keeps the cache; needs multiTenancy: false) or None (no election; replicas
	// must be 1).
	// +kubebuilder:default=Kubernetes
	// +optional
	ElectionBackend ElectionBackend `json:"electionBackend,omitempty"`

	// MemberAddressing: how members find the master. Service (the default) uses the leader
	// Service, behind which only the serving master is ready; members re-register by themselves
	// after a failover. Lease is refused: no published member reads a k8s:// address.
	// +kubebuilder:default=Service
	// +optional
	MemberAddressing MemberAddressing `json:"memberAddressing,omitempty"`

	// MultiTenancy keeps a per-tenant quota ledger on the master, so Binding ceilings are
	// enforced and domains are isolated tenants. Only store images before Mooncake 0.3.12 need
	// false.
	// +kubebuilder:default=true
	// +optional
	MultiTenancy *bool `json:"multiTenancy,omitempty"`

	// AllocationStrategy: how the master places objects on members.
	// +kubebuilder:default=FreeRatioFirst
	// +optional
	AllocationStrategy AllocationStrategy `json:"allocationStrategy,omitempty"`

	// ExtraArgs are appended to the master's arguments, one `-flag` or `-flag=value` token
	// each. Flags the operator derives, snapshot flags and flags that change the store's
	// storage are refused.
	// +optional
	// +listType=atomic
	ExtraArgs []string `json:"extraArgs,omitempty"`

	// ExtraEnv is added to the master container's environment.
	// +optional
	// +listType=atomic
	ExtraEnv []corev1.EnvVar `json:"extraEnv,omitempty"`

	// Etcd is where masters with electionBackend: Etcd elect and keep their operation log.
	// Required with Etcd, refused otherwise.
	// +optional
	Etcd *StoreEtcd `json:"etcd,omitempty"`
}

// StoreEtcd is an etcd cluster a warm-failover store keeps its leader election and operation
// log in. Only the masters use it: members and engines reach the serving master through the
// leader Service, as with the Lease. The store's etcd client speaks plain gRPC (it has no TLS
// settings), so the etcd is to be reachable from the store's leader Pods alone: whoever can
// write there can take the store over.
type StoreEtcd struct {
	// Endpoints are the etcd cluster's client addresses, host:port each, e.g.
	// store-etcd.gpustack-system.svc:2379.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	// +listType=atomic
	Endpoints []string `json:"endpoints"`
}

// MemberGroup is a set of nodes that each run one member Pod contributing memory to the store.
type MemberGroup struct {
	// NodeSelector picks the nodes of this group; one member Pod runs per matching node.
	// Widening it adds members and restarts none.
	// +kubebuilder:validation:MinProperties=1
	NodeSelector map[string]string `json:"nodeSelector"`

	// Medium is the memory the members contribute: DRAM (host memory) or VRAM.
	// Immutable for the group at this position.
	// +kubebuilder:default=DRAM
	// +optional
	Medium Medium `json:"medium,omitempty"`

	// CapacityPerMember is the segment each member registers with the master. For DRAM it is
	// charged to the member Pod's memory request: a claim on the node, not a hint.
	CapacityPerMember resource.Quantity `json:"capacityPerMember"`

	// LocalBufferSize is the member's transfer staging buffer, added to the memory request.
	// Unset, the member is given 128Mi (the store's own default would be 1Gi that no request
	// holds).
	// +optional
	LocalBufferSize *resource.Quantity `json:"localBufferSize,omitempty"`

	// Transport overrides spec.transport for this group, e.g. RDMA on one group of nodes and
	// CANN on another.
	// +optional
	Transport *Transport `json:"transport,omitempty"`

	// FabricInterfaceCount is how many fabric devices each member requests when the group's
	// protocol is RDMA or EFA.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	FabricInterfaceCount *int32 `json:"fabricInterfaceCount,omitempty"`

	// Image overrides spec.image for this group.
	// +optional
	Image string `json:"image,omitempty"`

	// ExtraArgs are appended to the member's arguments.
	// +optional
	// +listType=atomic
	ExtraArgs []string `json:"extraArgs,omitempty"`

	// ExtraEnv is added to the member container's environment.
	// +optional
	// +listType=atomic
	ExtraEnv []corev1.EnvVar `json:"extraEnv,omitempty"`

	// DrainTimeout is how long a member Pod that is stopping may spend moving its objects to
	// the other members (its preStop hook drains it through the master) before the member stops;
	// what has not moved by then is lost. Its terminationGracePeriodSeconds is this plus 20s. The
	// master moves about 8 objects a second per member, whatever their size.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('1h')",message="drainTimeout must be between 10s and 1h"
	// +optional
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`
}

// ExternalConnection points at a store the operator does not run.
type ExternalConnection struct {
	// Endpoints of the store: Client (master RPC) and Admin (master HTTP), both required.
	// +kubebuilder:validation:MinItems=2
	// +kubebuilder:validation:MaxItems=2
	// +listType=map
	// +listMapKey=name
	Endpoints []Endpoint `json:"endpoints"`
}

// Endpoint is a named host:port of the store.
type Endpoint struct {
	// Name: Client or Admin.
	Name EndpointName `json:"name"`
	// Address as host:port.
	// +kubebuilder:validation:MinLength=1
	Address string `json:"address"`
}

// Capacity is what the store reports about its memory.
type Capacity struct {
	// Total bytes registered by members, as the master reports it.
	Total resource.Quantity `json:"total"`
	// Used bytes allocated to objects, as the master reports it. It moves with every write an
	// engine makes, so while it keeps moving it is rewritten at most every 5 minutes (the
	// master's own /metrics carries it as it moves); total is rewritten as soon as it changes.
	// +optional
	Used *resource.Quantity `json:"used,omitempty"`
	// ObservedTime is when these figures were read from the store.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
}

// Cold-cache reasons: what emptied the store's cache.
const (
	// ColdCacheLeaderChanged: another leader replica took the election Lease. A standby holds
	// no objects, so the new leader starts empty.
	ColdCacheLeaderChanged = "LeaderChanged"
	// ColdCacheMasterRestarted: the master answering is a new process (its counters started
	// over), so every object the old one held is gone.
	ColdCacheMasterRestarted = "MasterRestarted"
)

// LeaderStatus is the serving master as the operator observed it: who holds the election and
// when the cache was last emptied by a failover or a restart.
type LeaderStatus struct {
	// Holder is the leader Pod that holds the election Lease (electing backends).
	// +optional
	Holder string `json:"holder,omitempty"`
	// HolderSince is when Holder acquired the Lease (the Lease's acquireTime).
	// +optional
	HolderSince *metav1.Time `json:"holderSince,omitempty"`
	// LeaseTransitions is the Lease's count of holder changes.
	// +optional
	LeaseTransitions *int32 `json:"leaseTransitions,omitempty"`
	// ColdCacheSince is the time of the last change of the serving master the operator saw (a
	// new Lease holder's acquireTime, or the first read of a restarted master): every object
	// the store held before it misses afterwards.
	// +optional
	ColdCacheSince *metav1.Time `json:"coldCacheSince,omitempty"`
	// ColdCacheReason says what emptied the cache: LeaderChanged or MasterRestarted.
	// +optional
	ColdCacheReason string `json:"coldCacheReason,omitempty"`
	// Failover is what a change of leader does to the cache: Cold (the next master starts
	// empty) or Warm (the next master replays the operation log and keeps the objects).
	// +optional
	Failover FailoverMode `json:"failover,omitempty"`
	// LastFailover is the last new master process the operator read, and how many of the
	// objects the master before it held it kept.
	// +optional
	LastFailover *FailoverObserved `json:"lastFailover,omitempty"`
}

// FailoverObserved is what a new master process kept of the objects the one before it held.
type FailoverObserved struct {
	// Time of the first read of the new master.
	Time metav1.Time `json:"time"`
	// Mode: Warm when the new master kept objects (or there were none to keep), else Cold.
	Mode FailoverMode `json:"mode"`
	// Kept and Lost count objects: the previous master's count split by what the new one
	// holds.
	Kept int64 `json:"kept"`
	Lost int64 `json:"lost"`
}

// FailoverMode is what a change of the serving master does to the cache.
type FailoverMode string

// Failover modes.
const (
	FailoverCold FailoverMode = "Cold"
	FailoverWarm FailoverMode = "Warm"
)

// MemberStatus is one member segment the master lists, joined to its Pod where known.
type MemberStatus struct {
	// Segment is the segment name the member registered (its transfer endpoint).
	Segment string `json:"segment"`
	// Pod is the member Pod that owns the segment, when it could be matched.
	// +optional
	Pod string `json:"pod,omitempty"`
	// Node the member Pod runs on.
	// +optional
	Node string `json:"node,omitempty"`
	// Protocol the segment was registered with, in store spelling.
	// +optional
	Protocol string `json:"protocol,omitempty"`
	// Status of the segment as the master reports it.
	// +optional
	Status string `json:"status,omitempty"`
	// Capacity of the segment.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`
}

// KVCacheBackendStatus is what the operator observed, read from the store itself.
type KVCacheBackendStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the conditions.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// PhaseMessage says why the phase is what it is.
	// +optional
	PhaseMessage string `json:"phaseMessage,omitempty"`
	// Conditions: LeaderAvailable, CapacityObserved, MembersMounted, ElectionObserved,
	// RolloutComplete, Deletable, WritesAttributed (multi-tenant masters).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Endpoints of the store: Client and Admin.
	// +optional
	// +listType=map
	// +listMapKey=name
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// Capacity as read from the store; absent (not zero) until the store reports it, and
	// absent after a change of the serving master until the new master answered.
	// +optional
	Capacity *Capacity `json:"capacity,omitempty"`
	// Leader is the serving master: the election's holder and the last cold cache.
	// +optional
	Leader *LeaderStatus `json:"leader,omitempty"`
	// Members are the segments the master lists.
	// +optional
	// +listType=atomic
	Members []MemberStatus `json:"members,omitempty"`
	// UsedBy lists the pools that use this backend; deletion waits until it is empty.
	// +optional
	// +listType=atomic
	UsedBy []ObjectReference `json:"usedBy,omitempty"`
	// Drains are the members whose objects the operator is moving to the other members before
	// they leave (a Pod being replaced, a node cordoned).
	// +optional
	// +listType=map
	// +listMapKey=pod
	Drains []MemberDrain `json:"drains,omitempty"`
	// Lost counts the objects the store lost although nobody removed them (a master that
	// restarted, a member gone without its objects moved), as the master's figures showed
	// them: an avalanche of misses tells here.
	// +optional
	Lost *LossStatus `json:"lost,omitempty"`
}

// MemberDrain is a member whose objects the master is moving to the other members.
type MemberDrain struct {
	// Pod and Node of the member.
	Pod  string `json:"pod"`
	Node string `json:"node,omitempty"`
	// Segments of the member being drained.
	// +listType=atomic
	Segments []string `json:"segments"`
	// JobID of the master's drain job.
	JobID string `json:"jobID"`
	// Reason: Replace (the member's Pod is replaced) or Cordoned (its node is cordoned).
	Reason string `json:"reason"`
	// StartTime of the drain; it is given up after the group's drainTimeout.
	StartTime metav1.Time `json:"startTime"`
}

// Member drain reasons.
const (
	DrainReplace  = "Replace"
	DrainCordoned = "Cordoned"
)

// LossStatus counts the objects a store lost without their removal being asked for.
type LossStatus struct {
	// Objects and Bytes lost, in total, since the operator first read the store.
	Objects int64             `json:"objects"`
	Bytes   resource.Quantity `json:"bytes"`
	// Last is the most recent loss.
	// +optional
	Last *Loss `json:"last,omitempty"`
}

// Loss is one loss of objects.
type Loss struct {
	Time metav1.Time `json:"time"`
	// Cause: MasterRestarted (every object of the previous master) or MemberLost (a member
	// gone with the objects on it).
	Cause   string            `json:"cause"`
	Objects int64             `json:"objects"`
	Bytes   resource.Quantity `json:"bytes"`
	// Member is the segment that went, for MemberLost.
	// +optional
	Member string `json:"member,omitempty"`
}

// Loss causes.
const (
	LossMasterRestarted = "MasterRestarted"
	LossMemberLost      = "MemberLost"
)

// KVCacheBackend is a Mooncake KV cache store: a leader Deployment with Lease election and
// member DaemonSets (managed), or an existing store (external).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=kvcb,categories=kvcache
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoints[?(@.name=="Client")].address`
// +kubebuilder:printcolumn:name="Capacity",type=string,JSONPath=`.status.capacity.total`
// +kubebuilder:printcolumn:name="Failover",type=string,priority=1,JSONPath=`.status.leader.failover`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Update-Pending",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="UpdatePending")].status`
type KVCacheBackend struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the store.
	Spec KVCacheBackendSpec `json:"spec"`
	// Status is observed from the store.
	// +optional
	Status KVCacheBackendStatus `json:"status,omitempty"`
}

// KVCacheBackendList is a list of KVCacheBackends.
// +kubebuilder:object:root=true
type KVCacheBackendList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KVCacheBackend `json:"items"`
}
