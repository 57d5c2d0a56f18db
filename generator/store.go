package generator

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/values"
	"github.com/kvcache-operator/kvcache/vocab"
)

// DefaultSystemNamespace is where managed stores run unless told otherwise.
const DefaultSystemNamespace = "gpustack-system"

// Tenant is one ledger entry the seed policy file carries: a domain and its requested quota.
type Tenant struct {
	Name       string
	QuotaBytes int64
}

// StoreInput is everything the rendered store of one backend depends on.
type StoreInput struct {
	// Backend, defaulted (the API server's defaults or kvv1's Default()).
	Backend *kvv1.KVCacheBackend
	// SystemNamespace the store runs in; empty means DefaultSystemNamespace.
	SystemNamespace string
	// BackendImageSetting is the value of the Setting kv-cache-backend-image ("" when absent).
	BackendImageSetting string
	// Tenants seed the master's ledger (multi-tenancy only).
	Tenants []Tenant
	// OperatorImage is the operator's own image: an electing leader Pod copies the launcher
	// (`kvcache elect`) out of it into the stock store image, and every member Pod its preStop
	// drain (`kvcache drain-member`). "" means values' default, the chart's.
	OperatorImage string
	// OperatorNamespace is the manager's own namespace, whose manager Pods the store's
	// NetworkPolicy admits to the admin port. "" means values' default, the chart's.
	OperatorNamespace string
	// BoundNamespaces are the namespaces holding a Binding on the backend (BoundNamespaces):
	// the store's NetworkPolicy admits their Pods.
	BoundNamespaces []string
	// MetricsFrom are the peers the store's NetworkPolicy admits to the admin port to scrape
	// the master's metrics (the chart's networkPolicy.metricsFrom).
	MetricsFrom []networkingv1.NetworkPolicyPeer
}

// storeValues is the typed data the store templates lay out.
type storeValues struct {
	// Names is the vocabulary the templates spell labels, variables and programs with.
	Names            vocab.Names
	Name             string
	Namespace        string
	Owner            metav1.OwnerReference
	ImagePullPolicy  corev1.PullPolicy
	ImagePullSecrets []corev1.LocalObjectReference
	Ports            values.Store
	Leader           leaderValues
	Members          []memberValues
	// MemberAccount is the ServiceAccount members run as: their own when electing, else
	// "default" (named all the same, see the templates).
	MemberAccount string
	// StoreAPIAccess: the store's Pods run as their own accounts and get an API token (the
	// launcher holds the Lease); otherwise they run as "default" with no token mounted.
	StoreAPIAccess bool
	// QuotaPolicy is the seed ledger file's content ("" without multi-tenancy).
	QuotaPolicy string
	Tenants     []Tenant
	// NetworkPolicy is nil when the store renders none.
	NetworkPolicy *networkPolicyValues
}

// warmStopDelay is how long a deleted warm leader serves on: kube-proxy's sync (1 s at the
// least) with a margin (measured: a graceful failover's first put 14.4 s after the delete).
const warmStopDelay = 3 * time.Second

type leaderValues struct {
	Name  string
	Image string
	// LauncherImage is the operator's image the launcher is copied from ("" when not electing).
	LauncherImage string
	LauncherPath  string
	LauncherDir   string
	Replicas      int32
	RollingUpdate bool
	// MaxUnavailable of a rolling update: every replica but one. Standbys are never ready, so
	// the Deployment controller replaces them first and stops at the serving leader, the one
	// available Pod; the operator then hands over from it once, gracefully.
	MaxUnavailable int32
	LeaseElection  bool
	// Warm: every replica runs the master in its etcd HA mode with the operation log.
	Warm           bool
	ServiceAccount string
	// Command is the launcher when electing, else the master itself.
	Command []string
	// ReadinessPeriodSeconds: an electing leader is probed every second, so that a new leader
	// is routed to as soon as its master serves.
	ReadinessPeriodSeconds int32
	// PreStop, when set, runs before the kubelet stops the leader container.
	PreStop []string
	// Liveness: only a plain master is probed for liveness. A standby runs no master, and an
	// electing leader's launcher exits when its master does, so the container restarts.
	Liveness     bool
	MultiTenancy bool
	PolicyConfig string // ConfigMap holding the seed policy
	Args         []string
	Env          []corev1.EnvVar
}

type memberValues struct {
	Index        int
	Name         string
	Component    string
	Image        string
	RestPort     int32
	NodeSelector map[string]string
	// Command runs the member: the stock member itself, or (warm failover) the operator's
	// launcher, which picks the member's segment name and then runs it.
	Command       []string
	Args          []string
	Env           []corev1.EnvVar
	MemoryRequest string // "" renders no request
	Fabric        *fabricValues
	// LauncherImage is the operator's image the kvcache binary is copied from, into LauncherDir
	// (at LauncherPath), as an electing leader's launcher is: the preStop hook runs it.
	LauncherImage, LauncherDir, LauncherPath string
	// PreStop is the hook's command: the member's self-drain, bounded by the group's drainTimeout.
	PreStop []string
	// TerminationGracePeriodSeconds covers the drain and the member's own exit after it.
	TerminationGracePeriodSeconds int64
}

// fabricValues are the grants a member needs to reach an RDMA or EFA device.
type fabricValues struct {
	ResourceName string
	Count        int32
}

// LeaderName is the leader Deployment, Service, Lease and ServiceAccount name of a backend.
func LeaderName(backend string) string { return backend + vocab.LeaderSuffix }

// launcherImage is the operator's image the store's Pods copy the project's binary from (the
// election launcher, the members' drain): the one the operator runs as, else the chart's default.
func launcherImage(in StoreInput, d values.Defaults) string {
	return cmp.Or(in.OperatorImage, d.OperatorImage)
}

// BackendOfLeader is the backend whose leader objects are named name (ok false: not a leader's
// name).
func BackendOfLeader(name string) (backend string, ok bool) {
	backend, ok = strings.CutSuffix(name, vocab.LeaderSuffix)
	return backend, ok && backend != ""
}

// MemberAccountName is the ServiceAccount of a backend's members when electing.
func MemberAccountName(backend string) string { return backend + "-member" }

// MemberName is the DaemonSet name of member group i.
func MemberName(backend string, i int) string { return backend + "-member-" + strconv.Itoa(i) }

// QuotaPolicyName is the ConfigMap seeding the master's tenant ledger.
func QuotaPolicyName(backend string) string { return backend + "-tenant-quota-policy" }

// ClientEndpoint is the master RPC address of a managed backend.
func ClientEndpoint(backend, ns string, d values.Defaults) string {
	return fmt.Sprintf("%s.%s.svc:%d", LeaderName(backend), ns, d.Store.RPCPort)
}

// AdminEndpoint is the master HTTP address of a managed backend.
func AdminEndpoint(backend, ns string, d values.Defaults) string {
	return fmt.Sprintf("%s.%s.svc:%d", LeaderName(backend), ns, d.Store.AdminPort)
}

func (r *Renderer) storeValues(in StoreInput) (*storeValues, error) {
	b := in.Backend
	m := b.Spec.Connection.Managed
	ns := in.SystemNamespace
	if ns == "" {
		ns = DefaultSystemNamespace
	}
	d := r.defaults
	l := m.Leader
	v := &storeValues{
		Names:     vocab.TemplateNames(),
		Name:      b.Name,
		Namespace: ns,
		Owner: metav1.OwnerReference{
			APIVersion:         kvv1.GroupVersion.String(),
			Kind:               "KVCacheBackend",
			Name:               b.Name,
			UID:                b.UID,
			Controller:         ptrTo(true),
			BlockOwnerDeletion: ptrTo(true),
		},
		ImagePullPolicy:  b.Spec.ImagePullPolicy,
		ImagePullSecrets: b.Spec.ImagePullSecrets,
		Ports:            d.Store,
	}
	leader := leaderValues{
		Name:           LeaderName(b.Name),
		Image:          b.StoreImage(-1, in.BackendImageSetting),
		Replicas:       l.ReplicaCount(),
		RollingUpdate:  l.ReplicaCount() > 1,
		MaxUnavailable: l.ReplicaCount() - 1,
		LeaseElection:  l.LeaseElection(),
		Warm:           l.Warm(),
		MultiTenancy:   l.MultiTenancyEnabled(),
	}
	if leader.Image == "" {
		return nil, fmt.Errorf("KVCacheBackend %s: no store image: set spec.image or create the Setting %s", b.Name, kvv1.SettingKVCacheBackendImage)
	}
	leader.ServiceAccount, v.MemberAccount = "default", "default"
	leader.Command, leader.ReadinessPeriodSeconds, leader.Liveness = []string{vocab.MasterCommand}, 5, true
	if leader.LeaseElection {
		leader.ServiceAccount = LeaderName(b.Name)
		v.MemberAccount = MemberAccountName(b.Name)
		v.StoreAPIAccess = true
	}
	if leader.MultiTenancy {
		leader.PolicyConfig = QuotaPolicyName(b.Name)
		v.Tenants = sortedTenants(in.Tenants)
	}
	leader.Args = leaderArgs(b, d)
	leader.Env = l.ExtraEnv
	if leader.Warm {
		// Each master advertises its own address (-rpc_address) in etcd. A standby answers
		// /health and is probed like any master; it is ready only once it serves, and probed
		// every second so that the Service routes to it as soon as it does.
		leader.Env = append([]corev1.EnvVar{fieldEnv(vocab.DrainPodIPEnv, "status.podIP")}, leader.Env...)
		leader.ReadinessPeriodSeconds = 1
		// The master exits on SIGTERM at once, and the Pod's network with it, while kube-proxy
		// may still send the Service's new connections to the Pod's address until its next
		// sync: a client dialling then gets no answer and waits out the store client's 30 s
		// connect timeout (measured: a graceful failover's first put 30.8 s after the delete,
		// against 10.6 s after a kill). Serving on after the Pod left the Service's endpoints,
		// the master keeps its open connections, and a dial meanwhile is refused at once (no
		// ready endpoint) and retried. The electing launcher lingers after its master for the
		// same reason (leader.DefaultLinger); an image without sleep fails the hook, and the
		// kubelet stops the master at once as before.
		leader.PreStop = []string{"sleep", strconv.Itoa(int(warmStopDelay / time.Second))}
	}
	if leader.LeaseElection {
		leader.LauncherImage = launcherImage(in, d)
		leader.LauncherDir = vocab.LauncherDir
		leader.LauncherPath = vocab.LauncherDir + "/kvcache"
		leader.Command, leader.ReadinessPeriodSeconds, leader.Liveness = []string{leader.LauncherPath}, 1, false
		// The launcher runs the master; the Lease names the Pod.
		leader.Args = append([]string{"elect", "--lease-name=" + LeaderName(b.Name), fmt.Sprintf("--peer-port=%d", d.Store.LeaderPeerPort), "--"}, append([]string{vocab.MasterCommand}, leader.Args...)...)
		leader.Env = append([]corev1.EnvVar{fieldEnv(vocab.LauncherPodNameEnv, "metadata.name"), fieldEnv(vocab.LauncherPodNamespaceEnv, "metadata.namespace")}, leader.Env...)
	}
	v.Leader = leader

	// Members reach the master through the leader Service, whichever Pod serves it: a member
	// re-registers by itself when a new master answers at the same address. (Lease addressing
	// names k8s://, which no published member reads; admission refuses it.)
	// With warm failover too: only the serving master listens on its RPC port and is Ready, and
	// the store's etcd stays reachable from the masters alone (tenants' Pods never need it).
	master, admin := ClientEndpoint(b.Name, ns, d), AdminEndpoint(b.Name, ns, d)
	for i, g := range m.Members {
		mv, err := memberValuesFor(b, i, g, memberEndpoints{master: master, admin: admin, launcherImage: launcherImage(in, d)}, in.BackendImageSetting, d)
		if err != nil {
			return nil, err
		}
		v.Members = append(v.Members, mv)
	}
	if WhyNoNetworkPolicy(b) == "" {
		np := &networkPolicyValues{
			Name:             NetworkPolicyName(b.Name),
			BoundNamespaces:  sortedUnique(in.BoundNamespaces),
			ManagerNamespace: in.OperatorNamespace,
			MetricsFrom:      in.MetricsFrom,
		}
		if np.ManagerNamespace == "" {
			np.ManagerNamespace = d.OperatorNamespace
		}
		v.NetworkPolicy = np
	}
	return v, nil
}

// leaderArgs are mooncake_master's flags in the documented order; extraArgs come last. The
// master runs in its plain mode whether or not the leader elects through a Lease: that
// election is the launcher's, since no published store build has a Kubernetes HA backend. Only
// warm failover runs the master's own etcd HA mode.
func leaderArgs(b *kvv1.KVCacheBackend, d values.Defaults) []string {
	l := b.Spec.Connection.Managed.Leader
	args := []string{
		fmt.Sprintf("-rpc_port=%d", d.Store.RPCPort),
		fmt.Sprintf("-metrics_port=%d", d.Store.AdminPort),
		"-default_kv_lease_ttl=" + d.Store.DefaultKVLeaseTTL,
		"-allocation_strategy=" + allocationFlag(l.AllocationStrategy),
	}
	if l.MultiTenancyEnabled() {
		args = append(args,
			"-enable_multi_tenants=true",
			fmt.Sprintf("-tenant_quota_connector_uri=%s/%s", d.Store.TenantQuotaDir, d.Store.TenantQuotaFile),
		)
	}
	if l.Warm() {
		args = append(args, warmMasterArgs(b)...)
	}
	return append(args, l.ExtraArgs...)
}

// allocationFlag is the master's spelling of an allocation strategy.
func allocationFlag(s kvv1.AllocationStrategy) string {
	if s == kvv1.AllocationRandom {
		return "random"
	}
	return "free_ratio_first"
}

// memberEndpoints are what a member group's Pods reach: the master's RPC (the member itself)
// and admin (its preStop drain) addresses, and the operator's image the drain is copied from.
type memberEndpoints struct {
	master, admin, launcherImage string
}

// A put that stays unfinished longer than this is never discarded early: 10 years, beyond any
// object's age. The master's early discard frees a key's memory before its removal is in the
// operation log, and a standby that replays that log hands out another key's bytes for it. The
// release timeout must be greater than the discard timeout.
const (
	warmPutStartDiscardTimeoutSec = 315360000
	warmPutStartReleaseTimeoutSec = warmPutStartDiscardTimeoutSec + 1
)

// warmMasterArgs are the flags of a warm-failover master: the etcd HA mode with the operation
// log, under the store's own cluster id, and a put's early discard turned off.
func warmMasterArgs(b *kvv1.KVCacheBackend) []string {
	return []string{
		"-enable_ha=true",
		"-ha_backend_type=etcd",
		"-ha_backend_connstring=" + etcdList(b.Spec.Connection.Managed.Leader.Etcd),
		"-enable_oplog=true",
		"-cluster_id=" + StoreClusterID(b),
		"-rpc_address=$(" + vocab.DrainPodIPEnv + ")",
		fmt.Sprintf("-put_start_discard_timeout_sec=%d", warmPutStartDiscardTimeoutSec),
		fmt.Sprintf("-put_start_release_timeout_sec=%d", warmPutStartReleaseTimeoutSec),
	}
}

func etcdList(e *kvv1.StoreEtcd) string {
	if e == nil {
		return ""
	}
	return strings.Join(e.Endpoints, ";")
}

// maxClusterIDLen is the store's limit on a cluster id.
const maxClusterIDLen = 128

// StoreClusterID is the id a warm-failover store keeps its election and operation log under in
// etcd: the backend's name and, once it has one, its UID,
// so a backend deleted and created again under the same name never replays the log of the one
// before (whose index names segments of members that are gone).
func StoreClusterID(b *kvv1.KVCacheBackend) string {
	if b.UID == "" {
		return truncate(b.Name, maxClusterIDLen)
	}
	uid := string(b.UID)
	return truncate(b.Name, maxClusterIDLen-len(uid)-1) + "-" + uid
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func memberValuesFor(b *kvv1.KVCacheBackend, i int, g kvv1.MemberGroup, e memberEndpoints, setting string, d values.Defaults) (memberValues, error) {
	mv := memberValues{
		Index:        i,
		Name:         MemberName(b.Name, i),
		Component:    "member-" + strconv.Itoa(i),
		Image:        b.StoreImage(i, setting),
		RestPort:     d.Store.MemberRestPortBase + int32(i),
		NodeSelector: g.NodeSelector,
		Command:      []string{vocab.MemberCommand},
	}
	if mv.Image == "" {
		return mv, fmt.Errorf("KVCacheBackend %s: member group %d: no store image: set spec.connection.managed.members[%d].image, spec.image or the Setting %s", b.Name, i, i, kvv1.SettingKVCacheBackendImage)
	}
	protocol := b.EffectiveProtocol(i).StoreSpelling()
	mv.Args = append([]string{fmt.Sprintf("--port=%d", mv.RestPort)}, g.ExtraArgs...)
	mv.Env = []corev1.EnvVar{
		{Name: vocab.MasterEnv, Value: e.master},
		{Name: vocab.MetadataServerEnv, Value: vocab.MetadataServer},
		{Name: vocab.ProtocolEnv, Value: protocol},
		fieldEnv(vocab.LocalHostnameEnv, "status.podIP"),
		{Name: vocab.GlobalSegmentSizeEnv, Value: strconv.FormatInt(g.CapacityPerMember.Value(), 10)},
	}
	// The staging buffer is always written: left unset, the member allocates the store's 1 GiB
	// default, which its memory request would not hold.
	buffer := *resource.NewQuantity(d.Store.MemberLocalBufferSize, resource.BinarySI)
	if g.LocalBufferSize != nil {
		buffer = g.LocalBufferSize.DeepCopy()
	}
	mv.Env = append(mv.Env,
		corev1.EnvVar{Name: vocab.LocalBufferSizeEnv, Value: strconv.FormatInt(buffer.Value(), 10)},
		corev1.EnvVar{Name: vocab.MetricEnv, Value: "1"},
		corev1.EnvVar{Name: vocab.DrainAdminEnv, Value: e.admin},
		fieldEnv(vocab.DrainPodIPEnv, "status.podIP"))
	if b.Spec.Connection.Managed.Leader.Warm() {
		// A restarted member registers under a segment name the serving master has never seen
		// for its host: the index the next master replays may still hold its old objects, and
		// under the old name those would read back the new member's memory.
		mv.Command = []string{vocab.LauncherDir + "/kvcache", vocab.MemberRunCommand, "--"}
		mv.Args = append([]string{vocab.MemberCommand}, mv.Args...)
	}
	// A member dials the master too: after a failover, bounded as an engine's dial is, unless
	// the group's extraEnv sets its own bound.
	if !slices.ContainsFunc(g.ExtraEnv, func(e corev1.EnvVar) bool { return e.Name == vocab.RPCConnectTimeoutEnv }) {
		mv.Env = append(mv.Env, corev1.EnvVar{Name: vocab.RPCConnectTimeoutEnv, Value: strconv.FormatInt(d.Store.ClientConnectTimeoutMS, 10)})
	}
	mv.Env = append(mv.Env, g.ExtraEnv...)

	// A member loses every object it holds the moment it stops, so before the kubelet signals it,
	// its preStop hook has the master move them to the other members (kvcache drain-member,
	// copied in from the operator's image beside the stock member). The hook gives up at the
	// group's drainTimeout and the Pod's grace period outlasts it by a margin.
	timeout := g.DrainTimeoutOrDefault()
	mv.LauncherImage, mv.LauncherDir, mv.LauncherPath = e.launcherImage, vocab.LauncherDir, vocab.LauncherDir+"/kvcache"
	mv.PreStop = []string{mv.LauncherPath, vocab.DrainMemberCommand,
		fmt.Sprintf("--deadline=%ds", int64((timeout+time.Second-1)/time.Second)),
		// The kubelet discards a successful hook's output: the lines go to the member's log.
		"--log-file=/proc/1/fd/1"}
	if b.Spec.Connection.Managed.Leader.Warm() {
		// The new master of a failover during the drain keeps the objects: wait for it and drain
		// again there, rather than stop as if a restarted master had forgotten them.
		mv.PreStop = append(mv.PreStop, "--warm")
	}
	mv.TerminationGracePeriodSeconds = int64((timeout + kvv1.DrainGraceMargin + time.Second - 1) / time.Second)

	// DRAM members hold their segment in the Pod's own memory, so the request claims it; a VRAM
	// segment lives on the device and only the staging buffer is host memory. No limit: the
	// process needs room beyond its segment, and a limit at the segment size would OOM-kill it.
	var mem resource.Quantity
	if g.Medium != kvv1.MediumVRAM {
		mem = g.CapacityPerMember.DeepCopy()
	}
	mem.Add(buffer)
	if !mem.IsZero() {
		mv.MemoryRequest = mem.String()
	}

	count := int32(1)
	if g.FabricInterfaceCount != nil {
		count = *g.FabricInterfaceCount
	}
	if name, n, ok := FabricResource(protocol, count, d.Store); ok {
		mv.Fabric = &fabricValues{ResourceName: name, Count: n}
	}
	return mv, nil
}

func fieldEnv(name, path string) corev1.EnvVar {
	// apiVersion is spelled out as the API server would default it, so an applied child and the
	// stored one do not differ.
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func sortedTenants(in []Tenant) []Tenant {
	out := append([]Tenant(nil), in...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func ptrTo[T any](v T) *T { return &v }

// RenderStore renders every object of a managed backend's store. An external backend renders
// nothing: the operator only observes it.
func (r *Renderer) RenderStore(in StoreInput) ([]Object, error) {
	if in.Backend.Spec.Connection.Managed == nil {
		return nil, nil
	}
	v, err := r.storeValues(in)
	if err != nil {
		return nil, err
	}
	stream, err := r.templates.ExecuteDir("store", v)
	if err != nil {
		return nil, fmt.Errorf("render store of KVCacheBackend %s: %w", in.Backend.Name, err)
	}
	objs, err := r.decoder.decodeAll("store of KVCacheBackend "+in.Backend.Name, stream)
	if err != nil {
		return nil, err
	}
	specHashes, err := storeSpecHashes(in)
	if err != nil {
		return nil, err
	}
	if err := stampHashes(objs, specHashes); err != nil {
		return nil, err
	}
	SortObjects(objs)
	return objs, nil
}
