package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
)

// typicalPod is the injection reference's bare vLLM Pod.
func typicalPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "team-a",
			Labels: map[string]string{vocab.LabelInject: "true"},
			Annotations: map[string]string{
				vocab.AnnotationBinding: "team-a", vocab.AnnotationEngine: "vLLM",
				vocab.AnnotationRole: "Decode", vocab.AnnotationContainer: "server",
			}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "server", Image: "vllm/vllm-openai:v0.29.0",
			Command: []string{"vllm"}, Args: []string{"serve", "--model", "Qwen/Qwen2.5-72B-Instruct"},
		}}},
	}
}

// walkthroughLookup resolves the walkthrough's backend, pool and Binding from memory.
func walkthroughLookup(r *generator.Renderer) objects.Reader {
	b := kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "mooncake-dram"}}
	b.Spec.Connection.Managed = &kvv1.ManagedConnection{Members: []kvv1.MemberGroup{{
		NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, CapacityPerMember: resource.MustParse("8Gi"),
	}}}
	b.Default()
	p := kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "shared-dram"}, Spec: kvv1.KVCachePoolSpec{
		Backends: []string{"mooncake-dram"}, Quota: kvv1.PoolQuota{Total: resource.MustParse("16Gi")},
	}}
	bi := kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "team-a"}, Spec: kvv1.KVCachePoolBindingSpec{
		PoolRef: kvv1.LocalReference{Name: "shared-dram"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("8Gi")},
		Domain: kvv1.Domain{Name: "default", BlockSize: 64, Dtype: "bfloat16"},
	}}
	return objects.NewFiles(objects.Set{Backends: []kvv1.KVCacheBackend{b}, Pools: []kvv1.KVCachePool{p}, Bindings: []kvv1.KVCachePoolBinding{bi}}, objects.FileOptions{Defaults: r.Defaults()})
}

func reviewBody(tb testing.TB, pod *corev1.Pod) []byte {
	tb.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		tb.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "705ab4f5-6393-11e8-b7cc-42010a800002", Operation: admissionv1.Create,
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: pod.Namespace, Name: pod.Name, Object: runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// serve runs one admission through a controller-runtime webhook exactly as the server does:
// decode the AdmissionReview, call the handler, compute and encode the response.
func serve(tb testing.TB, wh *admission.Webhook, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/mutate-pods", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	wh.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		tb.Fatalf("status %d: %s", w.Code, w.Body)
	}
	return w
}

func mutatorWebhook(tb testing.TB) (*admission.Webhook, *generator.Renderer) {
	r, err := generator.NewRenderer()
	if err != nil {
		tb.Fatal(err)
	}
	return &admission.Webhook{Handler: NewPodMutator(injection.New(r), walkthroughLookup(r))}, r
}

// BenchmarkAdmissionInject is the admission path of a typical vLLM Pod: decode the
// AdmissionReview, inject against an in-memory lookup, compute the JSON patch, encode.
func BenchmarkAdmissionInject(b *testing.B) {
	wh, _ := mutatorWebhook(b)
	body := reviewBody(b, typicalPod())
	b.ReportAllocs()
	for b.Loop() {
		serve(b, wh, body)
	}
}

// fixedResponse answers every request with the same precomputed response.
type fixedResponse struct{ resp admission.Response }

func (f fixedResponse) Handle(context.Context, admission.Request) admission.Response { return f.resp }

// BenchmarkAdmissionDecodeEncode is the floor: the same AdmissionReview decoded and the response
// the mutator gives it (the same patch operations, holding the same values) encoded, with no
// injection.
func BenchmarkAdmissionDecodeEncode(b *testing.B) {
	wh, _ := mutatorWebhook(b)
	body := reviewBody(b, typicalPod())
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		b.Fatal(err)
	}
	resp := wh.Handler.Handle(context.Background(), admission.Request{AdmissionRequest: *review.Request})
	if !resp.Allowed || len(resp.Patches) == 0 {
		b.Fatalf("the typical Pod must be injected: %+v", resp.Result)
	}
	floor := &admission.Webhook{Handler: fixedResponse{resp: resp}}
	b.ReportAllocs()
	for b.Loop() {
		serve(b, floor, body)
	}
}
