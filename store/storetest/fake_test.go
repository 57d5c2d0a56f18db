package storetest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

const (
	gib = int64(1) << 30
	mib = int64(1) << 20
)

func newFake(t *testing.T, opts storetest.FakeOptions) (*storetest.Fake, *store.Client) {
	t.Helper()
	f := storetest.NewFake(opts)
	t.Cleanup(f.Close)
	return f, store.New(f.URL())
}

// Figures measured on mooncake_master 0.3.13.post1 (hack/MOONCAKE_NOTES.md §3 and
// store/realstore_test.go).
func TestEffectiveQuotas(t *testing.T) {
	cases := []struct {
		name      string
		requested map[string]int64
		capacity  int64
		want      map[string]int64
	}{
		{"nothing mounted", map[string]int64{"team-a": gib}, 0, map[string]int64{"team-a": 0}},
		{"fits", map[string]int64{"a": 64 * mib, "b": mib}, 256 * mib, map[string]int64{"a": 64 * mib, "b": mib}},
		{"exactly fits", map[string]int64{"a": 128 * mib, "b": 128 * mib}, 256 * mib, map[string]int64{"a": 128 * mib, "b": 128 * mib}},
		{"one over", map[string]int64{"team-a": gib}, 256 * mib, map[string]int64{"team-a": 256 * mib}},
		{"notes: 64 MiB / 1 MiB / 512 MiB over 256 MiB",
			map[string]int64{"a": 64 * mib, "b": mib, "c": 512 * mib}, 256 * mib,
			map[string]int64{"a": 29774470, "b": 465226, "c": 238195760}},
		{"1 GiB + 2 GiB over 256 MiB", map[string]int64{"team-a": gib, "team-b": 2 * gib}, 256 * mib,
			map[string]int64{"team-a": 89478485, "team-b": 178956971}},
		{"a tie goes to the smallest tenant_id", map[string]int64{"team-c": gib, "team-a": gib, "team-b": gib}, 256 * mib,
			map[string]int64{"team-a": 89478486, "team-b": 89478485, "team-c": 89478485}},
		{"huge requests do not overflow", map[string]int64{"a": 1<<63 - 1, "b": 1<<63 - 1, "c": 1}, 256 * mib,
			map[string]int64{"a": 128 * mib, "b": 128 * mib, "c": 0}},
		{"none", map[string]int64{}, 256 * mib, map[string]int64{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := storetest.EffectiveQuotas(tc.requested, tc.capacity)
			assert.Equal(t, tc.want, got)
			var sum int64
			for _, v := range got {
				sum += v
			}
			assert.LessOrEqual(t, sum, tc.capacity)
		})
	}
}

func TestFakeRestart(t *testing.T) {
	ctx := context.Background()
	f, c := newFake(t, storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"team-a": gib}})
	url := f.URL()
	f.MountSegment("127.0.0.1:14297", 256*mib, "tcp")
	segs, err := c.Segments(ctx)
	require.NoError(t, err)

	_, err = c.PutTenant(ctx, "team-b", 2*gib)
	require.NoError(t, err)
	require.NoError(t, c.DeleteTenant(ctx, "team-a"))
	f.SetCharged("team-b", 4096)
	assert.Equal(t, map[string]int64{"team-b": 2 * gib}, f.PolicyFile())

	f.Restart()
	assert.Equal(t, url, f.URL())
	tenants, err := c.Tenants(ctx)
	require.NoError(t, err)
	require.Len(t, tenants, 1, "the ledger is rebuilt from the persisted file")
	assert.Equal(t, "team-b", tenants[0].ID)
	assert.Zero(t, tenants[0].ChargedBytes, "objects are lost")
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	assert.Zero(t, m.AllocatedBytes)
	after, err := c.Segments(ctx)
	require.NoError(t, err)
	assert.Equal(t, segs, after, "members re-mount the same segments")
	require.NoError(t, c.DeleteTenant(ctx, "team-b"), "empty after the restart")

	// A file replaced while running is read only at the next start.
	f.ReplacePolicyFile(map[string]int64{"team-z": mib})
	tenants, err = c.Tenants(ctx)
	require.NoError(t, err)
	assert.Empty(t, tenants)
	f.Restart()
	tenants, err = c.Tenants(ctx)
	require.NoError(t, err)
	require.Len(t, tenants, 1)
	assert.Equal(t, "team-z", tenants[0].ID)
}

func TestFakeDown(t *testing.T) {
	ctx := context.Background()
	f, c := newFake(t, storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"team-a": gib}})
	f.SetCharged("team-a", 10)
	f.SetDown(true)
	f.SetDown(true) // idempotent
	_, err := c.Health(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connection refused")
	f.SetDown(false)
	f.SetDown(false)
	tenants, err := c.Tenants(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(10), tenants[0].ChargedBytes, "down/up is not a restart")
	f.Close()
	_, err = c.Health(ctx)
	require.Error(t, err)
}

func TestFakeReadOnlyPolicy(t *testing.T) {
	ctx := context.Background()
	f, c := newFake(t, storetest.FakeOptions{MultiTenancy: true, ReadOnlyPolicy: true, Tenants: map[string]int64{"team-a": gib}})
	_, err := c.PutTenant(ctx, "team-b", gib)
	assert.True(t, store.HasCode(err, store.CodePersistFail), "%v", err)
	err = c.DeleteTenant(ctx, "team-a")
	assert.True(t, store.HasCode(err, store.CodePersistFail), "%v", err)
	var se *store.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusInternalServerError, se.HTTPStatus)
	tenants, err := c.Tenants(ctx)
	require.NoError(t, err)
	require.Len(t, tenants, 1, "nothing changed")
	assert.Equal(t, map[string]int64{"team-a": gib}, f.PolicyFile())
}

func TestFakeChargedWithoutPolicy(t *testing.T) {
	ctx := context.Background()
	f, c := newFake(t, storetest.FakeOptions{MultiTenancy: true})
	f.SetCharged("orphan", 5)
	tenants, err := c.Tenants(ctx)
	require.NoError(t, err)
	assert.Equal(t, []store.Tenant{{ID: "orphan", ChargedBytes: 5, OverQuota: true}}, tenants)
	assert.True(t, store.HasCode(c.DeleteTenant(ctx, "orphan"), store.CodeObjectNotFound))
	f.SetCharged("orphan", 0)
	tenants, err = c.Tenants(ctx)
	require.NoError(t, err)
	assert.Empty(t, tenants)
}

func TestFakeRequestsLog(t *testing.T) {
	ctx := context.Background()
	f, c := newFake(t, storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"team-a": gib}})
	_, err := c.Tenants(ctx)
	require.NoError(t, err)
	_, err = c.Metrics(ctx)
	require.NoError(t, err)
	_, err = c.PutTenant(ctx, "team a", mib)
	require.NoError(t, err)
	require.NoError(t, c.DeleteTenant(ctx, "team a"))
	assert.Equal(t, []string{
		"GET /api/v1/tenant_quotas",
		"GET /metrics",
		"PUT /api/v1/tenant_quotas?tenant_id=team%20a",
		"DELETE /api/v1/tenant_quotas?tenant_id=team%20a",
	}, f.Requests())
	f.ResetRequests()
	assert.Empty(t, f.Requests())
}

// raw sends one request to the fake and returns the status and body.
func raw(t *testing.T, method, url, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

// The answers of hack/MOONCAKE_NOTES.md §3, byte for byte where the notes give them.
func TestFakeWireFormat(t *testing.T) {
	f, _ := newFake(t, storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"team-a": gib}})
	u := f.URL() + "/api/v1/tenant_quotas"
	const teamA = `{"tenant_id":"team-a","requested_quota_bytes":1073741824,"effective_quota_bytes":0,"charged_bytes":0,"admission_closed":false,"over_quota":false,"has_explicit_policy":true}`
	cases := []struct {
		method, url, body string
		status            int
		want              string
	}{
		{"GET", u, "", 200, `{"success":true,"data":[` + teamA + `]}`},
		{"GET", u + "?tenant_id=", "", 200, `{"success":true,"data":[` + teamA + `]}`},
		{"GET", u + "?tenant_id=team-a", "", 200, `{"success":true,"data":` + teamA + `}`},
		{"GET", u + "?tenant_id=nobody", "", 404, `{"success":false,"error_code":-704,"error_message":"OBJECT_NOT_FOUND"}`},
		{"GET", u + "?tenant_id=_bad", "", 400, `{"success":false,"error_code":-600,"error_message":"Invalid tenant_id"}`},
		{"GET", u + "?tenant_id=a%09b", "", 400, `{"success":false,"error_code":-600,"error_message":"Invalid tenant_id"}`},
		{"PUT", u, `{"tenant_id":"team-c","quota_bytes":1048576}`, 400, `{"success":false,"error_code":-600,"error_message":"Missing or invalid tenant_id"}`},
		{"PUT", u + "?tenant_id=_x", `notjson`, 400, `{"success":false,"error_code":-600,"error_message":"Missing or invalid tenant_id"}`},
		{"PUT", u + "?tenant_id=team-c", `{"quota_bytes":1048576}`, 400, `{"success":false,"error_code":-600,"error_message":"Tenant quota must be in [1, 2^63 - 1] bytes"}`},
		{"PUT", u + "?tenant_id=team-c", `{"requested_quota_bytes":0}`, 400, `{"success":false,"error_code":-600,"error_message":"Tenant quota must be in [1, 2^63 - 1] bytes"}`},
		{"PUT", u + "?tenant_id=team-c", `{"requested_quota_bytes":9223372036854775808}`, 400, `{"success":false,"error_code":-600,"error_message":"Tenant quota must be in [1, 2^63 - 1] bytes"}`},
		{"PUT", u + "?tenant_id=team-c", `{"requested_quota_bytes":-1}`, 400, `{"success":false,"error_code":-600,"error_message":"Invalid JSON body: Failed to parse number"}`},
		{"PUT", u + "?tenant_id=team-c", `{"requested_quota_bytes":"1GB"}`, 400, `{"success":false,"error_code":-600,"error_message":"Invalid JSON body: Failed to parse number"}`},
		{"PUT", u + "?tenant_id=team-c", `{"requested_quota_bytes":1.5}`, 400, `{"success":false,"error_code":-600,"error_message":"Invalid JSON body: Failed to parse number"}`},
		{"PUT", u + "?tenant_id=team-c", `notjson`, 400, `{"success":false,"error_code":-600,"error_message":"Invalid JSON body: Expected these: {"}`},
		{"PUT", u + "?tenant_id=team-c", `[]`, 400, `{"success":false,"error_code":-600,"error_message":"Invalid JSON body: Expected these: {"}`},
		{"PUT", u + "?tenant_id=team-c&tenant_id=team-d", `{"requested_quota_bytes":1048576,"extra":1}`, 200,
			`{"success":true,"data":{"tenant_id":"team-c","requested_quota_bytes":1048576,"effective_quota_bytes":0,"charged_bytes":0,"admission_closed":false,"over_quota":false,"has_explicit_policy":true}}`},
		{"DELETE", u + "?tenant_id=team-c", "", 200, `{"success":true,"data":null}`},
		{"DELETE", u + "?tenant_id=team-c", "", 404, `{"success":false,"error_code":-704,"error_message":"OBJECT_NOT_FOUND"}`},
		{"DELETE", u, "", 400, `{"success":false,"error_code":-600,"error_message":"Missing or invalid tenant_id"}`},
		{"POST", u + "?tenant_id=x", "", 404, `404 Not Found`},
		{"GET", f.URL() + "/nope", "", 404, `404 Not Found`},
		{"POST", f.URL() + "/health", "", 404, `404 Not Found`},
		{"GET", f.URL() + "/health", "", 200, `{"status":"ok","role":"leader","ha_state":"serving","service_ready":true,"leader_address":null,"view_version":null}`},
		{"GET", f.URL() + "/get_segments_detail", "", 200, `{"total_segments":0,"segments":[]}`},
		{"GET", f.URL() + "/get_all_segments", "", 200, ``},
	}
	for _, tc := range cases {
		status, body, hdr := raw(t, tc.method, tc.url, tc.body)
		assert.Equal(t, tc.status, status, "%s %s %s", tc.method, tc.url, tc.body)
		assert.Equal(t, tc.want, body, "%s %s %s", tc.method, tc.url, tc.body)
		if strings.HasPrefix(tc.want, "{") {
			assert.Equal(t, "application/json; charset=utf-8", hdr.Get("Content-Type"))
		}
		if tc.want == "404 Not Found" {
			assert.Empty(t, hdr.Get("Content-Type"))
		}
	}

	f.SetCharged("team-a", 7)
	status, body, _ := raw(t, "DELETE", u+"?tenant_id=team-a", "")
	assert.Equal(t, 409, status)
	assert.Equal(t, `{"success":false,"error_code":-1702,"error_message":"TENANT_NOT_EMPTY"}`, body)

	f.MountSegment("127.0.0.1:14297", 256*mib, "tcp")
	status, body, _ = raw(t, "GET", f.URL()+"/get_all_segments", "")
	assert.Equal(t, 200, status)
	assert.Equal(t, "127.0.0.1:14297\n", body)
	_, body, _ = raw(t, "GET", f.URL()+"/get_segments_detail", "")
	var detail struct {
		Total    int              `json:"total_segments"`
		Segments []map[string]any `json:"segments"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &detail))
	assert.Equal(t, 1, detail.Total)
	assert.Contains(t, body, `"size_human":"0.25 GiB"`)
	assert.Contains(t, body, `"allocator_used_bytes":7,`)
	assert.Contains(t, body, `"allocator_usage_percent":2.60770320892334E-6}`)
	f.SetCharged("team-a", 0)
	_, body, _ = raw(t, "GET", f.URL()+"/get_segments_detail", "")
	assert.Contains(t, body, `"allocator_usage_percent":0E0}`)
}

func TestFakeMultiTenancyOffWire(t *testing.T) {
	f, _ := newFake(t, storetest.FakeOptions{})
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		for _, q := range []string{"", "?tenant_id=a"} {
			status, body, _ := raw(t, m, f.URL()+"/api/v1/tenant_quotas"+q, `{"requested_quota_bytes":1}`)
			assert.Equal(t, 409, status)
			assert.Equal(t, `{"success":false,"error_code":-1011,"error_message":"UNAVAILABLE_IN_CURRENT_MODE"}`, body)
		}
	}
	_, body, _ := raw(t, "GET", f.URL()+"/metrics", "")
	assert.NotContains(t, body, "mooncake_tenant")
}

func TestFakeMetrics(t *testing.T) {
	ctx := context.Background()
	f, c := newFake(t, storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"team-a": 64 * mib, `we"ird\name`: mib}})
	_, body, hdr := raw(t, "GET", f.URL()+"/metrics", "")
	assert.Equal(t, "text/plain; version=0.0.4", hdr.Get("Content-Type"))
	assert.Contains(t, body, "# TYPE mooncake_tenant_quota_requested_bytes gauge\n")
	assert.Contains(t, body, "mooncake_tenant_quota_allocatable_capacity_bytes 0\n")
	assert.NotContains(t, body, "segment_total_capacity_bytes")
	assert.NotContains(t, body, "master_value_size_bytes")

	f.MountSegment("127.0.0.1:1", 128*mib, "tcp")
	f.MountSegment("127.0.0.1:2", 128*mib, "tcp")
	f.SetCharged("team-a", 15)
	_, body, _ = raw(t, "GET", f.URL()+"/metrics", "")
	assert.Contains(t, body, `segment_total_capacity_bytes{segment="127.0.0.1:2"} 134217728`)
	assert.Contains(t, body, "master_value_size_bytes_bucket{le=\"4096.000000\"} 1\n")
	assert.Contains(t, body, `mooncake_tenant_quota_requested_bytes{tenant_id="we\"ird\\name"} 1048576`)
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	m.CounterSum = 0 // TestFakeCounters
	assert.Equal(t, store.Metrics{
		TotalCapacityBytes: 256 * mib,
		AllocatedBytes:     15,
		KeyCount:           1,
		Segments: map[string]store.SegmentMetrics{
			"127.0.0.1:1": {AllocatedBytes: 15, CapacityBytes: 128 * mib},
			"127.0.0.1:2": {CapacityBytes: 128 * mib},
		},
		Tenants: map[string]store.TenantMetrics{
			"team-a":      {RequestedBytes: 64 * mib, EffectiveBytes: 64 * mib, ChargedBytes: 15},
			`we"ird\name`: {RequestedBytes: mib, EffectiveBytes: mib},
		},
	}, m)

	f.UnmountSegment("127.0.0.1:1")
	m, err = c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, 128*mib, m.TotalCapacityBytes)
}

// The counters behave as the real master's: mounts count, each mounted member pings once a
// second, and a restarted master starts over (the members' re-mounts are remount requests).
func TestFakeCounters(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f, c := newFake(t, storetest.FakeOptions{Clock: func() time.Time { return now }})
	sum := func() float64 {
		t.Helper()
		m, err := c.Metrics(ctx)
		require.NoError(t, err)
		return m.CounterSum
	}
	assert.Zero(t, sum(), "a fresh master")
	f.MountSegment("127.0.0.1:1", mib, "tcp")
	f.MountSegment("127.0.0.1:2", mib, "tcp")
	assert.Equal(t, 2.0, sum(), "two mounts")
	now = now.Add(10 * time.Second)
	assert.Equal(t, 22.0, sum(), "two mounts and 2 x 10 pings")
	_, body, _ := raw(t, "GET", f.URL()+"/metrics", "")
	assert.Contains(t, body, "master_ping_requests_total 20\n")
	f.SetDown(true)
	f.SetDown(false)
	assert.Equal(t, 22.0, sum(), "the same process answering again")
	f.Restart()
	assert.Equal(t, 2.0, sum(), "a restarted master: the two re-mounts, no pings yet")
	_, body, _ = raw(t, "GET", f.URL()+"/metrics", "")
	assert.Contains(t, body, "master_remount_segment_requests_total 2\n")
	assert.Contains(t, body, "master_mount_segment_requests_total 0\n")
	now = now.Add(time.Second)
	assert.Equal(t, 4.0, sum())
}

// A tenant's eviction and rejection counters appear once they moved, as the master creates
// them, and start over with a restarted master.
func TestFakeTenantCounters(t *testing.T) {
	ctx := context.Background()
	f, c := newFake(t, storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"team-a": mib}})
	_, body, _ := raw(t, "GET", f.URL()+"/metrics", "")
	assert.NotContains(t, body, "mooncake_tenant_evict_bytes_total")
	assert.NotContains(t, body, "mooncake_tenant_quota_reject_total")
	f.Evict("team-a", 512<<10)
	f.Evict("team-a", 512<<10)
	f.Reject("team-a")
	_, body, _ = raw(t, "GET", f.URL()+"/metrics", "")
	assert.Contains(t, body, "# TYPE mooncake_tenant_evict_bytes_total counter\nmooncake_tenant_evict_bytes_total{tenant_id=\"team-a\"} 1048576\n")
	assert.Contains(t, body, `mooncake_tenant_quota_reject_total{tenant_id="team-a",reason="quota_exceeded"} 1`)
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, mib, m.Tenants["team-a"].EvictedBytes)
	assert.Equal(t, 1.0, m.Tenants["team-a"].Rejected)
	f.Restart()
	m, err = c.Metrics(ctx)
	require.NoError(t, err)
	assert.Zero(t, m.Tenants["team-a"].EvictedBytes)
	assert.Zero(t, m.Tenants["team-a"].Rejected)
}

func TestNewFakeRefusesWhatTheMasterRefuses(t *testing.T) {
	for _, seed := range []map[string]int64{{"_sys": 1}, {"a": 0}, {"": 1}, {"a\tb": 1}} {
		assert.Panics(t, func() { storetest.NewFake(storetest.FakeOptions{MultiTenancy: true, Tenants: seed}) }, "%v", seed)
	}
}

// remove_all and the drain API on the wire, as measured on the real master: tenant_id is not
// percent-decoded, no tenant_id means every tenant, force removes leased objects, and drain
// requests are refused with the real bodies.
func TestFakeRemoveAllAndDrainWire(t *testing.T) {
	f, c := newFake(t, storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"team-a": gib, "x y": gib}})
	ctx := context.Background()
	f.MountSegment("127.0.0.1:14123", 256*mib, "tcp")
	f.MountSegment("127.0.0.1:13951", 256*mib, "tcp")
	f.SetObjects("team-a", 9, 9<<16)
	f.SetObjects("x y", 1, 1<<16)
	f.SetObjects("team-b", 200, 200<<16)
	f.LeaseObjects("team-b", 200, 200<<16)
	u := f.URL()

	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/api/v1/remove_all?tenant_id=team-a", "", 404, "404 Not Found"},
		{"POST", "/api/v1/remove_all?tenant_id=x%20y", "", 200, `{"success":true,"removed_count":0}`},
		{"POST", "/api/v1/remove_all?tenant_id=x+y", "", 200, `{"success":true,"removed_count":0}`},
		{"POST", "/api/v1/remove_all?tenant_id=_bad", "", 200, `{"success":true,"removed_count":0}`},
		{"POST", "/api/v1/remove_all", "", 200, `{"success":true,"removed_count":10}`}, // every tenant; team-b is leased
		{"POST", "/api/v1/remove_all?tenant_id=team-b&force=yes", "", 200, `{"success":true,"removed_count":0}`},
		{"POST", "/api/v1/remove_all?tenant_id=team-b&force=1", "", 200, `{"success":true,"removed_count":200}`},
		{"GET", "/api/v1/segments/status?segment=127.0.0.1:14123", "", 200, `{"success":true,"segment":"127.0.0.1:14123","status":1,"status_name":"OK","error_code":0,"error_message":""}`},
		{"GET", "/api/v1/segments/status?segment=127.0.0.1:15001", "", 404, `{"success":false,"error_code":-101,"error_message":"SEGMENT_NOT_FOUND"}`},
		{"GET", "/api/v1/segments/status?segment=", "", 400, `{"success":false,"error_code":-600,"error_message":"Missing segment query parameter"}`},
		{"POST", "/api/v1/drain_jobs", `{"segments":[]}`, 400, `{"success":false,"error_code":-600,"error_message":"INVALID_PARAMS"}`},
		{"POST", "/api/v1/drain_jobs", `{"segment":["127.0.0.1:14123"]}`, 400, `{"success":false,"error_code":-600,"error_message":"INVALID_PARAMS"}`},
		{"POST", "/api/v1/drain_jobs", `{"segments":["127.0.0.1:14123"],"max_concurrency":0}`, 400, `{"success":false,"error_code":-600,"error_message":"INVALID_PARAMS"}`},
		{"POST", "/api/v1/drain_jobs", `notjson`, 400, `{"success":false,"error_code":-600,"error_message":"Invalid JSON body: Expected these: {"}`},
		{"POST", "/api/v1/drain_jobs", `{"segments":["nope"]}`, 404, `{"success":false,"error_code":-101,"error_message":"SEGMENT_NOT_FOUND"}`},
		{"GET", "/api/v1/drain_jobs", "", 404, "404 Not Found"},
		{"GET", "/api/v1/drain_jobs/query?job_id=1-2", "", 404, `{"success":false,"error_code":-1402,"error_message":"JOB_NOT_FOUND"}`},
		{"GET", "/api/v1/drain_jobs/query", "", 400, `{"success":false,"error_code":-600,"error_message":"Missing or invalid job_id"}`},
	} {
		status, body, _ := raw(t, tc.method, u+tc.path, tc.body)
		assert.Equal(t, tc.status, status, "%s %s", tc.method, tc.path)
		assert.Equal(t, tc.want, body, "%s %s", tc.method, tc.path)
	}
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	assert.Zero(t, m.KeyCount)
	assert.Zero(t, m.AllocatedBytes)

	// A drain with the real answer; its segment's allocator_used_bytes reads 0 from then on.
	f.SetObjects("team-a", 4, 4<<20)
	status, body, _ := raw(t, "POST", u+"/api/v1/drain_jobs", `{"segments":["127.0.0.1:13951"],"max_concurrency":4}`)
	require.Equal(t, 200, status, body)
	id := f.DrainJobs()[0]
	assert.Equal(t, `{"success":true,"job_id":"`+id+`","status":"CREATED","error_code":0,"error_message":""}`, body)
	segs, err := c.Segments(ctx)
	require.NoError(t, err)
	for _, s := range segs {
		if s.Name == "127.0.0.1:13951" {
			assert.Equal(t, "DRAINING", s.Status)
			assert.Zero(t, s.UsedBytes)
		}
	}
	m, err = c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(4), m.KeyCount, "a drain moves objects, it does not count them")
	assert.Equal(t, int64(4<<20), m.Segments["127.0.0.1:13951"].AllocatedBytes+m.Segments["127.0.0.1:14123"].AllocatedBytes)
}
