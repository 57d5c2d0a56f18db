package validation

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/vocab"
)

const (
	maxLeaderReplicas = 5
	maxMemberGroups   = 32
	// The leader Service is "<backend>-leader" and must be a DNS-1035 label.
	maxBackendNameLen = utilvalidation.DNS1035LabelMaxLength - len(vocab.LeaderSuffix)
)

// Reasons a flag may not be passed through leader.extraArgs, by flag key (no dashes).
const (
	reasonDerivedPorts    = "the operator sets it: the Service, probes and endpoints depend on the master's ports"
	reasonDerivedElection = "the operator derives the master's election from leader.electionBackend (Kubernetes: its launcher holds the leader's Lease and the master runs in its plain mode; Etcd: the master's own etcd HA mode at leader.etcd); set leader.electionBackend, leader.etcd and leader.replicas instead"
	reasonDerivedAlloc    = "the operator derives it from leader.allocationStrategy; set that field instead"
	reasonDerivedTenancy  = "the operator derives it from leader.multiTenancy and seeds the ledger file itself; set multiTenancy instead"
	reasonSnapshot        = "the store's snapshot is not offered: restoring a snapshot can make the cache serve another key's bytes instead of a miss"
	reasonOplog           = "the operation log is the warm failover's, which the operator configures with every setting it needs to be safe (an early discard that could hand out another key's bytes turned off, no tenants); set leader.electionBackend: Etcd and leader.etcd instead"
	reasonDiscard         = "the operator keeps the store's default for a cold store and sets it beyond any object's age for warm failover (electionBackend: Etcd), where the master's early discard of an unfinished put frees memory before the removal is logged, and the next master hands out another key's bytes for it"
	reasonConfigPath      = "a config file would override the flags the operator renders; use extraArgs flags that are allowed"
	reasonAllocator       = "member memory is allocated by the store's default allocator; this operator does not offer another"
	reasonCXL             = "CXL memory is not a medium this operator provisions; use members[].medium"
	reasonOldPort         = "-port is the store's old spelling of -rpc_port, which the operator sets: the Service, probes and endpoints depend on it"
	reasonConnector       = "the operator's ledger is the policy file it seeds into the leader, and another connector would leave it unread; set leader.multiTenancy instead"
	reasonIndirect        = "it reads further flags from a file or the environment, past these checks; pass each flag as its own token"
	reasonStorage         = "the store's storage is the members' memory; disk offload and file segments are not offered"
)

var refusedLeaderFlags = map[string]string{
	"rpc_port":                      reasonDerivedPorts,
	"metrics_port":                  reasonDerivedPorts,
	"port":                          reasonOldPort,
	"enable_ha":                     reasonDerivedElection,
	"ha_backend_type":               reasonDerivedElection,
	"ha_backend_connstring":         reasonDerivedElection,
	"rpc_address":                   reasonDerivedElection,
	"cluster_id":                    reasonDerivedElection,
	"pod_name":                      reasonDerivedElection,
	"pod_namespace":                 reasonDerivedElection,
	"allocation_strategy":           reasonDerivedAlloc,
	"enable_multi_tenants":          reasonDerivedTenancy,
	"tenant_quota_connector_uri":    reasonDerivedTenancy,
	"tenant_quota_connector_type":   reasonConnector,
	"enable_snapshot":               reasonSnapshot,
	"enable_snapshot_restore":       reasonSnapshot,
	"enable_oplog":                  reasonOplog,
	"etcd_endpoints":                reasonOplog,
	"put_start_discard_timeout_sec": reasonDiscard,
	"put_start_release_timeout_sec": reasonDiscard,
	"config_path":                   reasonConfigPath,
	"memory_allocator":              reasonAllocator,
	"enable_cxl":                    reasonCXL,
	"cxl_path":                      reasonCXL,
	"cxl_size":                      reasonCXL,
	"flagfile":                      reasonIndirect,
	"fromenv":                       reasonIndirect,
	"tryfromenv":                    reasonIndirect,
	"enable_offload":                reasonStorage,
	"root_fs_dir":                   reasonStorage,
	"global_file_segment_size":      reasonStorage,
}

// LeaderFlagRefusal returns why a leader.extraArgs flag key (without its leading dashes) is
// refused, or "" when it is allowed. The master parses flags with gflags, which reads a dash in
// a name as an underscore (-enable-snapshot-restore is enable_snapshot_restore) and -noX as a
// boolean X set to false, the last value winning; so a refused key is refused in each of those
// spellings.
func LeaderFlagRefusal(key string) string {
	_, r := leaderFlag(key)
	return r
}

// leaderFlag returns the flag gflags reads key as (its underscore name; "X=false" for a "no"
// negation) and why it is refused, or "" when it is allowed.
func leaderFlag(key string) (string, string) {
	name := strings.ReplaceAll(key, "-", "_")
	if r := leaderFlagRefusal(name); r != "" {
		return name, r
	}
	if rest, ok := strings.CutPrefix(name, "no"); ok {
		rest = strings.TrimPrefix(rest, "_")
		if r := leaderFlagRefusal(rest); r != "" {
			return rest + "=false", r
		}
	}
	return name, ""
}

func leaderFlagRefusal(key string) string {
	if r, ok := refusedLeaderFlags[key]; ok {
		return r
	}
	if strings.HasPrefix(key, "snapshot_") {
		return reasonSnapshot
	}
	return ""
}

// Environment the operator owns in the store containers, with why; extraEnv may not set it.
const (
	envFromSpec    = "the operator sets it from the backend's spec"
	envFromPod     = "the operator sets it from the Pod itself (the downward API)"
	envLauncher    = "the operator sets it from the Pod itself (the downward API): the launcher names the Lease holder by it"
	envMetric      = "the operator turns transfer-engine metrics on for every member"
	envDeviceUnset = "the operator leaves it unset on purpose: empty means every device, the only value right for every host of a group, since device names differ per host"
	envDrain       = "the operator sets it for the member's preStop drain (kvcache drain-member), which moves its objects to the other members before it stops"
)

var (
	derivedMemberEnv = map[string]string{
		vocab.MasterEnv: envFromSpec, vocab.MetadataServerEnv: envFromSpec, vocab.ProtocolEnv: envFromSpec,
		vocab.LocalHostnameEnv: envFromPod, vocab.GlobalSegmentSizeEnv: envFromSpec,
		vocab.LocalBufferSizeEnv: envFromSpec, vocab.MetricEnv: envMetric, vocab.DeviceEnv: envDeviceUnset,
		vocab.DrainAdminEnv: envDrain, vocab.DrainPodIPEnv: envDrain,
		// A config file replaces every variable above.
		vocab.ConfigPathEnv: "a configuration file would replace every MOONCAKE_* variable the operator sets",
	}
	derivedLeaderEnv = map[string]string{
		"POD_NAME": envLauncher, "POD_NAMESPACE": envLauncher,
		vocab.DrainPodIPEnv: "the operator sets it from the Pod itself (the downward API): a warm-failover master advertises it in etcd",
	}
	// Store client attributes a member's -D key=value could override; the operator sets each
	// through the environment.
	derivedMemberAttributes = []string{"master_server_address", "metadata_server", "protocol", "local_hostname", "global_segment_size", "local_buffer_size", "device_name"}
)

// BackendContext carries what backend validation needs from outside the object.
type BackendContext struct {
	// BackendImageSetting is the value of the Setting kv-cache-backend-image; "" when absent.
	BackendImageSetting string
}

// ValidateBackend checks a KVCacheBackend on its own. Call it on a defaulted object.
func ValidateBackend(b *kvv1.KVCacheBackend, ctx BackendContext) field.ErrorList {
	var errs field.ErrorList
	if len(b.Name) > maxBackendNameLen || len(utilvalidation.IsDNS1035Label(b.Name)) > 0 {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), b.Name,
			fmt.Sprintf("must be a DNS-1035 label of at most %d characters (lowercase letters, digits and '-', starting with a letter), because the leader Service is named <name>-leader", maxBackendNameLen)))
	}
	spec := field.NewPath("spec")
	errs = append(errs, enum(spec.Child("type"), string(b.Spec.Type), "Mooncake")...)
	errs = append(errs, validateProtocol(spec.Child("transport", "protocol"), b.Spec.Transport.Protocol)...)
	if b.Spec.Image != "" {
		if e := imageReference(spec.Child("image"), b.Spec.Image); e != nil {
			errs = append(errs, e)
		}
	}
	if b.Spec.ImagePullPolicy != "" {
		errs = append(errs, enum(spec.Child("imagePullPolicy"), string(b.Spec.ImagePullPolicy), "Always", "IfNotPresent", "Never")...)
	}
	conn := spec.Child("connection")
	m, e := b.Spec.Connection.Managed, b.Spec.Connection.External
	switch {
	case m == nil && e == nil:
		errs = append(errs, field.Required(conn, "exactly one of spec.connection.managed (the operator runs the store) or spec.connection.external (an existing store) must be set"))
	case m != nil && e != nil:
		errs = append(errs, field.Forbidden(conn, "spec.connection.managed and spec.connection.external are both set; exactly one may be: remove the other"))
	case m != nil:
		errs = append(errs, validateManaged(b, conn.Child("managed"), ctx)...)
	default:
		errs = append(errs, validateExternal(conn.Child("external"), e)...)
	}
	return errs
}

func validateManaged(b *kvv1.KVCacheBackend, p *field.Path, ctx BackendContext) field.ErrorList {
	var errs field.ErrorList
	m := b.Spec.Connection.Managed
	l := m.Leader
	lp := p.Child("leader")
	replicas := l.ReplicaCount()
	if replicas < 1 || replicas > maxLeaderReplicas {
		errs = append(errs, field.Invalid(lp.Child("replicas"), replicas, fmt.Sprintf("must be between 1 and %d", maxLeaderReplicas)))
	}
	errs = append(errs, enum(lp.Child("electionBackend"), string(l.ElectionBackend), "Kubernetes", "None", "Etcd")...)
	errs = append(errs, validateWarm(lp, l)...)
	errs = append(errs, enum(lp.Child("memberAddressing"), string(l.MemberAddressing), "Service", "Lease")...)
	errs = append(errs, enum(lp.Child("allocationStrategy"), string(l.AllocationStrategy), "FreeRatioFirst", "Random")...)
	if l.ElectionBackend == kvv1.ElectionNone && replicas > 1 {
		errs = append(errs, field.Invalid(lp.Child("replicas"), replicas, "more than one leader replica needs electionBackend: Kubernetes, because standbys take over through the Lease; set replicas: 1 or electionBackend: Kubernetes"))
	}
	if l.MemberAddressing == kvv1.AddressingLease {
		errs = append(errs, field.Invalid(lp.Child("memberAddressing"), l.MemberAddressing, "Lease addressing hands members a k8s://<namespace>/<lease> master address, which no published Mooncake member reads (it exits with Invalid HA backend entry); set memberAddressing: Service, the default: members reach whichever master serves through the leader Service and re-register by themselves after a failover"))
	}
	errs = append(errs, validateLeaderArgs(lp.Child("extraArgs"), l.ExtraArgs)...)
	errs = append(errs, validateExtraEnv(lp.Child("extraEnv"), l.ExtraEnv, derivedLeaderEnv)...)

	// A member group resolves to the leader's image unless it names its own, so one error covers
	// every group.
	if b.StoreImage(-1, ctx.BackendImageSetting) == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "image"),
			fmt.Sprintf("no store image for the leader: set spec.image, or create the Setting %s (the chart installs it)", kvv1.SettingKVCacheBackendImage)))
	}
	mp := p.Child("members")
	if len(m.Members) == 0 {
		errs = append(errs, field.Required(mp, "at least one member group is needed: members contribute the store's memory"))
	}
	if len(m.Members) > maxMemberGroups {
		errs = append(errs, field.TooMany(mp, len(m.Members), maxMemberGroups))
	}
	for i, g := range m.Members {
		gp := mp.Index(i)
		if len(g.NodeSelector) == 0 {
			errs = append(errs, field.Required(gp.Child("nodeSelector"), "a member group selects its nodes; one member Pod runs per matching node"))
		}
		errs = append(errs, nodeSelector(gp.Child("nodeSelector"), g.NodeSelector)...)
		errs = append(errs, enum(gp.Child("medium"), string(g.Medium), "DRAM", "VRAM")...)
		if g.CapacityPerMember.Sign() <= 0 {
			errs = append(errs, field.Invalid(gp.Child("capacityPerMember"), g.CapacityPerMember.String(), "must be greater than zero: it is the segment each member registers, e.g. 8Gi"))
		} else if e := byteCount(gp.Child("capacityPerMember"), g.CapacityPerMember, "8Gi"); e != nil {
			errs = append(errs, e)
		}
		if g.LocalBufferSize != nil && g.LocalBufferSize.Sign() < 0 {
			errs = append(errs, field.Invalid(gp.Child("localBufferSize"), g.LocalBufferSize.String(), "must not be negative"))
		} else if g.LocalBufferSize != nil {
			if e := byteCount(gp.Child("localBufferSize"), *g.LocalBufferSize, "128Mi"); e != nil {
				errs = append(errs, e)
			}
		}
		if g.Transport != nil {
			errs = append(errs, validateProtocol(gp.Child("transport", "protocol"), g.Transport.Protocol)...)
		}
		if g.Image != "" {
			if e := imageReference(gp.Child("image"), g.Image); e != nil {
				errs = append(errs, e)
			}
		}
		if g.FabricInterfaceCount != nil && *g.FabricInterfaceCount < 1 {
			errs = append(errs, field.Invalid(gp.Child("fabricInterfaceCount"), *g.FabricInterfaceCount, "must be at least 1"))
		}
		if d := g.DrainTimeoutOrDefault(); d < kvv1.MinDrainTimeout || d > kvv1.MaxDrainTimeout {
			errs = append(errs, field.Invalid(gp.Child("drainTimeout"), shortDuration(d), fmt.Sprintf(
				"must be between %s and %s: it is how long a stopping member Pod spends moving its objects to the other members before it stops (its terminationGracePeriodSeconds is this plus %s), e.g. 5m",
				shortDuration(kvv1.MinDrainTimeout), shortDuration(kvv1.MaxDrainTimeout), shortDuration(kvv1.DrainGraceMargin))))
		}
		errs = append(errs, validateMemberArgs(gp.Child("extraArgs"), g.ExtraArgs)...)
		errs = append(errs, validateExtraEnv(gp.Child("extraEnv"), g.ExtraEnv, derivedMemberEnv)...)
	}
	return errs
}

// validateWarm checks leader.etcd against the election backend, and what warm failover needs.
func validateWarm(lp *field.Path, l kvv1.Leader) field.ErrorList {
	var errs field.ErrorList
	ep := lp.Child("etcd")
	if !l.Warm() {
		if l.Etcd != nil {
			errs = append(errs, field.Forbidden(ep, fmt.Sprintf("only electionBackend: Etcd reads leader.etcd (this leader elects with %s); remove it, or set electionBackend: Etcd for warm failover", l.ElectionBackend)))
		}
		return errs
	}
	if l.Etcd == nil || len(l.Etcd.Endpoints) == 0 {
		errs = append(errs, field.Required(ep.Child("endpoints"), "electionBackend: Etcd keeps the masters' election and operation log in an etcd: name its client addresses, e.g. endpoints: [store-etcd.gpustack-system.svc:2379]"))
	} else {
		seen := map[string]bool{}
		for i, e := range l.Etcd.Endpoints {
			switch {
			case strings.ContainsAny(e, ";, \t/"):
				errs = append(errs, field.Invalid(ep.Child("endpoints").Index(i), e, "one host:port per entry, without a scheme (the store's etcd client speaks plain gRPC), e.g. store-etcd.gpustack-system.svc:2379"))
			case hostPort(e) != "":
				errs = append(errs, field.Invalid(ep.Child("endpoints").Index(i), e, hostPort(e)))
			case seen[e]:
				errs = append(errs, field.Duplicate(ep.Child("endpoints").Index(i), e))
			}
			seen[e] = true
		}
	}
	if l.MultiTenancyEnabled() {
		errs = append(errs, field.Invalid(lp.Child("multiTenancy"), true, "warm failover needs multiTenancy: false: the master evicts a tenant's objects for its quota without logging it, and after a failover the next master hands out another key's bytes for an evicted key (measured on the stock master with etcd healthy); set multiTenancy: false (Bindings' ceilings are then not enforced), or keep electionBackend: Kubernetes"))
	}
	return errs
}

// shortDuration spells a duration as a user writes it: 1h, 5m, 1h1m, 90s (not 1h0m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// flagKey returns a -flag or -flag=value token's key without dashes, and whether the token
// has the shape of a flag at all.
func flagKey(tok string) (string, bool) {
	if !strings.HasPrefix(tok, "-") {
		return "", false
	}
	k := strings.TrimLeft(tok, "-")
	if i := strings.IndexByte(k, '='); i >= 0 {
		k = k[:i]
	}
	return k, k != ""
}

func validateLeaderArgs(p *field.Path, args []string) field.ErrorList {
	var errs field.ErrorList
	for i, a := range args {
		k, ok := flagKey(a)
		if !ok || strings.ContainsAny(k, " \t") {
			errs = append(errs, field.Invalid(p.Index(i), a, "each entry is one -flag or -flag=value token, e.g. -default_kv_lease_ttl=10m"))
			continue
		}
		if name, r := leaderFlag(k); r != "" {
			shown := "-" + k
			if name != k && name != strings.TrimPrefix(k, "no")+"=false" {
				shown = fmt.Sprintf("%s (read by the master as -%s)", a, name)
			}
			errs = append(errs, field.Forbidden(p.Index(i), fmt.Sprintf("%s: %s", shown, r)))
		}
	}
	return errs
}

func validateExtraEnv(p *field.Path, env []corev1.EnvVar, derived map[string]string) field.ErrorList {
	var errs field.ErrorList
	for i, e := range env {
		if why, ok := derived[e.Name]; ok {
			errs = append(errs, field.Forbidden(p.Index(i).Child("name"), fmt.Sprintf("%s: %s; remove it from extraEnv", e.Name, why)))
		}
	}
	return errs
}

// validateMemberArgs refuses member arguments that would override what the operator configures:
// the REST port, a configuration file, and -D overrides of the client attributes it sets.
func validateMemberArgs(p *field.Path, args []string) field.ErrorList {
	var errs field.ErrorList
	for j := 0; j < len(args); j++ {
		a := args[j]
		switch k := memberFlag(a); {
		case k == "port":
			errs = append(errs, field.Invalid(p.Index(j), a, "the operator sets the member's REST port (8080 + the group's position); remove it"))
		case k == "config":
			errs = append(errs, field.Invalid(p.Index(j), a, "a configuration file would replace every MOONCAKE_* variable the operator sets; remove it"))
		case strings.HasPrefix(a, "-D"):
			kv := strings.TrimPrefix(a, "-D")
			if kv == "" && j+1 < len(args) {
				kv = args[j+1]
			}
			attr, _, _ := strings.Cut(kv, "=")
			if slices.Contains(derivedMemberAttributes, attr) {
				errs = append(errs, field.Invalid(p.Index(j), a, fmt.Sprintf("%s is set by the operator through the environment; remove the override", attr)))
			}
		}
	}
	return errs
}

// memberLongFlags are mc_store_rest_server's long options. It parses them with Python's argparse,
// which reads a unique prefix as the option (--por is --port).
var memberLongFlags = []string{"config", "port", "max-wait-time", "help"}

// memberFlag is the option a member argument is read as, without dashes: a long option by its
// unique prefix, or the key of a single-dash token ("" for anything else).
func memberFlag(tok string) string {
	if name, ok := strings.CutPrefix(tok, "--"); ok {
		name, _, _ = strings.Cut(name, "=")
		if name == "" {
			return ""
		}
		match := ""
		for _, f := range memberLongFlags {
			if f == name {
				return f
			}
			if strings.HasPrefix(f, name) {
				if match != "" {
					return "" // ambiguous: argparse refuses it and the member exits
				}
				match = f
			}
		}
		return match
	}
	k, _ := flagKey(tok)
	return k
}

func validateExternal(p *field.Path, e *kvv1.ExternalConnection) field.ErrorList {
	var errs field.ErrorList
	ep := p.Child("endpoints")
	seen := map[kvv1.EndpointName]bool{}
	for i, x := range e.Endpoints {
		xp := ep.Index(i)
		switch x.Name {
		case kvv1.EndpointClient, kvv1.EndpointAdmin:
			if seen[x.Name] {
				errs = append(errs, field.Duplicate(xp.Child("name"), x.Name))
			}
			seen[x.Name] = true
		default:
			errs = append(errs, field.NotSupported(xp.Child("name"), x.Name, []string{"Client", "Admin"}))
		}
		if err := hostPort(x.Address); err != "" {
			errs = append(errs, field.Invalid(xp.Child("address"), x.Address, err))
		}
	}
	for _, n := range []kvv1.EndpointName{kvv1.EndpointClient, kvv1.EndpointAdmin} {
		if !seen[n] {
			errs = append(errs, field.Required(ep, fmt.Sprintf("the %s endpoint is required: add {name: %s, address: host:port} (%s)", n, n, endpointPurpose(n))))
		}
	}
	return errs
}

func endpointPurpose(n kvv1.EndpointName) string {
	if n == kvv1.EndpointClient {
		return "the master RPC address engines connect to, port 50051 by default"
	}
	return "the master HTTP address the operator reads health, capacity and the ledger from, port 9003 by default"
}

func hostPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "must be host:port, e.g. mooncake-master.store.svc:50051"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "the port must be a number between 1 and 65535"
	}
	return ""
}

func validateProtocol(p *field.Path, v kvv1.TransportProtocol) field.ErrorList {
	if v == "" {
		return nil
	}
	return enum(p, string(v), "Auto", "TCP", "RDMA", "EFA", "CANN", "ROCM", "MUSA", "MACA")
}

// enum refuses a value outside allowed; "" passes (defaulting fills it).
func enum(p *field.Path, v string, allowed ...string) field.ErrorList {
	if v == "" {
		return nil
	}
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(p, v, allowed)}
}

// nodeSelector refuses a label key or value the API server would refuse in the member
// DaemonSet's nodeSelector (the whole DaemonSet would fail to apply), in key order.
func nodeSelector(p *field.Path, sel map[string]string) field.ErrorList {
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		if msgs := utilvalidation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p, k, "is not a label key: "+strings.Join(msgs, "; ")+", e.g. kubernetes.io/os"))
		}
		if msgs := utilvalidation.IsValidLabelValue(sel[k]); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Key(k), sel[k], "is not a label value: "+strings.Join(msgs, "; ")+", e.g. linux"))
		}
	}
	return errs
}
