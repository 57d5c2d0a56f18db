package webhook_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
	"github.com/kvcache-operator/kvcache/webhook"
)

// apiserverMetrics reads kube-apiserver's /metrics.
func apiserverMetrics(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	require.NoError(t, err)
	return families
}

// apiRequests reads kube-apiserver's apiserver_request_total for one verb and resource.
func apiRequests(t testing.TB, verb, resource string) float64 {
	t.Helper()
	total := 0.0
	for _, m := range apiserverMetrics(t)["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["verb"] == verb && labels["resource"] == resource {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// apiReads counts the API server's reads of one resource (GET and LIST).
func apiReads(t testing.TB, resource string) float64 {
	return apiRequests(t, "GET", resource) + apiRequests(t, "LIST", resource)
}

// An admission reads nothing from the API server for a Binding the manager's cache has: the
// Binding, pools, backends and Settings all come from the cache. A Binding the cache has not
// seen costs exactly one live read (here one that does not exist, which is then refused).
func TestAdmissionReadsTheBindingLiveOnlyWhenTheCacheHasNotSeenIt(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	pod := vllmPod(map[string]string{vocab.LabelInject: "true"})
	_, err := create(t, pod, "reads-warmup") // lets the cache start its informers
	require.NoError(t, err)
	before := map[string]float64{}
	resources := []string{"kvcachepoolbindings", "kvcachepools", "kvcachebackends", "settings"}
	for _, r := range resources {
		before[r] = apiReads(t, r)
	}
	const n = 20
	for i := range n {
		_, err := create(t, pod, fmt.Sprintf("reads-%d", i))
		require.NoError(t, err)
	}
	for _, r := range resources {
		assert.Zero(t, apiReads(t, r)-before[r], "no API reads of %s: they come from the cache", r)
	}

	absent := pod.DeepCopy()
	absent.Annotations[vocab.AnnotationBinding] = "absent"
	was := apiReads(t, "kvcachepoolbindings")
	_, err = create(t, absent, "reads-absent")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `KVCachePoolBinding "absent" not found in namespace "team-a"`)
	assert.Equal(t, 1.0, apiReads(t, "kvcachepoolbindings")-was, "one live read for a Binding the cache has not seen")
}

// admissionQuantiles estimates quantiles of kvcache_admission_duration_seconds for one webhook.
func admissionQuantiles(t testing.TB, webhook string, qs ...float64) []float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	var h *dto.Histogram
	for _, f := range families {
		if f.GetName() != "kvcache_admission_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "webhook" && l.GetValue() == webhook {
					h = m.GetHistogram()
				}
			}
		}
	}
	require.NotNil(t, h, "no histogram for %s", webhook)
	return quantiles(bucketsOf(h), qs...)
}

// buckets are a histogram's cumulative counts by upper bound.
type buckets struct {
	bounds []float64
	counts []float64
}

func bucketsOf(h *dto.Histogram) buckets {
	var b buckets
	for _, x := range h.GetBucket() {
		b.bounds = append(b.bounds, x.GetUpperBound())
		b.counts = append(b.counts, float64(x.GetCumulativeCount()))
	}
	return b
}

// quantiles estimates quantiles from cumulative buckets (linear within a bucket, as PromQL's
// histogram_quantile does).
func quantiles(b buckets, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if len(b.counts) == 0 {
		return out
	}
	total := b.counts[len(b.counts)-1]
	for i, q := range qs {
		rank := q * total
		prevBound, prevCount := 0.0, 0.0
		for j, c := range b.counts {
			if c >= rank {
				out[i] = prevBound + (b.bounds[j]-prevBound)*(rank-prevCount)/(c-prevCount)
				break
			}
			prevBound, prevCount = b.bounds[j], c
		}
	}
	return out
}

// BenchmarkCreatePods creates Pods through the real API server with the manager serving, one
// client at a time and eight at once, and compares kinds of Pod measured in the same run:
//   - unlabelled: the Pod as submitted, no webhook called;
//   - as-injected: the Pod as the webhook leaves it, without the label (a larger object);
//   - noop-webhook: the Pod as injected, through a webhook that answers at once, unchanged
//     (what any webhook call costs this API server);
//   - fixed-patch: the Pod as submitted, through a webhook that answers at once with the very
//     patch injection makes (the floor of any webhook making this injection);
//   - labelled: the Pod as submitted, injected by the manager.
//
// The kinds run interleaved in rounds of 50 Pods, in a rotating order, so that drift of the
// machine and growth of etcd weigh on all alike; b.N Pods of each kind in all. Reported: Pods/s
// per kind; labelled/unlabelled, fixed-patch/unlabelled (the floor of that ratio) and
// labelled/fixed-patch (the manager's serving beyond the floor); the p99 latency of a create as
// the client sees it, labelled and unlabelled; the quantiles of the handler's own time. Run:
//
//	make tools && KUBEBUILDER_ASSETS=$(hack/tools.sh assets) go test ./test/webhook/ -run '^$' -bench CreatePods -benchtime 500x
func BenchmarkCreatePods(b *testing.B) {
	applyCluster(b, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	asInjected, err := create(b, vllmPod(map[string]string{vocab.LabelInject: "true"}), "load-template")
	require.NoError(b, err)
	delete(asInjected.Labels, vocab.LabelInject)
	asInjected.ObjectMeta = metav1.ObjectMeta{Labels: asInjected.Labels, Annotations: asInjected.Annotations}
	asInjected.Status = corev1.PodStatus{}
	noop := asInjected.DeepCopy()
	noop.Labels = map[string]string{noopLabel: "none"}
	fixedWebhook(b, injectionPatch(b))
	kinds := []struct {
		name string
		pod  *corev1.Pod
	}{
		{"unlabelled", vllmPod(nil)},
		{"as-injected", asInjected},
		{"noop-webhook", noop},
		{"fixed-patch", vllmPod(map[string]string{noopLabel: "injection"})},
		{"labelled", vllmPod(map[string]string{vocab.LabelInject: "true"})},
	}
	const round = 50
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			elapsed := make([]time.Duration, len(kinds))
			latencies := make([][]time.Duration, len(kinds))
			done := make([]int, len(kinds))
			b.ResetTimer()
			for r := 0; done[0] < b.N; r++ {
				n := min(round, b.N-done[0])
				for j := range kinds {
					k := (r + j) % len(kinds)
					took, each := createPods(b, kinds[k].pod, fmt.Sprintf("load-%d-%d-%d-", clients, r, k), n, clients)
					elapsed[k] += took
					latencies[k] = append(latencies[k], each...)
					done[k] += n
				}
			}
			b.StopTimer()
			rate := map[string]float64{}
			for k, kind := range kinds {
				rate[kind.name] = float64(done[k]) / elapsed[k].Seconds()
				b.ReportMetric(rate[kind.name], kind.name+"-pods/s")
				if kind.name == "unlabelled" || kind.name == "labelled" {
					b.ReportMetric(percentile(latencies[k], 0.99).Seconds()*1e3, kind.name+"-create-p99-ms")
				}
			}
			b.ReportMetric(rate["labelled"]/rate["unlabelled"], "labelled/unlabelled")
			b.ReportMetric(rate["fixed-patch"]/rate["unlabelled"], "fixed-patch/unlabelled")
			b.ReportMetric(rate["labelled"]/rate["fixed-patch"], "labelled/fixed-patch")
			q := admissionQuantiles(b, "pod-inject", 0.5, 0.99)
			b.ReportMetric(q[0]*1e3, "handler-p50-ms")
			b.ReportMetric(q[1]*1e3, "handler-p99-ms")
		})
	}
}

// createPods creates n copies of pod named prefix<i> with clients goroutines and returns how
// long that took and each create's latency as the client saw it; then it deletes them.
func createPods(b *testing.B, pod *corev1.Pod, prefix string, n, clients int) (time.Duration, []time.Duration) {
	b.Helper()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	each := make([]time.Duration, n)
	t0 := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				p := pod.DeepCopy()
				p.Namespace, p.Name = userNamespace, fmt.Sprintf("%s%d", prefix, i)
				start := time.Now()
				if err := env.Client.Create(context.Background(), p); err != nil {
					failed.Add(1)
				}
				each[i-1] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	b.StopTimer()
	defer b.StartTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d creates failed", failed.Load())
	}
	require.NoError(b, env.Client.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(userNamespace), client.GracePeriodSeconds(0)))
	return took, each
}

// percentile is the q-quantile of ds (nearest rank).
func percentile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

const noopLabel = "kvcache-bench/noop"

// injectionPatch is the JSON patch the Pod mutator answers for the benchmark's labelled Pod.
func injectionPatch(b *testing.B) []byte {
	b.Helper()
	r, err := generator.NewRenderer()
	require.NoError(b, err)
	m := webhook.NewPodMutator(injection.New(r), objects.Cluster{Cached: env.Client, Live: env.Client})
	pod := vllmPod(map[string]string{vocab.LabelInject: "true"})
	pod.Namespace = userNamespace
	raw, err := json.Marshal(pod)
	require.NoError(b, err)
	resp := m.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "bench", Operation: admissionv1.Create, Namespace: userNamespace, Object: runtime.RawExtension{Raw: raw},
	}})
	require.True(b, resp.Allowed, "%+v", resp.Result)
	require.NotEmpty(b, resp.Patches)
	patch, err := json.Marshal(resp.Patches)
	require.NoError(b, err)
	return patch
}

// fixedWebhook registers a mutating webhook for Pods labelled noopLabel, served by an HTTPS
// server in this process that allows every request at once: unchanged when the label says
// "none", with patch when it says "injection".
func fixedWebhook(b *testing.B, patch []byte) {
	b.Helper()
	var calls atomic.Int64
	jsonPatch := admissionv1.PatchTypeJSONPatch
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if json.Unmarshal(review.Request.Object.Raw, &meta) == nil && meta.Metadata.Labels[noopLabel] == "injection" {
			resp.Patch, resp.PatchType = patch, &jsonPatch
		}
		review.Request, review.Response = nil, resp
		_ = json.NewEncoder(w).Encode(&review)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	b.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	url := srv.URL + "/fixed"
	none := admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-fixed"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "fixed.bench.kvcache.gpustack.ai", AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			SideEffects: &none,
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: noopLabel, Operator: metav1.LabelSelectorOpExists}}},
		}},
	}
	require.NoError(b, env.Client.Create(context.Background(), cfg))
	b.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })
	// The API server's webhook configuration cache takes a moment: wait until a Pod reaches it.
	require.Eventually(b, func() bool {
		before := calls.Load()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: userNamespace, GenerateName: "fixed-probe-", Labels: map[string]string{noopLabel: "none"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		require.NoError(b, env.Client.Create(context.Background(), p, client.DryRunAll))
		return calls.Load() > before
	}, 10*time.Second, 50*time.Millisecond, "the fixed webhook is called")
}
