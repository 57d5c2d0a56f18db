package storeview

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
)

// fakeAdmin is a master's ledger in memory, counting what it is asked. Calls it does not
// expect fail the test through the nil embedded interface.
type fakeAdmin struct {
	store.Admin
	endpoint string

	mu      sync.Mutex
	tenants map[string]store.Tenant
	figures map[string]store.TenantMetrics
	err     error // every read fails with it
	// gate, when set, holds each ledger read until it is closed.
	gate chan struct{}
	// leased are the bytes of each tenant's objects a reader leases: RemoveTenantObjects leaves
	// them, and DeleteTenant refuses a tenant that still has a charge (-1702).
	leased map[string]int64

	ledgerReads, metricsReads atomic.Int32
}

func (f *fakeAdmin) Endpoint() string { return f.endpoint }

func (f *fakeAdmin) Tenants(context.Context) ([]store.Tenant, error) {
	f.ledgerReads.Add(1)
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []store.Tenant
	for _, t := range f.tenants {
		out = append(out, t)
	}
	return out, nil
}

func (f *fakeAdmin) Metrics(context.Context) (store.Metrics, error) {
	f.metricsReads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.Metrics{}, f.err
	}
	return store.Metrics{Tenants: f.figures}, nil
}

func (f *fakeAdmin) PutTenant(_ context.Context, id string, bytes int64) (store.Tenant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tenants[id]
	t.ID, t.RequestedQuotaBytes, t.EffectiveQuotaBytes = id, bytes, bytes
	f.tenants[id] = t
	return t, nil
}

func (f *fakeAdmin) RemoveTenantObjects(_ context.Context, id string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tenants[id]
	removed := t.ChargedBytes - f.leased[id]
	t.ChargedBytes = f.leased[id]
	f.tenants[id] = t
	return removed / 4096, nil
}

func (f *fakeAdmin) DeleteTenant(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tenants[id].ChargedBytes > 0 {
		return &store.Error{Op: "DELETE", Code: store.CodeTenantNotEmpty, Message: "TENANT_NOT_EMPTY"}
	}
	delete(f.tenants, id)
	return nil
}

func newFake(endpoint string, tenants ...store.Tenant) *fakeAdmin {
	f := &fakeAdmin{endpoint: endpoint, tenants: map[string]store.Tenant{}, figures: map[string]store.TenantMetrics{}, leased: map[string]int64{}}
	for _, t := range tenants {
		f.tenants[t.ID] = t
	}
	return f
}

func backendOf(name string, uid types.UID) *kvv1.KVCacheBackend {
	return &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
}

// clock is a test's time, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestTheLedgerIsReadOncePerMaxAgeWhoeverAsks(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Unix(1000, 0)}
	v := &View{MaxAge: 15 * time.Second, Clock: clk.Now}
	a := newFake("http://a:9003", store.Tenant{ID: "team-a", RequestedQuotaBytes: 4 << 30})
	m := Master{Backend: backendOf("a", "uid-a"), Admin: a}

	first := v.Ledger(ctx, m)
	require.NoError(t, first.Err)
	assert.Equal(t, int64(4<<30), first.Tenants["team-a"].RequestedQuotaBytes)
	assert.Equal(t, clk.Now(), first.At)
	clk.Add(14 * time.Second)
	for range 5 {
		assert.Equal(t, first, v.Ledger(ctx, m), "a reader within MaxAge gets the same read")
	}
	assert.Equal(t, int32(1), a.ledgerReads.Load(), "one read for six readers")

	// A reader's copy is its own.
	mine := v.Ledger(ctx, m)
	mine.Tenants["team-a"] = store.Tenant{ID: "team-a"}
	assert.Equal(t, int64(4<<30), v.Ledger(ctx, m).Tenants["team-a"].RequestedQuotaBytes)

	clk.Add(time.Second)
	later := v.Ledger(ctx, m)
	assert.Equal(t, int32(2), a.ledgerReads.Load(), "read again once MaxAge passed")
	assert.Equal(t, clk.Now(), later.At)
}

func TestAMasterIsNamedByItsBackendsUIDAndItsEndpoint(t *testing.T) {
	ctx := context.Background()
	v := &View{}
	a := newFake("http://a:9003", store.Tenant{ID: "first"})
	again := newFake("http://a:9003", store.Tenant{ID: "second"})
	moved := newFake("http://a-2:9003", store.Tenant{ID: "moved"})

	for _, tc := range []struct {
		name  string
		m     Master
		reads *atomic.Int32
		saw   string
	}{
		{"the backend's master", Master{Backend: backendOf("a", "uid-1"), Admin: a}, &a.ledgerReads, "first"},
		{"a backend created again under its name is another master", Master{Backend: backendOf("a", "uid-2"), Admin: again}, &again.ledgerReads, "second"},
		{"an endpoint that moved is another master", Master{Backend: backendOf("a", "uid-1"), Admin: moved}, &moved.ledgerReads, "moved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := v.Ledger(ctx, tc.m)
			assert.Contains(t, l.Tenants, tc.saw)
			assert.Len(t, l.Tenants, 1)
			assert.Equal(t, int32(1), tc.reads.Load())
		})
	}
}

func TestTheOperatorsOwnWriteIsSeenByTheNextReader(t *testing.T) {
	ctx := context.Background()
	v := &View{MaxAge: time.Hour}
	a := newFake("http://a:9003")
	m := Master{Backend: backendOf("a", "uid-a"), Admin: a}
	require.Empty(t, v.Ledger(ctx, m).Tenants)
	v.Figures(ctx, m)

	put, err := v.Put(ctx, m, "team-a", 8<<30)
	require.NoError(t, err)
	assert.Equal(t, int64(8<<30), put.RequestedQuotaBytes)
	assert.Equal(t, int64(8<<30), v.Ledger(ctx, m).Tenants["team-a"].RequestedQuotaBytes, "the PUT is in the next read")
	assert.Equal(t, int32(2), a.ledgerReads.Load())
	v.Figures(ctx, m)
	assert.Equal(t, int32(2), a.metricsReads.Load(), "the figures are read again too")
}

func TestAReadInFlightDuringAWriteIsNotKept(t *testing.T) {
	ctx := context.Background()
	v := &View{MaxAge: time.Hour}
	a := newFake("http://a:9003")
	a.gate = make(chan struct{})
	m := Master{Backend: backendOf("a", "uid-a"), Admin: a}
	done := make(chan Ledger)
	go func() { done <- v.Ledger(ctx, m) }()
	require.Eventually(t, func() bool { return a.ledgerReads.Load() == 1 }, time.Second, time.Millisecond)
	v.Wrote(m) // a write lands while the read is on its way
	close(a.gate)
	<-done
	v.Ledger(ctx, m)
	assert.Equal(t, int32(2), a.ledgerReads.Load(), "the read begun before the write answers its own reader only")
}

func TestConcurrentReadersShareOneRead(t *testing.T) {
	ctx := context.Background()
	v := &View{MaxAge: time.Hour}
	a := newFake("http://a:9003", store.Tenant{ID: "team-a"})
	a.gate = make(chan struct{})
	m := Master{Backend: backendOf("a", "uid-a"), Admin: a}
	var wg sync.WaitGroup
	results := make([]Ledger, 8)
	for i := range results {
		wg.Go(func() { results[i] = v.Ledger(ctx, m) })
	}
	require.Eventually(t, func() bool { return a.ledgerReads.Load() == 1 }, time.Second, time.Millisecond)
	close(a.gate)
	wg.Wait()
	assert.Equal(t, int32(1), a.ledgerReads.Load(), "readers arriving during a read wait for it")
	for _, l := range results {
		assert.Contains(t, l.Tenants, "team-a")
	}
}

func TestAFailedReadAnswersOnlyBriefly(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Unix(1000, 0)}
	v := &View{MaxAge: 15 * time.Second, Clock: clk.Now}
	a := newFake("http://a:9003")
	a.err = errors.New("connection refused")
	m := Master{Backend: backendOf("a", "uid-a"), Admin: a}
	for range 3 {
		l := v.Ledger(ctx, m)
		assert.Nil(t, l.Tenants)
		assert.EqualError(t, l.Err, "connection refused")
		f := v.Figures(ctx, m)
		assert.Nil(t, f.Tenants)
		assert.Error(t, f.Err)
	}
	assert.Equal(t, int32(1), a.ledgerReads.Load(), "readers together ask an unreachable master once, not each")
	assert.Equal(t, int32(1), a.metricsReads.Load())

	// The store comes up: a failure is not reported for the rest of the poll.
	a.err = nil
	clk.Add(failedMaxAge)
	l := v.Ledger(ctx, m)
	assert.NoError(t, l.Err, "a failed read answers for %s only", failedMaxAge)
	assert.Equal(t, int32(2), a.ledgerReads.Load())
	clk.Add(failedMaxAge)
	v.Ledger(ctx, m)
	assert.Equal(t, int32(2), a.ledgerReads.Load(), "a good read answers for the whole MaxAge")

	a.err = &store.Error{Op: "GET /api/v1/tenant_quotas", Code: store.CodeUnavailableInCurrentMode, Message: "UNAVAILABLE_IN_CURRENT_MODE"}
	clk.Add(15 * time.Second)
	l = v.Ledger(ctx, m)
	assert.True(t, l.NoLedger, "a master without multi-tenancy keeps no ledger: not a failure")
	assert.NoError(t, l.Err)
}

func TestReleaseClosesEmptiesAndDeletesATenant(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		charge int64
		leased int64
		want   Released
		entry  *store.Tenant
	}{
		{name: "an empty tenant goes at once", want: Released{}},
		{name: "a tenant's objects are removed and then the entry", charge: 8 * 4096, want: Released{Removed: 8, RemovedBytes: 8 * 4096}},
		{name: "leased objects stay, and the entry with them, closed to writes", charge: 8 * 4096, leased: 4096,
			want:  Released{Removed: 7, RemovedBytes: 7 * 4096, Left: true, LeftBytes: 4096},
			entry: &store.Tenant{ID: "team-a", RequestedQuotaBytes: 1, EffectiveQuotaBytes: 1, ChargedBytes: 4096}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &View{MaxAge: time.Hour}
			a := newFake("http://a:9003", store.Tenant{ID: "team-a", RequestedQuotaBytes: 4 << 30, ChargedBytes: tc.charge})
			a.leased["team-a"] = tc.leased
			m := Master{Backend: backendOf("a", "uid-a"), Admin: a}
			ledger := v.Ledger(ctx, m).Tenants
			got, err := v.Release(ctx, m, ledger, "team-a")
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			if tc.entry == nil {
				assert.NotContains(t, ledger, "team-a", "the caller's copy follows")
				assert.NotContains(t, v.Ledger(ctx, m).Tenants, "team-a")
				return
			}
			assert.Equal(t, *tc.entry, ledger["team-a"])
			assert.Equal(t, *tc.entry, v.Ledger(ctx, m).Tenants["team-a"])
		})
	}
	t.Run("what was written since the caller's read is counted from the closing PUT", func(t *testing.T) {
		v := &View{MaxAge: time.Hour}
		a := newFake("http://a:9003", store.Tenant{ID: "team-a", RequestedQuotaBytes: 4 << 30})
		m := Master{Backend: backendOf("a", "uid-a"), Admin: a}
		ledger := v.Ledger(ctx, m).Tenants // read while the tenant held nothing
		a.mu.Lock()
		a.tenants["team-a"] = store.Tenant{ID: "team-a", RequestedQuotaBytes: 4 << 30, ChargedBytes: 3 * 4096}
		a.mu.Unlock()
		got, err := v.Release(ctx, m, ledger, "team-a")
		require.NoError(t, err)
		assert.Equal(t, Released{Removed: 3, RemovedBytes: 3 * 4096}, got)
	})
	t.Run("a tenant not in the ledger is already released", func(t *testing.T) {
		v := &View{}
		m := Master{Backend: backendOf("a", "uid-a"), Admin: newFake("http://a:9003")}
		got, err := v.Release(ctx, m, map[string]store.Tenant{}, "gone")
		require.NoError(t, err)
		assert.Equal(t, Released{}, got)
	})
}

func TestNotesAreKeptPerMasterAndTenant(t *testing.T) {
	v := &View{}
	a := Master{Backend: backendOf("a", "uid-a"), Admin: newFake("http://a:9003")}
	b := Master{Backend: backendOf("b", "uid-b"), Admin: newFake("http://b:9003")}
	n := Note{Op: OpRelease, Binding: types.NamespacedName{Namespace: "team-a", Name: "chat"}, Pool: "shared", Left: true, At: time.Unix(1000, 0)}
	v.Note(a, "team-a-chat", n)
	assert.Equal(t, map[string]Note{"team-a-chat": n}, v.Notes(a))
	assert.Empty(t, v.Notes(b), "another master's notes are its own")
	notes := v.Notes(a)
	delete(notes, "team-a-chat")
	assert.Len(t, v.Notes(a), 1, "a reader's copy is its own")
	v.Clear(a, "team-a-chat")
	assert.Empty(t, v.Notes(a))
}

// The backend reconciler's read of /metrics answers the pool and Binding controllers: the
// master is not asked again within MaxAge; a read that began before a ledger write is not kept.
func TestAReadHandedOverAnswersTheOtherReaders(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	admin := &fakeAdmin{endpoint: "http://a:9003", tenants: map[string]store.Tenant{}, figures: map[string]store.TenantMetrics{"team-a": {ChargedBytes: 1}}}
	m := Master{Backend: &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: types.UID("u")}}, Admin: admin}
	v := &View{MaxAge: 15 * time.Second, Clock: func() time.Time { return now }}

	r := v.BeginRead(m)
	v.Saw(r, store.Metrics{Tenants: map[string]store.TenantMetrics{"team-a": {ChargedBytes: 7}}}, now)
	f := v.Figures(context.Background(), m)
	require.NoError(t, f.Err)
	assert.Equal(t, int64(7), f.Tenants["team-a"].ChargedBytes, "the handed-over read")
	assert.Zero(t, admin.metricsReads.Load(), "the master was not asked again")

	r = v.BeginRead(m)
	v.Wrote(m)
	v.Saw(r, store.Metrics{Tenants: map[string]store.TenantMetrics{"team-a": {ChargedBytes: 8}}}, now)
	f = v.Figures(context.Background(), m)
	assert.Equal(t, int64(1), f.Tenants["team-a"].ChargedBytes, "a read begun before the write is not kept: the master is asked")
	assert.Equal(t, int32(1), admin.metricsReads.Load())

	r = v.BeginRead(m)
	v.Saw(r, store.Metrics{Tenants: map[string]store.TenantMetrics{"team-a": {ChargedBytes: 9}}}, now.Add(-time.Second))
	assert.Equal(t, int64(1), v.Figures(context.Background(), m).Tenants["team-a"].ChargedBytes, "an older read does not replace a newer one")
}
