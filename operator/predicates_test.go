package operator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

func TestIgnoreStatusUpdates(t *testing.T) {
	base := func() *kvv1.KVCachePoolBinding {
		return &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "team-a", Generation: 2, ResourceVersion: "10",
			Finalizers: []string{kvv1.FinalizerBinding}, Labels: map[string]string{"team": "a"}}}
	}
	cases := []struct {
		name string
		edit func(b *kvv1.KVCachePoolBinding)
		pass bool
	}{
		{"a status write is ignored", func(b *kvv1.KVCachePoolBinding) {
			b.ResourceVersion = "11"
			b.Status.Usage = resource.NewQuantity(4096, resource.BinarySI)
		}, false},
		{"a spec change passes", func(b *kvv1.KVCachePoolBinding) { b.Generation = 3 }, true},
		{"a finalizer removed passes", func(b *kvv1.KVCachePoolBinding) { b.Finalizers = nil }, true},
		{"a deletion passes", func(b *kvv1.KVCachePoolBinding) { b.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, true},
		{"a label change passes", func(b *kvv1.KVCachePoolBinding) { b.Labels["team"] = "b" }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := base()
			c.edit(n)
			assert.Equal(t, c.pass, IgnoreStatusUpdates().Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: n}))
		})
	}
	assert.True(t, IgnoreStatusUpdates().Create(event.CreateEvent{Object: base()}))
	assert.True(t, IgnoreStatusUpdates().Delete(event.DeleteEvent{Object: base()}))
}
