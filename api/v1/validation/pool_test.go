package validation

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// walkthroughPool is the walkthrough's KVCachePool: 16Gi over mooncake-dram.
func walkthroughPool() *kvv1.KVCachePool {
	p := &kvv1.KVCachePool{}
	p.Name = "shared-dram"
	p.Spec.Backends = []string{"mooncake-dram"}
	p.Spec.Quota.Total = resource.MustParse("16Gi")
	p.Default()
	return p
}

// walkthroughBinding is the walkthrough's KVCachePoolBinding, defaulted (domain name "default").
func walkthroughBinding() *kvv1.KVCachePoolBinding {
	b := &kvv1.KVCachePoolBinding{}
	b.Name, b.Namespace = "team-a", "team-a"
	b.Spec.PoolRef.Name = "shared-dram"
	b.Spec.Quota.Ceiling = resource.MustParse("8Gi")
	b.Spec.Domain.BlockSize = 64
	b.Spec.Domain.Dtype = "bfloat16"
	b.Default()
	return b
}

func TestValidatePool(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *kvv1.KVCachePool)
		want   []string
	}{
		{
			name:   "the walkthrough pool has no errors",
			mutate: func(*kvv1.KVCachePool) {},
		},
		{
			name:   "a pool naming no backend is refused",
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Backends = nil },
			want:   []string{"spec.backends: Required value: name exactly one KVCacheBackend"},
		},
		{
			name:   "a pool naming two backends is refused",
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Backends = []string{"mooncake-dram", "mooncake-vram"} },
			want:   []string{`spec.backends: Invalid value: ["mooncake-dram","mooncake-vram"]: a pool divides exactly one backend, 2 are named; create one pool per backend`},
		},
		{
			name:   "a pool whose backend name is empty is refused",
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Backends = []string{""} },
			want:   []string{"spec.backends[0]: Required value: name exactly one KVCacheBackend"},
		},
		{
			name:   "a pool with a zero total is refused",
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Quota.Total = resource.MustParse("0") },
			want:   []string{`spec.quota.total: Invalid value: "0": must be greater than zero, e.g. 16Gi`},
		},
		{
			name:   "a pool with no total is refused as a zero total",
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Quota.Total = resource.Quantity{} },
			want:   []string{`spec.quota.total: Invalid value: "0": must be greater than zero, e.g. 16Gi`},
		},
		{
			name:   "a pool with a negative total is refused",
			mutate: func(p *kvv1.KVCachePool) { p.Spec.Quota.Total = resource.MustParse("-16Gi") },
			want:   []string{`spec.quota.total: Invalid value: "-16Gi": must be greater than zero, e.g. 16Gi`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := walkthroughPool()
			require.Empty(t, ValidatePool(p), "the walkthrough pool must start valid")
			tt.mutate(p)
			assert.Equal(t, tt.want, errStrings(ValidatePool(p)))
		})
	}
}

func TestValidateBinding(t *testing.T) {
	const (
		domainNameMsg = "must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters): it is the store tenant engines write under"
	)
	tests := []struct {
		name   string
		mutate func(b *kvv1.KVCachePoolBinding)
		// unknownPool validates without the pool (nil), as when it cannot be read.
		unknownPool bool
		want        []string
	}{
		{
			name:   "the walkthrough binding has no errors",
			mutate: func(*kvv1.KVCachePoolBinding) {},
		},
		{
			name:   "a ceiling equal to the pool's total passes",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.MustParse("16Gi") },
		},
		{
			name:   "a ceiling equal to the pool's total in another unit passes",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.MustParse("16384Mi") },
		},
		{
			name:        "a ceiling is not compared with a total when the pool is unknown",
			mutate:      func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.MustParse("1Ti") },
			unknownPool: true,
		},
		{
			name:   "an explicit DNS-1123 domain name passes",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Name = "llama-3-8b" },
		},
		{
			name:   "a lowercase dtype with an underscore passes",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Dtype = "fp8_e4m3" },
		},
		{
			name:   "a binding naming no pool is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.PoolRef.Name = "" },
			want:   []string{"spec.poolRef.name: Required value: name the KVCachePool this Binding grants access to"},
		},
		{
			name:   "a zero ceiling is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.MustParse("0") },
			want:   []string{`spec.quota.ceiling: Invalid value: "0": must be greater than zero, e.g. 8Gi`},
		},
		{
			name:        "a zero ceiling is refused even when the pool is unknown",
			mutate:      func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.Quantity{} },
			unknownPool: true,
			want:        []string{`spec.quota.ceiling: Invalid value: "0": must be greater than zero, e.g. 8Gi`},
		},
		{
			name:   "a ceiling above the pool's total is refused, naming the pool and its total",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Quota.Ceiling = resource.MustParse("32Gi") },
			want:   []string{`spec.quota.ceiling: Invalid value: "32Gi": exceeds the total 16Gi of KVCachePool shared-dram; lower the ceiling or raise the pool's spec.quota.total`},
		},
		{
			name:   "a domain name with uppercase letters and an underscore is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Name = "Team_A" },
			want:   []string{`spec.domain.name: Invalid value: "Team_A": ` + domainNameMsg},
		},
		{
			name:   "a domain name of 64 characters is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Name = strings.Repeat("d", 64) },
			want:   []string{`spec.domain.name: Invalid value: "` + strings.Repeat("d", 64) + `": ` + domainNameMsg},
		},
		{
			name:   "a blockSize of 0 is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.BlockSize = 0 },
			want:   []string{"spec.domain.blockSize: Invalid value: 0: must be greater than zero: the engines' block size in tokens, e.g. 64"},
		},
		{
			name:   "an empty dtype is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Dtype = "" },
			want:   []string{"spec.domain.dtype: Required value: name the KV cache dtype the engines in this domain use, e.g. bfloat16"},
		},
		{
			name:   "dtype auto is refused because engines in one domain could pick different dtypes",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Dtype = "auto" },
			want:   []string{`spec.domain.dtype: Invalid value: "auto": auto lets each engine pick its own dtype, so two workloads in the domain could write incompatible blocks; name one, e.g. bfloat16 or fp8`},
		},
		{
			name:   "dtype BFloat16 is refused with the lowercase spelling to use",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Dtype = "BFloat16" },
			want:   []string{`spec.domain.dtype: Invalid value: "BFloat16": must be lowercase, as engines spell it: use bfloat16`},
		},
		{
			name:   "a dtype of two words is refused",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Dtype = "b f16" },
			want:   []string{`spec.domain.dtype: Invalid value: "b f16": must be one word, e.g. bfloat16`},
		},
		{
			name:   "a dtype Auto is refused as auto, not told to become auto",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Dtype = "Auto" },
			want:   []string{`spec.domain.dtype: Invalid value: "Auto": auto lets each engine pick its own dtype, so two workloads in the domain could write incompatible blocks; name one, e.g. bfloat16 or fp8`},
		},
		{
			name:   "a dtype B F16 is refused as two words before its case",
			mutate: func(b *kvv1.KVCachePoolBinding) { b.Spec.Domain.Dtype = "B F16" },
			want:   []string{`spec.domain.dtype: Invalid value: "B F16": must be one word, e.g. bfloat16`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := walkthroughBinding()
			require.Empty(t, ValidateBinding(b, walkthroughPool()), "the walkthrough binding must start valid")
			tt.mutate(b)
			pool := walkthroughPool()
			if tt.unknownPool {
				pool = nil
			}
			assert.Equal(t, tt.want, errStrings(ValidateBinding(b, pool)))
		})
	}
}

func TestValidateSetting(t *testing.T) {
	setting := func(name, value string) *kvv1.Setting {
		s := &kvv1.Setting{}
		s.Name = name
		s.Spec.Value = value
		s.Default()
		return s
	}
	tests := []struct {
		name    string
		setting *kvv1.Setting
		want    []string
	}{
		{
			name:    "the chart's kv-cache-backend-image passes",
			setting: setting(kvv1.SettingKVCacheBackendImage, kvv1.DefaultKVCacheBackendImage),
		},
		{
			name:    "model-deployment-kv-cache-dtype-owned true passes",
			setting: setting(kvv1.SettingKVCacheDtypeOwned, "true"),
		},
		{
			name:    "model-deployment-kv-cache-dtype-owned false passes",
			setting: setting(kvv1.SettingKVCacheDtypeOwned, "false"),
		},
		{
			name:    "a Setting outside the catalog is refused, listing the catalog",
			setting: setting("kv-cache-dtype", "bfloat16"),
			want:    []string{`metadata.name: Unsupported value: "kv-cache-dtype": supported values: "kv-cache-backend-image", "model-deployment-kv-cache-dtype-owned"`},
		},
		{
			name:    "model-deployment-kv-cache-dtype-owned yes is refused: only true and false",
			setting: setting(kvv1.SettingKVCacheDtypeOwned, "yes"),
			want:    []string{`spec.value: Unsupported value: "yes": supported values: "true", "false"`},
		},
		{
			name:    "an empty kv-cache-backend-image is refused, naming the default image as an example",
			setting: setting(kvv1.SettingKVCacheBackendImage, ""),
			want:    []string{"spec.value: Required value: name the store image, e.g. gpustack/mirrored-mooncake:0.3.13.post1-cpu"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, errStrings(ValidateSetting(tt.setting)))
		})
	}
}
