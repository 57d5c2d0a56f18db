package store

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/store/storetest"
)

// A drain's life against the fake master: refusals with the master's codes, the segments'
// statuses, the job read back, a cancel refused while units are active, and the job's end.
func TestClientDrainAgainstFake(t *testing.T) {
	ctx := context.Background()
	f := storetest.NewFake(storetest.FakeOptions{MultiTenancy: true})
	t.Cleanup(f.Close)
	c := New(f.URL())
	const a, b = "10.0.0.7:13001", "10.0.0.8:12611"
	f.MountSegment(a, 256*mib, "tcp")
	f.MountSegment(b, 256*mib, "tcp")

	_, err := c.CreateDrain(ctx, nil, nil, 8)
	assertStoreError(t, err, http.StatusBadRequest, CodeInvalidParams, "INVALID_PARAMS")
	_, err = c.CreateDrain(ctx, []string{a, a}, nil, 8)
	assertStoreError(t, err, http.StatusBadRequest, CodeInvalidParams, "INVALID_PARAMS")
	_, err = c.CreateDrain(ctx, []string{a}, []string{a}, 8)
	assertStoreError(t, err, http.StatusBadRequest, CodeInvalidParams, "INVALID_PARAMS")
	_, err = c.CreateDrain(ctx, []string{"10.0.0.7:15001"}, nil, 8) // a te_endpoint is not a segment name
	assertStoreError(t, err, http.StatusNotFound, CodeSegmentNotFound, "SEGMENT_NOT_FOUND")
	_, err = c.CreateDrain(ctx, []string{a}, []string{"nope"}, 8)
	assertStoreError(t, err, http.StatusNotFound, CodeSegmentNotFound, "SEGMENT_NOT_FOUND")
	assert.Empty(t, f.DrainJobs(), "a refused drain creates no job")

	st, err := c.SegmentStatus(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, SegmentOK, st)
	_, err = c.SegmentStatus(ctx, "nope")
	assertStoreError(t, err, http.StatusNotFound, CodeSegmentNotFound, "SEGMENT_NOT_FOUND")
	_, err = c.SegmentStatus(ctx, "")
	assertStoreError(t, err, http.StatusBadRequest, CodeInvalidParams, "Missing segment query parameter")

	job, err := c.CreateDrain(ctx, []string{a}, []string{b}, 8)
	require.NoError(t, err)
	assert.Equal(t, DrainJob{ID: job.ID, Status: DrainCreated, Segments: []string{a}}, job)
	assert.Equal(t, []string{job.ID}, f.DrainJobs())
	st, err = c.SegmentStatus(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, SegmentDraining, st, "DRAINING from the moment of the POST")
	segs, err := c.Segments(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{a: SegmentDraining, b: SegmentOK}, statuses(segs))

	// Draining again, or to a draining target, is refused.
	_, err = c.CreateDrain(ctx, []string{a}, nil, 8)
	assertStoreError(t, err, http.StatusConflict, CodeUnavailableInStatus, "UNAVAILABLE_IN_CURRENT_STATUS")
	_, err = c.CreateDrain(ctx, []string{b}, []string{a}, 8)
	assertStoreError(t, err, http.StatusConflict, CodeUnavailableInStatus, "UNAVAILABLE_IN_CURRENT_STATUS")

	got, err := c.Drain(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, DrainJob{ID: job.ID, Status: DrainCreated, Segments: []string{a}, Message: "Drain job created",
		CreatedAtMs: got.CreatedAtMs, UpdatedAtMs: got.CreatedAtMs}, got)
	assert.False(t, got.Done())
	assert.NotZero(t, got.CreatedAtMs)
	f.SetDrain(job.ID, storetest.DrainProgress{Status: DrainRunning, Active: 8, Blocked: 6})
	got, err = c.Drain(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, DrainRunning, got.Status)
	assert.Equal(t, "Drain job running", got.Message)
	assert.Equal(t, int64(8), got.ActiveUnits)
	assert.Equal(t, int64(6), got.BlockedUnits)

	err = c.CancelDrain(ctx, job.ID)
	assertStoreError(t, err, http.StatusConflict, CodeUnavailableInStatus, "UNAVAILABLE_IN_CURRENT_STATUS")
	assert.Equal(t, "POST /api/v1/drain_jobs/cancel?job_id="+job.ID, opOf(t, err))

	f.SetDrain(job.ID, storetest.DrainProgress{Status: DrainSucceeded, Succeeded: 95, MigratedBytes: 24903680})
	got, err = c.Drain(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, DrainJob{ID: job.ID, Status: DrainSucceeded, Segments: []string{a}, SucceededUnits: 95, MigratedBytes: 24903680,
		Message: "Drain job finished successfully", CreatedAtMs: got.CreatedAtMs, UpdatedAtMs: got.UpdatedAtMs}, got)
	assert.True(t, got.Done())
	st, err = c.SegmentStatus(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, SegmentDrained, st)
	err = c.CancelDrain(ctx, job.ID)
	assertStoreError(t, err, http.StatusConflict, CodeUnavailableInStatus, "UNAVAILABLE_IN_CURRENT_STATUS")

	// A failed job leaves its segment OK; a job with no active unit can be cancelled.
	j2, err := c.CreateDrain(ctx, []string{b}, nil, 0)
	require.NoError(t, err)
	f.SetDrain(j2.ID, storetest.DrainProgress{Status: DrainFailed, Succeeded: 13, Failed: 114, MigratedBytes: 13 << 22})
	got, err = c.Drain(ctx, j2.ID)
	require.NoError(t, err)
	assert.Equal(t, "Drain job failed: unrecoverable units remain", got.Message)
	st, err = c.SegmentStatus(ctx, b)
	require.NoError(t, err)
	assert.Equal(t, SegmentOK, st)

	f.MountSegment(a, 256*mib, "tcp") // the member restarted: a new mount is OK
	j3, err := c.CreateDrain(ctx, []string{a}, nil, 2)
	require.NoError(t, err)
	require.NoError(t, c.CancelDrain(ctx, j3.ID), "a job not yet planned has no active unit")
	got, err = c.Drain(ctx, j3.ID)
	require.NoError(t, err)
	assert.Equal(t, DrainCanceled, got.Status)
	st, err = c.SegmentStatus(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, SegmentOK, st)

	_, err = c.Drain(ctx, "1-2")
	assertStoreError(t, err, http.StatusNotFound, CodeJobNotFound, "JOB_NOT_FOUND")
	_, err = c.Drain(ctx, "not-an-id")
	assertStoreError(t, err, http.StatusBadRequest, CodeInvalidParams, "Missing or invalid job_id")

	// Jobs live in the master's memory only.
	f.Restart()
	_, err = c.Drain(ctx, job.ID)
	assertStoreError(t, err, http.StatusNotFound, CodeJobNotFound, "JOB_NOT_FOUND")
	segs, err = c.Segments(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{a: SegmentOK, b: SegmentOK}, statuses(segs))
}

func statuses(segs []Segment) map[string]string {
	m := map[string]string{}
	for _, s := range segs {
		m[s.Name] = s.Status
	}
	return m
}

// The drain requests as the master reads them: segment names in the JSON body, target_segments
// and max_concurrency only when given, the job id (and segment name) escaped in the query.
func TestDrainRequests(t *testing.T) {
	ctx := context.Background()
	type seen struct{ method, path, rawQuery, contentType, body string }
	var (
		mu  sync.Mutex
		got []seen
	)
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), string(b)})
		mu.Unlock()
		switch r.URL.Path {
		case "/api/v1/drain_jobs":
			_, _ = io.WriteString(w, `{"success":true,"job_id":"1101725150691577454-8035271609663295380","status":"CREATED","error_code":0,"error_message":""}`)
		case "/api/v1/drain_jobs/query":
			_, _ = io.WriteString(w, `{"success":true,"job_id":"1101725150691577454-8035271609663295380","type":0,"type_name":"DRAIN","status":3,"status_name":"SUCCEEDED","created_at_ms_epoch":1796152747233,"last_updated_at_ms_epoch":1796152771681,"segments":["127.0.0.1:14123"],"succeeded_units":95,"failed_units":0,"blocked_units":0,"active_units":0,"migrated_bytes":24903680,"message":"Drain job finished successfully","error_code":0,"error_message":""}`)
		case "/api/v1/segments/status":
			_, _ = io.WriteString(w, `{"success":true,"segment":"127.0.0.1:14123","status":2,"status_name":"DRAINING","error_code":0,"error_message":""}`)
		default:
			_, _ = io.WriteString(w, `{"success":true,"job_id":"1101725150691577454-8035271609663295380","status":"CANCELED","error_code":0,"error_message":""}`)
		}
	})
	_, err := c.CreateDrain(ctx, []string{"127.0.0.1:14123"}, []string{"127.0.0.1:13951", "[fd00::2]:13002"}, 8)
	require.NoError(t, err)
	job, err := c.CreateDrain(ctx, []string{"127.0.0.1:14123"}, nil, 0)
	require.NoError(t, err)
	assert.Equal(t, "1101725150691577454-8035271609663295380", job.ID)
	j, err := c.Drain(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, DrainJob{ID: job.ID, Status: DrainSucceeded, Segments: []string{"127.0.0.1:14123"}, SucceededUnits: 95,
		MigratedBytes: 24903680, Message: "Drain job finished successfully", CreatedAtMs: 1796152747233, UpdatedAtMs: 1796152771681}, j)
	require.NoError(t, c.CancelDrain(ctx, job.ID))
	st, err := c.SegmentStatus(ctx, "127.0.0.1:14123")
	require.NoError(t, err)
	assert.Equal(t, SegmentDraining, st)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []seen{
		{"POST", "/api/v1/drain_jobs", "", "application/json", `{"segments":["127.0.0.1:14123"],"target_segments":["127.0.0.1:13951","[fd00::2]:13002"],"max_concurrency":8}`},
		{"POST", "/api/v1/drain_jobs", "", "application/json", `{"segments":["127.0.0.1:14123"]}`},
		{"GET", "/api/v1/drain_jobs/query", "job_id=1101725150691577454-8035271609663295380", "", ""},
		{"POST", "/api/v1/drain_jobs/cancel", "job_id=1101725150691577454-8035271609663295380", "", ""},
		{"GET", "/api/v1/segments/status", "segment=127.0.0.1%3A14123", "", ""},
	}, got)
}

// Answers of the drain API copied from the real master (0.3.13.post1): each failure is an *Error
// with the master's code, whatever the call.
func TestDrainErrors(t *testing.T) {
	ctx := context.Background()
	calls := map[string]func(*Client) error{
		"CreateDrain":   func(c *Client) error { _, err := c.CreateDrain(ctx, []string{"s"}, nil, 4); return err },
		"Drain":         func(c *Client) error { _, err := c.Drain(ctx, "1-2"); return err },
		"CancelDrain":   func(c *Client) error { return c.CancelDrain(ctx, "1-2") },
		"SegmentStatus": func(c *Client) error { _, err := c.SegmentStatus(ctx, "s"); return err },
	}
	cases := []struct {
		name   string
		status int
		body   string
		code   int
		msg    string
	}{
		{"bad request", 400, `{"success":false,"error_code":-600,"error_message":"INVALID_PARAMS"}`, CodeInvalidParams, "INVALID_PARAMS"},
		{"bad JSON", 400, `{"success":false,"error_code":-600,"error_message":"Invalid JSON body: Expected these: {"}`, CodeInvalidParams, "Invalid JSON body: Expected these: {"},
		{"unknown segment", 404, `{"success":false,"error_code":-101,"error_message":"SEGMENT_NOT_FOUND"}`, CodeSegmentNotFound, "SEGMENT_NOT_FOUND"},
		{"already draining", 409, `{"success":false,"error_code":-1010,"error_message":"UNAVAILABLE_IN_CURRENT_STATUS"}`, CodeUnavailableInStatus, "UNAVAILABLE_IN_CURRENT_STATUS"},
		{"unknown job", 404, `{"success":false,"error_code":-1402,"error_message":"JOB_NOT_FOUND"}`, CodeJobNotFound, "JOB_NOT_FOUND"},
		{"a standby", 503, `{"success":false,"error_code":-1011,"error_message":"UNAVAILABLE_IN_CURRENT_MODE"}`, CodeUnavailableInCurrentMode, "UNAVAILABLE_IN_CURRENT_MODE"},
		{"a master without the API", 404, "404 Not Found", 0, "404 Not Found"},
	}
	for _, tc := range cases {
		for name, call := range calls {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				assertStoreError(t, call(serve(t, fixed(tc.status, "application/json; charset=utf-8", tc.body))), tc.status, tc.code, tc.msg)
			})
		}
	}
	for name, call := range calls {
		t.Run("200 that is not an answer/"+name, func(t *testing.T) {
			err := call(serve(t, fixed(200, "text/plain", "ok")))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "not a ")
		})
	}
	_, err := serve(t, fixed(200, "application/json", `{"success":true}`)).CreateDrain(ctx, []string{"s"}, nil, 4)
	assert.ErrorContains(t, err, "success without job_id")
	_, err = serve(t, fixed(200, "application/json", `{"success":true}`)).Drain(ctx, "1-2")
	assert.ErrorContains(t, err, "success without job_id or status_name")
	_, err = serve(t, fixed(200, "application/json", `{"success":true}`)).SegmentStatus(ctx, "s")
	assert.ErrorContains(t, err, "success without status_name")
}

// remove_all of one tenant: the unleased objects go, the count comes back, other tenants stay;
// force is never sent, and an id the master could not match is refused before any request.
func TestRemoveTenantObjects(t *testing.T) {
	ctx := context.Background()
	f := storetest.NewFake(storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"team-a": gib, "team-b": gib}})
	t.Cleanup(f.Close)
	c := New(f.URL())
	f.MountSegment("127.0.0.1:14297", 256*mib, "tcp")
	f.SetObjects("team-a", 200, 200<<16)
	f.SetObjects("team-b", 200, 200<<16)
	f.LeaseObjects("team-a", 50, 50<<16)

	n, err := c.RemoveTenantObjects(ctx, "team-a")
	require.NoError(t, err)
	assert.Equal(t, int64(150), n, "the 50 leased objects stay")
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(250), m.KeyCount)
	assert.Equal(t, int64(50<<16), m.Tenants["team-a"].ChargedBytes)
	assert.Equal(t, int64(200<<16), m.Tenants["team-b"].ChargedBytes)
	err = c.DeleteTenant(ctx, "team-a")
	assertStoreError(t, err, http.StatusConflict, CodeTenantNotEmpty, "TENANT_NOT_EMPTY")

	f.LeaseObjects("team-a", 0, 0) // the leases expired
	n, err = c.RemoveTenantObjects(ctx, "team-a")
	require.NoError(t, err)
	assert.Equal(t, int64(50), n)
	require.NoError(t, c.DeleteTenant(ctx, "team-a"))
	n, err = c.RemoveTenantObjects(ctx, "nobody")
	require.NoError(t, err)
	assert.Zero(t, n, "an unknown tenant removes nothing, and is no error")

	f.ResetRequests()
	for _, id := range []string{"", "x y", "a+b", "a%20b", "été", "a&tenant_id=team-b", "a/b"} {
		_, err := c.RemoveTenantObjects(ctx, id)
		require.ErrorIs(t, err, ErrTenantNotAddressable, "%q", id)
		assert.True(t, strings.HasPrefix(err.Error(), "POST /api/v1/remove_all: "), err.Error())
	}
	assert.Empty(t, f.Requests(), "a refused id sends nothing")
	_, err = c.RemoveTenantObjects(ctx, "x y")
	assert.EqualError(t, err, `POST /api/v1/remove_all: tenant id "x y": tenant id cannot be addressed by remove_all: the master matches tenant_id without percent-decoding it, so only ids of letters, digits, '-', '.', '_' and '~' can be targeted (a Binding's domain, a DNS-1123 label, always can)`)
	_, err = c.RemoveTenantObjects(ctx, "")
	assert.EqualError(t, err, `POST /api/v1/remove_all: empty tenant id: tenant id cannot be addressed by remove_all (without one the master removes every tenant's objects); name the tenant`)

	m, err = c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(200), m.KeyCount, "team-b untouched")
	_, err = c.RemoveTenantObjects(ctx, "Team_B.x~y")
	require.NoError(t, err)
	assert.Equal(t, []string{"GET /metrics", "POST /api/v1/remove_all?tenant_id=Team_B.x~y"}, f.Requests())

	_, err = serve(t, fixed(200, "application/json", `{"success":true}`)).RemoveTenantObjects(ctx, "team-a")
	assert.ErrorContains(t, err, "success without removed_count")
	_, err = serve(t, fixed(404, "", "404 Not Found")).RemoveTenantObjects(ctx, "team-a")
	assertStoreError(t, err, 404, 0, "404 Not Found")
}

func TestMetricsSegmentsAndKeys(t *testing.T) {
	m, err := ParseMetrics([]byte(`# TYPE master_key_count gauge
master_key_count 200
# TYPE master_evicted_key_count counter
master_evicted_key_count 3
# TYPE segment_allocated_bytes gauge
segment_allocated_bytes{segment="127.0.0.1:14123"} 268435456
segment_allocated_bytes{segment="127.0.0.1:13951"} 0
segment_allocated_bytes 7
# TYPE segment_total_capacity_bytes gauge
segment_total_capacity_bytes{segment="127.0.0.1:14123"} 268435456
segment_total_capacity_bytes{segment="127.0.0.1:13951"} 67108864
`))
	require.NoError(t, err)
	assert.Equal(t, int64(200), m.KeyCount)
	assert.Equal(t, int64(3), m.EvictedKeys)
	assert.Equal(t, map[string]SegmentMetrics{
		"127.0.0.1:14123": {AllocatedBytes: 268435456, CapacityBytes: 268435456},
		"127.0.0.1:13951": {CapacityBytes: 67108864},
	}, m.Segments, "a sample without the segment label is not a segment")
}
