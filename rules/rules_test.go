package rules

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/objects"
)

// The rules judged against files, as `kvcache check -f` and `render` judge them: the same
// functions the webhooks call, without an API server.

func backend(name string) kvv1.KVCacheBackend {
	b := kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: name}}
	b.Spec.Connection.Managed = &kvv1.ManagedConnection{Members: []kvv1.MemberGroup{{
		NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, Medium: kvv1.MediumDRAM, CapacityPerMember: resource.MustParse("8Gi"),
	}}}
	return b
}

func pool(name, backend string) kvv1.KVCachePool {
	p := kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Backends = []string{backend}
	p.Spec.Quota.Total = resource.MustParse("16Gi")
	return p
}

func messages(v Verdict) string {
	var out []string
	for _, e := range v.Errors {
		out = append(out, e.Error())
	}
	return strings.Join(out, "\n")
}

func TestMultiTenancyCannotBeTurnedOffUnderAPool(t *testing.T) {
	old := backend("mooncake-dram")
	off := old.DeepCopy()
	off.Spec.Connection.Managed.Leader.MultiTenancy = ptr.To(false)
	files := objects.NewFiles(objects.Set{Backends: []kvv1.KVCacheBackend{old}, Pools: []kvv1.KVCachePool{pool("shared-dram", "mooncake-dram")}}, objects.FileOptions{ChartSettings: true})
	v, err := Backend(context.Background(), files, nil, &old, off)
	require.NoError(t, err)
	assert.Contains(t, messages(v), "spec.connection.managed.leader.multiTenancy: Forbidden: KVCachePool shared-dram uses this backend")
	assert.Contains(t, messages(v), "delete the pool first, or keep multiTenancy: true")

	alone := objects.NewFiles(objects.Set{Backends: []kvv1.KVCacheBackend{old}}, objects.FileOptions{ChartSettings: true})
	v, err = Backend(context.Background(), alone, nil, &old, off)
	require.NoError(t, err)
	assert.Empty(t, v.Errors, "no pool: nothing lives in the ledger")
}

func TestABackendWithoutAnImageIsRefusedNamingBoth(t *testing.T) {
	b := backend("mooncake-dram")
	noSettings := objects.NewFiles(objects.Set{}, objects.FileOptions{})
	v, err := Backend(context.Background(), noSettings, nil, nil, &b)
	require.NoError(t, err)
	assert.Contains(t, messages(v), "set spec.image, or create the Setting kv-cache-backend-image")

	chart := objects.NewFiles(objects.Set{}, objects.FileOptions{ChartSettings: true})
	v, err = Backend(context.Background(), chart, nil, nil, &b)
	require.NoError(t, err)
	assert.Empty(t, v.Errors, "the chart's Setting supplies the image")
}

func TestAPoolNeedsItsBackendFirst(t *testing.T) {
	p := pool("shared-dram", "mooncake-dram")
	v, err := Pool(context.Background(), objects.NewFiles(objects.Set{}, objects.FileOptions{}), nil, &p)
	require.NoError(t, err)
	assert.Contains(t, messages(v), "create the KVCacheBackend first, then the KVCachePool, then its KVCachePoolBindings")

	b := backend("mooncake-dram")
	v, err = Pool(context.Background(), objects.NewFiles(objects.Set{Backends: []kvv1.KVCacheBackend{b}}, objects.FileOptions{}), nil, &p)
	require.NoError(t, err)
	assert.Empty(t, v.Errors)
}

func TestAnUnknownSettingIsRefused(t *testing.T) {
	v := Setting(nil, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: "kv-cache-backend-imag"}, Spec: kvv1.SettingSpec{Value: "x"}})
	assert.Contains(t, messages(v), `metadata.name: Unsupported value: "kv-cache-backend-imag"`)
	v = Setting(nil, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: kvv1.SettingKVCacheDtypeOwned}, Spec: kvv1.SettingSpec{Value: "false"}})
	assert.Empty(t, v.Errors)
}
