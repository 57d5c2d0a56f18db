package binding

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/enginestats"
	"github.com/kvcache-operator/kvcache/store"
)

var now = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

func testBinding() *kvv1.KVCachePoolBinding {
	return &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "chat", Generation: 2},
		Spec: kvv1.KVCachePoolBindingSpec{PoolRef: kvv1.LocalReference{Name: "shared"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("4Gi")},
			Domain: kvv1.Domain{Name: "team-a-chat", BlockSize: 64, Dtype: "bfloat16"}}}
}

var self = types.NamespacedName{Namespace: "team-a", Name: "chat"}

// cond is a condition without its times, as a test compares it.
func cond(b *kvv1.KVCachePoolBinding, t string) metav1.Condition {
	c := meta.FindStatusCondition(b.Status.Conditions, t)
	if c == nil {
		return metav1.Condition{}
	}
	out := *c
	out.LastTransitionTime = metav1.Time{}
	return out
}

func want(t string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: 2}
}

func TestTheGrantIsWhatTheLedgerSays(t *testing.T) {
	entry := store.Tenant{ID: "team-a-chat", RequestedQuotaBytes: 4 << 30, EffectiveQuotaBytes: 3 << 30, ChargedBytes: 1 << 20}
	ledger := map[string]store.Tenant{"team-a-chat": entry}
	other := types.NamespacedName{Namespace: "team-b", Name: "first"}
	for _, tc := range []struct {
		name              string
		g                 grant
		granted, domain   metav1.Condition
		effective, usage  string
		phase             kvv1.Phase
		releasableRemoved bool
	}{
		{name: "no backend: nothing known",
			g:       grant{pool: "shared"},
			granted: want(kvv1.ConditionQuotaGranted, metav1.ConditionUnknown, kvv1.ReasonBackendNotFound, "the pool's backend does not exist"),
			domain:  want(kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, kvv1.ReasonBackendNotFound, "the pool's backend does not exist, so there is no master to hold the domain"),
			phase:   kvv1.PhasePending},
		{name: "no ledger by design: unenforced",
			g:       grant{pool: "shared", backend: "dram", holder: self, noLedger: true},
			granted: want(kvv1.ConditionQuotaGranted, metav1.ConditionTrue, kvv1.ReasonUnenforced, "KVCacheBackend dram keeps no tenant ledger: the ceiling is not enforced and writes land in the default tenant"),
			domain:  want(kvv1.ConditionDomainExclusive, metav1.ConditionTrue, kvv1.ReasonUnregistered, "domain team-a-chat is claimed by no other Binding on KVCacheBackend dram; the backend keeps no tenant ledger, so its master registers no domain"),
			phase:   kvv1.PhaseReady},
		{name: "an unreadable ledger claims nothing",
			g:       grant{pool: "shared", backend: "dram", holder: self},
			granted: want(kvv1.ConditionQuotaGranted, metav1.ConditionUnknown, kvv1.ReasonLedgerUnreachable, "the tenant ledger behind KVCachePool shared cannot be read; its QuotaLedgerAvailable condition says why"),
			domain:  want(kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, kvv1.ReasonLedgerUnreachable, "domain team-a-chat is claimed by no other Binding on KVCacheBackend dram; whether its master registered it is unknown until the ledger answers (KVCachePool shared's QuotaLedgerAvailable says why)"),
			phase:   kvv1.PhasePending},
		{name: "a domain another Binding claimed first",
			g:       grant{pool: "shared", backend: "dram", holder: other, ledger: ledger},
			granted: want(kvv1.ConditionQuotaGranted, metav1.ConditionFalse, kvv1.ReasonNoLedgerEntry, "the domain is held by another Binding"),
			domain:  want(kvv1.ConditionDomainExclusive, metav1.ConditionFalse, kvv1.ReasonDomainConflict, "domain team-a-chat on KVCacheBackend dram is claimed by KVCachePoolBinding team-b/first, which claimed it first; this Binding is left out of the ledger: delete it or use another domain"),
			phase:   kvv1.PhasePending},
		{name: "not registered yet",
			g:       grant{pool: "shared", backend: "dram", holder: self, ledger: map[string]store.Tenant{}},
			granted: want(kvv1.ConditionQuotaGranted, metav1.ConditionFalse, kvv1.ReasonNoLedgerEntry, "the master's ledger has no entry for tenant team-a-chat yet"),
			domain:  want(kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, kvv1.ReasonNotRegistered, "domain team-a-chat is claimed by no other Binding on KVCacheBackend dram; its master's ledger has no entry for it yet"),
			phase:   kvv1.PhasePending},
		{name: "granted: the store's figure, cut in proportion",
			g:         grant{pool: "shared", backend: "dram", holder: self, ledger: ledger},
			granted:   want(kvv1.ConditionQuotaGranted, metav1.ConditionTrue, kvv1.ReasonGranted, "the store grants 3Gi of the requested 4Gi"),
			domain:    want(kvv1.ConditionDomainExclusive, metav1.ConditionTrue, kvv1.ReasonRegistered, "domain team-a-chat is this Binding's on the master of KVCacheBackend dram"),
			effective: "3Gi", usage: "1Mi", phase: kvv1.PhaseReady},
		{name: "granted nothing",
			g:         grant{pool: "shared", backend: "dram", holder: self, ledger: map[string]store.Tenant{"team-a-chat": {ID: "team-a-chat", RequestedQuotaBytes: 4 << 30}}},
			granted:   want(kvv1.ConditionQuotaGranted, metav1.ConditionFalse, kvv1.ReasonZeroGranted, "the store grants tenant team-a-chat nothing (requested 4Gi): no member segment is mounted, or the ceilings oversubscribe the store"),
			domain:    want(kvv1.ConditionDomainExclusive, metav1.ConditionTrue, kvv1.ReasonRegistered, "domain team-a-chat is this Binding's on the master of KVCacheBackend dram"),
			effective: "0", usage: "0", phase: kvv1.PhasePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBinding()
			b.Status.Conditions = []metav1.Condition{{Type: kvv1.ConditionReleasable, Status: metav1.ConditionFalse, Reason: kvv1.ReasonLedgerUnreachable}}
			tc.g.now, tc.g.refresh = now, time.Minute
			setGrant(b, tc.g)
			setPhase(b)
			assert.Equal(t, tc.granted, cond(b, kvv1.ConditionQuotaGranted))
			assert.Equal(t, tc.domain, cond(b, kvv1.ConditionDomainExclusive))
			assert.Nil(t, meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionReleasable), "a live Binding is not releasing")
			if tc.effective == "" {
				assert.Nil(t, b.Status.EffectiveQuota)
				assert.Nil(t, b.Status.Usage)
			} else {
				require.NotNil(t, b.Status.EffectiveQuota)
				assert.Equal(t, tc.effective, b.Status.EffectiveQuota.String())
				assert.Equal(t, tc.usage, b.Status.Usage.String())
				assert.Equal(t, now, b.Status.UsageObservedTime.Time)
			}
			assert.Equal(t, tc.phase, b.Status.Phase)
		})
	}
}

func TestUsageMovingEveryPollIsWrittenAtMostEveryRefresh(t *testing.T) {
	b := testBinding()
	g := grant{pool: "shared", backend: "dram", holder: self, refresh: time.Minute}
	at := func(d time.Duration, charged int64) {
		g.now = now.Add(d)
		g.ledger = map[string]store.Tenant{"team-a-chat": {ID: "team-a-chat", RequestedQuotaBytes: 4 << 30, EffectiveQuotaBytes: 4 << 30, ChargedBytes: charged}}
		setGrant(b, g)
	}
	at(0, 0)
	at(time.Second, 64<<20)
	assert.Equal(t, "64Mi", b.Status.Usage.String(), "crossing zero is written at once")
	at(2*time.Second, 65<<20)
	assert.Equal(t, "64Mi", b.Status.Usage.String(), "kept until the refresh is due")
	assert.Equal(t, now.Add(time.Second), b.Status.UsageObservedTime.Time)
	at(time.Minute+time.Second, 70<<20)
	assert.Equal(t, "70Mi", b.Status.Usage.String())
}

func TestCacheInUseIsAnnouncedWhenItTurnsFalse(t *testing.T) {
	ready := operator.PodUse{Namespace: "team-a", Name: "chat-0", Engine: engines.VLLM, Ready: true, ReadySince: now.Add(-time.Hour), Created: now.Add(-time.Hour)}
	ready2 := ready
	ready2.Name = "chat-1"
	// Two engines asked a window's worth of prompt tokens and the store served none.
	neverHit := enginestats.Window{Window: 15 * time.Minute, From: now.Add(-15 * time.Minute), PromptTokens: 9000, Requests: 6, Pods: 2, Models: []string{"qwen"}}
	base := use{now: now, window: time.Minute, refresh: time.Minute, backend: "dram", held: true, observed: true, activity: operator.Activity{Since: now.Add(-2 * time.Hour)}}
	for _, tc := range []struct {
		name     string
		u        func(u use) use
		prev     *metav1.Condition
		status   metav1.ConditionStatus
		reason   string
		announce bool
		event    string
	}{
		{name: "no Pod: Unknown, never False", u: func(u use) use { return u }, status: metav1.ConditionUnknown, reason: kvv1.ReasonNoPods},
		{name: "Ready for the window with no write: False, announced",
			u:      func(u use) use { u.pods = []operator.PodUse{ready}; return u },
			status: metav1.ConditionFalse, reason: kvv1.ReasonNoWrites, announce: true},
		{name: "False again: not announced twice",
			u:      func(u use) use { u.pods = []operator.PodUse{ready}; return u },
			prev:   &metav1.Condition{Type: kvv1.ConditionCacheInUse, Status: metav1.ConditionFalse, Reason: kvv1.ReasonNoWrites},
			status: metav1.ConditionFalse, reason: kvv1.ReasonNoWrites},
		{name: "a write seen: True",
			u: func(u use) use {
				u.pods, u.activity.LastWrite = []operator.PodUse{ready}, now.Add(-time.Second)
				return u
			},
			status: metav1.ConditionTrue, reason: kvv1.ReasonWritesObserved},
		{name: "a domain held by another Binding: its writes are not this one's",
			u:      func(u use) use { u.pods, u.held = []operator.PodUse{ready}, false; return u },
			status: metav1.ConditionUnknown, reason: kvv1.ReasonNotObserved},
		{name: "written, and two engines asked a window's worth with none served from the store: False, announced as not read",
			u: func(u use) use {
				u.pods, u.activity.LastWrite = []operator.PodUse{ready, ready2}, now.Add(-time.Second)
				u.engines = neverHit
				return u
			},
			prev:   &metav1.Condition{Type: kvv1.ConditionCacheInUse, Status: metav1.ConditionTrue, Reason: kvv1.ReasonWritesObserved},
			status: metav1.ConditionFalse, reason: kvv1.ReasonNoStoreHits, announce: true, event: "CacheNotRead"},
		{name: "written and read back by the second engine: True",
			u: func(u use) use {
				u.pods, u.activity.LastWrite = []operator.PodUse{ready, ready2}, now.Add(-time.Second)
				u.engines = neverHit
				u.engines.StoreTokens = 1408
				return u
			},
			status: metav1.ConditionTrue, reason: kvv1.ReasonWritesObserved},
		{name: "one engine's repeats come from its own prefix cache: not judged",
			u: func(u use) use {
				u.pods, u.activity.LastWrite = []operator.PodUse{ready}, now.Add(-time.Second)
				u.engines = neverHit
				u.engines.Pods = 1
				return u
			},
			status: metav1.ConditionTrue, reason: kvv1.ReasonWritesObserved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBinding()
			if tc.prev != nil {
				b.Status.Conditions = []metav1.Condition{*tc.prev}
			}
			event, got := setCacheInUse(b, tc.u(base))
			c := cond(b, kvv1.ConditionCacheInUse)
			assert.Equal(t, tc.status, c.Status)
			assert.Equal(t, tc.reason, c.Reason)
			if tc.announce {
				assert.Equal(t, c.Message, got, "the event says what the condition says")
				if tc.event == "" {
					tc.event = "CacheNotWritten"
				}
				assert.Equal(t, tc.event, event)
			} else {
				assert.Empty(t, got)
			}
		})
	}
}

func TestAHeldTenantWithoutAMasterReadKeepsItsVerdict(t *testing.T) {
	b := testBinding()
	b.Status.Conditions = []metav1.Condition{{Type: kvv1.ConditionCacheInUse, Status: metav1.ConditionTrue, Reason: kvv1.ReasonWritesObserved, Message: "kept"}}
	pod := operator.PodUse{Namespace: "team-a", Name: "chat-0", Ready: true, ReadySince: now.Add(-time.Hour)}
	_, announce := setCacheInUse(b, use{now: now, window: time.Minute, backend: "dram", held: true, pods: []operator.PodUse{pod}})
	assert.Empty(t, announce)
	assert.Equal(t, "kept", cond(b, kvv1.ConditionCacheInUse).Message, "the figures were not read: nothing new is known")
}

func TestEvictionsAtTheGrantAreAnnouncedWhenTheyStartAndWhenWritesAreRefused(t *testing.T) {
	b := testBinding()
	b.Status.EffectiveQuota = resource.NewQuantity(256<<20, resource.BinarySI)
	u := use{now: now, window: time.Minute, held: true, observed: true, activity: operator.Activity{Since: now.Add(-time.Hour)}}

	assert.Empty(t, setEvicting(b, u))
	assert.Equal(t, want(kvv1.ConditionEvictingOwnObjects, metav1.ConditionFalse, kvv1.ReasonNotEvicting,
		"the store evicted none of tenant team-a-chat's objects and refused none of its writes within the last 1m0s: its writes fit its grant"), cond(b, kvv1.ConditionEvictingOwnObjects))

	u.activity.LastEviction = now.Add(-time.Second)
	got := setEvicting(b, u)
	assert.Equal(t, kvv1.ReasonAtGrant, cond(b, kvv1.ConditionEvictingOwnObjects).Reason)
	assert.Contains(t, got, "tenant team-a-chat is at its grant of 256Mi")
	assert.Equal(t, cond(b, kvv1.ConditionEvictingOwnObjects).Message, got)
	assert.Empty(t, setEvicting(b, u), "announced once while it lasts")

	u.activity.LastRejection = now
	assert.Contains(t, setEvicting(b, u), "refuses some of its writes (TENANT_QUOTA_EXCEEDED, -1700)", "worse: announced again")

	u.noLedger = true
	assert.Empty(t, setEvicting(b, u))
	assert.Nil(t, meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionEvictingOwnObjects), "a store without a ledger reports nothing per tenant")
}

func TestEvictedFollowsTheTenantsCounter(t *testing.T) {
	b := testBinding()
	u := use{now: now, refresh: time.Minute, held: true, observed: true, figure: store.TenantMetrics{EvictedBytes: 1 << 20}}
	setEvicted(b, u)
	assert.Equal(t, "1Mi", b.Status.Evicted.String())
	assert.Equal(t, now, b.Status.EvictedObservedTime.Time)

	setEvicted(b, use{now: now, held: true}) // not read: kept
	assert.Equal(t, "1Mi", b.Status.Evicted.String())

	setEvicted(b, use{now: now, held: false}) // no tenant of its own
	assert.Nil(t, b.Status.Evicted)
	assert.Nil(t, b.Status.EvictedObservedTime)
}

func TestDriftNamesTheStalePods(t *testing.T) {
	b := testBinding()
	setDrift(b, nil)
	assert.Nil(t, b.Status.Drift)
	assert.Equal(t, want(kvv1.ConditionInjectionCurrent, metav1.ConditionTrue, kvv1.ReasonCurrent, "every Pod injected through this Binding runs what injection writes now"), cond(b, kvv1.ConditionInjectionCurrent))

	var stale []staleFinding
	for i := range 12 {
		stale = append(stale, staleFinding{fmt.Sprintf("chat-%02d", i), "annotation x differs"})
	}
	setDrift(b, stale)
	require.NotNil(t, b.Status.Drift)
	assert.Equal(t, int32(12), b.Status.Drift.Pods)
	assert.Len(t, b.Status.Drift.Names, maxDriftNames)
	assert.Equal(t, want(kvv1.ConditionInjectionCurrent, metav1.ConditionFalse, kvv1.ReasonPodsDrifted,
		"12 Pod(s) run a configuration injection no longer writes for this Binding: chat-00 (annotation x differs); chat-01 (annotation x differs); chat-02 (annotation x differs); and 9 more. Injection runs only when a Pod is created: roll their workloads (kubectl -n team-a rollout restart deployment/<name>, or delete a bare Pod and create it again); status.drift names them and kvcache check lists each"),
		cond(b, kvv1.ConditionInjectionCurrent))
}

func TestABindingWhosePoolGoesIsGrantedNothing(t *testing.T) {
	filled := func() *kvv1.KVCachePoolBinding {
		b := testBinding()
		q := resource.MustParse("1Gi")
		b.Status.EffectiveQuota, b.Status.Usage, b.Status.Evicted = &q, &q, &q
		b.Status.Phase = kvv1.PhaseReady
		b.Status.Conditions = []metav1.Condition{{Type: kvv1.ConditionEvictingOwnObjects, Status: metav1.ConditionTrue, Reason: kvv1.ReasonAtGrant}}
		return b
	}
	for _, tc := range []struct {
		name   string
		set    func(b *kvv1.KVCachePoolBinding)
		reason string
		msg    string
	}{
		{"its pool is missing", setOrphanStatus, kvv1.ReasonPoolNotFound, "KVCachePool shared does not exist: nothing is granted through this Binding"},
		{"its pool is being deleted", func(b *kvv1.KVCachePoolBinding) { setPoolDeletingStatus(b, "shared") }, kvv1.ReasonPoolDeleting,
			"KVCachePool shared is being deleted: its tenants are released from the ledger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := filled()
			tc.set(b)
			assert.Equal(t, want(kvv1.ConditionQuotaGranted, metav1.ConditionFalse, tc.reason, tc.msg), cond(b, kvv1.ConditionQuotaGranted))
			assert.Equal(t, want(kvv1.ConditionDomainExclusive, metav1.ConditionUnknown, tc.reason, tc.msg), cond(b, kvv1.ConditionDomainExclusive))
			assert.Nil(t, meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionEvictingOwnObjects))
			assert.Nil(t, b.Status.EffectiveQuota)
			assert.Nil(t, b.Status.Usage)
			assert.Nil(t, b.Status.Evicted)
			assert.Equal(t, kvv1.PhasePending, b.Status.Phase)
		})
	}
	t.Run("a deleted Binding of a pool being deleted keeps what it said", func(t *testing.T) {
		b := filled()
		b.DeletionTimestamp = &metav1.Time{Time: now}
		before := b.Status.DeepCopy()
		setPoolDeletingStatus(b, "shared")
		assert.Equal(t, *before, b.Status)
	})
}

func TestAReleaseWaitingForTheLedgerSaysHowLong(t *testing.T) {
	b := testBinding()
	setReleasableLedgerUnreachable(b, "shared")
	assert.Equal(t, want(kvv1.ConditionReleasable, metav1.ConditionFalse, kvv1.ReasonLedgerUnreachable,
		"the tenant ledger behind KVCachePool shared cannot be read, so the tenant cannot be released yet (its QuotaLedgerAvailable condition says why); the Binding waits at most 10m0s for it"),
		cond(b, kvv1.ConditionReleasable))
}

func TestTheFiguresAreWhatWasObserved(t *testing.T) {
	b := testBinding()
	b.Status.Conditions = []metav1.Condition{{Type: kvv1.ConditionCacheInUse, Status: metav1.ConditionTrue, Reason: kvv1.ReasonWritesObserved}}
	b.Status.Drift = &kvv1.BindingDrift{Pods: 2}
	u := use{held: true, observed: true, figure: store.TenantMetrics{ChargedBytes: 1 << 20, EffectiveBytes: 4 << 30, EvictedBytes: 4096}}
	assert.Equal(t, operator.BindingFigures{Namespace: "team-a", Name: "chat", Pool: "shared", Domain: "team-a-chat",
		UsedBytes: ptr.To[int64](1 << 20), EffectiveBytes: ptr.To[int64](4 << 30), EvictedBytes: ptr.To[int64](4096), CacheInUse: ptr.To(true), DriftedPods: 2},
		figures(b, "shared", u))
	u.observed = false
	b.Status.Conditions[0].Status = metav1.ConditionUnknown
	assert.Equal(t, operator.BindingFigures{Namespace: "team-a", Name: "chat", Pool: "shared", Domain: "team-a-chat", DriftedPods: 2}, figures(b, "shared", u),
		"unread figures and an Unknown verdict are absent, not zero")
}

func TestStoreHitsAreTheEnginesOwnFiguresRateLimited(t *testing.T) {
	b := testBinding()
	u := use{now: now, refresh: 5 * time.Minute}
	setStoreHits(b, u)
	assert.Nil(t, b.Status.StoreHits, "no engine Pod read: no figure, not a zero")

	u.engines = enginestats.Window{Window: 15 * time.Minute, From: now.Add(-15 * time.Minute), PromptTokens: 1503, StoreTokens: 1408, Pods: 2}
	setStoreHits(b, u)
	require.NotNil(t, b.Status.StoreHits)
	assert.Equal(t, kvv1.StoreHits{
		Window: metav1.Duration{Duration: 15 * time.Minute}, Since: metav1.Time{Time: now.Add(-15 * time.Minute)},
		PromptTokens: 1503, StoreTokens: 1408, Ratio: "93.7%", Pods: 2, ObservedTime: metav1.Time{Time: now},
	}, *b.Status.StoreHits)

	u.now = now.Add(time.Minute)
	u.engines.PromptTokens, u.engines.StoreTokens = 3006, 2816
	setStoreHits(b, u)
	assert.Equal(t, int64(1503), b.Status.StoreHits.PromptTokens, "figures that keep moving are rewritten only when the refresh is due")

	u.engines.Unreadable, u.engines.Err = 1, errors.New("pod team-a/chat-2: connection refused")
	setStoreHits(b, u)
	assert.Equal(t, "1 of 3 Ready engine Pods could not be read: pod team-a/chat-2: connection refused", b.Status.StoreHits.Message, "a Pod that cannot be read is said at once")
	assert.Equal(t, int64(3006), b.Status.StoreHits.PromptTokens)
}
