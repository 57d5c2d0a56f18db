package operator_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	bindingctrl "github.com/kvcache-operator/kvcache/operator/binding"
	"github.com/kvcache-operator/kvcache/operator/storeview"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// Deleting a pool removes its tenants from the master's ledger before the pool goes (they would
// otherwise keep taking part in the proportional cut of every other grant): entries of its
// Bindings are deleted, a tenant still owning objects holds the pool, a foreign entry and the
// entries of another pool on the same master are untouched. New Pods may not attach meanwhile.
func TestDeletingAPoolReleasesItsTenants(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "pool-del", storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"foreign": 1 << 30}})
	fake.MountSegment("10.6.0.10:15400", 8<<30, "tcp")
	create(t, walkthroughBackend("pool-del"))
	doomed := pool("pool-del-a", "pool-del", "8Gi")
	create(t, doomed)
	create(t, pool("pool-del-b", "pool-del", "8Gi"))
	create(t, binding("team-a", "pool-del-a1", "pool-del-a", "del-a1", "6Gi"))
	create(t, binding("team-b", "pool-del-a2", "pool-del-a", "del-a2", "6Gi"))
	create(t, binding("team-a", "pool-del-b1", "pool-del-b", "del-b1", "6Gi"))
	for _, nn := range [][2]string{{"team-a", "pool-del-a1"}, {"team-b", "pool-del-a2"}, {"team-a", "pool-del-b1"}} {
		eventuallyBinding(t, nn[0], nn[1], "Granted", func(b *kvv1.KVCachePoolBinding) bool {
			return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
		})
	}
	// 19Gi requested of 8Gi mounted (with the foreign 1Gi): every grant is cut.
	b1 := eventuallyBinding(t, "team-a", "pool-del-b1", "cut", func(b *kvv1.KVCachePoolBinding) bool {
		return b.Status.EffectiveQuota != nil && b.Status.EffectiveQuota.Value() < 6<<30
	})
	t.Logf("pool-del-b1's grant while pool-del-a's tenants are in the ledger: %s", b1.Status.EffectiveQuota)
	assert.Contains(t, get(t, doomed).Finalizers, kvv1.FinalizerPool)

	// An engine is reading an object of del-a2: its lease keeps it from being removed.
	fake.SetCharged("del-a2", 4096)
	fake.LeaseObjects("del-a2", 1, 4096)
	require.NoError(t, env.Client.Delete(ctx, doomed))
	p := eventuallyPool(t, "pool-del-a", "held by the tenant that owns objects", func(p *kvv1.KVCachePool) bool {
		return condition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Reason == "PoolDeleting" &&
			condition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Message != "the pool is being deleted; its tenants are released from the ledger and new Pods may not attach"
	})
	assert.Equal(t, metav1.ConditionFalse, condition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Status, "injection refuses new Pods on this pool")
	deleted := get(t, doomed).DeletionTimestamp
	require.NotNil(t, deleted)
	assert.Equal(t, "the pool is being deleted and waits: tenant(s) del-a2: their objects were removed but those readers hold a lease on, which the master removes once the lease ends (default_kv_lease_ttl after the last read); the pool waits for it until "+
		deleted.Add(10*time.Minute).UTC().Format(time.RFC3339)+" at the latest (10m0s after its deletion), retried every 500ms",
		condition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Message)
	assert.Equal(t, kvv1.PhaseDeleting, p.Status.Phase)
	policy := fake.PolicyFile()
	assert.NotContains(t, policy, "del-a1", "the empty tenant is released at once")
	assert.Contains(t, policy, "del-a2")

	fake.SetCharged("del-a2", 0)
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(doomed), &kvv1.KVCachePool{}))
	}, wait, 100*time.Millisecond, "the pool goes once its tenants are released")
	policy = fake.PolicyFile()
	assert.Equal(t, map[string]int64{"foreign": 1 << 30, "del-b1": 6 << 30}, policy, "the deleted pool's tenants are gone from the master; the rest is untouched")

	// The Bindings of the deleted pool stay, with nothing granted and no finalizer holding them.
	for _, nn := range [][2]string{{"team-a", "pool-del-a1"}, {"team-b", "pool-del-a2"}} {
		got := eventuallyBinding(t, nn[0], nn[1], "PoolNotFound", func(b *kvv1.KVCachePoolBinding) bool {
			return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "PoolNotFound"
		})
		assert.NotContains(t, got.Finalizers, kvv1.FinalizerBinding)
		assert.Nil(t, got.Status.EffectiveQuota)
		assert.Equal(t, metav1.ConditionUnknown, condition(got.Status.Conditions, kvv1.ConditionDomainExclusive).Status)
		assert.Equal(t, "KVCachePool pool-del-a does not exist: nothing is granted through this Binding", condition(got.Status.Conditions, kvv1.ConditionQuotaGranted).Message)
	}
	// The other pool's Binding gets the capacity they no longer share.
	eventuallyBinding(t, "team-a", "pool-del-b1", "granted in full", func(b *kvv1.KVCachePoolBinding) bool {
		return b.Status.EffectiveQuota != nil && b.Status.EffectiveQuota.Value() == 6<<30
	})
}

// staleReader serves the reads a reconcile makes from a cache that has not caught up: the
// pools and the Bindings given, everything else (and every write) from the API server.
type staleReader struct {
	client.Client
	pools    []kvv1.KVCachePool
	bindings []kvv1.KVCachePoolBinding
}

func (s *staleReader) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	switch x := o.(type) {
	case *kvv1.KVCachePool:
		for i := range s.pools {
			if s.pools[i].Name == key.Name {
				s.pools[i].DeepCopyInto(x)
				return nil
			}
		}
	case *kvv1.KVCachePoolBinding:
		for i := range s.bindings {
			if client.ObjectKeyFromObject(&s.bindings[i]) == key {
				s.bindings[i].DeepCopyInto(x)
				return nil
			}
		}
	}
	return s.Client.Get(ctx, key, o, opts...)
}

func (s *staleReader) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	switch x := l.(type) {
	case *kvv1.KVCachePoolList:
		if err := s.Client.List(ctx, x, opts...); err != nil {
			return err
		}
		for i := range s.pools {
			x.Items = append(x.Items, *s.pools[i].DeepCopy())
		}
		return nil
	case *kvv1.KVCachePoolBindingList:
		lo := (&client.ListOptions{}).ApplyOptions(opts)
		x.Items = nil
		for i := range s.bindings {
			if lo.FieldSelector == nil || lo.FieldSelector.Matches(bindingFields{&s.bindings[i]}) {
				x.Items = append(x.Items, *s.bindings[i].DeepCopy())
			}
		}
		return nil
	}
	return s.Client.List(ctx, l, opts...)
}

// bindingFields is the one field the controllers select Bindings by.
type bindingFields struct{ b *kvv1.KVCachePoolBinding }

func (f bindingFields) Has(field string) bool { return field == "spec.poolRef.name" }
func (f bindingFields) Get(field string) string {
	if field == "spec.poolRef.name" {
		return f.b.Spec.PoolRef.Name
	}
	return ""
}

// A stale view for a Binding reconciler run directly: the pool exists in the view only (so the
// manager, which finds no such pool, puts no finalizer on its Bindings and writes no ledger for
// them), with its finalizer already on.
func staleView(t *testing.T, poolName, backend string, bindings ...*kvv1.KVCachePoolBinding) *staleReader {
	t.Helper()
	p := pool(poolName, backend, "16Gi")
	p.Finalizers = []string{kvv1.FinalizerPool}
	p.Generation = 1
	v := &staleReader{Client: env.Client, pools: []kvv1.KVCachePool{*p}}
	for _, b := range bindings {
		v.bindings = append(v.bindings, *get(t, b.DeepCopy()))
	}
	return v
}

func directBindingReconciler(c client.Client, fake *storetest.Fake) *bindingctrl.Reconciler {
	return &bindingctrl.Reconciler{Client: c, Admin: func(*kvv1.KVCacheBackend) store.Admin { return store.New(fake.URL()) },
		View: freshView(), Recorder: events.NewFakeRecorder(100), PollInterval: time.Second}
}

// freshView is a store view for reconcilers run directly: every reconcile reads the store, as
// each poll of the manager's does.
func freshView() *storeview.View { return &storeview.View{MaxAge: time.Nanosecond} }

// A Binding that vanished between the read a reconcile works from and its finalizer patch gets
// no entry, and does not stop the others: each remaining Binding gets its finalizer and then
// its entry. (Before, a reconcile stopped at the vanished one and went on to write entries for
// Bindings that never got the finalizer.)
func TestABindingDeletedMidReconcile(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "midrec", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.7.0.10:15400", 16<<30, "tcp")
	create(t, walkthroughBackend("midrec"))
	// The pool exists in the stale view only; the manager sees none and touches neither.
	gone := binding("team-a", "midrec-a-gone", "midrec-pool", "midrec-gone", "4Gi")
	kept := binding("team-a", "midrec-b-kept", "midrec-pool", "midrec-kept", "4Gi")
	require.NoError(t, env.Client.Create(ctx, gone))
	create(t, kept)
	quiet(t, gone, kept)
	view := staleView(t, "midrec-pool", "midrec", gone, kept)
	require.NoError(t, env.Client.Delete(ctx, gone)) // no finalizer yet: gone at once
	require.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(gone), &kvv1.KVCachePoolBinding{})))

	r := directBindingReconciler(view, fake)
	for _, b := range []*kvv1.KVCachePoolBinding{gone, kept} {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
		require.NoError(t, err, "%s", b.Name)
	}
	live := get(t, kept.DeepCopy())
	assert.True(t, controllerutil.ContainsFinalizer(live, kvv1.FinalizerBinding), "the Binding after the vanished one gets its finalizer")
	policy := fake.PolicyFile()
	assert.Equal(t, map[string]int64{"midrec-kept": 4 << 30}, policy, "an entry only for the Binding that carries the finalizer; none for the vanished one")
	for _, r := range fake.Requests() {
		assert.NotContains(t, r, "midrec-gone", "nothing is asked about the vanished Binding's tenant")
	}
	// The pool exists only in the view: release the Binding for cleanup.
	release(t, kept, kvv1.FinalizerBinding)
}

// Finalizers are patched under an optimistic lock: a reconcile working from a read that
// another actor's finalizer has since joined fails with a Conflict instead of replacing the
// list without it, and the retry on a fresh read keeps both. Releasing keeps it too.
func TestAForeignFinalizerIsKept(t *testing.T) {
	ctx := context.Background()
	const foreign = "example.com/backup-hold"
	fake := fakeStore(t, "foreign", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.8.0.10:15400", 16<<30, "tcp")
	create(t, walkthroughBackend("foreign"))
	b := binding("team-b", "foreign-one", "foreign-pool", "foreign-one", "4Gi")
	require.NoError(t, env.Client.Create(ctx, b))
	t.Cleanup(func() { deleteAndWait(t, b) })
	quiet(t, b)
	view := staleView(t, "foreign-pool", "foreign", b) // read before the foreign finalizer
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := get(t, b.DeepCopy())
		controllerutil.AddFinalizer(cur, foreign)
		return env.Client.Update(ctx, cur)
	}))

	r := directBindingReconciler(view, fake)
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
	require.Error(t, err, "the stale read's patch is refused")
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	assert.Equal(t, []string{foreign}, get(t, b.DeepCopy()).Finalizers, "the foreign finalizer is kept")
	assert.Empty(t, fake.PolicyFile(), "no entry before the finalizer is on")

	// The retry reads afresh: both finalizers, then the entry.
	view = staleView(t, "foreign-pool", "foreign", b)
	_, err = directBindingReconciler(view, fake).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{foreign, kvv1.FinalizerBinding}, get(t, b.DeepCopy()).Finalizers)
	assert.Equal(t, map[string]int64{"foreign-one": 4 << 30}, fake.PolicyFile())
	release(t, b, foreign)

	// Through the manager, on a pool that exists: a Binding created with a foreign finalizer
	// gets the operator's beside it, and its release removes only the operator's.
	create(t, pool("foreign-real", "foreign", "16Gi"))
	held := binding("team-b", "foreign-two", "foreign-real", "foreign-two", "4Gi")
	held.Finalizers = []string{foreign}
	create(t, held)
	eventuallyBinding(t, "team-b", "foreign-two", "Granted", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
	})
	assert.ElementsMatch(t, []string{foreign, kvv1.FinalizerBinding}, get(t, held.DeepCopy()).Finalizers)
	require.NoError(t, env.Client.Delete(ctx, held))
	got := eventuallyBinding(t, "team-b", "foreign-two", "released by the operator", func(b *kvv1.KVCachePoolBinding) bool {
		return !controllerutil.ContainsFinalizer(b, kvv1.FinalizerBinding)
	})
	assert.Equal(t, []string{foreign}, got.Finalizers, "the foreign finalizer still holds the Binding")
	assert.NotContains(t, fake.PolicyFile(), "foreign-two", "the released tenant's entry is deleted")
	release(t, held, foreign)
}

// quiet waits until the manager is done with the Bindings (of a pool it cannot find: it
// reports that once and then writes nothing while nothing changes), so that a read taken now
// stays current: no resourceVersion moves for a second.
func quiet(t *testing.T, bs ...*kvv1.KVCachePoolBinding) {
	t.Helper()
	versions := func() []string {
		var out []string
		for _, b := range bs {
			out = append(out, get(t, b.DeepCopy()).ResourceVersion)
		}
		return out
	}
	last, since := versions(), time.Now()
	poll(t, func() bool {
		now := versions()
		if !slices.Equal(now, last) {
			last, since = now, time.Now()
		}
		return time.Since(since) > time.Second
	}, func() string { return "the Bindings kept changing" })
}

// release removes finalizers from b (as their owners would) so that cleanup can delete it.
func release(t *testing.T, b *kvv1.KVCachePoolBinding, finalizers ...string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &kvv1.KVCachePoolBinding{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		for _, f := range finalizers {
			controllerutil.RemoveFinalizer(cur, f)
		}
		return env.Client.Update(context.Background(), cur)
	}))
}

// Deleting the whole walkthrough at once (kubectl delete -f) while an engine still holds objects
// under a tenant: the master goes with its backend, ledger and objects included, so nothing
// waits for the tenant to empty, and everything is gone.
func TestDeletingTheStoreWithItsPoolAndBindingsTogetherCompletes(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "all-del", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.6.0.11:15400", 8<<30, "tcp")
	b := walkthroughBackend("all-del")
	p := pool("all-del", "all-del", "8Gi")
	bd := binding("team-a", "all-del", "all-del", "all-del", "6Gi")
	for _, o := range []client.Object{b, p, bd} {
		require.NoError(t, env.Client.Create(ctx, o))
	}
	eventuallyBinding(t, "team-a", "all-del", "Granted", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
	})
	fake.SetCharged("all-del", 4096) // an engine holds an object: the tenant cannot be deleted
	for _, o := range []client.Object{b, p, bd} {
		require.NoError(t, env.Client.Delete(ctx, o))
	}
	for _, o := range []client.Object{bd, p, b} {
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object)))
		}, wait, 100*time.Millisecond, "%T %s is gone", o, o.GetName())
	}
}
