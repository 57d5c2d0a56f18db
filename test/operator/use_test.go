package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/store/storetest"
	"github.com/kvcache-operator/kvcache/vocab"
)

// externalBackend declares a store the operator only observes, whose engines connect to
// client.
func externalBackend(name, clientAddr string) *kvv1.KVCacheBackend {
	return &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.KVCacheBackendSpec{
		Connection: kvv1.Connection{External: &kvv1.ExternalConnection{Endpoints: []kvv1.Endpoint{
			{Name: kvv1.EndpointClient, Address: clientAddr},
			{Name: kvv1.EndpointAdmin, Address: name + ".example:9003"},
		}}}}}
}

// injectPod runs the webhook's injection on a vLLM Pod naming binding (resolving through the
// API server, as admission does), creates it, and reports it Ready as the kubelet would.
func injectPod(t *testing.T, ns, name, binding string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{vocab.LabelInject: "true"},
			Annotations: map[string]string{vocab.AnnotationBinding: binding, vocab.AnnotationEngine: "vLLM"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.29.0", Command: []string{"vllm"}, Args: []string{"serve", "--model", "m"}}}},
	}
	res, err := injection.New(r).Inject(ctx, pod, ns, objects.Cluster{Cached: env.Client, Live: env.Client})
	require.NoError(t, err)
	injected, err := res.Apply(pod)
	require.NoError(t, err)
	require.True(t, res.Injected)
	require.NoError(t, env.Client.Create(ctx, injected))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), injected, client.GracePeriodSeconds(0)) })
	setReady(t, injected)
	return injected
}

// setReady reports a Pod Running and Ready since now, as the kubelet does.
func setReady(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.20.0.5",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	require.NoError(t, env.Client.Status().Update(context.Background(), p))
}

// eventNote waits for an event of reason about object name and returns its note.
func eventNote(t *testing.T, reason, name string) string {
	t.Helper()
	var note string
	poll(t, func() bool {
		l := &eventsv1.EventList{}
		require.NoError(t, env.Client.List(context.Background(), l))
		for _, e := range l.Items {
			if e.Reason == reason && e.Regarding.Name == name {
				note = e.Note
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("no %s event about %s", reason, name) })
	return note
}

// gathered is the value of the manager's series name with the given labels (nil: absent).
func gathered(t *testing.T, name string, labels map[string]string) *float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				v := m.GetGauge().GetValue()
				if f.GetType() == dto.MetricType_COUNTER {
					v = m.GetCounter().GetValue()
				}
				return &v
			}
		}
	}
	return nil
}

func matches(m *dto.Metric, labels map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range labels {
		if got[k] != v {
			return false
		}
	}
	return true
}

// A Binding reports how its tenant is used: Unknown with no Pod, False (naming the Pod and the
// checks) once an injected Pod has been Ready for the window with no write, True once writes
// arrive; evictions at the grant make EvictingOwnObjects True with an event and count in
// status.evicted; and a Pod injected before the backend's address changed is counted as
// drifted, with the fix. The manager's metrics carry the same figures.
func TestBindingReportsHowItsTenantIsUsed(t *testing.T) {
	fake := grantedTenant(t, "use-store", "10.20.0.10", 1<<30, "1Gi", "use", "team-a-use", "256Mi")
	b := eventuallyBinding(t, "team-a", "use", "Granted, and no Pod uses it", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted" &&
			condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Reason == "NoPods"
	})
	assert.Equal(t, metav1.ConditionUnknown, condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Status, "no Pod: never False")
	assert.Equal(t, metav1.ConditionFalse, condition(b.Status.Conditions, kvv1.ConditionEvictingOwnObjects).Status)
	assert.Equal(t, "0", b.Status.Evicted.String(), "observed: none evicted")
	labels := map[string]string{"namespace": "team-a", "binding": "use", "pool": "use-pool", "domain": "team-a-use"}
	assert.Nil(t, gathered(t, "kvcache_binding_cache_in_use", labels), "absent while Unknown")

	// An injected Pod that never writes.
	injectPod(t, "team-a", "silent-0", "use")
	b = eventuallyBinding(t, "team-a", "use", "CacheInUse False", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Status == metav1.ConditionFalse
	})
	c := condition(b.Status.Conditions, kvv1.ConditionCacheInUse)
	assert.Equal(t, "NoWrites", c.Reason)
	assert.Contains(t, c.Message, fmt.Sprintf("no write under tenant team-a-use reached the master of KVCacheBackend use-store while Pod silent-0 has been Ready for %s or longer", cacheInUseWindow))
	assert.Contains(t, c.Message, `kubectl -n team-a exec silent-0 -- python3 -c "import vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker"`)
	assert.Equal(t, c.Message, eventNote(t, "CacheNotWritten", "use"), "the event says the same")
	require.Eventually(t, func() bool {
		v := gathered(t, "kvcache_binding_cache_in_use", labels)
		return v != nil && *v == 0
	}, wait, 100*time.Millisecond)

	// The engine writes: True.
	fake.SetCharged("team-a-use", 4<<20)
	b = eventuallyBinding(t, "team-a", "use", "CacheInUse True", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Status == metav1.ConditionTrue
	})
	assert.Equal(t, "the master of KVCacheBackend use-store saw writes under tenant team-a-use while Pods using it run", condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Message)

	// At its grant the store evicts the domain's own objects.
	fake.Evict("team-a-use", 1<<20)
	b = eventuallyBinding(t, "team-a", "use", "EvictingOwnObjects True", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionEvictingOwnObjects).Status == metav1.ConditionTrue && b.Status.Evicted.Value() == 1<<20
	})
	ev := condition(b.Status.Conditions, kvv1.ConditionEvictingOwnObjects)
	assert.Equal(t, "AtGrant", ev.Reason)
	assert.Contains(t, ev.Message, "tenant team-a-use is at its grant of 256Mi")
	assert.Contains(t, ev.Message, "a ceiling is not a reservation")
	assert.Equal(t, ev.Message, eventNote(t, "EvictingOwnObjects", "use"))
	require.NotNil(t, b.Status.EvictedObservedTime)
	require.Eventually(t, func() bool {
		v := gathered(t, "kvcache_binding_evicted_bytes_total", labels)
		return v != nil && *v == 1<<20
	}, wait, 100*time.Millisecond, "kvcache_binding_evicted_bytes_total")

	// The backend's address changes: the running Pod keeps the old one.
	assert.Equal(t, metav1.ConditionTrue, condition(b.Status.Conditions, kvv1.ConditionInjectionCurrent).Status)
	assert.Nil(t, b.Status.Drift)
	updateBackend(t, "use-store", func(b *kvv1.KVCacheBackend) {
		b.Spec.Connection.External.Endpoints[0].Address = "use-store-2.example:50051"
	})
	b = eventuallyBinding(t, "team-a", "use", "drift counted", func(b *kvv1.KVCachePoolBinding) bool {
		return b.Status.Drift != nil
	})
	assert.Equal(t, &kvv1.BindingDrift{Pods: 1, Names: []string{"silent-0"}}, b.Status.Drift)
	cur := condition(b.Status.Conditions, kvv1.ConditionInjectionCurrent)
	assert.Equal(t, metav1.ConditionFalse, cur.Status)
	assert.Equal(t, "PodsDrifted", cur.Reason)
	assert.Contains(t, cur.Message, "silent-0 (annotation kvcache.gpustack.ai/client-config differs (master_server_address \"use-store.example:50051\", now \"use-store-2.example:50051\"))")
	assert.Contains(t, cur.Message, "roll their workloads (kubectl -n team-a rollout restart deployment/<name>")
	require.Eventually(t, func() bool {
		v := gathered(t, "kvcache_binding_drifted_pods", labels)
		return v != nil && *v == 1
	}, wait, 100*time.Millisecond, "kvcache_binding_drifted_pods")
	// A Pod created now gets the new address, and is current.
	injectPod(t, "team-a", "fresh-0", "use")
	time.Sleep(2 * time.Second)
	assert.Equal(t, &kvv1.BindingDrift{Pods: 1, Names: []string{"silent-0"}}, get(t, &kvv1.KVCachePoolBinding{ObjectMeta: b.ObjectMeta}).Status.Drift)
}

// Writes under the tenant default on a master whose Bindings all name other domains are an
// engine ignoring its tenant: the backend says so, once, with an event.
func TestBackendReportsWritesUnderTheDefaultTenant(t *testing.T) {
	fake := fakeStore(t, "default-writes", storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"default": 1 << 20}})
	fake.MountSegment("10.21.0.10:15400", 1<<30, "tcp")
	create(t, externalBackend("default-writes", "default-writes.example:50051"))
	got := eventuallyBackend(t, "default-writes", "WritesAttributed True", func(b *kvv1.KVCacheBackend) bool {
		return condition(b.Status.Conditions, kvv1.ConditionWritesAttributed).Status == metav1.ConditionTrue
	})
	assert.Equal(t, "Attributed", condition(got.Status.Conditions, kvv1.ConditionWritesAttributed).Reason)
	fake.SetCharged("default", 8192)
	got = eventuallyBackend(t, "default-writes", "WritesAttributed False", func(b *kvv1.KVCacheBackend) bool {
		return condition(b.Status.Conditions, kvv1.ConditionWritesAttributed).Status == metav1.ConditionFalse
	})
	c := condition(got.Status.Conditions, kvv1.ConditionWritesAttributed)
	assert.Equal(t, "DefaultTenantWrites", c.Reason)
	assert.Equal(t, "the master holds objects under the tenant default, and no KVCachePoolBinding on this backend names the domain default: an engine is ignoring the tenant injection gave it (vLLM-Ascend never passes it to the store; an engine image that does not read the injected tenant writes there too). Those writes share nothing with the Binding they were meant for: check the Pods whose Binding's CacheInUse is False", c.Message)
	assert.Equal(t, c.Message, eventNote(t, "DefaultTenantWrites", "default-writes"))

	// A Binding that names the domain default makes those writes its own.
	create(t, pool("default-writes-pool", "default-writes", "1Gi"))
	create(t, binding("team-b", "shared", "default-writes-pool", "default", "1Mi"))
	t.Cleanup(func() { fake.SetCharged("default", 0) }) // before the Binding goes: an empty tenant can be released
	got = eventuallyBackend(t, "default-writes", "WritesAttributed True again", func(b *kvv1.KVCacheBackend) bool {
		return condition(b.Status.Conditions, kvv1.ConditionWritesAttributed).Status == metav1.ConditionTrue
	})
	assert.Equal(t, "the objects under the tenant default are KVCachePoolBinding team-b/shared's domain", condition(got.Status.Conditions, kvv1.ConditionWritesAttributed).Message)
}
