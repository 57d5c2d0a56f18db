//go:build envtest

// Built with -tags envtest (make test does): a real kube-apiserver, which make test-unit does
// not build.

package objects_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/objects"
)

// countingReader counts the Gets that reach the API server.
type countingReader struct {
	client.Reader
	gets atomic.Int64
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets.Add(1)
	return r.Reader.Get(ctx, key, obj, opts...)
}

// Cluster against a real API server and a real informer cache: a Binding the cache has
// costs no API read, one it has not seen is read live, and a deleting Binding the cache has seen
// is refused without one. Stopping the cache freezes it the way a watch that has not delivered
// yet leaves it, which makes the miss and the remaining window deterministic.
func TestClusterReadsTheBindingFromTheCacheAndLiveOnAMiss(t *testing.T) {
	env, err := testenv.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	const ns = "team-a"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	binding := func(name string) *kvv1.KVCachePoolBinding {
		b := &kvv1.KVCachePoolBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{kvv1.FinalizerBinding}},
			Spec: kvv1.KVCachePoolBindingSpec{
				PoolRef: kvv1.LocalReference{Name: "shared-dram"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("1Gi")},
				Domain: kvv1.Domain{Name: name, BlockSize: 64, Dtype: "bfloat16"},
			},
		}
		require.NoError(t, env.Client.Create(ctx, b))
		t.Cleanup(func() {
			live := &kvv1.KVCachePoolBinding{}
			if env.Client.Get(ctx, client.ObjectKeyFromObject(b), live) == nil {
				live.Finalizers = nil
				_ = env.Client.Update(ctx, live)
			}
		})
		return b
	}
	cached := binding("cached")
	deleting := binding("deleting")
	stale := binding("stale")

	s, err := generator.NewScheme()
	require.NoError(t, err)
	c, err := cache.New(env.Config, cache.Options{Scheme: s})
	require.NoError(t, err)
	cctx, stopCache := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Start(cctx) }()
	t.Cleanup(stopCache)
	_, err = c.GetInformer(ctx, &kvv1.KVCachePoolBinding{})
	require.NoError(t, err)
	require.True(t, c.WaitForCacheSync(ctx))

	live := &countingReader{Reader: env.Client}
	lookup := objects.Cluster{Cached: c, Live: live}
	vllm, ok := engines.ByName("vLLM")
	require.True(t, ok)

	t.Run("a Binding the cache has costs no API read", func(t *testing.T) {
		before := live.gets.Load()
		b, found, err := lookup.Binding(ctx, ns, cached.Name)
		require.NoError(t, err)
		require.True(t, found)
		assert.Equal(t, cached.UID, b.UID)
		assert.Zero(t, live.gets.Load()-before)
	})

	t.Run("a deleting Binding the cache has seen is refused without an API read", func(t *testing.T) {
		require.NoError(t, env.Client.Delete(ctx, deleting))
		require.Eventually(t, func() bool {
			b := &kvv1.KVCachePoolBinding{}
			return c.Get(ctx, client.ObjectKeyFromObject(deleting), b) == nil && b.DeletionTimestamp != nil
		}, 10*time.Second, 10*time.Millisecond, "the cache never saw the deletion")
		before := live.gets.Load()
		_, rf := injection.Resolve(ctx, lookup, ns, deleting.Name, vllm, injection.NamedByAnnotation)
		require.NotNil(t, rf)
		assert.Equal(t, injection.ReasonBindingDeleting, rf.Reason)
		assert.Equal(t, `KVCachePoolBinding team-a/deleting is being deleted, so new Pods may not attach to it; name another Binding`, rf.Message)
		assert.Zero(t, live.gets.Load()-before)
	})

	// From here on the cache receives nothing, as while a watch event is in flight.
	stopCache()
	require.NoError(t, <-stopped)

	t.Run("a Binding created a moment ago is read live", func(t *testing.T) {
		fresh := binding("fresh")
		before := live.gets.Load()
		b, found, err := lookup.Binding(ctx, ns, fresh.Name)
		require.NoError(t, err)
		require.True(t, found)
		assert.Equal(t, fresh.UID, b.UID)
		assert.Equal(t, int64(1), live.gets.Load()-before, "one live read on the miss")
	})

	t.Run("a Binding that does not exist is read live and not found", func(t *testing.T) {
		before := live.gets.Load()
		_, found, err := lookup.Binding(ctx, ns, "absent")
		require.NoError(t, err)
		assert.False(t, found)
		assert.Equal(t, int64(1), live.gets.Load()-before)
	})

	t.Run("until the deletion reaches the cache, the Binding is served as it was", func(t *testing.T) {
		require.NoError(t, env.Client.Delete(ctx, stale))
		b := &kvv1.KVCachePoolBinding{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(stale), b))
		require.NotNil(t, b.DeletionTimestamp, "the API server has it deleting")
		before := live.gets.Load()
		got, found, err := lookup.Binding(ctx, ns, stale.Name)
		require.NoError(t, err)
		require.True(t, found)
		assert.Nil(t, got.DeletionTimestamp, "the window Cluster documents: the cache has not seen the deletion")
		assert.Zero(t, live.gets.Load()-before)
	})
}
