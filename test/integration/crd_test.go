package integration

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/objects"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop envtest:", err)
	}
	os.Exit(code)
}

func walkthroughBackend(name string) *kvv1.KVCacheBackend {
	return &kvv1.KVCacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Members: []kvv1.MemberGroup{{
				NodeSelector:      map[string]string{"kubernetes.io/os": "linux"},
				CapacityPerMember: resource.MustParse("8Gi"),
			}},
		}}},
	}
}

func walkthroughBinding(ns, name string) *kvv1.KVCachePoolBinding {
	return &kvv1.KVCachePoolBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kvv1.KVCachePoolBindingSpec{
			PoolRef: kvv1.LocalReference{Name: "shared-dram"},
			Quota:   kvv1.BindingQuota{Ceiling: resource.MustParse("8Gi")},
			Domain:  kvv1.Domain{BlockSize: 64, Dtype: "bfloat16"},
		},
	}
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

func TestBindingDomainIsImmutable(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, "team-a")
	b := walkthroughBinding("team-a", "team-a")
	require.NoError(t, env.Client.Create(ctx, b))
	assert.Equal(t, "default", b.Spec.Domain.Name, "the API server defaults domain.name")

	edited := b.DeepCopy()
	edited.Spec.Domain.Dtype = "fp8"
	err := env.Client.Update(ctx, edited)
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
	assert.Contains(t, err.Error(), "spec.domain is immutable (name, blockSize, dtype): create a new KVCachePoolBinding for a different domain")

	moved := b.DeepCopy()
	moved.Spec.PoolRef.Name = "other"
	err = env.Client.Update(ctx, moved)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.poolRef is immutable")

	// The ceiling is not part of the domain: it may change.
	raised := b.DeepCopy()
	raised.Spec.Quota.Ceiling = resource.MustParse("12Gi")
	require.NoError(t, env.Client.Update(ctx, raised))
}

func TestPoolBackendsAreImmutable(t *testing.T) {
	ctx := context.Background()
	p := &kvv1.KVCachePool{
		ObjectMeta: metav1.ObjectMeta{Name: "immutable-pool"},
		Spec:       kvv1.KVCachePoolSpec{Backends: []string{"a"}, Quota: kvv1.PoolQuota{Total: resource.MustParse("16Gi")}},
	}
	require.NoError(t, env.Client.Create(ctx, p))
	p.Spec.Backends = []string{"b"}
	err := env.Client.Update(ctx, p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.backends is immutable: create a new KVCachePool for another backend")

	two := &kvv1.KVCachePool{
		ObjectMeta: metav1.ObjectMeta{Name: "two-backends"},
		Spec:       kvv1.KVCachePoolSpec{Backends: []string{"a", "b"}, Quota: kvv1.PoolQuota{Total: resource.MustParse("1Gi")}},
	}
	err = env.Client.Create(ctx, two)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.backends: Too many")
}

func TestBackendConnectionIsExactlyOneAndFrozen(t *testing.T) {
	ctx := context.Background()
	neither := walkthroughBackend("neither")
	neither.Spec.Connection.Managed = nil
	err := env.Client.Create(ctx, neither)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exactly one of spec.connection.managed or spec.connection.external must be set")

	b := walkthroughBackend("frozen-branch")
	require.NoError(t, env.Client.Create(ctx, b))
	b.Spec.Connection = kvv1.Connection{External: &kvv1.ExternalConnection{Endpoints: []kvv1.Endpoint{
		{Name: kvv1.EndpointClient, Address: "m:50051"}, {Name: kvv1.EndpointAdmin, Address: "m:9003"},
	}}}
	err = env.Client.Update(ctx, b)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the managed/external branch cannot change after creation")
}

// The schema bounds a member group's drainTimeout (10s to 1h) without the webhook, and refuses one
// that is not a duration.
func TestDrainTimeoutIsBoundedBySchema(t *testing.T) {
	ctx := context.Background()
	for name, d := range map[string]time.Duration{"drain-5s": 5 * time.Second, "drain-2h": 2 * time.Hour} {
		b := walkthroughBackend(name)
		b.Spec.Connection.Managed.Members[0].DrainTimeout = &metav1.Duration{Duration: d}
		err := env.Client.Create(ctx, b)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), fmt.Sprintf("spec.connection.managed.members[0].drainTimeout: Invalid value: %q: drainTimeout must be between 10s and 1h", d), name)
	}
	for name, d := range map[string]time.Duration{"drain-10s": 10 * time.Second, "drain-1h": time.Hour} {
		b := walkthroughBackend(name)
		b.Spec.Connection.Managed.Members[0].DrainTimeout = &metav1.Duration{Duration: d}
		require.NoError(t, env.Client.Create(ctx, b), name)
	}

	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCacheBackend", "metadata": map[string]any{"name": "drain-soon"},
		"spec": map[string]any{"connection": map[string]any{"managed": map[string]any{"members": []any{map[string]any{
			"nodeSelector": map[string]any{"kubernetes.io/os": "linux"}, "capacityPerMember": "8Gi", "drainTimeout": "soon",
		}}}}},
	}}
	err := env.Client.Create(ctx, u)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.connection.managed.members[0].drainTimeout")
}

// The CLI defaults objects read from files in Go; they must come out exactly as the API server
// stores them, or `kvcache render` would show a different store than the operator runs.
func TestGoDefaultsMatchTheServer(t *testing.T) {
	ctx := context.Background()
	b := walkthroughBackend("defaults")
	b.Spec.Connection.Managed.Members = append(b.Spec.Connection.Managed.Members, kvv1.MemberGroup{
		NodeSelector: map[string]string{"a": "b"}, CapacityPerMember: resource.MustParse("1Gi"),
		Transport: &kvv1.Transport{},
	})
	local := b.DeepCopy()
	local.Default()
	require.NoError(t, env.Client.Create(ctx, b))
	assert.Equal(t, local.Spec, b.Spec)

	createNamespace(t, "defaults")
	bi := walkthroughBinding("defaults", "defaults")
	localBinding := bi.DeepCopy()
	localBinding.Default()
	require.NoError(t, env.Client.Create(ctx, bi))
	assert.Equal(t, localBinding.Spec, bi.Spec)

	md := &kvv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "defaults", Name: "qwen-chat"},
		Spec: kvv1.ModelDeploymentSpec{
			Model:  kvv1.Model{Name: "Qwen/Qwen2.5-7B-Instruct"},
			Engine: kvv1.Engine{Name: kvv1.EngineVLLM, Version: "0.29.0"},
			Roles:  []kvv1.Role{{Name: "server"}},
		},
	}
	localMD := md.DeepCopy()
	localMD.Default()
	require.NoError(t, env.Client.Create(ctx, md))
	assert.Equal(t, localMD.Spec, md.Spec)
}

// kubectl finds the kinds by short name and category, and `kubectl get` prints the columns the
// walkthrough shows.
func TestCRDsCarryNamesCategoryAndColumns(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		plural, short string
		columns       []string
	}{
		{"kvcachebackends", "kvcb", []string{"Type", "Phase", "Endpoint", "Capacity", "Failover", "Age", "Update-Pending"}},
		{"kvcachepools", "kvcp", []string{"Quota", "Usage", "Phase", "Endpoint", "Age"}},
		{"kvcachepoolbindings", "kvcpb", []string{"Pool", "Domain", "Effective", "Usage", "Hit Rate", "Phase", "Age"}},
		{"modeldeployments", "md", []string{"Engine", "Roles", "Hit Rate", "Phase", "Age"}},
		{"instancetypes", "it", nil},
		{"settings", "", []string{"Value", "Age"}},
	}
	for _, c := range cases {
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: c.plural + ".worker.gpustack.ai"}, crd), c.plural)
		shorts, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "shortNames")
		if c.short != "" {
			assert.Equal(t, []string{c.short}, shorts, c.plural)
		}
		cats, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "categories")
		assert.Equal(t, []string{"kvcache"}, cats, c.plural)
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		require.Len(t, versions, 1)
		cols, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns")
		if c.columns != nil {
			var names []string
			for _, col := range cols {
				names = append(names, col.(map[string]any)["name"].(string))
			}
			assert.Equal(t, c.columns, names, c.plural)
		}
		_, hasStatus, _ := unstructured.NestedMap(versions[0].(map[string]any), "subresources", "status")
		assert.True(t, hasStatus, "%s has a status subresource", c.plural)
	}
}

// A pool's Bindings are selected by spec.poolRef.name the same way through the API server (the
// CRD's selectable field, what `kubectl get kvcpb -A --field-selector` uses) and through the
// manager's cache (its field index).
func TestBindingsAreSelectedByPool(t *testing.T) {
	ctx := context.Background()
	for _, ns := range []string{"select-a", "select-b"} {
		createNamespace(t, ns)
	}
	want := map[string][]string{"select-one": {"select-a/one", "select-b/one"}, "select-two": {"select-a/two"}}
	for pool, keys := range want {
		for _, k := range keys {
			ns, name, _ := strings.Cut(k, "/")
			b := walkthroughBinding(ns, name)
			b.Spec.PoolRef.Name = pool
			require.NoError(t, env.Client.Create(ctx, b))
		}
	}

	c, err := cache.New(env.Config, cache.Options{Scheme: env.Client.Scheme()})
	require.NoError(t, err)
	require.NoError(t, objects.IndexBindingsByPool(ctx, c))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = c.Start(cctx) }()
	require.True(t, c.WaitForCacheSync(cctx))

	keysOf := func(bs []kvv1.KVCachePoolBinding) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.Namespace+"/"+b.Name)
		}
		sort.Strings(out)
		return out
	}
	for pool, keys := range want {
		live, err := objects.Cluster{Cached: env.Client}.BindingsOf(ctx, pool)
		require.NoError(t, err, "the API server selects Bindings by spec.poolRef.name")
		assert.Equal(t, keys, keysOf(live), "from the API server, pool %s", pool)
		_, err = objects.Cluster{Cached: c}.BindingsOf(ctx, pool)
		require.NoError(t, err, "the cache indexes Bindings by spec.poolRef.name")
		assert.Eventually(t, func() bool {
			cached, err := objects.Cluster{Cached: c}.BindingsOf(ctx, pool)
			return err == nil && assert.ObjectsAreEqual(keys, keysOf(cached))
		}, 10*time.Second, 50*time.Millisecond, "from the cache, pool %s", pool)
	}
	pools := []kvv1.KVCachePool{{ObjectMeta: metav1.ObjectMeta{Name: "select-two"}}, {ObjectMeta: metav1.ObjectMeta{Name: "select-one"}}}
	both, err := objects.BindingsOfPools(ctx, objects.Cluster{Cached: env.Client}, pools)
	require.NoError(t, err)
	assert.Equal(t, []string{"select-a/two", "select-a/one", "select-b/one"}, []string{
		both[0].Namespace + "/" + both[0].Name, both[1].Namespace + "/" + both[1].Name, both[2].Namespace + "/" + both[2].Name,
	}, "several pools are listed in the order given")
}
