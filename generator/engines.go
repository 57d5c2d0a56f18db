package generator

import (
	"fmt"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kvcache-operator/kvcache/engines"
)

// FragmentInput is everything an engine fragment depends on.
type FragmentInput struct {
	Engine engines.Engine
	// Master is the store's Client endpoint (the pool's clientEndpoint).
	Master string
	// Protocol is the transport in store spelling (tcp, rdma, ascend, ...).
	Protocol string
	// Tenant is the Binding's domain; "" when the backend keeps no tenant ledger.
	Tenant string
	// Dtype is the Binding's dtype; "" when the Setting leaves the dtype to containers.
	Dtype string
	// Role selects the vLLM family's kv_role.
	Role engines.Role
}

type fragmentValues struct {
	Master          string
	Protocol        string
	Tenant          string
	Dtype           string
	Connector       string
	KVRole          string
	LocalBufferSize int64
}

// RenderFragment renders the fragment an engine's container receives. Pod injection and
// ModelDeployment rendering both call it, so the two paths cannot drift.
func (r *Renderer) RenderFragment(in FragmentInput) (*engines.Fragment, error) {
	name := "engines/sglang.yaml"
	if in.Engine.VLLMFamily() {
		name = "engines/vllm.yaml"
	}
	v := fragmentValues{
		Master:          in.Master,
		Protocol:        in.Protocol,
		Tenant:          in.Tenant,
		Dtype:           in.Dtype,
		Connector:       in.Engine.Connector,
		KVRole:          in.Engine.KVRole(in.Role),
		LocalBufferSize: r.defaults.Injection.LocalBufferSize,
	}
	out, err := r.engine.Execute(name, v)
	if err != nil {
		return nil, fmt.Errorf("render %s fragment: %w", in.Engine.Name, err)
	}
	j, err := yaml.YAMLToJSONStrict(out)
	if err != nil {
		return nil, fmt.Errorf("render %s fragment: %w\n%s", in.Engine.Name, err, out)
	}
	f := &engines.Fragment{}
	strict, err := sigsjson.UnmarshalStrict(j, f)
	if err == nil && len(strict) > 0 {
		err = strict[0]
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s fragment: %w\n%s", in.Engine.Name, err, out)
	}
	return f, nil
}
