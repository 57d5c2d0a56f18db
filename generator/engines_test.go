package generator

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/vocab"
)

// The variables an engine's template writes are the ones its definition names, which the launch
// checks refuse to see assigned or unset elsewhere: one list, checked against the render.
func TestFragmentsWriteExactlyTheEnginesInjectedEnv(t *testing.T) {
	r, err := NewRenderer()
	require.NoError(t, err)
	for _, e := range engines.All() {
		t.Run(e.Name, func(t *testing.T) {
			f, err := r.RenderFragment(FragmentInput{Engine: e, CacheInput: CacheInput{Master: "m:50051", Protocol: "tcp", Tenant: "team-a", Dtype: "bfloat16"}})
			require.NoError(t, err)
			var names []string
			for _, v := range f.Env {
				names = append(names, v.Name)
			}
			assert.Equal(t, e.InjectedEnv, names)
		})
	}
}

// The vLLM family's file names its mode, its tenant and a zero segment on every render: the
// engine is a pure client of the operator's store, whatever the backend keeps.
func TestClientConfigIsAPureClientWithTheTenant(t *testing.T) {
	r, err := NewRenderer()
	require.NoError(t, err)
	for _, e := range []engines.Engine{engines.VLLM, engines.VLLMAscend} {
		t.Run(e.Name, func(t *testing.T) {
			f, err := r.RenderFragment(FragmentInput{Engine: e, CacheInput: CacheInput{Master: "m:50051", Protocol: "tcp", Tenant: "team-a", Dtype: "bfloat16"}})
			require.NoError(t, err)
			var cfg map[string]any
			require.NoError(t, json.Unmarshal([]byte(f.Annotations[vocab.AnnotationClientConfig]), &cfg))
			assert.Equal(t, engines.ClientModeStandalone, cfg["mode"])
			assert.Equal(t, "team-a", cfg["tenant_id"])
			assert.InDelta(t, 0, cfg["global_segment_size"], 0)
			assert.InDelta(t, float64(e.StagingBuffer), cfg["local_buffer_size"], 0)
		})
	}
}
