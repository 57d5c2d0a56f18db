package webhook_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/golden"
)

// warningsClient is a client that records the admission warnings the API server relays.
type warningRecorder struct{ got []string }

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.got = append(w.got, text)
}

func clientWithWarnings(t *testing.T) (client.Client, *warningRecorder) {
	t.Helper()
	rec := &warningRecorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = rec
	s, err := generator.NewScheme()
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: s})
	require.NoError(t, err)
	return c, rec
}

func requireInvalid(t *testing.T, err error, webhook, msg string) {
	t.Helper()
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
	assert.Contains(t, err.Error(), `admission webhook "`+webhook+`" denied the request`)
	assert.Contains(t, err.Error(), msg)
}

func binding(ns, name, pool, domain string, ceiling string) *kvv1.KVCachePoolBinding {
	return &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kvv1.KVCachePoolBindingSpec{
		PoolRef: kvv1.LocalReference{Name: pool}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse(ceiling)},
		Domain: kvv1.Domain{Name: domain, BlockSize: 64, Dtype: "bfloat16"},
	}}
}

func TestBackendValidatorLive(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	ctx := context.Background()
	b := &kvv1.KVCacheBackend{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "mooncake-dram"}, b))

	snap := b.DeepCopy()
	snap.Spec.Connection.Managed.Leader.ExtraArgs = []string{"-enable_snapshot_restore=true"}
	requireInvalid(t, env.Client.Update(ctx, snap), "kvcachebackends.worker.gpustack.ai",
		"spec.connection.managed.leader.extraArgs[0]: Forbidden: -enable_snapshot_restore: the store's snapshot is not offered: restoring a snapshot can make the cache serve another key's bytes instead of a miss")

	off := b.DeepCopy()
	off.Spec.Connection.Managed.Leader.MultiTenancy = ptr.To(false)
	requireInvalid(t, env.Client.Update(ctx, off), "kvcachebackends.worker.gpustack.ai",
		"spec.connection.managed.leader.multiTenancy: Forbidden: KVCachePools")

	ok := b.DeepCopy()
	ok.Spec.Connection.Managed.Leader.ExtraArgs = []string{"-default_kv_lease_ttl=10m"}
	require.NoError(t, env.Client.Update(ctx, ok), "an allowed extraArg is admitted")
}

func TestPoolValidatorLive(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	ctx := context.Background()
	c, warnings := clientWithWarnings(t)
	pool := func(name, backend string) *kvv1.KVCachePool {
		return &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.KVCachePoolSpec{
			Backends: []string{backend}, Quota: kvv1.PoolQuota{Total: resource.MustParse("4Gi")}}}
	}
	requireInvalid(t, c.Create(ctx, pool("dangling", "no-such-backend")), "kvcachepools.worker.gpustack.ai",
		`spec.backends[0]: Not found: "no-such-backend": no KVCacheBackend has this name; create the KVCacheBackend first, then the KVCachePool, then its KVCachePoolBindings`)

	p := pool("second-legacy", "mooncake-legacy")
	require.NoError(t, c.Create(ctx, p), "a pool over a backend without multi-tenancy is admitted")
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	assert.Contains(t, warnings.got, "KVCacheBackend mooncake-legacy keeps no tenant ledger (leader.multiTenancy: false): Binding ceilings on this pool are not enforced and every write lands in the store's default tenant")
}

func TestBindingValidatorLive(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	ctx := context.Background()
	requireInvalid(t, env.Client.Create(ctx, binding(userNamespace, "too-big", "shared-dram", "too-big", "20Gi")), "kvcachepoolbindings.worker.gpustack.ai",
		`spec.quota.ceiling: Invalid value: "20Gi": exceeds the total 16Gi of KVCachePool shared-dram; lower the ceiling or raise the pool's spec.quota.total`)
	requireInvalid(t, env.Client.Create(ctx, binding(managerNamespace, "chat", "unreachable", "team-a-chat", "1Gi")), "kvcachepoolbindings.worker.gpustack.ai",
		`spec.domain.name: Duplicate value: "team-a-chat": already registered on the master of KVCacheBackend mooncake-dram by KVCachePoolBinding team-a/chat; name a different domain`)
	requireInvalid(t, env.Client.Create(ctx, binding(userNamespace, "legacy-2", "legacy", "second", "1Gi")), "kvcachepoolbindings.worker.gpustack.ai",
		`KVCacheBackend mooncake-legacy keeps no tenant ledger (leader.multiTenancy: false), so every write lands in one default tenant and the backend carries one domain only`)
	ok := binding(managerNamespace, "fits", "shared-dram", "kvcache-system-fits", "16Gi")
	require.NoError(t, env.Client.Create(ctx, ok), "a ceiling equal to the pool total, on a fresh domain, is admitted")
	t.Cleanup(func() { _ = env.Client.Delete(ctx, ok) })
}

func TestModelDeploymentValidatorLive(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	ctx := context.Background()
	md := func(name, bindingName string) *kvv1.ModelDeployment {
		return &kvv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: userNamespace, Name: name}, Spec: kvv1.ModelDeploymentSpec{
			Model: kvv1.Model{Name: "Qwen/Qwen2.5-7B-Instruct"}, Engine: kvv1.Engine{Name: kvv1.EngineVLLM, Version: "0.29.0"},
			KVCache: &kvv1.KVCacheAttachment{PoolRef: kvv1.LocalReference{Name: bindingName}},
			Roles:   []kvv1.Role{{Name: "server", Replicas: ptr.To[int32](2)}},
		}}
	}
	requireInvalid(t, env.Client.Create(ctx, md("mixed", "mixed")), "modeldeployments.worker.gpustack.ai", "NotSupportedTransport")
	requireInvalid(t, env.Client.Create(ctx, md("nobinding", "nope")), "modeldeployments.worker.gpustack.ai",
		`spec.kvCache.poolRef.name: Not found: "nope"`)
	pd := md("pd", "team-a")
	pd.Spec.Roles = []kvv1.Role{{Name: "prefill", Kind: kvv1.RolePrefill}}
	requireInvalid(t, env.Client.Create(ctx, pd), "modeldeployments.worker.gpustack.ai", "Decode")
	ok := md("qwen-chat", "team-a")
	require.NoError(t, env.Client.Create(ctx, ok), "the walkthrough's ModelDeployment is admitted")
	t.Cleanup(func() { _ = env.Client.Delete(ctx, ok) })

	// The shape rules, each refused through the API server.
	i := 0
	for name, c := range map[string]struct {
		edit func(*kvv1.ModelDeployment)
		want string
	}{
		"duplicate role names": {func(m *kvv1.ModelDeployment) { m.Spec.Roles = append(m.Spec.Roles, m.Spec.Roles[0]) }, "spec.roles[1].name: Duplicate value"},
		"two Decode roles": {func(m *kvv1.ModelDeployment) {
			m.Spec.Roles = []kvv1.Role{{Name: "p", Kind: kvv1.RolePrefill}, {Name: "d1", Kind: kvv1.RoleDecode}, {Name: "d2", Kind: kvv1.RoleDecode}}
		}, "spec.roles[2].kind"},
		"an owned flag in a role's extraArgs": {func(m *kvv1.ModelDeployment) { m.Spec.Roles[0].ExtraArgs = []string{"--kv_transfer_config={}"} }, "spec.roles[0].extraArgs"},
		"fabric interfaces on a tcp pool":     {func(m *kvv1.ModelDeployment) { m.Spec.Roles[0].Resources.Interface = 1 }, "fabric interfaces are RDMA or EFA devices, and KVCachePool shared-dram offers tcp"},
		"fabric interfaces without a cache": {func(m *kvv1.ModelDeployment) {
			m.Spec.KVCache = nil
			m.Spec.Roles[0].Resources.Interface = 1
		}, "fabric interfaces follow the cache pool's transport"},
	} {
		i++
		bad := md(fmt.Sprintf("bad-%d", i), "team-a")
		c.edit(bad)
		err := env.Client.Create(ctx, bad)
		requireInvalid(t, err, "modeldeployments.worker.gpustack.ai", c.want)
		t.Logf("%s: %v", name, err)
	}
}

func TestSettingValidatorLive(t *testing.T) {
	ctx := context.Background()
	bad := &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: "kv-cache-backend-imag"}, Spec: kvv1.SettingSpec{Value: "x"}}
	requireInvalid(t, env.Client.Create(ctx, bad), "settings.worker.gpustack.ai", `metadata.name: Unsupported value: "kv-cache-backend-imag"`)
	s := &kvv1.Setting{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: kvv1.SettingKVCacheDtypeOwned}, s))
	s.Spec.Value = "yes"
	requireInvalid(t, env.Client.Update(ctx, s), "settings.worker.gpustack.ai", `spec.value: Unsupported value: "yes"`)
}
