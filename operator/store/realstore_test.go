//go:build linux

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
