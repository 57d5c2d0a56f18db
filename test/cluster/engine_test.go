package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/internal/enginetest"
	"github.com/kvcache-operator/kvcache/vocab"
)

// Real engines: the vLLM of hack/images.sh's vllm image, in Pods made from the playground's own
// manifest (test/cluster/walkthrough/vllm-engines.yaml) with another name, namespace, Binding or
// node, injected by the webhook like any user's Pod. What they say about the cache is their
// own counters (internal/enginetest), never a figure of the operator's.

// realEngineWords is the prompt's length: about 2200 tokens, so that whole blocks of vLLM's
// CPU block size cover more than 90% of it.
const realEngineWords = 2000

// cpuBlockTokens is vLLM's KV block on CPU: only whole blocks are stored and loaded.
const cpuBlockTokens = 128

// realEngine is one running engine Pod.
type realEngine struct {
	ns, name, node string
	ip             string
	started        time.Duration // creation to Ready
}

func (e *realEngine) String() string { return e.ns + "/" + e.name + " (" + e.node + ")" }

func (e *realEngine) client() enginetest.Engine {
	return enginetest.Engine{Base: "http://" + e.ip + ":8000", Engine: engines.VLLM}
}

// realEngineSpec says which Pod to make: a name in a namespace, the Binding it names, the node.
type realEngineSpec struct{ ns, name, binding, node string }

var venvOnce struct {
	sync.Once
	path string
	err  error
}

// vllmVenv is the host path of the vLLM venv the engine Pods mount (hack/images.sh venv vllm).
func vllmVenv(t *testing.T) string {
	t.Helper()
	venvOnce.Do(func() {
		out, err := script("hack/images.sh", "venv", "vllm")
		venvOnce.path, venvOnce.err = strings.TrimSpace(lastLine(out)), err
		if err != nil {
			venvOnce.err = fmt.Errorf("hack/images.sh venv vllm (make images builds it): %w\n%s", err, out)
		}
	})
	require.NoError(t, venvOnce.err)
	return venvOnce.path
}

// realEnginePod is the playground's first engine Pod made into spec.
func realEnginePod(t *testing.T, spec realEngineSpec) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(env.repo, "test", "cluster", "walkthrough", "vllm-engines.yaml"))
	require.NoError(t, err)
	first, _, _ := strings.Cut(strings.ReplaceAll(string(raw), "__VLLM_VENV__", vllmVenv(t)), "\n---\n")
	p := &corev1.Pod{}
	require.NoError(t, sigsyaml.Unmarshal([]byte(first), p))
	require.Equal(t, env.images["vllm"], p.Spec.Containers[0].Image, "test/cluster/walkthrough/vllm-engines.yaml runs the vllm image hack/images.sh builds")
	p.Namespace, p.Name = spec.ns, spec.name
	p.Annotations[vocab.AnnotationBinding] = spec.binding
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": spec.node}
	return p
}

// startRealEngines creates the engines and waits until every one serves (they start in
// parallel: a minute or so each on this machine). They outlive the step that starts them: the
// test's namespace cleanup removes what stopRealEngine did not.
func startRealEngines(t *testing.T, specs ...realEngineSpec) []*realEngine {
	t.Helper()
	ctx := context.Background()
	out := make([]*realEngine, len(specs))
	t0 := time.Now()
	for i, s := range specs {
		_, err := createPod(ctx, realEnginePod(t, s), false)
		require.NoError(t, err, "create engine %s/%s", s.ns, s.name)
		out[i] = &realEngine{ns: s.ns, name: s.name, node: s.node}
	}
	for _, e := range out {
		p := waitPodReadyIn(t, e.ns, e.name, 8*time.Minute)
		e.ip, e.started = p.Status.PodIP, time.Since(t0)
	}
	return out
}

// stopRealEngine deletes an engine and waits until it is gone (its memory is back).
func stopRealEngine(t *testing.T, e *realEngine) {
	t.Helper()
	require.NoError(t, deletePod(context.Background(), e.ns, e.name, 5))
	eventually(t, 2*time.Minute, 250*time.Millisecond, "engine "+e.String()+" gone", func() (bool, string) {
		_, err := env.client.CoreV1().Pods(e.ns).Get(context.Background(), e.name, metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})
}

// ask sends the prompt of seed to e, after emptying e's own prefix cache (so what it serves
// from cache can only come from the store), and waits until the blocks it computed are in the
// store. what names the case in the figures.
func ask(t *testing.T, e *realEngine, seed uint64, what string) enginetest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := e.client()
	require.NoError(t, c.ResetPrefixCache(ctx), "engine %s", e)
	r, err := c.Ask(ctx, enginetest.Prompt(seed, realEngineWords))
	require.NoError(t, err, "engine %s", e)
	// The blocks it computed are looked up and written after the response.
	_, err = c.WaitSaved(ctx, r, cpuBlockTokens)
	require.NoError(t, err, "engine %s handed what it computed to the store", e)
	record(t, "real engine %s, %s: %s", e, what, r)
	return r
}

// The walkthrough's real engines: another Binding's engine, and one fresh after the member
// rollout. The prompts are the walkthrough's own (seeds), so no other test's blocks match.
const (
	otherNS      = "team-b"
	otherBinding = "team-b"
	walkSeed     = 20261204
)

// realEngines: two real engines of two Bindings on one store. The first computes a prompt and
// writes its blocks; with its own prefix cache emptied it loads them back from the store; the
// other Binding's engine, on the other node, is asked the same prompt and gets none of them
// (the master keeps tenants apart). The first Binding's status, and its HIT RATE column, show
// what the engine counted.
func (w *walk) realEngines(t *testing.T) {
	ctx := context.Background()
	w.ensureNamespace(t, otherNS)
	kubectl(t, []byte(fmt.Sprintf(`apiVersion: worker.gpustack.ai/v1
kind: KVCachePoolBinding
metadata: {name: %s, namespace: %s}
spec:
  poolRef: {name: %s}
  quota: {ceiling: 256Mi}
  domain: {name: %s, blockSize: 64, dtype: bfloat16}
`, otherBinding, otherNS, poolName, otherBinding)), "apply", "-f", "-")
	eventually(t, 2*time.Minute, 250*time.Millisecond, "KVCachePoolBinding team-b granted", func() (bool, string) {
		b := &kvv1.KVCachePoolBinding{}
		if err := env.kube.Get(ctx, client.ObjectKey{Namespace: otherNS, Name: otherBinding}, b); err != nil {
			return false, err.Error()
		}
		return condTrue(b.Status.Conditions, kvv1.ConditionQuotaGranted), fmt.Sprintf("%v", b.Status.Conditions)
	})
	es := startRealEngines(t,
		realEngineSpec{ns: bindingNS, name: "vllm-walk", binding: bindingName, node: "node-0"},
		realEngineSpec{ns: otherNS, name: "vllm-other", binding: otherBinding, node: "node-1"})
	w.engine = es[0]
	other := es[1]
	record(t, "two real engines created together, Ready after %s and %s", w.engine.started.Round(time.Second), other.started.Round(time.Second))

	first := ask(t, w.engine, walkSeed, "a prompt the store has not seen")
	assert.Zero(t, first.StoreTokens, "a new prompt gets nothing from the store")
	back := ask(t, w.engine, walkSeed, "the same prompt, its own prefix cache emptied")
	assert.GreaterOrEqual(t, float64(back.StoreTokens), 0.9*float64(back.PromptTokens), "the engine loaded at least 90%% of the prompt it computed back from the store")
	asked := time.Now()
	foreign := ask(t, other, walkSeed, "the same prompt from another Binding's engine")
	assert.Zero(t, foreign.StoreTokens, "another Binding's engine gets none of team-a's blocks: the master keeps tenants apart")
	record(t, "real engines: team-a's prompt from the store %d/%d tokens, first token %s (computed: %s); team-b's engine %d/%d from the store",
		back.StoreTokens, back.PromptTokens, back.FirstToken.Round(10*time.Millisecond), first.FirstToken.Round(10*time.Millisecond), foreign.StoreTokens, foreign.PromptTokens)

	// The hit rate where users look, moved by the real engine's own counters.
	var b kvv1.KVCachePoolBinding
	at := eventually(t, 3*time.Minute, time.Second, "team-a's status.storeHits counts the store's tokens", func() (bool, string) {
		if err := env.kube.Get(ctx, client.ObjectKey{Namespace: bindingNS, Name: bindingName}, &b); err != nil {
			return false, err.Error()
		}
		h := b.Status.StoreHits
		return h != nil && h.StoreTokens >= int64(back.StoreTokens) && h.Ratio != "", fmt.Sprintf("%+v", h)
	})
	record(t, "team-a's status.storeHits %s after the real engine's requests: %d of %d prompt tokens from the store (%s) over %s, %d Pod(s) read",
		at.Sub(asked).Round(time.Second), b.Status.StoreHits.StoreTokens, b.Status.StoreHits.PromptTokens, b.Status.StoreHits.Ratio, b.Status.StoreHits.Window.Duration, b.Status.StoreHits.Pods)
	out := kubectl(t, nil, "-n", bindingNS, "get", "kvcpb", bindingName)
	t.Logf("kubectl get kvcpb:\n%s", out)
	assert.Contains(t, out, "HIT RATE", "kubectl get kvcpb has the column")
	assert.Contains(t, out, b.Status.StoreHits.Ratio, "kubectl get kvcpb shows the hit rate")

	// team-b's engine goes (its memory is needed later); its Binding goes with the namespace.
	stopRealEngine(t, other)
	kubectl(t, nil, "-n", otherNS, "delete", "kvcpb", otherBinding, "--wait=true", "--timeout=2m")
}

// realEngineAfterFailover: the failovers left the store cold (a new master knows no object), and
// the real engine's prompt misses: nothing from the store, and the backend says the cache went
// cold. The engine computed the prompt again, so the store holds it again.
func (w *walk) realEngineAfterFailover(t *testing.T) {
	r := ask(t, w.engine, walkSeed, "after the failovers (a cold store)")
	assert.Zero(t, r.StoreTokens, "after a cold failover the store serves none of the prompt")
	b := getBackend(t, backendName)
	require.NotNil(t, b.Status.Leader)
	assert.NotNil(t, b.Status.Leader.ColdCacheSince, "the backend says the cache went cold: %+v", b.Status.Leader)
	assert.NotEmpty(t, objectEvents(context.Background(), t, "", backendName, "ColdCache"), "ColdCache events")
}

// realEngineBeforeRollout writes the prompt again (the leader change before it was a cold
// handover), so that the member rollout has it to keep.
func (w *walk) realEngineBeforeRollout(t *testing.T) {
	ask(t, w.engine, walkSeed, "before the member rollout (the handover before it was cold)")
	// Admission confirms a Pod's tenant in its pool's ledger: the pool read the ledger during
	// the handover, when no master answered, and says so until it reads it again.
	eventually(t, time.Minute, 250*time.Millisecond, "the pool reads its ledger again after the handover", func() (bool, string) {
		p := &kvv1.KVCachePool{}
		if err := env.kube.Get(context.Background(), client.ObjectKey{Name: poolName}, p); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	w.fresh = startRealEngines(t, realEngineSpec{ns: bindingNS, name: "vllm-fresh", binding: bindingName, node: "node-1"})[0]
}

// realEngineAfterRollout: a fresh engine, started before the rollout and asked nothing until
// now, loads the prompt from the store the members were replaced under.
func (w *walk) realEngineAfterRollout(t *testing.T) {
	r := ask(t, w.fresh, walkSeed, "a fresh engine after every member was replaced (drained)")
	assert.GreaterOrEqual(t, float64(r.StoreTokens), 0.9*float64(r.PromptTokens), "the prompt's blocks moved with the members: a fresh engine loads at least 90%% of it")
	stopRealEngine(t, w.fresh)
	stopRealEngine(t, w.engine)
}

// realEngine on the warm store: a real engine's prompt, written before its serving master is
// killed, is loaded back from the store the standby took over with.
func (ww *warmWalk) realEngine(t *testing.T) {
	e := startRealEngines(t, realEngineSpec{ns: bindingNS, name: "vllm-warm", binding: warmBinding, node: "node-0"})[0]
	defer stopRealEngine(t, e)
	first := ask(t, e, walkSeed+1, "on the warm store, before its master is killed")
	assert.Zero(t, first.StoreTokens, "a new prompt gets nothing from the store")
	r := ww.failoverRun(t, true, nil)
	assertWarm(t, r)
	// The engine's client still holds its connection to the killed master: its first lookup
	// after the failover fails on it (read as a miss) and reconnects (seen with the stock
	// client in test/ha too). The next request is the store's answer.
	once := ask(t, e, walkSeed+1, "the same prompt, the first request after the serving master was killed")
	back := ask(t, e, walkSeed+1, "the same prompt again (a warm failover)")
	assert.GreaterOrEqual(t, float64(back.StoreTokens), 0.9*float64(back.PromptTokens), "the standby kept the prompt's blocks: at least 90%% of it from the store")
	record(t, "warm: the engine's first request after the kill took %d of %d prompt tokens from the store", once.StoreTokens, once.PromptTokens)
	record(t, "warm: a real engine loaded %d of %d prompt tokens from the store after its master was killed (a new master served %s after the kill), first token %s (computed: %s)",
		back.StoreTokens, back.PromptTokens, r.a.Round(10*time.Millisecond), back.FirstToken.Round(10*time.Millisecond), first.FirstToken.Round(10*time.Millisecond))
}
