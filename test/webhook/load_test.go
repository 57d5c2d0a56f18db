package webhook_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/internal/golden"
)

// apiRequests reads kube-apiserver's apiserver_request_total for one verb and resource.
func apiRequests(t testing.TB, verb, resource string) float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	require.NoError(t, err)
	total := 0.0
	for _, m := range families["apiserver_request_total"].GetMetric() {
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
	pod := vllmPod(map[string]string{injection.LabelInject: "true"})
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
	absent.Annotations[injection.AnnotationBinding] = "absent"
	was := apiReads(t, "kvcachepoolbindings")
	_, err = create(t, absent, "reads-absent")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `KVCachePoolBinding "absent" not found in namespace "team-a"`)
	assert.Equal(t, 1.0, apiReads(t, "kvcachepoolbindings")-was, "one live read for a Binding the cache has not seen")
}

// admissionQuantiles estimates quantiles of kvcache_admission_duration_seconds for one webhook
// from its buckets (linear within a bucket, as PromQL's histogram_quantile does).
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
	out := make([]float64, len(qs))
	total := float64(h.GetSampleCount())
	for i, q := range qs {
		rank := q * total
		prevBound, prevCount := 0.0, 0.0
		for _, b := range h.GetBucket() {
			c := float64(b.GetCumulativeCount())
			if c >= rank {
				out[i] = prevBound + (b.GetUpperBound()-prevBound)*(rank-prevCount)/(c-prevCount)
				break
			}
			prevBound, prevCount = b.GetUpperBound(), c
		}
	}
	return out
}

// BenchmarkCreatePods creates Pods through the real API server with the manager serving:
// labelled (injected) and unlabelled, one client at a time and eight at once. Run:
//
//	make tools && KUBEBUILDER_ASSETS=$(hack/tools.sh assets) go test ./test/webhook/ -run '^$' -bench CreatePods -benchtime 500x
func BenchmarkCreatePods(b *testing.B) {
	applyCluster(b, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	for _, kind := range []struct {
		name   string
		labels map[string]string
	}{{"unlabelled", nil}, {"labelled", map[string]string{injection.LabelInject: "true"}}} {
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/clients=%d", kind.name, clients), func(b *testing.B) {
				pod := vllmPod(kind.labels)
				var next atomic.Int64
				prefix := fmt.Sprintf("load-%s-%d-%d-", kind.name, clients, b.N)
				var wg sync.WaitGroup
				var failed atomic.Int64
				b.ResetTimer()
				for range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							p := pod.DeepCopy()
							p.Namespace, p.Name = userNamespace, fmt.Sprintf("%s%d", prefix, i)
							if err := env.Client.Create(context.Background(), p); err != nil {
								failed.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if failed.Load() > 0 {
					b.Fatalf("%d creates failed", failed.Load())
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pods/s")
				if kind.labels != nil {
					q := admissionQuantiles(b, "pod-inject", 0.5, 0.99)
					b.ReportMetric(q[0]*1e3, "p50-ms")
					b.ReportMetric(q[1]*1e3, "p99-ms")
				}
				require.NoError(b, env.Client.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(userNamespace), client.GracePeriodSeconds(0)))
			})
		}
	}
}
