package injection

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAnOptInOnTheWorkloadItselfIsNamed(t *testing.T) {
	meta := func(labels, annotations map[string]string) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Labels: labels, Annotations: annotations}
	}
	pod := func(labels map[string]string) *corev1.Pod { return &corev1.Pod{ObjectMeta: *meta(labels, nil)} }
	cases := []struct {
		name     string
		workload *metav1.ObjectMeta
		template *corev1.Pod
		want     string
	}{
		{"the label alone, on the Deployment", meta(map[string]string{"kvcache.gpustack.ai/inject": "true"}, nil), pod(nil),
			`the Deployment's own metadata carries the label kvcache.gpustack.ai/inject: "true", which the webhook never reads: it injects the Pods the Deployment creates, whose labels and annotations come from spec.template.metadata; move them there (the label kvcache.gpustack.ai/inject: "true" under spec.template.metadata.labels)`},
		{"annotations alone", meta(nil, map[string]string{"kvcache.gpustack.ai/binding": "b", "app": "x"}), pod(map[string]string{"app": "x"}),
			`the Deployment's own metadata carries the annotations kvcache.gpustack.ai/binding, which the webhook never reads: it injects the Pods the Deployment creates, whose labels and annotations come from spec.template.metadata; move them there (the label kvcache.gpustack.ai/inject: "true" under spec.template.metadata.labels)`},
		{"the template opts in as well", meta(map[string]string{"kvcache.gpustack.ai/inject": "true"}, nil), pod(map[string]string{"kvcache.gpustack.ai/inject": "true"}), ""},
		{"the template opts out", meta(map[string]string{"kvcache.gpustack.ai/inject": "true"}, nil), pod(map[string]string{"kvcache.gpustack.ai/inject": "false"}), ""},
		{"nothing of the contract on the workload", meta(map[string]string{"app": "x"}, map[string]string{"note": "y"}), pod(nil), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Misplaced("Deployment", tc.workload, tc.template, "spec.template"))
		})
	}
}
