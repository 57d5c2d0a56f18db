package operator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func readyPod(name string, e engines.Engine, since time.Time) PodUse {
	return PodUse{Namespace: "team-a", Name: name, Engine: e, Ready: true, ReadySince: since}
}

func TestCacheUse(t *testing.T) {
	const window = 5 * time.Minute
	base := func() CacheUseInput {
		return CacheUseInput{
			Now: t0.Add(10 * time.Minute), Window: window, Tenant: "team-a-chat", Backend: "mooncake-dram",
			StoreImage: "gpustack/mirrored-mooncake:0.3.13.post1-cpu",
			Pods:       []PodUse{readyPod("vllm-0", engines.VLLM, t0)}, Observed: true,
			Activity: Activity{Since: t0.Add(-time.Hour)},
		}
	}
	trueCond := func(at time.Time) *metav1.Condition {
		return &metav1.Condition{Status: metav1.ConditionTrue, Reason: kvv1.ReasonWritesObserved, LastTransitionTime: metav1.Time{Time: at}}
	}
	cases := []struct {
		name    string
		edit    func(*CacheUseInput)
		status  metav1.ConditionStatus
		reason  string
		keep    bool
		message string
		recheck time.Duration
	}{
		{name: "no Pod uses the tenant: Unknown, never False", edit: func(in *CacheUseInput) { in.Pods = nil },
			status: metav1.ConditionUnknown, reason: kvv1.ReasonNoPods,
			message: "no Pod uses this tenant: none carries an injection record naming the Binding, and no ModelDeployment attached through it has Pods"},
		{name: "Pods none of which is Ready: Unknown", edit: func(in *CacheUseInput) {
			in.Pods = []PodUse{{Name: "vllm-1"}, {Name: "vllm-0"}}
		}, status: metav1.ConditionUnknown, reason: kvv1.ReasonNoPodReady,
			message: "Pods vllm-0, vllm-1 use tenant team-a-chat and none is Ready yet, so nothing can write"},
		{name: "a store without a ledger cannot show writes: Unknown", edit: func(in *CacheUseInput) { in.NoLedger = true },
			status: metav1.ConditionUnknown, reason: kvv1.ReasonNoTenantFigures,
			message: "KVCacheBackend mooncake-dram keeps no tenant ledger, so its master reports no writes per tenant: whether Pod vllm-0 writes cannot be observed"},
		{name: "a write after the Pods became Ready: True", edit: func(in *CacheUseInput) { in.Activity.LastWrite = t0.Add(time.Minute) },
			status: metav1.ConditionTrue, reason: kvv1.ReasonWritesObserved,
			message: "the master of KVCacheBackend mooncake-dram saw writes under tenant team-a-chat while Pods using it run"},
		{name: "a write from before the Pods were created does not count", edit: func(in *CacheUseInput) { in.Activity.LastWrite = t0.Add(-time.Minute) },
			status: metav1.ConditionFalse, reason: kvv1.ReasonNoWrites},
		{name: "a write while the Pod warms up, before it is Ready, counts", edit: func(in *CacheUseInput) {
			in.Pods[0].Created = t0.Add(-2 * time.Minute)
			in.Activity.LastWrite = t0.Add(-time.Minute)
		}, status: metav1.ConditionTrue, reason: kvv1.ReasonWritesObserved,
			message: "the master of KVCacheBackend mooncake-dram saw writes under tenant team-a-chat while Pods using it run"},
		{name: "Ready for the window with no write: False, naming the Pod and the vLLM reader check", edit: func(in *CacheUseInput) {},
			status: metav1.ConditionFalse, reason: kvv1.ReasonNoWrites,
			message: `no write under tenant team-a-chat reached the master of KVCacheBackend mooncake-dram while Pod vllm-0 has been Ready for 5m0s or longer: the configuration is in place, yet the engine caches nothing. Check that the image has the reader of the injected file: kubectl -n team-a exec vllm-0 -- python3 -c "import vllm.distributed.mooncake_store" (the reader's module by release: vllm.distributed.mooncake_store (0.31.0 to 0.33.0); vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker (0.29.0 to 0.30.0)) (an ImportError means nothing reads it: the engine runs with no cache at all); whether the engine ignores the injected tenant: it then writes under the tenant default, which this master refuses (TENANT_NOT_REGISTERED) unless a Binding registers the domain default; that the engine's bundled Mooncake client is on the master's line (Mooncake 0.3.13, image gpustack/mirrored-mooncake:0.3.13.post1-cpu): a client on another line starts healthy and then fails every write with RPC_FAIL (-900)`},
		{name: "writes under the tenant default are named as such", edit: func(in *CacheUseInput) {
			in.DefaultWrites = true
			in.Pods = []PodUse{readyPod("ascend-0", engines.VLLMAscend, t0)}
		}, status: metav1.ConditionFalse, reason: kvv1.ReasonNoWrites,
			message: "no write under tenant team-a-chat reached the master of KVCacheBackend mooncake-dram while Pod ascend-0 has been Ready for 5m0s or longer: the configuration is in place, yet the engine caches nothing. Check vLLM-Ascend's Mooncake backend never passes the tenant to the store: its writes go to the tenant default, which needs a KVCachePoolBinding whose domain is default; the master holds writes under the tenant default instead: an engine that ignores the injected tenant (team-a-chat) writes there; that the engine's bundled Mooncake client is on the master's line (Mooncake 0.3.13, image gpustack/mirrored-mooncake:0.3.13.post1-cpu): a client on another line starts healthy and then fails every write with RPC_FAIL (-900)"},
		{name: "an engine release on another Mooncake line is named", edit: func(in *CacheUseInput) {
			p := readyPod("sglang-0", engines.SGLang, t0)
			p.EngineVersion = "0.5.18"
			in.Pods = []PodUse{p}
			in.Tenant = "default"
		}, status: metav1.ConditionFalse, reason: kvv1.ReasonNoWrites,
			message: `no write under tenant default reached the master of KVCacheBackend mooncake-dram while Pod sglang-0 has been Ready for 5m0s or longer: the configuration is in place, yet the engine caches nothing. Check that the image has SGLang's Mooncake store: kubectl -n team-a exec sglang-0 -- python3 -c "import sglang.srt.mem_cache.storage.mooncake_store.mooncake_store"; SGLang 0.5.18 bundles the Mooncake client 0.3.12.post1, and the master of KVCacheBackend mooncake-dram runs gpustack/mirrored-mooncake:0.3.13.post1-cpu (Mooncake 0.3.13): a client and a master on different lines start healthy and then fail every write with RPC_FAIL (-900); use an engine release on the store's line, or a store image of Mooncake 0.3.12`},
		{name: "many Pods are named up to a bound, then counted", edit: func(in *CacheUseInput) {
			in.Pods = nil
			for _, n := range []string{"p7", "p1", "p2", "p3", "p4", "p5", "p6"} {
				in.Pods = append(in.Pods, PodUse{Name: n})
			}
		}, status: metav1.ConditionUnknown, reason: kvv1.ReasonNoPodReady,
			message: "7 Pods (p1, p2, p3, p4, p5 and 2 more) use tenant team-a-chat and none is Ready yet, so nothing can write"},
		{name: "Pods Ready for less than the window: Unknown, rechecked when it ends", edit: func(in *CacheUseInput) {
			in.Pods = []PodUse{readyPod("vllm-0", engines.VLLM, in.Now.Add(-2*time.Minute))}
		}, status: metav1.ConditionUnknown, reason: kvv1.ReasonAwaitingWrites, recheck: 3 * time.Minute,
			message: "no write under tenant team-a-chat seen yet; Pod vllm-0 has been Ready and watched since 2026-12-01T10:08:00Z: without a write within 5m0s of that this turns False"},
		{name: "the window runs from when the manager started watching, not before", edit: func(in *CacheUseInput) {
			in.Activity.Since = in.Now.Add(-time.Minute)
		}, status: metav1.ConditionUnknown, reason: kvv1.ReasonAwaitingWrites, recheck: 4 * time.Minute},
		{name: "a verdict stands while the window of new Pods runs", edit: func(in *CacheUseInput) {
			in.Pods = []PodUse{readyPod("vllm-9", engines.VLLM, in.Now.Add(-time.Minute))}
			in.Prev = trueCond(t0)
		}, keep: true, recheck: 4 * time.Minute},
		{name: "an Unknown about the Pods is not kept once they are Ready", edit: func(in *CacheUseInput) {
			in.Pods = []PodUse{readyPod("vllm-9", engines.VLLM, in.Now.Add(-time.Minute))}
			in.Prev = &metav1.Condition{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonNoPods}
		}, status: metav1.ConditionUnknown, reason: kvv1.ReasonAwaitingWrites, recheck: 4 * time.Minute},
		{name: "a True condition is evidence of a write at its transition (a restarted manager's first read is a baseline)", edit: func(in *CacheUseInput) {
			in.Activity = Activity{Since: in.Now}
			in.Prev = trueCond(t0.Add(time.Minute))
		}, status: metav1.ConditionTrue, reason: kvv1.ReasonWritesObserved},
		{name: "a store not read this time keeps the verdict", edit: func(in *CacheUseInput) {
			in.Observed = false
			in.Prev = &metav1.Condition{Status: metav1.ConditionFalse, Reason: kvv1.ReasonNoWrites}
		}, keep: true},
		{name: "a store never read: Unknown", edit: func(in *CacheUseInput) { in.Observed = false },
			status: metav1.ConditionUnknown, reason: kvv1.ReasonNotObserved,
			message: "the master of KVCacheBackend mooncake-dram has not been read yet, so writes under tenant team-a-chat are not known"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := base()
			c.edit(&in)
			v := CacheUse(in)
			assert.Equal(t, c.keep, v.Keep, "keep")
			assert.Equal(t, c.recheck, v.RecheckAfter, "recheck")
			if c.keep {
				return
			}
			assert.Equal(t, c.status, v.Status)
			assert.Equal(t, c.reason, v.Reason)
			if c.message != "" {
				assert.Equal(t, c.message, v.Message)
			}
		})
	}
}

func TestCacheUseMessageDoesNotMoveWithTheFigures(t *testing.T) {
	in := CacheUseInput{Now: t0.Add(time.Hour), Window: time.Minute, Tenant: "t", Backend: "b", Observed: true,
		Pods: []PodUse{readyPod("p", engines.VLLM, t0)}, Activity: Activity{Since: t0, LastWrite: t0.Add(30 * time.Minute), Figures: TenantFigures{Charged: 1}}}
	first := CacheUse(in)
	in.Activity.Figures, in.Activity.LastWrite, in.Now = TenantFigures{Charged: 99, Evicted: 7}, t0.Add(59*time.Minute), t0.Add(61*time.Minute)
	assert.Equal(t, first, CacheUse(in), "a tenant written every poll keeps one condition")
}

func TestEviction(t *testing.T) {
	hold := 5 * time.Minute
	grant := resource.MustParse("128Mi")
	cases := []struct {
		name    string
		in      EvictionInput
		ok      bool
		keep    bool
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{name: "an eviction within the hold: True, saying a ceiling is not a reservation and what to do",
			in: EvictionInput{Now: t0, Hold: hold, Tenant: "team-a-chat", Grant: &grant, Observed: true, Activity: Activity{LastEviction: t0.Add(-time.Minute)}},
			ok: true, status: metav1.ConditionTrue, reason: kvv1.ReasonAtGrant,
			message: "tenant team-a-chat is at its grant of 128Mi, so the store evicts the domain's own older objects to admit its new writes (status.evicted counts the bytes): going over the grant does not fail a write, and a ceiling is not a reservation. Raise spec.quota.ceiling (up to the pool's total), or the capacity behind the pool (grants are cut in proportion while ceilings oversubscribe the store), or accept it"},
		{name: "a write refused for the quota within the hold: True, WritesRefused, saying why",
			in: EvictionInput{Now: t0, Hold: hold, Tenant: "team-a-chat", Grant: &grant, Observed: true,
				Activity: Activity{LastEviction: t0.Add(-2 * time.Minute), LastRejection: t0.Add(-time.Minute)}},
			ok: true, status: metav1.ConditionTrue, reason: kvv1.ReasonWritesRefused,
			message: "tenant team-a-chat is at its grant of 128Mi and the store refuses some of its writes (TENANT_QUOTA_EXCEEDED, -1700): at the grant it evicts only the domain's objects nobody read within the master's default_kv_lease_ttl, and a value larger than the grant never fits; a ceiling is not a reservation. Raise spec.quota.ceiling (up to the pool's total), or the capacity behind the pool (grants are cut in proportion while ceilings oversubscribe the store), or accept it"},
		{name: "the last eviction longer ago than the hold: False",
			in: EvictionInput{Now: t0, Hold: hold, Tenant: "team-a-chat", Observed: true, Activity: Activity{LastEviction: t0.Add(-hold)}},
			ok: true, status: metav1.ConditionFalse,
			message: "the store evicted none of tenant team-a-chat's objects and refused none of its writes within the last 5m0s: its writes fit its grant"},
		{name: "never evicted: False", in: EvictionInput{Now: t0, Hold: hold, Tenant: "x", Observed: true}, ok: true, status: metav1.ConditionFalse},
		{name: "not read: keep", in: EvictionInput{Now: t0, Hold: hold, Tenant: "x"}, keep: true},
		{name: "True, and watched for less than the hold (a restarted manager): keep",
			in: EvictionInput{Now: t0, Hold: hold, Tenant: "x", Observed: true, Activity: Activity{Since: t0.Add(-time.Minute)},
				Prev: &metav1.Condition{Status: metav1.ConditionTrue, Reason: kvv1.ReasonAtGrant}}, keep: true},
		{name: "True, and watched for the hold with no eviction: False",
			in: EvictionInput{Now: t0, Hold: hold, Tenant: "x", Observed: true, Activity: Activity{Since: t0.Add(-hold)},
				Prev: &metav1.Condition{Status: metav1.ConditionTrue, Reason: kvv1.ReasonAtGrant}}, ok: true, status: metav1.ConditionFalse},
		{name: "no ledger: no condition", in: EvictionInput{Now: t0, Hold: hold, Tenant: "x", NoLedger: true, Observed: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, ok := Eviction(c.in)
			assert.Equal(t, c.ok, ok)
			assert.Equal(t, c.keep, v.Keep)
			if ok {
				assert.Equal(t, c.status, v.Status)
				if c.reason != "" {
					assert.Equal(t, c.reason, v.Reason)
				}
				if c.message != "" {
					assert.Equal(t, c.message, v.Message)
				}
			}
		})
	}
}

func TestTenantActivity(t *testing.T) {
	a := &TenantActivity{}
	obs := func(at time.Duration, f TenantFigures) Activity { return a.Observe("uid-1", "team-a", f, t0.Add(at)) }
	first := obs(0, TenantFigures{Charged: 10, Evicted: 5})
	assert.Equal(t, Activity{Since: t0, Figures: TenantFigures{Charged: 10, Evicted: 5}}, first, "the first read is a baseline: writes before it are not known")
	assert.True(t, obs(time.Second, TenantFigures{Charged: 10, Evicted: 5}).LastWrite.IsZero(), "nothing moved")
	got := obs(2*time.Second, TenantFigures{Charged: 20, Evicted: 5})
	assert.Equal(t, t0.Add(2*time.Second), got.LastWrite, "the charge rose: a write")
	assert.True(t, got.LastEviction.IsZero())
	got = obs(3*time.Second, TenantFigures{Charged: 20, Evicted: 9})
	assert.Equal(t, t0.Add(3*time.Second), got.LastWrite, "at the grant a write evicts: the charge stays")
	assert.Equal(t, t0.Add(3*time.Second), got.LastEviction)
	got = obs(4*time.Second, TenantFigures{Charged: 5, Evicted: 9})
	assert.Equal(t, t0.Add(3*time.Second), got.LastWrite, "a removal lowers the charge: not a write")
	got = obs(5*time.Second, TenantFigures{Charged: 5, Evicted: 9, Rejected: 1})
	assert.Equal(t, t0.Add(5*time.Second), got.LastWrite, "a put refused for the quota was a write attempt")
	assert.Equal(t, t0.Add(5*time.Second), got.LastRejection)
	got = obs(6*time.Second, TenantFigures{Charged: 3})
	assert.Equal(t, t0.Add(6*time.Second), got.LastWrite, "counters that started over: a new master, and what it holds was written since")
	assert.Equal(t, t0, got.Since)
	_, ok := a.Get("uid-2", "team-a")
	assert.False(t, ok, "per master")
	a.Forget("uid-1", "team-a")
	_, ok = a.Get("uid-1", "team-a")
	assert.False(t, ok)
}
