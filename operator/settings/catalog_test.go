package settings

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

func TestParse(t *testing.T) {
	got, err := Parse([]string{
		kvv1.SettingKVCacheBackendImage + "=registry.example/mooncake:0.3.13.post1-cpu",
		kvv1.SettingKVCacheDtypeOwned + "=false",
	})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		kvv1.SettingKVCacheBackendImage: "registry.example/mooncake:0.3.13.post1-cpu",
		kvv1.SettingKVCacheDtypeOwned:   "false",
	}, got)

	for _, c := range []struct {
		name  string
		pairs []string
		want  string
	}{
		{"no value", []string{kvv1.SettingKVCacheDtypeOwned}, "want name=value"},
		{"outside the catalog", []string{"cache-size=1Gi"}, `--setting cache-size: metadata.name: Unsupported value: "cache-size"`},
		{"a value the validator refuses", []string{kvv1.SettingKVCacheDtypeOwned + "=yes"}, `spec.value: Unsupported value: "yes"`},
		{"not an image", []string{kvv1.SettingKVCacheBackendImage + "=Not An Image"}, "--setting " + kvv1.SettingKVCacheBackendImage + ": spec.value"},
		{"given twice", []string{kvv1.SettingKVCacheDtypeOwned + "=true", kvv1.SettingKVCacheDtypeOwned + "=false"}, "given twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.pairs)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}
