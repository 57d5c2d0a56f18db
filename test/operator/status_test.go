package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/operator/backend"
	bindingctrl "github.com/kvcache-operator/kvcache/operator/binding"
	poolctrl "github.com/kvcache-operator/kvcache/operator/pool"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// statusVersions are the resourceVersions of the objects whose status carries usage.
func statusVersions(t *testing.T, objs ...client.Object) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range objs {
		c := o.DeepCopyObject().(client.Object)
		require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(o), c))
		out[c.GetNamespace()+"/"+c.GetName()] = c.GetResourceVersion()
	}
	return out
}

// Under real traffic usage changes on every poll. It is written at once when it appears or
// crosses zero (CacheAttached acts on whether anything is cached), otherwise at most every
// refresh interval: while engines write, steady state still changes no object. Measured as
// resourceVersions (the manager's own reconciles included) and as the writes of reconcilers
// run directly.
func TestUsageUnderTrafficIsRateLimited(t *testing.T) {
	fake := fakeStore(t, "traffic", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.9.4.10:15400", 8<<30, "tcp")
	create(t, walkthroughBackend("traffic"))
	rollOutLeader(t, "traffic")
	memberPod(t, "traffic", 0, 0, "10.9.4.10")
	p := pool("traffic-pool", "traffic", "8Gi")
	create(t, p)
	bi := binding("team-a", "traffic", "traffic-pool", "traffic", "4Gi")
	create(t, bi)
	eventuallyBinding(t, "team-a", "traffic", "Granted with no usage", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted" && b.Status.Usage != nil && b.Status.Usage.IsZero()
	})
	t.Cleanup(func() { fake.SetCharged("traffic", 0) }) // so the Binding can be released

	// An engine writes: the first bytes are written at once.
	fake.SetCharged("traffic", 64<<20)
	got := eventuallyBinding(t, "team-a", "traffic", "usage 64Mi", func(b *kvv1.KVCachePoolBinding) bool {
		return b.Status.Usage != nil && b.Status.Usage.String() == "64Mi"
	})
	assert.NotNil(t, got.Status.UsageObservedTime, "the time the figure was read")
	gotPool := eventuallyPool(t, "traffic-pool", "usage 64Mi", func(p *kvv1.KVCachePool) bool {
		return p.Status.Usage.Total != nil && p.Status.Usage.Total.String() == "64Mi"
	})
	assert.NotNil(t, gotPool.Status.Usage.ObservedTime)
	eventuallyBackend(t, "traffic", "used 64Mi", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Capacity != nil && b.Status.Capacity.Used != nil && b.Status.Capacity.Used.String() == "64Mi"
	})

	// It keeps moving, every poll: nothing is written (the refresh interval is 5 minutes).
	b := &kvv1.KVCacheBackend{}
	b.Name = "traffic"
	objs := []client.Object{b, p, bi}
	before := statusVersions(t, objs...)
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	counting := &countingClient{Client: env.Client}
	admin := func(*kvv1.KVCacheBackend) store.Admin { return store.New(fake.URL()) }
	rec := events.NewFakeRecorder(100)
	br := &backend.Reconciler{Client: counting, Renderer: r, SystemNamespace: systemNamespace, Admin: admin, Recorder: rec, PollInterval: time.Second, UsageRefresh: time.Hour}
	view := freshView()
	pr := &poolctrl.Reconciler{Client: counting, Admin: admin, View: view, Recorder: rec, PollInterval: time.Second, UsageRefresh: time.Hour}
	bdr := &bindingctrl.Reconciler{Client: counting, Admin: admin, View: view, Recorder: rec, PollInterval: time.Second, UsageRefresh: time.Hour, CacheInUseWindow: cacheInUseWindow}
	ctx := context.Background()
	reconcile := func() {
		_, err := br.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "traffic"}})
		require.NoError(t, err)
		_, err = pr.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "traffic-pool"}})
		require.NoError(t, err)
		_, err = bdr.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(bi)})
		require.NoError(t, err)
	}
	for i := 1; i <= 6; i++ {
		fake.SetCharged("traffic", int64(64+i)<<20)
		reconcile()
		time.Sleep(600 * time.Millisecond) // more than the manager's poll
	}
	writes, after := counting.Writes(), statusVersions(t, objs...)
	moved := 0
	for k, v := range after {
		if before[k] != v {
			moved++
		}
	}
	t.Logf("usage moving on 6 polls: %d writes by the direct reconcilers, %d of %d objects' resourceVersions moved", len(writes), moved, len(objs))
	assert.Empty(t, writes, "writes while usage moves; events: %v", drain(rec))
	assert.Equal(t, before, after, "resourceVersions while usage moves on every poll")
	got = get(t, bi.DeepCopy())
	assert.Equal(t, "64Mi", got.Status.Usage.String(), "the figure first read stays until the refresh is due")

	// Once the refresh is due the latest figure is written, with the time it was read.
	br.UsageRefresh, pr.UsageRefresh, bdr.UsageRefresh = time.Millisecond, time.Millisecond, time.Millisecond
	reconcile()
	assert.ElementsMatch(t, []string{
		"patch status *v1.KVCacheBackend /traffic",
		"patch status *v1.KVCachePool /traffic-pool",
		"patch status *v1.KVCachePoolBinding team-a/traffic",
	}, counting.Writes(), "one status write per object once the refresh is due")
	got = get(t, bi.DeepCopy())
	assert.Equal(t, "70Mi", got.Status.Usage.String())
	assert.Equal(t, "70Mi", get(t, p.DeepCopy()).Status.Usage.Total.String())

	// Emptied: written at once.
	fake.SetCharged("traffic", 0)
	eventuallyBinding(t, "team-a", "traffic", "usage 0", func(b *kvv1.KVCachePoolBinding) bool {
		return b.Status.Usage != nil && b.Status.Usage.IsZero()
	})
}

// A condition that speaks of the store is Unknown (or False "not observed") until the store
// answered, and goes back there when it stops answering: nothing keeps claiming a registration
// or a capacity nobody observes. The phase follows.
func TestConditionsClaimOnlyWhatWasObserved(t *testing.T) {
	fake := fakeStore(t, "observed", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.9.5.10:15400", 8<<30, "tcp")
	fake.SetDown(true)
	create(t, walkthroughBackend("observed"))
	create(t, pool("observed-pool", "observed", "8Gi"))
	create(t, binding("team-b", "observed", "observed-pool", "observed", "4Gi"))
	// Cleanups run last first: the ledger answers again before the Binding is released.
	t.Cleanup(func() { fake.SetDown(false) })

	unobserved := func(what string) {
		t.Helper()
		b := eventuallyBinding(t, "team-b", "observed", what, func(b *kvv1.KVCachePoolBinding) bool {
			return condition(b.Status.Conditions, kvv1.ConditionDomainExclusive).Reason == "LedgerUnreachable"
		})
		assert.Equal(t, metav1.Condition{Type: kvv1.ConditionDomainExclusive, Status: metav1.ConditionUnknown, Reason: "LedgerUnreachable",
			Message: "domain observed is claimed by no other Binding on KVCacheBackend observed; whether its master registered it is unknown until the ledger answers (KVCachePool observed-pool's QuotaLedgerAvailable says why)"},
			stripTimes(condition(b.Status.Conditions, kvv1.ConditionDomainExclusive)))
		assert.Equal(t, metav1.ConditionUnknown, condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Status)
		assert.Nil(t, b.Status.EffectiveQuota)
		assert.Nil(t, b.Status.Usage)
		assert.Equal(t, kvv1.PhasePending, b.Status.Phase)
		p := eventuallyPool(t, "observed-pool", "the ledger unreachable", func(p *kvv1.KVCachePool) bool {
			return condition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Reason == "LedgerUnreachable"
		})
		assert.Equal(t, metav1.ConditionFalse, condition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Status)
		assert.Nil(t, p.Status.Usage.Total)
		assert.Equal(t, kvv1.PhaseDegraded, p.Status.Phase)
		be := eventuallyBackend(t, "observed", "the leader unreachable", func(b *kvv1.KVCacheBackend) bool {
			return condition(b.Status.Conditions, kvv1.ConditionLeaderAvailable).Reason == "Unreachable"
		})
		assert.Nil(t, be.Status.Capacity)
		assert.Empty(t, be.Status.Members)
		assert.NotEqual(t, metav1.ConditionTrue, condition(be.Status.Conditions, kvv1.ConditionCapacityObserved).Status)
		assert.Equal(t, metav1.ConditionUnknown, condition(be.Status.Conditions, kvv1.ConditionMembersMounted).Status)
		p = eventuallyPool(t, "observed-pool", "capacity unknown", func(p *kvv1.KVCachePool) bool {
			return condition(p.Status.Conditions, kvv1.ConditionCapacityAllocatable).Status == metav1.ConditionUnknown
		})
		assert.Equal(t, "CapacityNotObserved", condition(p.Status.Conditions, kvv1.ConditionCapacityAllocatable).Reason)
	}
	unobserved("the store never answered")

	fake.SetDown(false)
	b := eventuallyBinding(t, "team-b", "observed", "registered", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionDomainExclusive).Reason == "Registered"
	})
	assert.Equal(t, metav1.Condition{Type: kvv1.ConditionDomainExclusive, Status: metav1.ConditionTrue, Reason: "Registered",
		Message: "domain observed is this Binding's on the master of KVCacheBackend observed"}, stripTimes(condition(b.Status.Conditions, kvv1.ConditionDomainExclusive)))

	fake.SetDown(true)
	unobserved("the store stopped answering")
}
