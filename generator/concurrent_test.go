package generator

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
)

// The manager shares one Renderer between the webhooks and every controller worker: renders
// running at once give the same bytes as one alone (run with -race to see shared state).
func TestOneRendererServesConcurrentRenders(t *testing.T) {
	r, err := NewRenderer()
	require.NoError(t, err)
	store := StoreInput{Backend: walkthroughBackend(), BackendImageSetting: kvv1.DefaultKVCacheBackendImage,
		Tenants: []Tenant{{Name: "default", QuotaBytes: 8 << 30}}}
	fragment := FragmentInput{Engine: engines.SGLang, CacheInput: CacheInput{Master: "m:50051", Protocol: "tcp", Tenant: "team-a", Dtype: "bfloat16"}}
	render := func() ([]byte, *engines.Fragment) {
		objs, err := r.RenderStore(store)
		require.NoError(t, err)
		out, err := Marshal(objs, "yaml")
		require.NoError(t, err)
		f, err := r.RenderFragment(fragment)
		require.NoError(t, err)
		return out, f
	}
	wantStore, wantFragment := render()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				gotStore, gotFragment := render()
				assert.True(t, bytes.Equal(wantStore, gotStore), "store render differs under concurrency")
				assert.Equal(t, wantFragment, gotFragment)
			}
		})
	}
	wg.Wait()
}
