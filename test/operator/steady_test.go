package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/backend"
	bindingctrl "github.com/kvcache-operator/kvcache/operator/binding"
	poolctrl "github.com/kvcache-operator/kvcache/operator/pool"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// countingClient records every write a reconcile makes through it.
type countingClient struct {
	client.Client
	mu     sync.Mutex
	writes []string
	// bodies are the status patches sent, for a failure to say what changed.
	bodies []string
}

func (c *countingClient) record(verb string, o any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	what := fmt.Sprintf("%T", o)
	switch co := o.(type) {
	case interface { // an unstructured object, or an apply of one
		GetKind() string
		GetNamespace() string
		GetName() string
	}:
		what = fmt.Sprintf("%s %s/%s", co.GetKind(), co.GetNamespace(), co.GetName())
	case client.Object:
		what = fmt.Sprintf("%T %s/%s", o, co.GetNamespace(), co.GetName())
	}
	c.writes = append(c.writes, verb+" "+what)
}

// Writes are the writes recorded so far, and forgets them.
func (c *countingClient) Writes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.writes
	c.writes = nil
	return w
}

func (c *countingClient) Create(ctx context.Context, o client.Object, opts ...client.CreateOption) error {
	c.record("create", o)
	return c.Client.Create(ctx, o, opts...)
}

func (c *countingClient) Update(ctx context.Context, o client.Object, opts ...client.UpdateOption) error {
	c.record("update", o)
	return c.Client.Update(ctx, o, opts...)
}

func (c *countingClient) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	c.record("patch", o)
	return c.Client.Patch(ctx, o, p, opts...)
}

func (c *countingClient) Apply(ctx context.Context, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.record("apply", o)
	return c.Client.Apply(ctx, o, opts...)
}

func (c *countingClient) Delete(ctx context.Context, o client.Object, opts ...client.DeleteOption) error {
	c.record("delete", o)
	return c.Client.Delete(ctx, o, opts...)
}

func (c *countingClient) Status() client.SubResourceWriter {
	return &countingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type countingStatus struct {
	client.SubResourceWriter
	c *countingClient
}

func (s *countingStatus) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	s.c.record("update status", o)
	return s.SubResourceWriter.Update(ctx, o, opts...)
}

func (s *countingStatus) Apply(ctx context.Context, o runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	s.c.record("apply status", o)
	return s.SubResourceWriter.Apply(ctx, o, opts...)
}

func (s *countingStatus) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	s.c.record("patch status", o)
	if body, err := p.Data(o); err == nil {
		s.c.mu.Lock()
		s.c.bodies = append(s.c.bodies, fmt.Sprintf("%s/%s: %s", o.GetNamespace(), o.GetName(), body))
		s.c.mu.Unlock()
	}
	return s.SubResourceWriter.Patch(ctx, o, p, opts...)
}

// A reconcile whose render and observations are unchanged writes nothing: no apply, no status
// patch, no finalizer patch, no ledger PUT, and no object's resourceVersion moves.
func TestSteadyStateMakesNoWrites(t *testing.T) {
	fake := fakeStore(t, "steady", storetest.FakeOptions{MultiTenancy: true})
	create(t, walkthroughBackend("steady"))
	rollOutLeader(t, "steady")
	memberPod(t, "steady", 0, 0, "10.3.0.10")
	fake.MountSegment("10.3.0.10:15400", 8<<30, "tcp")
	create(t, pool("steady-pool", "steady", "8Gi"))
	create(t, binding("team-a", "steady", "steady-pool", "team-a-steady", "4Gi"))
	// The steady state this test judges: the store Ready and known to be used by its pool, the
	// pool by its Binding, the Binding granted (Ready comes before the backend has seen its pool:
	// a reconcile judged then writes usedBy, which is no steady-state write).
	eventuallyBackend(t, "steady", "Ready and used by its pool", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Phase == kvv1.PhaseReady && len(b.Status.UsedBy) == 1 && condition(b.Status.Conditions, kvv1.ConditionDeletable).Status == metav1.ConditionFalse
	})
	eventuallyPool(t, "steady-pool", "used by its Binding", func(p *kvv1.KVCachePool) bool { return len(p.Status.UsedBy) == 1 })
	eventuallyBinding(t, "team-a", "steady", "Granted", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
	})

	r, err := generator.NewRenderer()
	require.NoError(t, err)
	counting := &countingClient{Client: env.Client}
	admin := func(*kvv1.KVCacheBackend) store.Admin { return store.New(fake.URL()) }
	rec := events.NewFakeRecorder(100)
	br := &backend.Reconciler{Client: counting, Renderer: r, SystemNamespace: systemNamespace, Admin: admin, Recorder: rec, PollInterval: time.Second}
	// Configured as the suite's manager is: the two must agree on every figure and message.
	view := freshView()
	pr := &poolctrl.Reconciler{Client: counting, Admin: admin, View: view, Recorder: rec, PollInterval: time.Second}
	bdr := &bindingctrl.Reconciler{Client: counting, Admin: admin, View: view, Recorder: rec, PollInterval: time.Second,
		Pods: cached, Injector: injection.New(r), CacheInUseWindow: cacheInUseWindow}
	ctx := context.Background()
	fake.ResetRequests()
	before := resourceVersions(t, "steady")
	cr := statusVersions(t, pool("steady-pool", "steady", "8Gi"), binding("team-a", "steady", "steady-pool", "team-a-steady", "4Gi"))
	for range 3 {
		_, err := br.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "steady"}})
		require.NoError(t, err)
		_, err = pr.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "steady-pool"}})
		require.NoError(t, err)
		_, err = bdr.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "steady"}})
		require.NoError(t, err)
	}
	assert.Empty(t, counting.Writes(), "API writes in steady state; events: %v; status patches: %v", drain(rec), counting.bodies)
	// Nor did anything else change them (the manager reconciles them too): no resourceVersion moved.
	was := get(t, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "steady"}})
	time.Sleep(time.Second)
	if now := get(t, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "steady"}}); now.ResourceVersion != was.ResourceVersion {
		// Say what the write changed, for the failure below.
		x, _ := json.Marshal(was.Status)
		y, _ := json.Marshal(now.Status)
		t.Logf("the backend was written meanwhile:\nstatus before %s\nstatus after  %s", x, y)
	}
	assert.Equal(t, before, resourceVersions(t, "steady"), "the backend's and its children's resourceVersions")
	assert.Equal(t, cr, statusVersions(t, pool("steady-pool", "steady", "8Gi"), binding("team-a", "steady", "steady-pool", "team-a-steady", "4Gi")), "the pool's and the Binding's")
	for _, req := range fake.Requests() {
		assert.NotRegexp(t, "^(PUT|DELETE) ", req, "ledger writes in steady state")
	}
}

// drain returns the events a fake recorder holds.
func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// A tenant written on every poll (its charge and its eviction counter move each time) and used
// by a Ready injected Pod settles too: once CacheInUse is True, EvictingOwnObjects True and the
// figures written, further polls write nothing, and a reconciler that starts with no memory of
// the tenant (a restarted manager) keeps every condition.
func TestSteadyWhileTheTenantIsWritten(t *testing.T) {
	fake := grantedTenant(t, "busy", "10.3.1.10", 8<<30, "8Gi", "busy", "team-a-busy", "4Gi")
	eventuallyBinding(t, "team-a", "busy", "Granted", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
	})
	injectPod(t, "team-a", "busy-0", "busy")
	written := int64(1 << 20)
	write := func() { // what an engine at its grant does between two polls
		written += 4096
		fake.SetCharged("team-a-busy", written)
		fake.Evict("team-a-busy", 4096)
	}
	write()
	eventuallyBinding(t, "team-a", "busy", "in use and evicting", func(b *kvv1.KVCachePoolBinding) bool {
		write()
		return condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Status == metav1.ConditionTrue &&
			condition(b.Status.Conditions, kvv1.ConditionEvictingOwnObjects).Status == metav1.ConditionTrue &&
			condition(b.Status.Conditions, kvv1.ConditionInjectionCurrent).Status == metav1.ConditionTrue
	})

	r, err := generator.NewRenderer()
	require.NoError(t, err)
	counting := &countingClient{Client: env.Client}
	admin := func(*kvv1.KVCacheBackend) store.Admin { return store.New(fake.URL()) }
	rec := events.NewFakeRecorder(100)
	view := freshView()
	pr := &poolctrl.Reconciler{Client: counting, Admin: admin, View: view, Recorder: rec, PollInterval: time.Second}
	bdr := &bindingctrl.Reconciler{Client: counting, Admin: admin, View: view, Recorder: rec, PollInterval: time.Second,
		Pods: cached, Injector: injection.New(r), Activity: &operator.TenantActivity{}, CacheInUseWindow: cacheInUseWindow}
	ctx := context.Background()
	for range 4 {
		write()
		_, err := pr.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "busy-pool"}})
		require.NoError(t, err)
		_, err = bdr.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "busy"}})
		require.NoError(t, err)
	}
	assert.Empty(t, counting.Writes(), "API writes while the tenant is written every poll; events: %v", drain(rec))
}
