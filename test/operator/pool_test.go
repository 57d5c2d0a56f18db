package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

func pool(name, backend, total string) *kvv1.KVCachePool {
	return &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.KVCachePoolSpec{
		Backends: []string{backend}, Quota: kvv1.PoolQuota{Total: resource.MustParse(total)}}}
}

func binding(ns, name, pool, domain, ceiling string) *kvv1.KVCachePoolBinding {
	return &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kvv1.KVCachePoolBindingSpec{
		PoolRef: kvv1.LocalReference{Name: pool}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse(ceiling)},
		Domain: kvv1.Domain{Name: domain, BlockSize: 64, Dtype: "bfloat16"}}}
}

func eventuallyBinding(t *testing.T, ns, name, what string, f func(b *kvv1.KVCachePoolBinding) bool) *kvv1.KVCachePoolBinding {
	t.Helper()
	b := &kvv1.KVCachePoolBinding{}
	poll(t, func() bool {
		return env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b) == nil && f(b)
	}, func() string { return fmt.Sprintf("binding %s/%s: %s; last status: %+v", ns, name, what, b.Status) })
	return b
}

func eventuallyPool(t *testing.T, name, what string, f func(p *kvv1.KVCachePool) bool) *kvv1.KVCachePool {
	t.Helper()
	p := &kvv1.KVCachePool{}
	poll(t, func() bool {
		return env.Client.Get(context.Background(), client.ObjectKey{Name: name}, p) == nil && f(p)
	}, func() string { return fmt.Sprintf("pool %s: %s; last status: %+v", name, what, p.Status) })
	return p
}

func hasPUT(reqs []string, tenant string) bool {
	for _, r := range reqs {
		if strings.HasPrefix(r, "PUT ") && strings.Contains(r, "tenant_id="+tenant) {
			return true
		}
	}
	return false
}

// Step 2: the pool resolves its backend and publishes its Client endpoint; each Binding gets
// the ledger finalizer, its tenant registered with its ceiling, and reports the grant the store
// computed. Deleting a Binding removes its tenant's objects and its entry, within seconds; the
// objects a reader leases stay until the lease ends and are removed then. Entries the operator
// did not register are never touched.
func TestLedgerConvergesFromBindings(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "ledger", storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"someone-else": 1 << 30}})
	fake.MountSegment("10.2.0.10:15400", 16<<30, "tcp")
	create(t, walkthroughBackend("ledger"))
	p := pool("ledger-pool", "ledger", "16Gi")
	create(t, p)
	bi := binding("team-a", "team-a", "ledger-pool", "team-a-chat", "8Gi")
	create(t, bi)

	gotPool := eventuallyPool(t, "ledger-pool", "Ready with the backend's endpoint", func(p *kvv1.KVCachePool) bool {
		return p.Status.Phase == kvv1.PhaseReady && p.Status.ClientEndpoint != ""
	})
	assert.Equal(t, "ledger-leader.gpustack-system.svc:50051", gotPool.Status.ClientEndpoint)
	assert.Equal(t, metav1.ConditionTrue, condition(gotPool.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Status)
	got := eventuallyBinding(t, "team-a", "team-a", "Granted", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
	})
	assert.Contains(t, got.Finalizers, kvv1.FinalizerBinding)
	assert.Equal(t, "8Gi", got.Status.EffectiveQuota.String(), "16Gi mounted, 9Gi requested in all: granted in full")
	assert.Equal(t, "the store grants 8Gi of the requested 8Gi", condition(got.Status.Conditions, kvv1.ConditionQuotaGranted).Message)
	assert.Equal(t, kvv1.PhaseReady, got.Status.Phase)
	assert.Equal(t, int64(8<<30), fake.PolicyFile()["team-a-chat"], "the tenant is registered with the ceiling")

	// Steady state: nothing is written again.
	fake.ResetRequests()
	time.Sleep(2 * time.Second)
	assert.False(t, hasPUT(fake.Requests(), "team-a-chat"), "an unchanged ceiling is not PUT again: %v", fake.Requests())

	// A raised ceiling is PUT.
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(bi), bi))
	bi.Spec.Quota.Ceiling = resource.MustParse("12Gi")
	require.NoError(t, env.Client.Update(ctx, bi))
	require.Eventually(t, func() bool { return fake.PolicyFile()["team-a-chat"] == 12<<30 }, wait, 100*time.Millisecond)

	// Oversubscription is a report, not a fault.
	second := binding("team-b", "team-b", "ledger-pool", "team-b-chat", "8Gi")
	create(t, second)
	gotPool = eventuallyPool(t, "ledger-pool", "Oversubscribed", func(p *kvv1.KVCachePool) bool {
		return condition(p.Status.Conditions, kvv1.ConditionQuotaWithinTotal).Reason == "Oversubscribed"
	})
	assert.Equal(t, "the Bindings' ceilings sum to 20Gi, more than the pool's total 16Gi; each Binding's QuotaGranted says what the store grants it",
		condition(gotPool.Status.Conditions, kvv1.ConditionQuotaWithinTotal).Message)
	assert.Equal(t, kvv1.PhaseReady, gotPool.Status.Phase)
	assert.Equal(t, []string{"team-a-chat", "team-b-chat"}, gotPool.Status.Domains)

	// Release: deleting a Binding removes its tenant's objects and then the tenant, within
	// seconds, whatever they hold; what a reader leases right now stays until the lease ends,
	// and the pool removes it then (status.releasing).
	fake.SetObjects("team-b-chat", 40, 40<<16)
	fake.LeaseObjects("team-b-chat", 3, 3<<16)
	t0 := time.Now()
	deleteAndWait(t, second)
	released := time.Since(t0)
	assert.Less(t, released, 10*time.Second, "the Binding goes within seconds")
	assert.Contains(t, strings.Join(eventNotes(t, "TenantReleased", "team-b"), "\n"),
		"removed 37 object(s) (2368Ki) of tenant team-b-chat from KVCacheBackend ledger; 192Ki that readers hold a lease on stay until the lease ends (default_kv_lease_ttl after their last read): KVCachePool ledger-pool removes them and the tenant then (status.releasing)")
	gotPool = eventuallyPool(t, "ledger-pool", "the leased rest releasing", func(p *kvv1.KVCachePool) bool { return len(p.Status.Releasing) == 1 })
	assert.Equal(t, "team-b-chat", gotPool.Status.Releasing[0].Tenant)
	assert.Equal(t, "team-b/team-b", gotPool.Status.Releasing[0].Binding)
	assert.Equal(t, int64(1), fake.PolicyFile()["team-b-chat"], "closed to writes meanwhile (a quota of one byte)")
	fake.LeaseObjects("team-b-chat", 0, 0) // the lease ends
	eventuallyPool(t, "ledger-pool", "released", func(p *kvv1.KVCachePool) bool { return len(p.Status.Releasing) == 0 })
	_, stillThere := fake.PolicyFile()["team-b-chat"]
	assert.False(t, stillThere, "the released tenant's entry is deleted")
	t.Logf("a Binding with 40 objects (3 leased) deleted in %s; its tenant gone once the lease ended", released.Round(10*time.Millisecond))
	assert.Equal(t, int64(1<<30), fake.PolicyFile()["someone-else"], "a foreign entry is never touched")
}

// A Binding deleted and created again under its own name while its tenant's last objects are
// still leased (kubectl delete, then apply: the soak's Binding churn) takes its tenant back: the
// release stops, the entry gets the new ceiling and keeps it, and the Binding is granted.
// Releasing on would hold the new Binding's tenant at a quota of one byte (ZeroGranted, every
// write refused) until the lease ended, and then remove what it wrote.
func TestABindingCreatedAgainTakesItsReleasingTenantBack(t *testing.T) {
	fake := fakeStore(t, "recreate", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.2.0.11:15400", 16<<30, "tcp")
	create(t, walkthroughBackend("recreate"))
	create(t, pool("recreate-pool", "recreate", "16Gi"))
	first := binding("team-b", "recreated", "recreate-pool", "team-r-chat", "2Gi")
	create(t, first)
	eventuallyBinding(t, "team-b", "recreated", "Granted", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
	})
	fake.SetObjects("team-r-chat", 10, 10<<16)
	fake.LeaseObjects("team-r-chat", 4, 4<<16)
	deleteAndWait(t, first)
	eventuallyPool(t, "recreate-pool", "the leased rest releasing", func(p *kvv1.KVCachePool) bool { return len(p.Status.Releasing) == 1 })
	require.Equal(t, int64(1), fake.PolicyFile()["team-r-chat"], "closed to writes while it releases")

	create(t, binding("team-b", "recreated", "recreate-pool", "team-r-chat", "2Gi"))
	got := eventuallyBinding(t, "team-b", "recreated", "Granted again", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
	})
	assert.Equal(t, "the store grants 2Gi of the requested 2Gi", condition(got.Status.Conditions, kvv1.ConditionQuotaGranted).Message)
	eventuallyPool(t, "recreate-pool", "no release pending", func(p *kvv1.KVCachePool) bool { return len(p.Status.Releasing) == 0 })
	// It stays so: nothing closes the tenant again or removes its objects.
	fake.ResetRequests()
	time.Sleep(3 * time.Second)
	assert.Equal(t, int64(2<<30), fake.PolicyFile()["team-r-chat"], "the entry keeps the new ceiling")
	for _, r := range fake.Requests() {
		assert.NotContains(t, r, "remove_all", "nothing of the tenant is removed: %v", fake.Requests())
	}
	assert.False(t, hasPUT(fake.Requests(), "team-r-chat"), "no write of the entry once it agrees: %v", fake.Requests())
	fake.LeaseObjects("team-r-chat", 0, 0) // the cleanup's release then goes at once
}

// A backend declared without multi-tenancy keeps no ledger: the pool says MultiTenancyDisabled,
// Bindings read Granted=True/Unenforced with no EFFECTIVE figure, nothing is written.
func TestNoLedgerIsUnenforced(t *testing.T) {
	fake := fakeStore(t, "no-ledger", storetest.FakeOptions{MultiTenancy: false})
	b := walkthroughBackend("no-ledger")
	b.Spec.Image = "kvcacheai/mooncake:0.3.11"
	b.Spec.Connection.Managed.Leader.MultiTenancy = ptr.To(false)
	create(t, b)
	create(t, pool("no-ledger-pool", "no-ledger", "8Gi"))
	create(t, binding("team-a", "legacy", "no-ledger-pool", "", "8Gi"))
	p := eventuallyPool(t, "no-ledger-pool", "MultiTenancyDisabled", func(p *kvv1.KVCachePool) bool {
		return condition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Reason == kvv1.ReasonMultiTenancyDisabled
	})
	assert.Equal(t, kvv1.PhaseReady, p.Status.Phase)
	got := eventuallyBinding(t, "team-a", "legacy", "Unenforced", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Unenforced"
	})
	assert.Equal(t, metav1.ConditionTrue, condition(got.Status.Conditions, kvv1.ConditionQuotaGranted).Status)
	assert.Nil(t, got.Status.EffectiveQuota)
	for _, r := range fake.Requests() {
		assert.NotContains(t, r, "tenant_quotas", "a store without a ledger is not asked for one")
	}
}

// The ledger unreachable: the pool says so, and injection (which reads the condition) refuses.
func TestUnreachableLedger(t *testing.T) {
	create(t, walkthroughBackend("unreachable")) // no fake: nothing listens
	create(t, pool("unreachable-pool", "unreachable", "8Gi"))
	p := eventuallyPool(t, "unreachable-pool", "LedgerUnreachable", func(p *kvv1.KVCachePool) bool {
		return condition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Reason == "LedgerUnreachable"
	})
	assert.Equal(t, kvv1.PhaseDegraded, p.Status.Phase)
}
