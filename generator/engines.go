package generator

import (
	"fmt"
	"sync"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/vocab"
)

// FragmentInput is everything an engine fragment depends on: the engine, the store it is
// attached to (the same CacheInput a ModelDeployment renders from), and its role.
type FragmentInput struct {
	Engine engines.Engine
	CacheInput
	// Role selects the vLLM family's kv_role.
	Role engines.Role
}

// fragmentValues are the template's data, and the key of the fragment cache: every field is
// comparable and they determine the output completely.
type fragmentValues struct {
	Names           vocab.Names
	Template        string
	Master          string
	Protocol        string
	Tenant          string
	Dtype           string
	Connector       string
	Mode            string
	KVRole          string
	LocalBufferSize int64
	// ConnectTimeoutMS bounds the client's dial of the master (values: store.clientConnectTimeoutMS).
	ConnectTimeoutMS int64
	// EnvOverridesFile: the engine reads variables over the projected file (vLLM-Ascend's
	// MOONCAKE_MASTER and MOONCAKE_GLOBAL_SEGMENT_SIZE), so the fragment writes them as well.
	EnvOverridesFile bool
}

// RenderFragment renders the fragment an engine's container receives. Pod injection and
// ModelDeployment rendering both call it, so the two paths cannot drift. Every Pod naming the
// same Binding gets the same fragment, so rendered fragments are cached by their values (the
// render is a pure function of them); callers get their own copy.
func (r *Renderer) RenderFragment(in FragmentInput) (*engines.Fragment, error) {
	name := "engines/sglang.yaml"
	if in.Engine.VLLMFamily() {
		name = "engines/vllm.yaml"
	}
	v := fragmentValues{
		Names:            vocab.TemplateNames(),
		Template:         name,
		Master:           in.Master,
		Protocol:         in.Protocol,
		Tenant:           in.Tenant,
		Dtype:            in.Dtype,
		Connector:        in.Engine.Connector,
		Mode:             in.Engine.ClientMode,
		KVRole:           in.Engine.KVRole(in.Role),
		LocalBufferSize:  in.Engine.StagingBuffer,
		ConnectTimeoutMS: r.defaults.Store.ClientConnectTimeoutMS,
		EnvOverridesFile: len(in.Engine.OverrideEnv) > 0,
	}
	if f, ok := r.fragments.get(v); ok {
		return f.DeepCopy(), nil
	}
	f, err := r.renderFragment(in.Engine, v)
	if err != nil {
		return nil, err
	}
	r.fragments.put(v, f)
	return f.DeepCopy(), nil
}

func (r *Renderer) renderFragment(e engines.Engine, v fragmentValues) (*engines.Fragment, error) {
	out, err := r.templates.Execute(v.Template, v)
	if err != nil {
		return nil, fmt.Errorf("render %s fragment: %w", e.Name, err)
	}
	j, err := yaml.YAMLToJSONStrict(out)
	if err != nil {
		return nil, fmt.Errorf("render %s fragment: %w\n%s", e.Name, err, out)
	}
	f := &engines.Fragment{}
	strict, err := sigsjson.UnmarshalStrict(j, f)
	if err == nil && len(strict) > 0 {
		err = strict[0]
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s fragment: %w\n%s", e.Name, err, out)
	}
	return f, nil
}

// fragmentCacheSize bounds the cache: distinct (Binding, role, engine) combinations in use. When
// it fills, it starts over rather than tracking recency; a miss only costs a render.
const fragmentCacheSize = 1024

type fragmentCache struct {
	mu sync.RWMutex
	m  map[fragmentValues]*engines.Fragment
}

func (c *fragmentCache) get(k fragmentValues) (*engines.Fragment, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	f, ok := c.m[k]
	return f, ok
}

func (c *fragmentCache) put(k fragmentValues, f *engines.Fragment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= fragmentCacheSize {
		c.m = map[fragmentValues]*engines.Fragment{}
	}
	c.m[k] = f
}
