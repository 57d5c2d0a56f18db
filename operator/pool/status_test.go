package pool

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
)

func testPool(total string, backends ...string) *kvv1.KVCachePool {
	return &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Generation: 3},
		Spec: kvv1.KVCachePoolSpec{Backends: backends, Quota: kvv1.PoolQuota{Total: resource.MustParse(total)}}}
}

func testBackend(capacity string) *kvv1.KVCacheBackend {
	b := &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "dram"}}
	b.Status.Endpoints = []kvv1.Endpoint{{Name: kvv1.EndpointClient, Address: "dram-leader.gpustack-system.svc:50051"}, {Name: kvv1.EndpointAdmin, Address: "dram-leader.gpustack-system.svc:9003"}}
	if capacity != "" {
		b.Status.Capacity = &kvv1.Capacity{Total: resource.MustParse(capacity)}
	}
	return b
}

func testBinding(ns, name, domain, ceiling string) *kvv1.KVCachePoolBinding {
	return &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kvv1.KVCachePoolBindingSpec{PoolRef: kvv1.LocalReference{Name: "shared"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse(ceiling)},
			Domain: kvv1.Domain{Name: domain, BlockSize: 64, Dtype: "bfloat16"}}}
}

// cond is a condition without its times, as a test compares it.
func cond(p *kvv1.KVCachePool, t string) metav1.Condition {
	c := meta.FindStatusCondition(p.Status.Conditions, t)
	if c == nil {
		return metav1.Condition{}
	}
	out := *c
	out.LastTransitionTime = metav1.Time{}
	return out
}

func TestBackendResolvedNamesTheBackendAndPublishesItsClientEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pool     *kvv1.KVCachePool
		backend  *kvv1.KVCacheBackend
		want     metav1.Condition
		endpoint string
	}{
		{"a resolved backend gives its Client endpoint", testPool("8Gi", "dram"), testBackend(""),
			metav1.Condition{Status: metav1.ConditionTrue, Reason: kvv1.ReasonResolved, Message: "KVCacheBackend dram"}, "dram-leader.gpustack-system.svc:50051"},
		{"a missing backend is named", testPool("8Gi", "dram"), nil,
			metav1.Condition{Status: metav1.ConditionFalse, Reason: kvv1.ReasonBackendNotFound, Message: "KVCacheBackend dram does not exist"}, ""},
		{"a pool names exactly one backend", testPool("8Gi", "dram", "vram"), nil,
			metav1.Condition{Status: metav1.ConditionFalse, Reason: kvv1.ReasonInvalidSpec, Message: "a pool names exactly one backend"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setBackendResolved(tc.pool, tc.backend)
			tc.want.Type, tc.want.ObservedGeneration = kvv1.ConditionBackendResolved, 3
			assert.Equal(t, tc.want, cond(tc.pool, kvv1.ConditionBackendResolved))
			assert.Equal(t, tc.endpoint, tc.pool.Status.ClientEndpoint)
		})
	}
}

func TestQuotaLedgerAvailableSaysWhatTheMasterKeeps(t *testing.T) {
	refused := &store.Error{Op: "PUT /api/v1/tenant_quotas?tenant_id=team-a", HTTPStatus: 500, Code: store.CodePersistFail, Message: "PERSISTENT_FAIL"}
	for _, tc := range []struct {
		name string
		o    observed
		want metav1.Condition
	}{
		{"no backend: unknown", observed{},
			metav1.Condition{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonBackendNotFound, Message: "the pool's backend does not exist"}},
		{"a master without multi-tenancy keeps none", observed{backend: testBackend(""), noLedger: true},
			metav1.Condition{Status: metav1.ConditionFalse, Reason: kvv1.ReasonMultiTenancyDisabled, Message: "KVCacheBackend dram keeps no tenant ledger: ceilings are not enforced, and the master ignores the tenant engines are given: every write lands in its default tenant"}},
		{"an unreadable ledger says why", observed{backend: testBackend(""), ledgerErr: errors.New("boom")},
			metav1.Condition{Status: metav1.ConditionFalse, Reason: kvv1.ReasonLedgerUnreachable, Message: "the tenant ledger of KVCacheBackend dram cannot be read: the admin endpoint could not be read"}},
		{"a ledger read with a failed write of a Binding's entry", observed{backend: testBackend(""), ledger: map[string]store.Tenant{}, writeErr: refused},
			metav1.Condition{Status: metav1.ConditionTrue, Reason: kvv1.ReasonLedgerObserved, Message: "the master keeps a tenant ledger; the last write failed: the store refused PUT /api/v1/tenant_quotas?tenant_id=team-a: PERSISTENT_FAIL (-1503)"}},
		{"a ledger read", observed{backend: testBackend(""), ledger: map[string]store.Tenant{}},
			metav1.Condition{Status: metav1.ConditionTrue, Reason: kvv1.ReasonLedgerObserved, Message: "the master of KVCacheBackend dram keeps a tenant ledger"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool("8Gi", "dram")
			setLedgerAvailable(p, tc.o)
			tc.want.Type, tc.want.ObservedGeneration = kvv1.ConditionQuotaLedgerAvailable, 3
			assert.Equal(t, tc.want, cond(p, kvv1.ConditionQuotaLedgerAvailable))
		})
	}
}

func TestAnUnreachableLedgerKeepsItsFirstMessage(t *testing.T) {
	p := testPool("8Gi", "dram")
	setLedgerAvailable(p, observed{backend: testBackend(""), ledgerErr: errors.New("timeout")})
	first := cond(p, kvv1.ConditionQuotaLedgerAvailable).Message
	setLedgerAvailable(p, observed{backend: testBackend(""), ledgerErr: &store.Error{Op: "GET /api/v1/tenant_quotas", HTTPStatus: 502}})
	assert.Equal(t, first, cond(p, kvv1.ConditionQuotaLedgerAvailable).Message, "a cause that reads differently each poll writes no status")
}

func TestQuotaWithinTotalComparesTheLiveCeilings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ceilings []string
		want     metav1.Condition
	}{
		{"no Binding", nil, metav1.Condition{Status: metav1.ConditionTrue, Reason: kvv1.ReasonWithinTotal, Message: "the Bindings' ceilings sum to 0 of the pool's total 16Gi"}},
		{"ceilings that fit", []string{"8Gi", "8Gi"}, metav1.Condition{Status: metav1.ConditionTrue, Reason: kvv1.ReasonWithinTotal, Message: "the Bindings' ceilings sum to 16Gi of the pool's total 16Gi"}},
		{"oversubscription is a report", []string{"12Gi", "8Gi"}, metav1.Condition{Status: metav1.ConditionFalse, Reason: kvv1.ReasonOversubscribed,
			Message: "the Bindings' ceilings sum to 20Gi, more than the pool's total 16Gi; each Binding's QuotaGranted says what the store grants it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool("16Gi", "dram")
			var live []liveBinding
			for i, c := range tc.ceilings {
				live = append(live, liveBinding{b: testBinding("team-a", string(rune('a'+i)), "d", c)})
			}
			setQuotaWithinTotal(p, live)
			tc.want.Type, tc.want.ObservedGeneration = kvv1.ConditionQuotaWithinTotal, 3
			assert.Equal(t, tc.want, cond(p, kvv1.ConditionQuotaWithinTotal))
		})
	}
}

func TestCapacityAllocatableComparesTheTotalWithTheStore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend *kvv1.KVCacheBackend
		want    metav1.Condition
	}{
		{"no backend", nil, metav1.Condition{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonCapacityNotObserved, Message: "the backend has not reported its capacity"}},
		{"capacity not observed", testBackend(""), metav1.Condition{Status: metav1.ConditionUnknown, Reason: kvv1.ReasonCapacityNotObserved, Message: "the backend has not reported its capacity"}},
		{"short", testBackend("4Gi"), metav1.Condition{Status: metav1.ConditionFalse, Reason: kvv1.ReasonCapacityShort, Message: "KVCacheBackend dram reports 4Gi, less than the pool's total 8Gi"}},
		{"enough", testBackend("16Gi"), metav1.Condition{Status: metav1.ConditionTrue, Reason: kvv1.ReasonAllocatable, Message: "KVCacheBackend dram reports 16Gi for the pool's total 8Gi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool("8Gi", "dram")
			setCapacityAllocatable(p, tc.backend)
			tc.want.Type, tc.want.ObservedGeneration = kvv1.ConditionCapacityAllocatable, 3
			assert.Equal(t, tc.want, cond(p, kvv1.ConditionCapacityAllocatable))
		})
	}
}

func TestUsageCountsTheDomainsTheLiveBindingsHold(t *testing.T) {
	now := time.Unix(10000, 0)
	a, b, c := testBinding("team-a", "chat", "team-a-chat", "4Gi"), testBinding("team-b", "chat", "team-b-chat", "4Gi"), testBinding("team-c", "copy", "team-a-chat", "4Gi")
	ledger := map[string]store.Tenant{"team-a-chat": {ID: "team-a-chat", ChargedBytes: 1 << 20}, "team-b-chat": {ID: "team-b-chat", ChargedBytes: 2 << 20}}
	live := []liveBinding{{b: a, holds: true}, {b: b, holds: true}, {b: c}}

	p := testPool("16Gi", "dram")
	setUse(p, observed{ledger: ledger, live: live, now: now, refresh: time.Minute})
	assert.Equal(t, []string{"team-a-chat", "team-a-chat", "team-b-chat"}, p.Status.Domains)
	assert.Equal(t, []kvv1.ObjectReference{{Kind: "KVCachePoolBinding", Namespace: "team-a", Name: "chat"}, {Kind: "KVCachePoolBinding", Namespace: "team-b", Name: "chat"},
		{Kind: "KVCachePoolBinding", Namespace: "team-c", Name: "copy"}}, p.Status.UsedBy)
	assert.Equal(t, "3Mi", p.Status.Usage.Total.String(), "the domain a Binding does not hold is not counted twice")
	assert.Equal(t, now, p.Status.Usage.ObservedTime.Time)

	// It moves: written at most every refresh.
	ledger["team-a-chat"] = store.Tenant{ID: "team-a-chat", ChargedBytes: 5 << 20}
	setUse(p, observed{ledger: ledger, live: live, now: now.Add(time.Second), refresh: time.Minute})
	assert.Equal(t, "3Mi", p.Status.Usage.Total.String())
	setUse(p, observed{ledger: ledger, live: live, now: now.Add(time.Minute), refresh: time.Minute})
	assert.Equal(t, "7Mi", p.Status.Usage.Total.String())

	setUse(p, observed{live: live, now: now.Add(2 * time.Minute), refresh: time.Minute})
	assert.Nil(t, p.Status.Usage.Total, "absent, not zero, while the ledger is unread")
}

func TestPhaseFollowsTheBackendAndTheLedger(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    observed
		want kvv1.Phase
	}{
		{"no backend", observed{}, kvv1.PhasePending},
		{"a ledger read", observed{backend: testBackend(""), ledger: map[string]store.Tenant{}}, kvv1.PhaseReady},
		{"no ledger by design", observed{backend: testBackend(""), noLedger: true}, kvv1.PhaseReady},
		{"an unreadable ledger", observed{backend: testBackend(""), ledgerErr: errors.New("x")}, kvv1.PhaseDegraded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool("8Gi", "dram")
			setBackendResolved(p, tc.o.backend)
			setStatus(p, tc.o)
			assert.Equal(t, tc.want, p.Status.Phase)
		})
	}
}

func TestADeletingPoolSaysWhatItWaitsFor(t *testing.T) {
	p := testPool("8Gi", "dram")
	p.Status.Usage.Total = resource.NewQuantity(1<<20, resource.BinarySI)
	setDeletingStatus(p, "")
	assert.Equal(t, kvv1.PhaseDeleting, p.Status.Phase)
	assert.Equal(t, metav1.Condition{Type: kvv1.ConditionQuotaLedgerAvailable, Status: metav1.ConditionFalse, Reason: kvv1.ReasonPoolDeleting, ObservedGeneration: 3,
		Message: "the pool is being deleted; its tenants are released from the ledger and new Pods may not attach"}, cond(p, kvv1.ConditionQuotaLedgerAvailable))
	assert.Nil(t, p.Status.Usage.Total)
	setDeletingStatus(p, "tenant(s) team-a-chat: leased")
	assert.Equal(t, "the pool is being deleted and waits: tenant(s) team-a-chat: leased", cond(p, kvv1.ConditionQuotaLedgerAvailable).Message)
}

func TestAHandedOverTenantIsRecordedOnce(t *testing.T) {
	s := &state{pool: testPool("8Gi", "dram")}
	since := time.Date(2026, 12, 4, 10, 0, 0, 700_000_000, time.UTC)
	s.releasing("team-b-chat", testBinding("team-b", "chat", "team-b-chat", "4Gi"), since)
	s.releasing("team-a-chat", testBinding("team-a", "chat", "team-a-chat", "4Gi"), since)
	s.releasing("team-b-chat", testBinding("team-b", "again", "team-b-chat", "4Gi"), since.Add(time.Minute))
	assert.Equal(t, []kvv1.ReleasingTenant{
		{Tenant: "team-a-chat", Binding: "team-a/chat", Since: metav1.Time{Time: since.Truncate(time.Second)}},
		{Tenant: "team-b-chat", Binding: "team-b/chat", Since: metav1.Time{Time: since.Truncate(time.Second)}},
	}, s.pool.Status.Releasing, "by tenant, once each, to the second")
}
