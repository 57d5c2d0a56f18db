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
	DefaultKVLeaseTTL  string `json:"defaultKVLeaseTTL"`
	MemberRestPortBase int32  `json:"memberRestPortBase"`
	TenantQuotaDir     string `json:"tenantQuotaDir"`
	TenantQuotaFile    string `json:"tenantQuotaFile"`
	// MemberLocalBufferSize is a member's staging buffer when its group sets none.
	MemberLocalBufferSize int64  `json:"memberLocalBufferSize"`
	RDMASharedResource    string `json:"rdmaSharedResource"`
	RDMAResource          string `json:"rdmaResource"`
	EFAResource           string `json:"efaResource"`
}

// ModelDeployment holds a managed deployment's images and ports.
type ModelDeployment struct {
	VLLMImage        string `json:"vllmImage"`
	VLLMAscendImage  string `json:"vllmAscendImage"`
	SGLangImage      string `json:"sglangImage"`
	VLLMPort         int32  `json:"vllmPort"`
	SGLangPort       int32  `json:"sglangPort"`
	AscendDriverPath string `json:"ascendDriverPath"`
}

// Defaults is the parsed defaults.yaml.
type Defaults struct {
	// OperatorImage is the operator's own image as the chart installs it by default: the image
	// electing leader Pods copy the launcher from when the manager is not told its own.
	OperatorImage   string          `json:"operatorImage"`
	Store           Store           `json:"store"`
	ModelDeployment ModelDeployment `json:"modelDeployment"`
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
