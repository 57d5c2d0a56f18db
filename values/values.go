// Package values owns the constants of rendered output (ports, sizes, resource names), read
// from the embedded defaults.yaml, and the built-in example manifests (examples/) that
// `kvcache render` uses when it is given no input.
package values

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

//go:embed defaults.yaml
var defaultsYAML []byte

//go:embed examples/walkthrough.yaml
var walkthroughYAML []byte

// Store holds the store's ports, sizes and resource names.
type Store struct {
	RPCPort            int32  `json:"rpcPort"`
	AdminPort          int32  `json:"adminPort"`
	LeaderPeerPort     int32  `json:"leaderPeerPort"`
	DefaultKVLeaseTTL  string `json:"defaultKVLeaseTTL"`
	MemberRestPortBase int32  `json:"memberRestPortBase"`
	TenantQuotaDir     string `json:"tenantQuotaDir"`
	TenantQuotaFile    string `json:"tenantQuotaFile"`
	// MemberLocalBufferSize is a member's staging buffer when its group sets none.
	MemberLocalBufferSize int64 `json:"memberLocalBufferSize"`
	// ClientConnectTimeoutMS bounds every store client's dial of the master, engines' and
	// members' alike (MC_RPC_CONNECT_TIMEOUT_MS).
	ClientConnectTimeoutMS int64  `json:"clientConnectTimeoutMS"`
	RDMASharedResource     string `json:"rdmaSharedResource"`
	RDMAResource           string `json:"rdmaResource"`
	EFAResource            string `json:"efaResource"`
}

// ModelDeployment holds a managed deployment's per-engine values, by engine id.
type ModelDeployment struct {
	Engines map[string]EngineDefaults `json:"engines"`
}

// EngineDefaults are one engine's values in a managed deployment.
type EngineDefaults struct {
	// Image is a format with the version (without a leading v) as its one verb.
	Image string `json:"image"`
	Port  int32  `json:"port"`
	// DisaggregationHostMount, when set, is a host tree the engine's prefill and decode halves
	// mount read-only at the same path.
	DisaggregationHostMount *HostMount `json:"disaggregationHostMount,omitempty"`
}

// HostMount is a host path mounted at the same path, and its volume's name.
type HostMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// Defaults is the parsed defaults.yaml.
type Defaults struct {
	// OperatorImage is the operator's own image as the chart installs it by default: the image
	// electing leader Pods copy the launcher from, and member Pods their drain, when the manager
	// is not told its own.
	OperatorImage string `json:"operatorImage"`
	// OperatorNamespace is the namespace the chart is installed in by default (the README's):
	// the store's NetworkPolicy admits the manager's Pods there when the manager is not told
	// its own.
	OperatorNamespace string          `json:"operatorNamespace"`
	Store             Store           `json:"store"`
	ModelDeployment   ModelDeployment `json:"modelDeployment"`
}

// Load parses the embedded defaults. It fails only if defaults.yaml itself is broken, which a
// unit test catches.
func Load() (Defaults, error) {
	var d Defaults
	if err := yaml.UnmarshalStrict(defaultsYAML, &d); err != nil {
		return Defaults{}, fmt.Errorf("values/defaults.yaml: %w", err)
	}
	return d, nil
}

// Walkthrough returns the built-in example: the walkthrough's backend, pool and Binding.
func Walkthrough() []byte {
	return append([]byte(nil), walkthroughYAML...)
}
