// Package vocab owns the names that two layers of this project must spell the same way: the
// injection contract's label and annotations, the labels every rendered object carries, the
// Mooncake client's and member's variables, where the vLLM family's configuration file is
// projected, and the store's programs. It imports nothing of this project. Engines, the
// generator, API validation, injection, the launcher and the operator use these constants; the
// templates receive them as values (Names), so a template never spells one itself.
package vocab

// The injection contract: the opt-in label and the annotations a Pod carries, exact case.
const (
	// Prefix is the contract's key prefix; any other key under it is refused (a typo must not
	// pass silently).
	Prefix = "kvcache.gpustack.ai/"
	// LabelInject opts a Pod in; only the value "true" does. It is a label because a webhook's
	// objectSelector matches labels only.
	LabelInject = Prefix + "inject"

	AnnotationBinding             = Prefix + "binding"
	AnnotationEngine              = Prefix + "engine"
	AnnotationRole                = Prefix + "role"
	AnnotationContainer           = Prefix + "container"
	AnnotationLaunchArgsForwarded = Prefix + "launch-args-forwarded"
	// AnnotationConfigFileReviewed declares that the file the engine's --config names sets none
	// of the keys injection owns or refuses: admission cannot open it, so the declaration is the
	// only way to admit that uncertainty. Only the value "true" is accepted.
	AnnotationConfigFileReviewed = Prefix + "config-file-reviewed"

	// AnnotationInjected is the injection record; AnnotationClientConfig the vLLM family's
	// client configuration, projected into the container as a file. Injection writes both.
	AnnotationInjected     = Prefix + "injected"
	AnnotationClientConfig = Prefix + "client-config"

	// AnnotationDomain does not exist on purpose: the domain comes from the Binding. It is
	// named so that it can be refused with its own message.
	AnnotationDomain = Prefix + "domain"

	// LabelModelDeployment names the ModelDeployment a Pod was rendered for. Those Pods carry
	// the written keys without the opt-in label, so the UPDATE freeze selects them by it too.
	LabelModelDeployment = Prefix + "model-deployment"
)

// Labels and annotations of what the operator renders.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"

	// StoreName is the app.kubernetes.io/name of every store object, ModelDeploymentName of
	// every object rendered for a ModelDeployment.
	StoreName           = "kv-cache-backend"
	ModelDeploymentName = "model-deployment"
	// ManagedBy is the app.kubernetes.io/managed-by of everything the operator renders.
	ManagedBy = "kvcache-operator"
	// LabelRoleKind on a ModelDeployment role's objects is the role's kind.
	LabelRoleKind = "worker.gpustack.ai/role-kind"

	// ComponentLeader is the app.kubernetes.io/component of a store's leader objects; a member
	// group's is MemberComponentPrefix and its index.
	ComponentLeader       = "leader"
	MemberComponentPrefix = "member-"
	// LeaderSuffix makes a backend's name into its leader's: the Deployment, Service, Lease and
	// ServiceAccount "<backend>-leader".
	LeaderSuffix = "-leader"

	// LabelPodSpecHash on a store Pod template is a hash of the template without its node
	// placement. Member DaemonSets update OnDelete and the operator replaces member Pods whose
	// hash is stale, so widening a nodeSelector restarts nobody.
	LabelPodSpecHash = Prefix + "pod-spec-hash"
	// AnnotationTemplateHash on the leader Deployment is the same hash of its Pod template.
	AnnotationTemplateHash = Prefix + "template-hash"
	// AnnotationSpecHash on a store workload is a hash of what of the user's objects its Pod
	// template is built from: it tells a template the spec changed from one the operator did.
	AnnotationSpecHash = Prefix + "spec-hash"
	// AnnotationAppliedHash on every rendered object is a hash of the whole render of it: the
	// operator applies again when it changed, and sends nothing while it did not.
	AnnotationAppliedHash = Prefix + "applied-hash"
	// LabelStoreLeader marks the leader Pod whose launcher holds the election Lease.
	LabelStoreLeader = Prefix + "store-leader"

	// LabelNamespaceName is the label the API server sets on every Namespace to its own name:
	// no tenant can set or change it, so a NetworkPolicy selects namespaces by it alone.
	LabelNamespaceName = "kubernetes.io/metadata.name"
	// ManagerAppName is the app.kubernetes.io/name of the manager's Pods as the chart labels
	// them (the chart's name).
	ManagerAppName = "kvcache-operator"
)

// The Mooncake client's variables, as SGLang's reader and the store's own member
// (mc_store_rest_server) read them, and the observability toggles.
const (
	MasterEnv            = "MOONCAKE_MASTER"
	MetadataServerEnv    = "MOONCAKE_TE_META_DATA_SERVER"
	ProtocolEnv          = "MOONCAKE_PROTOCOL"
	DeviceEnv            = "MOONCAKE_DEVICE"
	GlobalSegmentSizeEnv = "MOONCAKE_GLOBAL_SEGMENT_SIZE"
	LocalBufferSizeEnv   = "MOONCAKE_LOCAL_BUFFER_SIZE"
	LocalHostnameEnv     = "MOONCAKE_LOCAL_HOSTNAME"
	// TenantEnv carries SGLang's tenant.
	TenantEnv = "MOONCAKE_TENANT_ID"
	// ConfigPathEnv names the vLLM family's configuration file.
	ConfigPathEnv = "MOONCAKE_CONFIG_PATH"
	// SGLangConfigPathEnv makes SGLang read a file instead of the environment.
	SGLangConfigPathEnv = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"
	// MetricEnv and BandwidthMetricEnv are observability toggles, set only when absent.
	MetricEnv          = "MC_TE_METRIC"
	BandwidthMetricEnv = "MC_STORE_CLIENT_METRIC_BANDWIDTH"
	// RPCConnectTimeoutEnv bounds a client's dial of the master (milliseconds; the client's own
	// default is 30 s per attempt): set only when absent.
	RPCConnectTimeoutEnv = "MC_RPC_CONNECT_TIMEOUT_MS"

	// MetadataServer is the transfer engine's metadata mode everywhere: peers exchange segment
	// descriptors by handshake, so no metadata service runs.
	MetadataServer = "P2PHANDSHAKE"
)

// Where the vLLM family's client configuration is projected from the Pod's own annotation.
const (
	ConfigVolume    = "gpustack-kvcache-config"
	ConfigMountPath = "/etc/gpustack/kvcache"
	ConfigFile      = "mooncake.json"
	ConfigPath      = ConfigMountPath + "/" + ConfigFile
)

// The store's programs, and what an electing leader's launcher reads.
const (
	MasterCommand = "mooncake_master"
	MemberCommand = "mc_store_rest_server"
	// LauncherDir is where an electing leader Pod's init container copies the launcher.
	LauncherDir = "/opt/kvcache"
	// The launcher's identity: the Lease holder names the Pod.
	LauncherPodNameEnv      = "POD_NAME"
	LauncherPodNamespaceEnv = "POD_NAMESPACE"

	// DrainMemberCommand is the kvcache subcommand a member Pod's preStop hook runs (copied into
	// LauncherDir like the leader's launcher): it drains the member's objects to the others
	// through the master before the member stops.
	DrainMemberCommand = "drain-member"
	// MemberRunCommand is the kvcache subcommand a warm-failover member Pod runs its member
	// under: it picks a segment name the serving master has never seen for the Pod.
	MemberRunCommand = "member-run"
	// DrainAdminEnv is the master's admin address (host:port or URL) the drain talks to, and
	// DrainPodIPEnv the member Pod's IP (the downward API's status.podIP), the host part of the
	// segment names its member registered.
	DrainAdminEnv = "KVCACHE_MASTER_ADMIN"
	DrainPodIPEnv = "KVCACHE_POD_IP"
)

// Names is the vocabulary as the templates read it (.Names.X): every name a template writes
// comes from here, and a misspelt field fails the render (missingkey=error).
type Names struct {
	LabelName, LabelInstance, LabelComponent, LabelManagedBy string
	StoreName, ModelDeploymentName, ManagedBy, LabelRoleKind string
	LabelModelDeployment                                     string
	AnnotationClientConfig                                   string
	LabelNamespaceName, ManagerAppName                       string

	MasterEnv, MetadataServerEnv, ProtocolEnv, DeviceEnv       string
	GlobalSegmentSizeEnv, LocalBufferSizeEnv, LocalHostnameEnv string
	TenantEnv, ConfigPathEnv, MetricEnv, BandwidthMetricEnv    string
	RPCConnectTimeoutEnv                                       string
	MetadataServer                                             string
	ConfigVolume, ConfigMountPath, ConfigFile, ConfigPath      string
	MasterCommand, MemberCommand                               string
	LauncherDir, LauncherPodNameEnv, LauncherPodNamespaceEnv   string
}

// TemplateNames returns the vocabulary for the templates.
func TemplateNames() Names {
	return Names{
		LabelName: LabelName, LabelInstance: LabelInstance, LabelComponent: LabelComponent, LabelManagedBy: LabelManagedBy,
		StoreName: StoreName, ModelDeploymentName: ModelDeploymentName, ManagedBy: ManagedBy, LabelRoleKind: LabelRoleKind,
		LabelModelDeployment:   LabelModelDeployment,
		AnnotationClientConfig: AnnotationClientConfig,
		LabelNamespaceName:     LabelNamespaceName, ManagerAppName: ManagerAppName,
		MasterEnv: MasterEnv, MetadataServerEnv: MetadataServerEnv, ProtocolEnv: ProtocolEnv, DeviceEnv: DeviceEnv,
		GlobalSegmentSizeEnv: GlobalSegmentSizeEnv, LocalBufferSizeEnv: LocalBufferSizeEnv, LocalHostnameEnv: LocalHostnameEnv,
		TenantEnv: TenantEnv, ConfigPathEnv: ConfigPathEnv, MetricEnv: MetricEnv, BandwidthMetricEnv: BandwidthMetricEnv,
		RPCConnectTimeoutEnv: RPCConnectTimeoutEnv,
		MetadataServer:       MetadataServer,
		ConfigVolume:         ConfigVolume, ConfigMountPath: ConfigMountPath, ConfigFile: ConfigFile, ConfigPath: ConfigPath,
		MasterCommand: MasterCommand, MemberCommand: MemberCommand,
		LauncherDir: LauncherDir, LauncherPodNameEnv: LauncherPodNameEnv, LauncherPodNamespaceEnv: LauncherPodNamespaceEnv,
	}
}
