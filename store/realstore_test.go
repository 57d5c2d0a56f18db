//go:build linux && realstore

// Built with -tags realstore (make test does): the tests install the real store from PyPI through
// hack/mooncake.sh, which make test-unit leaves out.

// The Client against the REAL mooncake_master (and a real member) from PyPI's
// mooncake-transfer-engine-non-cuda wheel, provided by hack/mooncake.sh. The wheel is Linux-only,
// hence the build tag. Everything runs on loopback; no Kubernetes.

package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
)

const realSegmentSize = 268435456 // MOONCAKE_GLOBAL_SEGMENT_SIZE of the member

// startMaster starts mooncake_master with the flags the leader template renders, on free ports,
// and waits for /health. It returns the process, the RPC port and a Client of its admin port.
func startMaster(t *testing.T, bin string, multiTenancy bool) (*mooncaketest.Proc, int, *Client) {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "tenant-quota-policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("version: 1\ntenants:\n  - name: team-a\n    quota: 1073741824\n"), 0o644))
	ports := mooncaketest.FreePorts(t, 2)
	rpc, met := ports[0], ports[1]
	args := []string{
		"-rpc_port=" + strconv.Itoa(rpc),
		"-metrics_port=" + strconv.Itoa(met),
		"-metrics_host=127.0.0.1",
		"-default_kv_lease_ttl=5m",
		"-allocation_strategy=free_ratio_first",
		"-enable_multi_tenants=" + strconv.FormatBool(multiTenancy),
		"-tenant_quota_connector_uri=" + policy,
	}
	name := "mooncake_master (multi-tenancy " + map[bool]string{true: "on", false: "off"}[multiTenancy] + ")"
	p := mooncaketest.Start(t, name, 3*time.Second, nil, filepath.Join(bin, "mooncake_master"), args...)
	c := New(fmt.Sprintf("http://127.0.0.1:%d", met), WithTimeout(2*time.Second))
	mooncaketest.Poll(t, 10*time.Second, name+" /health", []*mooncaketest.Proc{p}, func() error {
		h, err := c.Health(context.Background())
		if err == nil && !h.ServiceReady {
			err = errors.New("service_ready false")
		}
		return err
	})
	return p, rpc, c
}

func TestRealStore(t *testing.T) {
	start := time.Now()
	bin := mooncaketest.Bin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	master, rpc, c := startMaster(t, bin, true)

	h, err := c.Health(ctx)
	require.NoError(t, err)
	assert.Equal(t, Health{ServiceReady: true, Role: "leader", HAState: "serving"}, h)

	// The member (mc_store_rest_server) mounts a 256 MiB segment. Its tenant is team-a so that
	// a PUT through its REST API charges team-a (mounting itself is not tenant-gated).
	rest := mooncaketest.FreePorts(t, 1)[0]
	member := mooncaketest.Start(t, "mc_store_rest_server", 1500*time.Millisecond,
		[]string{
			"MOONCAKE_MASTER=127.0.0.1:" + strconv.Itoa(rpc),
			"MOONCAKE_TE_META_DATA_SERVER=P2PHANDSHAKE",
			"MOONCAKE_PROTOCOL=tcp",
			"MOONCAKE_LOCAL_HOSTNAME=127.0.0.1",
			"MOONCAKE_GLOBAL_SEGMENT_SIZE=" + strconv.Itoa(realSegmentSize),
			"MOONCAKE_LOCAL_BUFFER_SIZE=16777216",
			"MOONCAKE_TENANT_ID=team-a",
			"MC_TE_METRIC=1",
			"MC_STORE_CLIENT_SETUP_RETRIES=2",
		},
		filepath.Join(bin, "mc_store_rest_server"), "--port="+strconv.Itoa(rest))
	procs := []*mooncaketest.Proc{master, member}

	mooncaketest.Poll(t, 10*time.Second, "master_total_capacity_bytes == segment size", procs, func() error {
		m, err := c.Metrics(ctx)
		if err != nil {
			return err
		}
		if m.TotalCapacityBytes != realSegmentSize {
			return fmt.Errorf("master_total_capacity_bytes %d", m.TotalCapacityBytes)
		}
		return nil
	})

	segs, err := c.Segments(ctx)
	require.NoError(t, err)
	require.Len(t, segs, 1)
	assert.Regexp(t, regexp.MustCompile(`^127\.0\.0\.1:\d+$`), segs[0].Name)
	assert.Equal(t, int64(realSegmentSize), segs[0].SizeBytes)
	assert.Equal(t, "tcp", segs[0].Protocol)
	assert.Equal(t, "OK", segs[0].Status)
	assert.NotEmpty(t, segs[0].ID)
	assert.NotEmpty(t, segs[0].ClientID)
	assert.Regexp(t, `^127\.0\.0\.1:\d+$`, segs[0].TEEndpoint)

	tenants, err := c.Tenants(ctx)
	require.NoError(t, err)
	assert.Equal(t, []Tenant{{ID: "team-a", RequestedQuotaBytes: 1 << 30, EffectiveQuotaBytes: realSegmentSize, HasExplicitPolicy: true}}, tenants)

	// 1 GiB + 2 GiB requested over 256 MiB: effective is a largest-remainder split of exactly
	// the capacity (not floored shares: those would be 89478485 + 178956970).
	tb, err := c.PutTenant(ctx, "team-b", 2<<30)
	require.NoError(t, err)
	assert.Equal(t, Tenant{ID: "team-b", RequestedQuotaBytes: 2 << 30, EffectiveQuotaBytes: 178956971, HasExplicitPolicy: true}, tb)
	tenants, err = c.Tenants(ctx)
	require.NoError(t, err)
	assert.Equal(t, []Tenant{
		{ID: "team-a", RequestedQuotaBytes: 1 << 30, EffectiveQuotaBytes: 89478485, HasExplicitPolicy: true},
		{ID: "team-b", RequestedQuotaBytes: 2 << 30, EffectiveQuotaBytes: 178956971, HasExplicitPolicy: true},
	}, tenants)
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]TenantMetrics{
		"team-a": {RequestedBytes: 1 << 30, EffectiveBytes: 89478485},
		"team-b": {RequestedBytes: 2 << 30, EffectiveBytes: 178956971},
	}, m.Tenants)

	require.NoError(t, c.DeleteTenant(ctx, "team-b"))
	err = c.DeleteTenant(ctx, "team-b")
	assert.True(t, HasCode(err, CodeObjectNotFound), "%v", err)
	var se *Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusNotFound, se.HTTPStatus)
	assert.Equal(t, "DELETE /api/v1/tenant_quotas?tenant_id=team-b", se.Op)

	// Bad input and an id that needs escaping.
	_, err = c.PutTenant(ctx, "_reserved", 1<<20)
	assert.True(t, HasCode(err, CodeInvalidParams), "%v", err)
	_, err = c.PutTenant(ctx, "team-c", 0)
	assert.True(t, HasCode(err, CodeInvalidParams), "%v", err)
	odd := "odd id&tenant_id=x+y/é"
	to, err := c.PutTenant(ctx, odd, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, odd, to.ID)
	require.NoError(t, c.DeleteTenant(ctx, odd))

	// Charge team-a through the member's REST API, then the ledger refuses to drop it.
	restPut := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("http://127.0.0.1:%d/api/put", rest),
			strings.NewReader(`{"key":"k1","value":"hello world"}`))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("member PUT /api/put: HTTP %d", resp.StatusCode)
		}
		return nil
	}
	mooncaketest.Poll(t, 10*time.Second, "member REST put", procs, restPut)
	mooncaketest.Poll(t, 5*time.Second, "team-a charged", procs, func() error {
		m, err := c.Metrics(ctx)
		if err != nil {
			return err
		}
		if m.Tenants["team-a"].ChargedBytes == 0 || m.AllocatedBytes == 0 {
			return fmt.Errorf("metrics %+v", m)
		}
		return nil
	})
	tenants, err = c.Tenants(ctx)
	require.NoError(t, err)
	require.Len(t, tenants, 1)
	assert.Equal(t, int64(len("hello world")), tenants[0].ChargedBytes)
	err = c.DeleteTenant(ctx, "team-a")
	assert.True(t, HasCode(err, CodeTenantNotEmpty), "%v", err)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusConflict, se.HTTPStatus)

	// At its grant a tenant's new writes evict its own older objects (the eviction counter
	// rises, the charge stays within the grant); a value larger than the grant is refused
	// (-1700) and counted as a rejection. Both counters exist only once they moved.
	require.Zero(t, m.Tenants["team-a"].EvictedBytes)
	_, err = c.PutTenant(ctx, "team-a", 16)
	require.NoError(t, err)
	restPutValue := func(key, value string) (int, error) {
		body := fmt.Sprintf(`{"key":%q,"value":%q}`, key, value)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("http://127.0.0.1:%d/api/put", rest), strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	code, err := restPutValue("k2", "hello again")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code, "a write at the grant succeeds")
	m, err = c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(len("hello world")), m.Tenants["team-a"].EvictedBytes, "k1 evicted to admit k2")
	assert.Equal(t, int64(len("hello again")), m.Tenants["team-a"].ChargedBytes)
	assert.Zero(t, m.Tenants["team-a"].Rejected)
	code, err = restPutValue("k3", strings.Repeat("x", 32))
	require.NoError(t, err)
	assert.NotEqual(t, http.StatusOK, code, "a value larger than the grant is refused")
	m, err = c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, float64(1), m.Tenants["team-a"].Rejected, "mooncake_tenant_quota_reject_total{reason=quota_exceeded}")

	// The same master with multi-tenancy off has no ledger.
	_, _, off := startMaster(t, bin, false)
	_, err = off.Tenants(ctx)
	assert.True(t, HasCode(err, CodeUnavailableInCurrentMode), "%v", err)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusConflict, se.HTTPStatus)
	_, err = off.PutTenant(ctx, "team-b", 1<<30)
	assert.True(t, HasCode(err, CodeUnavailableInCurrentMode), "%v", err)
	m, err = off.Metrics(ctx)
	require.NoError(t, err)
	assert.Empty(t, m.Tenants)
	assert.Zero(t, m.TotalCapacityBytes)
	segs, err = off.Segments(ctx)
	require.NoError(t, err)
	assert.Empty(t, segs)

	t.Logf("real store checks took %s (before process cleanup)", time.Since(start).Round(time.Millisecond))
}

// waitDrain polls a drain job every 200 ms until it ends, recording every status it passes
// through, and fails the test after d.
func waitDrain(t *testing.T, c *Client, id string, d time.Duration, watch []*mooncaketest.Proc) (DrainJob, []string) {
	t.Helper()
	var seen []string
	var j DrainJob
	mooncaketest.Poll(t, d, "drain job "+id+" to end", watch, func() error {
		var err error
		if j, err = c.Drain(t.Context(), id); err != nil {
			return err
		}
		if len(seen) == 0 || seen[len(seen)-1] != j.Status {
			seen = append(seen, j.Status)
		}
		if !j.Done() {
			time.Sleep(150 * time.Millisecond)
			return fmt.Errorf("%s: %+v", j.Status, j)
		}
		return nil
	})
	return j, seen
}

func segmentByName(t *testing.T, c *Client, name string) Segment {
	t.Helper()
	segs, err := c.Segments(t.Context())
	require.NoError(t, err)
	for _, s := range segs {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("segment %s not listed: %+v", name, segs)
	return Segment{}
}

// A drain of one of two members moves every object it holds: the statuses pass through
// DRAINING to DRAINED, the job's figures match what the segment held, no object is counted
// twice or lost, and once the drained member is stopped (SIGTERM, as the kubelet stops it) every
// object reads back byte for byte from the other.
func TestRealDrain(t *testing.T) {
	bin := mooncaketest.Bin(t, "python")
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{Tenants: []string{"team-a"}})
	c := New(m.Admin, WithTimeout(2*time.Second))
	memberA, segA := mooncaketest.StartMember(t, bin, m, "member A", "127.0.0.2", 128<<20)
	_, segB := mooncaketest.StartMember(t, bin, m, "member B", "127.0.0.3", 128<<20)
	watch := []*mooncaketest.Proc{m.Proc, memberA}

	const n, size = 80, 1 << 20
	keys := mooncaketest.Keys("drain", n)
	client := mooncaketest.StartClient(t, bin, m, "team-a")
	client.Put(t, keys, size) // no read yet: a read would lease the objects and block their move

	before, err := c.Metrics(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(n), before.KeyCount)
	usedA := segmentByName(t, c, segA).UsedBytes // reads 0 once DRAINING: read it first
	require.Positive(t, usedA, "free_ratio_first spreads the puts over both members")
	require.Less(t, usedA, int64(n*size), "free_ratio_first spreads the puts over both members")

	start := time.Now()
	job, err := c.CreateDrain(t.Context(), []string{segA}, []string{segB}, 8)
	require.NoError(t, err)
	assert.Equal(t, DrainCreated, job.Status)
	st, err := c.SegmentStatus(t.Context(), segA)
	require.NoError(t, err)
	assert.Equal(t, SegmentDraining, st, "DRAINING from the moment of the POST")
	_, err = c.CreateDrain(t.Context(), []string{segA}, nil, 8)
	assert.True(t, HasCode(err, CodeUnavailableInStatus), "a second drain of a draining segment: %v", err)
	mooncaketest.Poll(t, 10*time.Second, "the drain running with active units", watch, func() error {
		j, err := c.Drain(t.Context(), job.ID)
		if err == nil && (j.Status != DrainRunning || j.ActiveUnits == 0) {
			err = fmt.Errorf("%+v", j)
		}
		return err
	})
	err = c.CancelDrain(t.Context(), job.ID)
	assert.True(t, HasCode(err, CodeUnavailableInStatus), "a running drain has active units and cannot be cancelled: %v", err)

	end, seen := waitDrain(t, c, job.ID, 2*time.Minute, watch)
	took := time.Since(start)
	require.Equal(t, DrainSucceeded, end.Status, "%+v", end)
	assert.Contains(t, seen, DrainRunning)
	assert.Zero(t, end.FailedUnits)
	assert.Equal(t, usedA, end.MigratedBytes, "every byte the segment held moved")
	assert.Equal(t, usedA/size, end.SucceededUnits)
	assert.Equal(t, "Drain job finished successfully", end.Message)
	st, err = c.SegmentStatus(t.Context(), segA)
	require.NoError(t, err)
	assert.Equal(t, SegmentDrained, st)
	assert.Equal(t, SegmentDrained, segmentByName(t, c, segA).Status)
	after, err := c.Metrics(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(n), after.KeyCount, "a drain neither adds nor loses objects")
	t.Logf("drain of %d objects of %d bytes (%d bytes) at max_concurrency 8: %s, %.1f objects/s",
		end.SucceededUnits, size, end.MigratedBytes, took.Round(time.Millisecond), float64(end.SucceededUnits)/took.Seconds())

	// The kubelet's SIGTERM: the drained member unmounts at once and takes nothing with it.
	memberA.Signal(syscall.SIGTERM)
	memberA.Wait(t, 20*time.Second)
	mooncaketest.Poll(t, 10*time.Second, "member A's segment gone", []*mooncaketest.Proc{m.Proc}, func() error {
		segs, err := c.Segments(t.Context())
		if err != nil {
			return err
		}
		if len(segs) != 1 || segs[0].Name != segB {
			return fmt.Errorf("segments %+v", segs)
		}
		return nil
	})
	r := client.Get(t, keys, size)
	assert.Len(t, r.OK, n, "every object reads back byte for byte; missing %v, wrong %v", r.Missing, r.Wrong)
	final, err := c.Metrics(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(n), final.KeyCount)
}

// A drain whose target lacks room ends FAILED: what fit moved, the rest stayed on the source,
// which is OK again, and no object was lost.
func TestRealDrainNoRoom(t *testing.T) {
	bin := mooncaketest.Bin(t, "python")
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{Tenants: []string{"team-a"}})
	c := New(m.Admin, WithTimeout(2*time.Second))
	memberA, segA := mooncaketest.StartMember(t, bin, m, "member A", "127.0.0.2", 64<<20)
	watch := []*mooncaketest.Proc{m.Proc, memberA}

	// Every object on A (B is not there yet): 12 of 4 MiB = 48 MiB, and B holds 32 MiB.
	const n, size = 12, 4 << 20
	keys := mooncaketest.Keys("full", n)
	client := mooncaketest.StartClient(t, bin, m, "team-a")
	client.Put(t, keys, size)
	_, segB := mooncaketest.StartMember(t, bin, m, "member B", "127.0.0.3", 32<<20)
	require.Equal(t, int64(n*size), segmentByName(t, c, segA).UsedBytes)

	start := time.Now()
	job, err := c.CreateDrain(t.Context(), []string{segA}, []string{segB}, 8)
	require.NoError(t, err)
	end, seen := waitDrain(t, c, job.ID, 4*time.Minute, watch)
	t.Logf("drain to a target without room: %s after %s, %+v", end.Status, time.Since(start).Round(time.Millisecond), end)
	require.Equal(t, DrainFailed, end.Status, "%+v (statuses %v)", end, seen)
	assert.Equal(t, "Drain job failed: unrecoverable units remain", end.Message)
	assert.Positive(t, end.SucceededUnits, "what fit moved")
	assert.Less(t, end.SucceededUnits, int64(n))
	assert.Equal(t, end.SucceededUnits*size, end.MigratedBytes)
	assert.Positive(t, end.FailedUnits)
	st, err := c.SegmentStatus(t.Context(), segA)
	require.NoError(t, err)
	assert.Equal(t, SegmentOK, st, "a failed drain gives the segment back")

	mt, err := c.Metrics(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(n), mt.KeyCount)
	r := client.Get(t, keys, size)
	assert.Len(t, r.OK, n, "nothing lost; missing %v, wrong %v", r.Missing, r.Wrong)
}

// remove_all of one tenant removes only its unleased objects and reports how many; its objects
// read within the lease stay until the lease expires, and DeleteTenant succeeds once none is
// left. The other tenant's objects all read back byte for byte.
func TestRealRemoveTenantObjects(t *testing.T) {
	bin := mooncaketest.Bin(t, "python")
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{
		Tenants: []string{"team-a", "team-b"},
		Args:    []string{"-default_kv_lease_ttl=2000"}, // 2 s, so the leased objects go soon
	})
	c := New(m.Admin, WithTimeout(2*time.Second))
	member, _ := mooncaketest.StartMember(t, bin, m, "member", "127.0.0.2", 128<<20)
	watch := []*mooncaketest.Proc{m.Proc, member}

	const n, size = 40, 64 << 10
	a := mooncaketest.StartClient(t, bin, m, "team-a")
	b := mooncaketest.StartClient(t, bin, m, "team-b")
	keysA, keysB := mooncaketest.Keys("a", n), mooncaketest.Keys("b", n)
	a.Put(t, keysA, size)
	b.Put(t, keysB, size)
	require.Len(t, a.Get(t, keysA[:10], size).OK, 10, "the 10 read are leased from now on")

	removed, err := c.RemoveTenantObjects(t.Context(), "team-a")
	require.NoError(t, err)
	assert.Equal(t, int64(n-10), removed, "the unleased objects")
	mt, err := c.Metrics(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(n+10), mt.KeyCount)
	assert.Equal(t, int64(10*size), mt.Tenants["team-a"].ChargedBytes)
	assert.Equal(t, int64(n*size), mt.Tenants["team-b"].ChargedBytes)
	err = c.DeleteTenant(t.Context(), "team-a")
	assert.True(t, HasCode(err, CodeTenantNotEmpty), "leased objects remain: %v", err)

	start := time.Now()
	total := removed
	mooncaketest.Poll(t, 15*time.Second, "team-a's leased objects removed", watch, func() error {
		more, err := c.RemoveTenantObjects(t.Context(), "team-a")
		if err != nil {
			return err
		}
		total += more
		if total < n {
			time.Sleep(200 * time.Millisecond)
			return fmt.Errorf("removed %d of %d", total, n)
		}
		return nil
	})
	t.Logf("the 10 leased objects went %s after the first remove_all (lease TTL 2 s)", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, int64(n), total, "every object counted once")
	require.NoError(t, c.DeleteTenant(t.Context(), "team-a"))

	mt, err = c.Metrics(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(n), mt.KeyCount)
	r := b.Get(t, keysB, size)
	assert.Len(t, r.OK, n, "team-b untouched; missing %v, wrong %v", r.Missing, r.Wrong)
	assert.Len(t, a.Get(t, keysA, size).Missing, n, "team-a's objects are gone")
}
