package check

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
	"github.com/kvcache-operator/kvcache/vocab"
)

func binding(dtype string) *kvv1.KVCachePoolBinding {
	return &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "team-a"}, Spec: kvv1.KVCachePoolBindingSpec{
		PoolRef: kvv1.LocalReference{Name: "shared-dram"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("8Gi")},
		Domain: kvv1.Domain{BlockSize: 64, Dtype: dtype},
	}}
}

func labelled(value string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "bench-" + value, Labels: map[string]string{vocab.LabelInject: value},
			Annotations: map[string]string{vocab.AnnotationBinding: "team-a", vocab.AnnotationEngine: "vLLM"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Command: []string{"vllm"}, Args: []string{"serve", "m"}}}},
	}
}

// kvcache check -f --live: the objects the live cluster holds are the cluster the manifests meet,
// so a manifest of a held Binding is judged as an update of it.
func TestHeldReadsTheClusterAsClusterFilesWouldAndManifestsMeetItAsUpdates(t *testing.T) {
	s, err := generator.NewScheme()
	require.NoError(t, err)
	backend := &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "mooncake-dram"}, Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{
		Managed: &kvv1.ManagedConnection{Members: []kvv1.MemberGroup{{NodeSelector: map[string]string{"a": "b"}, CapacityPerMember: resource.MustParse("8Gi")}}}}}}
	pool := &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "shared-dram"}, Spec: kvv1.KVCachePoolSpec{Backends: []string{"mooncake-dram"}, Quota: kvv1.PoolQuota{Total: resource.MustParse("16Gi")}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(backend, pool, binding("bfloat16"), labelled("yes"), labelled("false")).Build()

	set, models, err := Held(context.Background(), c)
	require.NoError(t, err)
	assert.Len(t, set.Backends, 1)
	assert.Len(t, set.Pools, 1)
	require.Len(t, set.Bindings, 1)
	assert.Equal(t, "default", set.Bindings[0].Spec.Domain.Name, "defaulted as the API server defaults it")
	assert.Empty(t, models)

	r, err := generator.NewRenderer()
	require.NoError(t, err)
	report, err := Offline(context.Background(), rules.Apply{
		Cluster: set, Manifests: objects.Set{Bindings: []kvv1.KVCachePoolBinding{*binding("fp8")}}, Options: objects.FileOptions{Defaults: r.Defaults()}, Renderer: r,
	}, nil, injection.New(r), "")
	require.NoError(t, err)
	assert.Equal(t, []string{"FAIL spec.domain.dtype: Forbidden: is immutable (it is bfloat16): workloads sharing the domain read each other's blocks, so they must write the same dtype; create a new KVCachePoolBinding for another domain."},
		levels(report, "admission"))
}

// A Pod that carries the contract's annotations with an inject label other than "true" was never
// injected, and no webhook saw it: the live check fails it; the opt-out "false" is not judged.
func TestLiveCheckFailsPodsWhoseInjectLabelIsNotTrue(t *testing.T) {
	s, err := generator.NewScheme()
	require.NoError(t, err)
	c := fake.NewClientBuilder().WithScheme(s).WithObjects([]client.Object{labelled("yes"), labelled("false"), labelled("True")}...).Build()
	l := &live{c: c, o: LiveOptions{SystemNamespace: generator.DefaultSystemNamespace}, r: &Report{}, now: now}
	require.NoError(t, l.leftAlone(context.Background()))
	assert.Equal(t, []string{
		`FAIL label kvcache.gpustack.ai/inject is "True", and only "true" opts in (the webhook's objectSelector matches that value alone, so it never sees this Pod): the Pod is never injected though it carries kvcache.gpustack.ai/binding, kvcache.gpustack.ai/engine; set the label to "true" to opt in, or to "false" (or remove it and the annotations) to opt out.`,
		`FAIL label kvcache.gpustack.ai/inject is "yes", and only "true" opts in (the webhook's objectSelector matches that value alone, so it never sees this Pod): the Pod is never injected though it carries kvcache.gpustack.ai/binding, kvcache.gpustack.ai/engine; set the label to "true" to opt in, or to "false" (or remove it and the annotations) to opt out.`,
	}, levels(l.r, "pod.optIn"))
	for _, f := range l.r.Findings {
		assert.NotEmpty(t, f.Fix)
	}
}
