package generator

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

func walkthroughBackend() *kvv1.KVCacheBackend {
	b := &kvv1.KVCacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: "mooncake-dram", UID: "2c1f4a4e-0000-4000-8000-000000000001"},
		Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Members: []kvv1.MemberGroup{{
				NodeSelector:      map[string]string{"kubernetes.io/os": "linux"},
				Medium:            kvv1.MediumDRAM,
				CapacityPerMember: resource.MustParse("8Gi"),
			}},
		}}},
	}
	b.Default()
	return b
}

// BenchmarkRenderBackend renders the walkthrough backend's store with the templates already
// parsed: what one reconcile pays. Budget: <= 200 µs/op.
func BenchmarkRenderBackend(b *testing.B) {
	r, err := NewRenderer()
	if err != nil {
		b.Fatal(err)
	}
	in := StoreInput{
		Backend:             walkthroughBackend(),
		BackendImageSetting: kvv1.DefaultKVCacheBackendImage,
		Tenants:             []Tenant{{Name: "default", QuotaBytes: 8 << 30}},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.RenderStore(in); err != nil {
			b.Fatal(err)
		}
	}
}
