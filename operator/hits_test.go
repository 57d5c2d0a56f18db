package operator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/operator/enginestats"
)

func TestNeverReadBackNamesTheLikelyCause(t *testing.T) {
	now := t0.Add(time.Hour)
	window := 15 * time.Minute
	two := []PodUse{readyPod("vllm-a", engines.VLLM, t0), readyPod("vllm-b", engines.VLLM, t0)}
	written := CacheUseInput{
		Now: now, Window: 5 * time.Minute, Tenant: "team-a-chat", Backend: "mooncake-dram", Pods: two, Observed: true,
		Activity: Activity{Since: t0.Add(-time.Hour), LastWrite: now.Add(-time.Minute)}, BlockSize: 64,
	}
	never := enginestats.Window{Window: window, From: now.Add(-window), PromptTokens: 9000, Requests: 6, Pods: 2, Models: []string{"qwen"}}
	for _, tc := range []struct {
		name   string
		w      func(w enginestats.Window) enginestats.Window
		reason string
		cause  string
	}{
		{name: "prompts that never repeat", w: func(w enginestats.Window) enginestats.Window { return w },
			reason: kvv1.ReasonNoStoreHits, cause: "likely no prompt shared a prefix of a block or more with one another engine had computed"},
		{name: "two models on one domain", w: func(w enginestats.Window) enginestats.Window { w.Models = []string{"llama", "qwen"}; return w },
			reason: kvv1.ReasonNoStoreHits, cause: "likely the Pods serve different models (llama, qwen), whose blocks never match one another's prompts: give each model its own KVCachePoolBinding"},
		{name: "prompts shorter than a block", w: func(w enginestats.Window) enginestats.Window { w.Requests = 300; return w },
			reason: kvv1.ReasonNoStoreHits, cause: "likely the prompts are shorter than a block (spec.domain.blockSize 64 tokens)"},
		{name: "the store served some: written and read", w: func(w enginestats.Window) enginestats.Window { w.StoreTokens = 128; return w },
			reason: kvv1.ReasonWritesObserved},
		{name: "too few tokens asked to judge an idle service", w: func(w enginestats.Window) enginestats.Window { w.PromptTokens = 900; return w },
			reason: kvv1.ReasonWritesObserved},
		{name: "not watched for a whole window yet", w: func(w enginestats.Window) enginestats.Window { w.From = now.Add(-time.Minute); return w },
			reason: kvv1.ReasonWritesObserved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := written
			w := tc.w(never)
			in.Engines = &w
			v := CacheUse(in)
			assert.Equal(t, tc.reason, v.Reason, v.Message)
			if tc.cause != "" {
				assert.Equal(t, metav1.ConditionFalse, v.Status)
				assert.Contains(t, v.Message, "the engines write under tenant team-a-chat, yet for the last 15m0s the store served none of the prompt tokens Pods vllm-a, vllm-b were asked (their own counters): ")
				assert.Contains(t, v.Message, tc.cause)
			}
		})
	}
	// The message holds no figure: more requests of the same kind rewrite nothing.
	in := written
	a, b := never, never
	b.PromptTokens, b.Requests = 18000, 12
	in.Engines = &a
	first := CacheUse(in).Message
	in.Engines = &b
	assert.Equal(t, first, CacheUse(in).Message)
}

func TestStoreHitsFigures(t *testing.T) {
	assert.Nil(t, StoreHitsOf(enginestats.Window{}, t0), "no Pod asked for: no figure")
	h := StoreHitsOf(enginestats.Window{Window: 15 * time.Minute, From: t0.Add(-15 * time.Minute), PromptTokens: 3623, StoreTokens: 3584, Pods: 1}, t0)
	require.NotNil(t, h)
	assert.Equal(t, "98.9%", h.Ratio)
	assert.Equal(t, "100%", FormatRatio(1))
	assert.Equal(t, "0%", FormatRatio(0))
	h = StoreHitsOf(enginestats.Window{Window: time.Minute, From: t0, Unreadable: 2}, t0)
	assert.Equal(t, "", h.Ratio, "nothing asked: no ratio rather than 0%")
	assert.Equal(t, "2 of 2 Ready engine Pods could not be read: not read yet", h.Message)

	prev := &kvv1.StoreHits{PromptTokens: 100, StoreTokens: 90, Ratio: "90%", Pods: 2, ObservedTime: metav1.Time{Time: t0}}
	moved := &kvv1.StoreHits{PromptTokens: 200, StoreTokens: 180, Ratio: "90%", Pods: 2, ObservedTime: metav1.Time{Time: t0.Add(time.Minute)}}
	assert.Same(t, prev, RefreshStoreHits(prev, moved, t0.Add(time.Minute), 5*time.Minute), "moving figures wait for the refresh")
	assert.Same(t, moved, RefreshStoreHits(prev, moved, t0.Add(5*time.Minute), 5*time.Minute))
	cold := &kvv1.StoreHits{PromptTokens: 200, StoreTokens: 0, Ratio: "0%", Pods: 2}
	assert.Same(t, cold, RefreshStoreHits(prev, cold, t0.Add(time.Minute), 5*time.Minute), "the store stopped serving: written at once")
	assert.Nil(t, RefreshStoreHits(prev, nil, t0, time.Minute), "no engine any more: the figure goes")
}

func TestEngineReaderReadsEachPodOncePerInterval(t *testing.T) {
	var scrapes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := scrapes.Add(1)
		fmt.Fprintf(w, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"m\"} %d\n# TYPE vllm:external_prefix_cache_hits_total counter\nvllm:external_prefix_cache_hits_total{model_name=\"m\"} %d\n", 1000*n, 900*n)
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	pod := PodUse{Namespace: "team-a", Name: "vllm-a", UID: "a", Engine: engines.VLLM, Ready: true, EngineStarted: t0.Add(-time.Hour),
		MetricsURL: "http://" + u.Host + "/metrics"}
	broken := PodUse{Namespace: "team-a", Name: "vllm-b", UID: "b", Engine: engines.VLLM, Ready: true, MetricsErr: "pod team-a/vllm-b has no IP yet"}
	notReady := PodUse{Namespace: "team-a", Name: "vllm-c", UID: "c", Engine: engines.VLLM, MetricsURL: pod.MetricsURL}
	r := &EngineReader{Interval: 30 * time.Second}
	pods := []PodUse{pod, broken, notReady}
	for _, at := range []time.Duration{0, 10 * time.Second, 30 * time.Second, 60 * time.Second} {
		r.Read(context.Background(), pods, t0.Add(at))
	}
	assert.Equal(t, int32(3), scrapes.Load(), "at 0, 30 s and 60 s; not at 10 s; never the Pod that is not Ready")
	w := r.Window(pods, t0.Add(time.Minute), 15*time.Minute)
	assert.Equal(t, 2000.0, w.PromptTokens, "from the first read to the third")
	assert.Equal(t, 1800.0, w.StoreTokens)
	assert.Equal(t, 1, w.Pods)
	assert.Equal(t, 1, w.Unreadable)
	require.Error(t, w.Err)
	assert.True(t, strings.Contains(w.Err.Error(), "has no IP yet"), w.Err.Error())
}
