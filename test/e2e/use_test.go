//go:build linux

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
)

// tenantsUse runs the operator (TestRealStoreEndToEnd's manager and envtest) against a second
// real master and member (an external backend: a store the operator observes only, at loopback
// addresses) and real engine clients configured from what injection wrote:
//   - a Pod injected and Ready that never writes: CacheInUse False within the window, with the
//     message naming it and the checks, and an event;
//   - a Pod whose client writes under the injected tenant: True;
//   - writes past a 1 MiB grant: the master evicts the domain's own objects, status.evicted
//     rises with the master's counter, EvictingOwnObjects is True and the event appears;
//   - the backend's client address changes: the Pods injected before it are counted as drifted,
//     and a Pod injected now writes through the new address;
//   - writes at the grant whose objects are all being read (leased): the master refuses them
//     (-1700), and EvictingOwnObjects says so (WritesRefused), with an event.
func tenantsUse(t *testing.T, env *testenv.Env) {
	bin := mooncaketest.Bin(t, "python")
	c := env.Client
	ctx := context.Background()
	ports := mooncaketest.FreePorts(t, 3)
	rpcPort, adminPort, restPort := ports[0], ports[1], ports[2]
	admin := adminAPI{base: "http://127.0.0.1:" + strconv.Itoa(adminPort)}

	// The store: a multi-tenant master whose ledger the operator writes (the policy file in a
	// writable directory), and one member with a 64 MiB segment.
	policy := filepath.Join(t.TempDir(), "tenant-quota-policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("version: 1\ntenants: []\n"), 0o644))
	master := mooncaketest.Start(t, "mooncake_master", 3*time.Second, nil, filepath.Join(bin, "mooncake_master"),
		"-rpc_port="+strconv.Itoa(rpcPort), "-metrics_port="+strconv.Itoa(adminPort), "-metrics_host=127.0.0.1",
		"-default_kv_lease_ttl=5m", "-enable_multi_tenants=true", "-tenant_quota_connector_uri="+policy)
	mooncaketest.Poll(t, 10*time.Second, "the master's /health", []*mooncaketest.Proc{master}, func() error {
		_, err := admin.get("/health")
		return err
	})
	member := mooncaketest.Start(t, "mc_store_rest_server", 6*time.Second, []string{
		"MOONCAKE_MASTER=127.0.0.1:" + strconv.Itoa(rpcPort), "MOONCAKE_TE_META_DATA_SERVER=P2PHANDSHAKE", "MOONCAKE_PROTOCOL=tcp",
		"MOONCAKE_LOCAL_HOSTNAME=127.0.0.1", "MOONCAKE_GLOBAL_SEGMENT_SIZE=67108864", "MOONCAKE_LOCAL_BUFFER_SIZE=16777216",
		"MC_STORE_CLIENT_SETUP_RETRIES=2",
	}, filepath.Join(bin, "mc_store_rest_server"), "--port="+strconv.Itoa(restPort))
	t.Cleanup(member.Stop) // before the master stops (cleanups run last first)

	// The Settings and namespaces are the parent test's.
	clientAddr := "127.0.0.1:" + strconv.Itoa(rpcPort)
	require.NoError(t, c.Create(ctx, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "loopback"}, Spec: kvv1.KVCacheBackendSpec{
		Connection: kvv1.Connection{External: &kvv1.ExternalConnection{Endpoints: []kvv1.Endpoint{
			{Name: kvv1.EndpointClient, Address: clientAddr}, {Name: kvv1.EndpointAdmin, Address: "127.0.0.1:" + strconv.Itoa(adminPort)}}}}}}))
	require.NoError(t, c.Create(ctx, &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "loopback"}, Spec: kvv1.KVCachePoolSpec{
		Backends: []string{"loopback"}, Quota: kvv1.PoolQuota{Total: resource.MustParse("64Mi")}}}))
	// A 1 MiB grant: a few writes fill it.
	const grant = 1 << 20
	require.NoError(t, c.Create(ctx, &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: "chat"}, Spec: kvv1.KVCachePoolBindingSpec{
		PoolRef: kvv1.LocalReference{Name: "loopback"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("1Mi")},
		Domain: kvv1.Domain{Name: domainName, BlockSize: 64, Dtype: "bfloat16"}}}))
	bnd := &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: "chat"}}
	eventually(t, c, bnd, settle, "granted 1Mi by the real master, and no Pod uses it", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted" && b.Status.EffectiveQuota != nil &&
			b.Status.EffectiveQuota.Value() == grant && condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Reason == "NoPods"
	})
	assert.Equal(t, metav1.ConditionUnknown, condition(bnd.Status.Conditions, kvv1.ConditionCacheInUse).Status)

	r, err := generator.NewRenderer()
	require.NoError(t, err)
	inject := func(name string) *corev1.Pod {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: name, Labels: map[string]string{vocab.LabelInject: "true"},
				Annotations: map[string]string{vocab.AnnotationBinding: "chat", vocab.AnnotationEngine: "vLLM"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.29.0", Command: []string{"vllm"}, Args: []string{"serve", "--model", "m"}}}},
		}
		// What the webhook does on CREATE, then what the kubelet reports once it runs.
		res, err := injection.New(r).Inject(ctx, pod, tenantNamespace, objects.Cluster{Cached: c, Live: c})
		require.NoError(t, err)
		injected, err := res.Apply(pod)
		require.NoError(t, err)
		require.True(t, res.Injected)
		require.NoError(t, c.Create(ctx, injected))
		injected.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
		require.NoError(t, c.Status().Update(ctx, injected))
		return injected
	}
	// write runs the engine side configured from the Pod's projected mooncake.json (vLLM
	// computes local_hostname itself; here it is loopback): it puts and reads back bytes under
	// key, then puts more values under key-1 .. key-more, reading each back when readMore.
	script, err := filepath.Abs(filepath.Join("testdata", "engine_client.py"))
	require.NoError(t, err)
	write := func(p *corev1.Pod, key string, bytes, more int, readMore bool) clientResult {
		t.Helper()
		var doc map[string]any
		dec := json.NewDecoder(strings.NewReader(p.Annotations[vocab.AnnotationClientConfig]))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&doc))
		doc["local_hostname"] = "127.0.0.1"
		cfg, err := json.Marshal(doc)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "mooncake.json")
		require.NoError(t, os.WriteFile(path, cfg, 0o644))
		env := []string{"MOONCAKE_CONFIG_PATH=" + path, "E2E_KEY=" + key, "E2E_PAYLOAD_BYTES=" + strconv.Itoa(bytes),
			"E2E_MORE=" + strconv.Itoa(more), "MC_STORE_CLIENT_SETUP_RETRIES=2", "PYTHONUNBUFFERED=1"}
		if readMore {
			env = append(env, "E2E_READ_MORE=1")
		}
		stdout, stderr, err := mooncaketest.Run(t, 40*time.Second, env, filepath.Join(bin, "python"), script)
		require.NoError(t, err, "engine client: stdout:\n%s\nstderr:\n%s", stdout, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		var cr clientResult
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &cr), "engine client output:\n%s", stdout)
		require.Equal(t, 0, cr.Setup)
		return cr
	}

	// ---- 1. A Pod that never writes (an image with no reader of the file, say). -------------
	silent := inject("silent-0")
	readyAt := silent.Status.Conditions[0].LastTransitionTime.Time // as stored: whole seconds
	eventually(t, c, bnd, settle, "CacheInUse False", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Status == metav1.ConditionFalse
	})
	reported := time.Since(readyAt)
	notInUse := condition(bnd.Status.Conditions, kvv1.ConditionCacheInUse)
	assert.Equal(t, "NoWrites", notInUse.Reason)
	assert.Equal(t, `no write under tenant team-a-chat reached the master of KVCacheBackend loopback while Pod silent-0 has been Ready for 4s or longer: the configuration is in place, yet the engine caches nothing. `+
		`Check that the image has the reader of the injected file: kubectl -n team-a exec silent-0 -- python3 -c "import vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker" (an ImportError means nothing reads it: the engine runs with no cache at all); `+
		`whether the engine ignores the injected tenant: it then writes under the tenant default, which this master refuses (TENANT_NOT_REGISTERED) unless a Binding registers the domain default; `+
		`that the engine's bundled Mooncake client is on the master's Mooncake line: a client and a master on different lines start healthy and then fail every write with RPC_FAIL (-900)`, notInUse.Message)
	assert.GreaterOrEqual(t, reported, cacheInUseWindow, "not before the window")
	requireEvent(t, c, "CacheNotWritten", "chat", notInUse.Message)

	// ---- 2. A Pod whose engine writes under the injected tenant. -----------------------------
	writer := inject("writer-0")
	cr := write(writer, "block-0", 256<<10, 0, false)
	assert.Equal(t, 0, cr.Put, "the put under the injected tenant succeeds")
	assert.Equal(t, domainName, cr.SetupArgs.TenantID)
	eventually(t, c, bnd, settle, "CacheInUse True", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Status == metav1.ConditionTrue
	})
	assert.Equal(t, "the master of KVCacheBackend loopback saw writes under tenant team-a-chat while Pods using it run", condition(bnd.Status.Conditions, kvv1.ConditionCacheInUse).Message)
	assert.Equal(t, metav1.ConditionFalse, condition(bnd.Status.Conditions, kvv1.ConditionEvictingOwnObjects).Status, "within the grant: nothing evicted")
	require.NotNil(t, bnd.Status.Evicted)
	assert.Zero(t, bnd.Status.Evicted.Value())

	// ---- 3. Writes past the 1 MiB grant: the domain's own objects are evicted. ---------------
	// block-0 and block-a are read back (leased for the master's default_kv_lease_ttl, 5m); the
	// values after them are not, so each write at the grant evicts an older one of those.
	cr = write(writer, "block-a", 256<<10, 4, false)
	assert.Equal(t, 0, cr.Put)
	assert.Equal(t, []int{0, 0, 0, 0}, cr.More, "going over the grant does not fail a write while there is an object to evict")
	storeEvicted := evictedBytes(t, admin, domainName)
	require.Greater(t, storeEvicted, int64(0), "the master evicted the tenant's own objects")
	l, err := admin.ledger()
	require.NoError(t, err)
	assert.LessOrEqual(t, l[domainName].ChargedBytes, int64(grant), "and holds no more than the grant")
	eventually(t, c, bnd, settle, "evicted bytes in status, EvictingOwnObjects True", func(b *kvv1.KVCachePoolBinding) bool {
		return b.Status.Evicted != nil && b.Status.Evicted.Value() > 0 &&
			condition(b.Status.Conditions, kvv1.ConditionEvictingOwnObjects).Status == metav1.ConditionTrue
	})
	assert.Equal(t, storeEvicted, bnd.Status.Evicted.Value(), "the master's counter (crossing zero is written at once)")
	evicting := condition(bnd.Status.Conditions, kvv1.ConditionEvictingOwnObjects)
	assert.Equal(t, "AtGrant", evicting.Reason)
	assert.Equal(t, "tenant team-a-chat is at its grant of 1Mi, so the store evicts the domain's own older objects to admit its new writes (status.evicted counts the bytes): going over the grant does not fail a write, and a ceiling is not a reservation. "+
		"Raise spec.quota.ceiling (up to the pool's total), or the capacity behind the pool (grants are cut in proportion while ceilings oversubscribe the store), or accept it", evicting.Message)
	requireEvent(t, c, "EvictingOwnObjects", "chat", evicting.Message)

	// ---- 4. The backend's client address changes (the same master, reached by another name).
	newAddr := "localhost:" + strconv.Itoa(rpcPort)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b := &kvv1.KVCacheBackend{}
		if err := c.Get(ctx, client.ObjectKey{Name: "loopback"}, b); err != nil {
			return err
		}
		b.Spec.Connection.External.Endpoints[0].Address = newAddr
		return c.Update(ctx, b)
	}))
	eventually(t, c, bnd, settle, "both Pods injected before the change counted as drifted", func(b *kvv1.KVCachePoolBinding) bool {
		return b.Status.Drift != nil && b.Status.Drift.Pods == 2
	})
	assert.Equal(t, []string{silent.Name, writer.Name}, bnd.Status.Drift.Names)
	current := condition(bnd.Status.Conditions, kvv1.ConditionInjectionCurrent)
	assert.Equal(t, metav1.ConditionFalse, current.Status)
	assert.Contains(t, current.Message, fmt.Sprintf(`silent-0 (annotation kvcache.gpustack.ai/client-config differs (master_server_address "%s", now "%s"))`, clientAddr, newAddr))
	assert.Contains(t, current.Message, "roll their workloads")
	// A Pod injected now is current and reaches the master at the new address.
	fresh := inject("fresh-0")
	assert.Contains(t, fresh.Annotations[vocab.AnnotationClientConfig], `"master_server_address":"`+newAddr+`"`)
	cr = write(fresh, "block-fresh", 4096, 0, false)
	assert.Equal(t, 0, cr.Put)
	time.Sleep(2 * pollInterval)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(bnd), bnd))
	assert.Equal(t, int32(2), bnd.Status.Drift.Pods, "the new Pod is not drifted")
	// ---- 5. Writes read back at once (a hot working set): once every object left is leased
	// there is nothing to evict, and the master refuses the write (-1700).
	cr = write(writer, "block-b", 256<<10, 2, true)
	assert.Contains(t, cr.More, -1700, "TENANT_QUOTA_EXCEEDED at the grant with every object leased")
	eventually(t, c, bnd, settle, "EvictingOwnObjects WritesRefused", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionEvictingOwnObjects).Reason == "WritesRefused"
	})
	refused := condition(bnd.Status.Conditions, kvv1.ConditionEvictingOwnObjects)
	assert.Equal(t, metav1.ConditionTrue, refused.Status)
	assert.Contains(t, refused.Message, "the store refuses some of its writes (TENANT_QUOTA_EXCEEDED, -1700)")
	requireEvent(t, c, "EvictingOwnObjects", "chat", refused.Message)

	assert.False(t, master.Exited() || member.Exited(), "the store ran throughout")
	t.Logf("CacheInUse False %s after the silent Pod became Ready (window %s); the master evicted %d bytes of tenant %s", reported.Round(time.Millisecond), cacheInUseWindow, storeEvicted, domainName)
}

// evictedBytes is the master's mooncake_tenant_evict_bytes_total for tenant, read directly.
func evictedBytes(t *testing.T, a adminAPI, tenant string) int64 {
	t.Helper()
	body, err := a.get("/metrics")
	require.NoError(t, err)
	prefix := `mooncake_tenant_evict_bytes_total{tenant_id="` + tenant + `"} `
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return int64(n)
		}
	}
	return 0
}

// requireEvent waits for an event of reason about the Binding name with the given note.
func requireEvent(t *testing.T, c client.Client, reason, name, note string) {
	t.Helper()
	require.Eventually(t, func() bool {
		l := &eventsv1.EventList{}
		require.NoError(t, c.List(context.Background(), l))
		for _, e := range l.Items {
			if e.Reason == reason && e.Regarding.Name == name && e.Note == note {
				return true
			}
		}
		return false
	}, settle, 100*time.Millisecond, "the %s event: %s", reason, note)
}
