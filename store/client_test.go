package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/store/storetest"
)

const (
	gib = int64(1) << 30
	mib = int64(1) << 20
)

// serve starts an httptest server with h and returns a Client of it.
func serve(t *testing.T, h http.HandlerFunc, opts ...Option) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return New(srv.URL, opts...)
}

func fixed(status int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func TestClientAgainstFake(t *testing.T) {
	ctx := context.Background()
	f := storetest.NewFake(storetest.FakeOptions{MultiTenancy: true, Tenants: map[string]int64{"team-a": gib}})
	t.Cleanup(f.Close)
	c := New(f.URL())

	h, err := c.Health(ctx)
	require.NoError(t, err)
	assert.Equal(t, Health{ServiceReady: true, Role: "leader", HAState: "serving"}, h)

	// Nothing mounted: no capacity, effective 0 (hack/MOONCAKE_NOTES.md §3).
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, Metrics{Tenants: map[string]TenantMetrics{"team-a": {RequestedBytes: gib}}, Segments: map[string]SegmentMetrics{}}, m)
	segs, err := c.Segments(ctx)
	require.NoError(t, err)
	assert.Empty(t, segs)
	assert.NotNil(t, segs)

	f.MountSegment("127.0.0.1:14297", 256*mib, "tcp")
	m, err = c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, 256*mib, m.TotalCapacityBytes)
	assert.Equal(t, TenantMetrics{RequestedBytes: gib, EffectiveBytes: 256 * mib}, m.Tenants["team-a"])

	segs, err = c.Segments(ctx)
	require.NoError(t, err)
	require.Len(t, segs, 1)
	assert.Equal(t, "127.0.0.1:14297", segs[0].Name)
	assert.Equal(t, 256*mib, segs[0].SizeBytes)
	assert.Equal(t, "tcp", segs[0].Protocol)
	assert.Equal(t, "OK", segs[0].Status)
	assert.NotEmpty(t, segs[0].ID)
	assert.NotEmpty(t, segs[0].ClientID)
	assert.NotEmpty(t, segs[0].TEEndpoint)

	tenants, err := c.Tenants(ctx)
	require.NoError(t, err)
	assert.Equal(t, []Tenant{{ID: "team-a", RequestedQuotaBytes: gib, EffectiveQuotaBytes: 256 * mib, HasExplicitPolicy: true}}, tenants)

	// 1 GiB + 2 GiB over 256 MiB: largest-remainder split, measured on the real master.
	tb, err := c.PutTenant(ctx, "team-b", 2*gib)
	require.NoError(t, err)
	assert.Equal(t, Tenant{ID: "team-b", RequestedQuotaBytes: 2 * gib, EffectiveQuotaBytes: 178956971, HasExplicitPolicy: true}, tb)
	tenants, err = c.Tenants(ctx)
	require.NoError(t, err)
	require.Len(t, tenants, 2)
	assert.Equal(t, "team-a", tenants[0].ID)
	assert.Equal(t, int64(89478485), tenants[0].EffectiveQuotaBytes)
	assert.Equal(t, "team-b", tenants[1].ID)
	assert.Equal(t, 256*mib, tenants[0].EffectiveQuotaBytes+tenants[1].EffectiveQuotaBytes)

	f.SetCharged("team-a", 11)
	m, err = c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(11), m.AllocatedBytes)
	assert.Equal(t, map[string]TenantMetrics{
		"team-a": {RequestedBytes: gib, EffectiveBytes: 89478485, ChargedBytes: 11},
		"team-b": {RequestedBytes: 2 * gib, EffectiveBytes: 178956971},
	}, m.Tenants)

	err = c.DeleteTenant(ctx, "team-a")
	assertStoreError(t, err, http.StatusConflict, CodeTenantNotEmpty, "TENANT_NOT_EMPTY")
	assert.Equal(t, "DELETE /api/v1/tenant_quotas?tenant_id=team-a", opOf(t, err))

	require.NoError(t, c.DeleteTenant(ctx, "team-b"))
	err = c.DeleteTenant(ctx, "team-b")
	assertStoreError(t, err, http.StatusNotFound, CodeObjectNotFound, "OBJECT_NOT_FOUND")

	_, err = c.PutTenant(ctx, "_reserved", gib)
	assertStoreError(t, err, http.StatusBadRequest, CodeInvalidParams, "Missing or invalid tenant_id")
	_, err = c.PutTenant(ctx, "team-c", 0)
	assertStoreError(t, err, http.StatusBadRequest, CodeInvalidParams, "Tenant quota must be in [1, 2^63 - 1] bytes")

	// An odd tenant id survives the query string both ways.
	odd := "a b&c=d+e/é"
	to, err := c.PutTenant(ctx, odd, mib)
	require.NoError(t, err)
	assert.Equal(t, odd, to.ID)
	require.NoError(t, c.DeleteTenant(ctx, odd))

	assert.Contains(t, f.Requests(), "PUT /api/v1/tenant_quotas?tenant_id=team-b")
	assert.Contains(t, f.Requests(), "PUT /api/v1/tenant_quotas?tenant_id=a%20b%26c%3Dd%2Be%2F%C3%A9")
}

func TestClientFakeMultiTenancyOff(t *testing.T) {
	ctx := context.Background()
	f := storetest.NewFake(storetest.FakeOptions{Tenants: map[string]int64{"team-a": gib}})
	t.Cleanup(f.Close)
	c := New(f.URL())

	_, err := c.Tenants(ctx)
	assertStoreError(t, err, http.StatusConflict, CodeUnavailableInCurrentMode, "UNAVAILABLE_IN_CURRENT_MODE")
	_, err = c.PutTenant(ctx, "team-a", gib)
	assertStoreError(t, err, http.StatusConflict, CodeUnavailableInCurrentMode, "UNAVAILABLE_IN_CURRENT_MODE")
	err = c.DeleteTenant(ctx, "team-a")
	assertStoreError(t, err, http.StatusConflict, CodeUnavailableInCurrentMode, "UNAVAILABLE_IN_CURRENT_MODE")

	f.MountSegment("10.0.0.7:13001", gib, "rdma")
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	assert.Equal(t, gib, m.TotalCapacityBytes)
	assert.NotNil(t, m.Tenants)
	assert.Empty(t, m.Tenants, "no mooncake_tenant_* series without multi-tenancy")
}

func TestClientFakeOldMasterSegments(t *testing.T) {
	f := storetest.NewFake(storetest.FakeOptions{NoSegmentsDetail: true})
	t.Cleanup(f.Close)
	_, err := New(f.URL()).Segments(context.Background())
	require.ErrorIs(t, err, ErrNotSupported)
	assert.Contains(t, err.Error(), "GET /get_segments_detail")
}

func TestClientFakeDown(t *testing.T) {
	ctx := context.Background()
	f := storetest.NewFake(storetest.FakeOptions{})
	t.Cleanup(f.Close)
	c := New(f.URL())
	f.SetDown(true)
	_, err := c.Health(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.True(t, strings.HasPrefix(err.Error(), "GET /health: "), err.Error())
	var se *Error
	assert.False(t, errors.As(err, &se), "a transport failure is not a store Error")

	f.SetDown(false)
	h, err := c.Health(ctx)
	require.NoError(t, err)
	assert.True(t, h.ServiceReady)
}

// assertStoreError checks that err is an *Error with the given status, code and message, and
// that HasCode agrees.
func assertStoreError(t *testing.T, err error, status, code int, msg string) {
	t.Helper()
	require.Error(t, err)
	var se *Error
	require.True(t, errors.As(err, &se), "want *Error, got %T: %v", err, err)
	assert.Equal(t, status, se.HTTPStatus)
	assert.Equal(t, code, se.Code)
	assert.Equal(t, msg, se.Message)
	if code != 0 {
		assert.True(t, HasCode(err, code))
	}
	assert.False(t, HasCode(err, 12345))
}

func opOf(t *testing.T, err error) string {
	t.Helper()
	var se *Error
	require.True(t, errors.As(err, &se))
	return se.Op
}

// Envelope and status handling of the tenant API, answers copied from hack/MOONCAKE_NOTES.md §3.
func TestTenantEnvelopeErrors(t *testing.T) {
	ctx := context.Background()
	calls := map[string]func(*Client) error{
		"GET": func(c *Client) error { _, err := c.Tenants(ctx); return err },
		"PUT": func(c *Client) error { _, err := c.PutTenant(ctx, "team-a", gib); return err },
		"DELETE": func(c *Client) error {
			return c.DeleteTenant(ctx, "team-a")
		},
	}
	cases := []struct {
		name        string
		status      int
		contentType string
		body        string
		code        int
		msg         string
	}{
		{"multi-tenancy off", 409, "application/json; charset=utf-8", `{"success":false,"error_code":-1011,"error_message":"UNAVAILABLE_IN_CURRENT_MODE"}`, CodeUnavailableInCurrentMode, "UNAVAILABLE_IN_CURRENT_MODE"},
		{"unknown tenant", 404, "application/json; charset=utf-8", `{"success":false,"error_code":-704,"error_message":"OBJECT_NOT_FOUND"}`, CodeObjectNotFound, "OBJECT_NOT_FOUND"},
		{"not empty", 409, "application/json; charset=utf-8", `{"success":false,"error_code":-1702,"error_message":"TENANT_NOT_EMPTY"}`, CodeTenantNotEmpty, "TENANT_NOT_EMPTY"},
		{"bad input", 400, "application/json; charset=utf-8", `{"success":false,"error_code":-600,"error_message":"Invalid JSON body: Failed to parse number"}`, CodeInvalidParams, "Invalid JSON body: Failed to parse number"},
		{"read-only policy", 500, "application/json; charset=utf-8", `{"success":false,"error_code":-1503,"error_message":"PERSISTENT_FAIL"}`, CodePersistFail, "PERSISTENT_FAIL"},
		{"not leader", 503, "application/json; charset=utf-8", `{"success":false,"error_code":-1010,"error_message":"UNAVAILABLE_IN_CURRENT_STATUS"}`, CodeUnavailableInStatus, "UNAVAILABLE_IN_CURRENT_STATUS"},
		{"plain 404", 404, "", "404 Not Found", 0, "404 Not Found"},
		{"html 502 from a proxy", 502, "text/html", "<html><body>Bad Gateway</body></html>\n", 0, "<html><body>Bad Gateway</body></html>"},
		{"empty 503", 503, "", "", 0, "Service Unavailable"},
		{"failure envelope without a message", 500, "application/json", `{"success":false,"error_code":-1}`, -1, "Internal Server Error"},
	}
	for _, tc := range cases {
		for method, call := range calls {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				c := serve(t, fixed(tc.status, tc.contentType, tc.body))
				err := call(c)
				assertStoreError(t, err, tc.status, tc.code, tc.msg)
				assert.True(t, strings.HasPrefix(opOf(t, err), method+" /api/v1/tenant_quotas"), opOf(t, err))
			})
		}
	}
}

func TestTenantEnvelopeMalformed(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name, body string
		call       func(*Client) error
		want       string
	}{
		{"200 without envelope", "hello", func(c *Client) error { _, err := c.Tenants(ctx); return err }, "not a tenant API envelope"},
		{"200 JSON without success", `{"data":[]}`, func(c *Client) error { _, err := c.Tenants(ctx); return err }, `no "success" field`},
		{"list data not a list", `{"success":true,"data":"x"}`, func(c *Client) error { _, err := c.Tenants(ctx); return err }, "decoding data"},
		{"PUT success without snapshot", `{"success":true,"data":null}`, func(c *Client) error { _, err := c.PutTenant(ctx, "a", 1); return err }, "success without a snapshot"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(serve(t, fixed(200, "application/json", tc.body)))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			var se *Error
			assert.False(t, errors.As(err, &se))
		})
	}

	// Success envelopes: an empty list, and DELETE's null data.
	tenants, err := serve(t, fixed(200, "application/json", `{"success":true,"data":[]}`)).Tenants(ctx)
	require.NoError(t, err)
	assert.Equal(t, []Tenant{}, tenants)
	require.NoError(t, serve(t, fixed(200, "application/json", `{"success":true,"data":null}`)).DeleteTenant(ctx, "x"))
}

func TestHasCode(t *testing.T) {
	e := &Error{Op: "DELETE /api/v1/tenant_quotas?tenant_id=a", HTTPStatus: 409, Code: CodeTenantNotEmpty, Message: "TENANT_NOT_EMPTY"}
	cases := []struct {
		name string
		err  error
		code int
		want bool
	}{
		{"direct", e, CodeTenantNotEmpty, true},
		{"wrapped", fmt.Errorf("pool x: %w", e), CodeTenantNotEmpty, true},
		{"joined", errors.Join(errors.New("other"), e), CodeTenantNotEmpty, true},
		{"other code", e, CodeObjectNotFound, false},
		{"nil", nil, CodeTenantNotEmpty, false},
		{"not a store error", errors.New("TENANT_NOT_EMPTY"), CodeTenantNotEmpty, false},
		{"code 0 matches a status-only error", &Error{HTTPStatus: 404}, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, HasCode(tc.err, tc.code))
		})
	}
	assert.Equal(t, "DELETE /api/v1/tenant_quotas?tenant_id=a: TENANT_NOT_EMPTY (-1702, HTTP 409)", e.Error())
	assert.Equal(t, "GET /x: HTTP 404: 404 Not Found", (&Error{Op: "GET /x", HTTPStatus: 404, Message: "404 Not Found"}).Error())
}

func TestRedirectNotFollowed(t *testing.T) {
	ctx := context.Background()
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			var followed atomic.Int32
			c := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/elsewhere" || strings.HasPrefix(r.URL.Path, "/elsewhere") {
					followed.Add(1)
					_, _ = io.WriteString(w, `{"service_ready":true}`)
					return
				}
				http.Redirect(w, r, "/elsewhere"+r.URL.Path, status)
			})
			calls := map[string]func() error{
				"Health":       func() error { _, err := c.Health(ctx); return err },
				"Metrics":      func() error { _, err := c.Metrics(ctx); return err },
				"Segments":     func() error { _, err := c.Segments(ctx); return err },
				"Tenants":      func() error { _, err := c.Tenants(ctx); return err },
				"PutTenant":    func() error { _, err := c.PutTenant(ctx, "a", 1); return err },
				"DeleteTenant": func() error { return c.DeleteTenant(ctx, "a") },
				"RemoveTenantObjects": func() error {
					_, err := c.RemoveTenantObjects(ctx, "a")
					return err
				},
				"SegmentStatus": func() error { _, err := c.SegmentStatus(ctx, "s"); return err },
				"CreateDrain":   func() error { _, err := c.CreateDrain(ctx, []string{"s"}, nil, 4); return err },
				"Drain":         func() error { _, err := c.Drain(ctx, "1-2"); return err },
				"CancelDrain":   func() error { return c.CancelDrain(ctx, "1-2") },
			}
			for name, call := range calls {
				err := call()
				require.Error(t, err, name)
				assert.ErrorIs(t, err, ErrRedirect, name)
				assert.Contains(t, err.Error(), "/elsewhere/", name)
				assert.Contains(t, err.Error(), fmt.Sprintf("HTTP %d", status), name)
			}
			assert.Zero(t, followed.Load(), "a redirect target was requested")
		})
	}
}

func TestBodyLimit(t *testing.T) {
	ctx := context.Background()
	const limit = 1024
	health := `{"service_ready":true,"role":"leader","ha_state":"serving"}`
	exact := health + strings.Repeat(" ", limit-len(health))

	t.Run("exactly the limit", func(t *testing.T) {
		c := serve(t, fixed(200, "application/json", exact), WithBodyLimit(limit))
		h, err := c.Health(ctx)
		require.NoError(t, err)
		assert.True(t, h.ServiceReady)
	})
	t.Run("one byte over, with Content-Length", func(t *testing.T) {
		c := serve(t, fixed(200, "application/json", exact+" "), WithBodyLimit(limit))
		_, err := c.Health(ctx)
		require.ErrorIs(t, err, ErrBodyTooLarge)
		assert.Contains(t, err.Error(), "GET /health")
	})
	t.Run("over, streamed without Content-Length", func(t *testing.T) {
		c := serve(t, func(w http.ResponseWriter, _ *http.Request) {
			for i := 0; i < 4; i++ { // chunked: the size is unknown until read
				_, _ = io.WriteString(w, strings.Repeat("#", 400)+"\n")
				w.(http.Flusher).Flush()
			}
		}, WithBodyLimit(limit))
		_, err := c.Metrics(ctx)
		require.ErrorIs(t, err, ErrBodyTooLarge)
		assert.Contains(t, err.Error(), "GET /metrics")
	})
	t.Run("the default is 4 MiB", func(t *testing.T) {
		big := strings.Repeat("# padding comment line\n", (4<<20)/23+1)
		c := serve(t, fixed(200, "text/plain", big))
		_, err := c.Metrics(ctx)
		require.ErrorIs(t, err, ErrBodyTooLarge)
		assert.Equal(t, DefaultBodyLimit, c.limit)
	})
}

func TestTimeout(t *testing.T) {
	ctx := context.Background()
	block := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	stallBody := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		_, _ = io.WriteString(w, `{"service_ready":`)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	for name, h := range map[string]http.HandlerFunc{"no answer": block, "body stalls": stallBody} {
		t.Run(name, func(t *testing.T) {
			c := serve(t, h, WithTimeout(50*time.Millisecond))
			start := time.Now()
			_, err := c.Health(ctx)
			elapsed := time.Since(start)
			require.Error(t, err)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.True(t, strings.HasPrefix(err.Error(), "GET /health: "), err.Error())
			assert.Less(t, elapsed, time.Second, "the 50 ms timeout was not honoured")
		})
	}
	t.Run("caller's context still counts", func(t *testing.T) {
		c := serve(t, block)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := c.Tenants(cctx)
		assert.ErrorIs(t, err, context.Canceled)
	})
	assert.Equal(t, DefaultTimeout, New("http://x").timeout)
}

func TestSegments(t *testing.T) {
	ctx := context.Background()
	t.Run("0E0 and unknown fields", func(t *testing.T) {
		// Verbatim from hack/MOONCAKE_NOTES.md §3.
		body := `{"total_segments":1,"segments":[{"segment_name":"127.0.0.1:14297","segment_id":"4126188289888747822-10971623050882768307","client_id":"2325650249956618608-7305679565105749951","base_address":"0x7fda75000000","size_bytes":268435456,"size_human":"0.25 GiB","te_endpoint":"127.0.0.1:15740","protocol":"tcp","status":"OK","allocator_used_bytes":0,"allocator_capacity_bytes":268435456,"allocator_usage_percent":0E0}]}`
		segs, err := serve(t, fixed(200, "application/json; charset=utf-8", body)).Segments(ctx)
		require.NoError(t, err)
		assert.Equal(t, []Segment{{
			Name:       "127.0.0.1:14297",
			ID:         "4126188289888747822-10971623050882768307",
			ClientID:   "2325650249956618608-7305679565105749951",
			SizeBytes:  268435456,
			Protocol:   "tcp",
			Status:     "OK",
			TEEndpoint: "127.0.0.1:15740",
		}}, segs)
	})
	t.Run("exponent percent", func(t *testing.T) {
		body := `{"total_segments":1,"segments":[{"segment_name":"s","size_bytes":1,"allocator_used_bytes":11,"allocator_usage_percent":4.0978193283081055E-6}]}`
		segs, err := serve(t, fixed(200, "application/json", body)).Segments(ctx)
		require.NoError(t, err)
		require.Len(t, segs, 1)
		assert.Equal(t, int64(11), segs[0].UsedBytes)
	})
	t.Run("404 is ErrNotSupported", func(t *testing.T) {
		_, err := serve(t, fixed(404, "", "404 Not Found")).Segments(ctx)
		require.ErrorIs(t, err, ErrNotSupported)
	})
	t.Run("500 is a store error", func(t *testing.T) {
		_, err := serve(t, fixed(500, "text/plain", "boom")).Segments(ctx)
		assertStoreError(t, err, 500, 0, "boom")
	})
	t.Run("not JSON", func(t *testing.T) {
		_, err := serve(t, fixed(200, "text/plain", "127.0.0.1:1\n")).Segments(ctx)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "GET /get_segments_detail: decoding the body")
	})
}

func TestHealth(t *testing.T) {
	ctx := context.Background()
	body := `{"status":"ok","role":"leader","ha_state":"serving","service_ready":true,"leader_address":null,"view_version":null}`
	h, err := serve(t, fixed(200, "application/json; charset=utf-8", body)).Health(ctx)
	require.NoError(t, err)
	assert.Equal(t, Health{ServiceReady: true, Role: "leader", HAState: "serving"}, h)

	h, err = serve(t, fixed(200, "application/json", `{"service_ready":false,"role":"follower","ha_state":"standby","leader_address":"10.0.0.1:50051","view_version":7}`)).Health(ctx)
	require.NoError(t, err)
	assert.Equal(t, Health{ServiceReady: false, Role: "follower", HAState: "standby", ViewVersion: 7}, h)

	_, err = serve(t, fixed(503, "text/plain", "starting")).Health(ctx)
	assertStoreError(t, err, 503, 0, "starting")

	_, err = serve(t, fixed(200, "text/plain", "ok")).Health(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "GET /health: decoding the body")
}

// exposition mirrors the master's /metrics (hack/MOONCAKE_NOTES.md §3): HELP/TYPE lines, the
// segment series, the histogram, and the tenant block with all HELP/TYPE lines first.
const exposition = `# HELP master_allocated_bytes Total memory bytes currently allocated across all segments
# TYPE master_allocated_bytes gauge
master_allocated_bytes 15
# HELP master_total_capacity_bytes Total memory capacity across all mounted segments
# TYPE master_total_capacity_bytes gauge
master_total_capacity_bytes 268435456
# HELP segment_allocated_bytes Total memory bytes currently allocated of the segment
# TYPE segment_allocated_bytes gauge
segment_allocated_bytes{segment="127.0.0.1:14297"} 15
# HELP segment_total_capacity_bytes Total memory capacity of the mounted segment
# TYPE segment_total_capacity_bytes gauge
segment_total_capacity_bytes{segment="127.0.0.1:14297"} 268435456
# HELP master_key_count Total number of keys managed by the master
# TYPE master_key_count gauge
master_key_count 1
# HELP master_value_size_bytes Distribution of object value sizes
# TYPE master_value_size_bytes histogram
master_value_size_bytes_bucket{le="4096.000000"} 1
master_value_size_bytes_bucket{le="65536.000000"} 1
master_value_size_bytes_bucket{le="+Inf"} 1
master_value_size_bytes_sum 15
master_value_size_bytes_count 1
# HELP master_put_start_requests_total Total number of PutStart requests received
# TYPE master_put_start_requests_total counter
master_put_start_requests_total 1
# HELP mooncake_tenant_quota_requested_bytes Requested tenant quota policy in bytes
# TYPE mooncake_tenant_quota_requested_bytes gauge
# HELP mooncake_tenant_quota_effective_bytes Effective tenant quota in bytes
# TYPE mooncake_tenant_quota_effective_bytes gauge
# HELP mooncake_tenant_quota_charged_bytes Tenant quota charge in bytes
# TYPE mooncake_tenant_quota_charged_bytes gauge
# HELP mooncake_tenant_quota_admission_closed Tenant quota admission-closed flag
# TYPE mooncake_tenant_quota_admission_closed gauge
# HELP mooncake_tenant_quota_over_quota Tenant over-quota flag
# TYPE mooncake_tenant_quota_over_quota gauge
# HELP mooncake_tenant_quota_explicit_policy Tenant explicit policy flag
# TYPE mooncake_tenant_quota_explicit_policy gauge
mooncake_tenant_quota_requested_bytes{tenant_id="team-a"} 67108864
mooncake_tenant_quota_effective_bytes{tenant_id="team-a"} 67108864
mooncake_tenant_quota_charged_bytes{tenant_id="team-a"} 15
mooncake_tenant_quota_admission_closed{tenant_id="team-a"} 0
mooncake_tenant_quota_over_quota{tenant_id="team-a"} 0
mooncake_tenant_quota_explicit_policy{tenant_id="team-a"} 1
mooncake_tenant_quota_requested_bytes{tenant_id="team \"b\""} 9.223372036854776e+18
mooncake_tenant_quota_effective_bytes{tenant_id="team \"b\""} 201326592
mooncake_tenant_quota_charged_bytes{tenant_id="team \"b\""} 0
mooncake_tenant_quota_admission_closed{tenant_id="team \"b\""} 0
mooncake_tenant_quota_over_quota{tenant_id="team \"b\""} 0
mooncake_tenant_quota_explicit_policy{tenant_id="team \"b\""} 1
# HELP mooncake_tenant_quota_allocatable_capacity_bytes Global tenant quota allocatable capacity in bytes
# TYPE mooncake_tenant_quota_allocatable_capacity_bytes gauge
mooncake_tenant_quota_allocatable_capacity_bytes 268435456
# HELP mooncake_tenant_quota_requested_bytes_sum Global requested tenant quota sum in bytes
# TYPE mooncake_tenant_quota_requested_bytes_sum gauge
mooncake_tenant_quota_requested_bytes_sum 9223372036921884671
# HELP mooncake_tenant_quota_effective_bytes_sum Global effective tenant quota sum in bytes
# TYPE mooncake_tenant_quota_effective_bytes_sum gauge
mooncake_tenant_quota_effective_bytes_sum 268435456
# HELP mooncake_tenant_reject_total Tenant rejections
# TYPE mooncake_tenant_reject_total counter
mooncake_tenant_reject_total{tenant_id="team-b",reason="quota_exceeded"} 1
`

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	t.Run("exposition like the notes", func(t *testing.T) {
		var accept string
		c := serve(t, func(w http.ResponseWriter, r *http.Request) {
			accept = r.Header.Get("Accept")
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, exposition)
		})
		m, err := c.Metrics(ctx)
		require.NoError(t, err)
		assert.Equal(t, Metrics{
			TotalCapacityBytes: 268435456,
			AllocatedBytes:     15,
			KeyCount:           1,
			Segments:           map[string]SegmentMetrics{"127.0.0.1:14297": {AllocatedBytes: 15, CapacityBytes: 268435456}},
			Tenants: map[string]TenantMetrics{
				"team-a":   {RequestedBytes: 67108864, EffectiveBytes: 67108864, ChargedBytes: 15},
				`team "b"`: {RequestedBytes: 9223372036854775807, EffectiveBytes: 201326592},
			},
			CounterSum: 2, // master_put_start_requests_total 1 + mooncake_tenant_reject_total 1
		}, m)
		assert.Contains(t, accept, "text/plain")
	})
	t.Run("captured from mooncake_master 0.3.13.post1", func(t *testing.T) {
		text, err := os.ReadFile("testdata/metrics-0.3.13.post1.txt")
		require.NoError(t, err)
		m, err := ParseMetrics(text)
		require.NoError(t, err)
		assert.Equal(t, Metrics{
			TotalCapacityBytes: 268435456,
			AllocatedBytes:     11,
			KeyCount:           1,
			Segments:           map[string]SegmentMetrics{"127.0.0.1:14165": {AllocatedBytes: 11, CapacityBytes: 268435456}},
			Tenants:            map[string]TenantMetrics{"team-a": {RequestedBytes: 1073741824, EffectiveBytes: 268435456, ChargedBytes: 11}},
			// put_start, put_end, mount_segment, remount_segment, ping and fetch_tasks requests,
			// 1 each; every other counter of the capture is 0.
			CounterSum: 6,
		}, m)
	})
	t.Run("a tenant's eviction and rejection counters", func(t *testing.T) {
		// As the master prints them once team-b evicted at its grant and had two puts refused
		// (one series per reason).
		m, err := ParseMetrics([]byte(`# TYPE mooncake_tenant_quota_reject_total counter
mooncake_tenant_quota_reject_total{tenant_id="team-b",reason="quota_exceeded"} 2
mooncake_tenant_quota_reject_total{tenant_id="team-b",reason="admission_closed"} 1
# TYPE mooncake_tenant_evict_bytes_total counter
mooncake_tenant_evict_bytes_total{tenant_id="team-b"} 524288
# TYPE mooncake_tenant_quota_charged_bytes gauge
mooncake_tenant_quota_charged_bytes{tenant_id="team-b"} 1048576
`))
		require.NoError(t, err)
		assert.Equal(t, map[string]TenantMetrics{"team-b": {ChargedBytes: 1 << 20, EvictedBytes: 512 << 10, Rejected: 3}}, m.Tenants)
	})
	t.Run("bare master without multi-tenancy", func(t *testing.T) {
		m, err := ParseMetrics([]byte("# HELP master_total_capacity_bytes x\n# TYPE master_total_capacity_bytes gauge\nmaster_total_capacity_bytes 0\n"))
		require.NoError(t, err)
		assert.Equal(t, Metrics{Tenants: map[string]TenantMetrics{}, Segments: map[string]SegmentMetrics{}}, m)
	})
	t.Run("empty", func(t *testing.T) {
		m, err := ParseMetrics(nil)
		require.NoError(t, err)
		assert.Equal(t, Metrics{Tenants: map[string]TenantMetrics{}, Segments: map[string]SegmentMetrics{}}, m)
	})
	t.Run("untyped samples count too", func(t *testing.T) {
		m, err := ParseMetrics([]byte("master_total_capacity_bytes 1024\nmaster_allocated_bytes 3.0\n"))
		require.NoError(t, err)
		assert.Equal(t, int64(1024), m.TotalCapacityBytes)
		assert.Equal(t, int64(3), m.AllocatedBytes)
	})
	t.Run("garbage is an error", func(t *testing.T) {
		_, err := serve(t, fixed(200, "text/plain", "master_total_capacity_bytes{ 1\n")).Metrics(ctx)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "GET /metrics: parsing the exposition")
	})
	t.Run("non-2xx", func(t *testing.T) {
		_, err := serve(t, fixed(500, "text/plain", "oops")).Metrics(ctx)
		assertStoreError(t, err, 500, 0, "oops")
	})
}

func TestToBytes(t *testing.T) {
	cases := map[float64]int64{0: 0, -1: 0, 1.9: 1, 268435456: 268435456, 9.223372036854776e18: 9223372036854775807, 1e30: 9223372036854775807}
	for in, want := range cases {
		assert.Equal(t, want, toBytes(in), "%v", in)
	}
}

// The tenant travels percent-encoded in the query string; PUT's body is exactly
// {"requested_quota_bytes":N}.
func TestTenantRequests(t *testing.T) {
	ctx := context.Background()
	type seen struct{ method, rawQuery, id, contentType, body string }
	var (
		mu   sync.Mutex
		last seen
	)
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s := seen{r.Method, r.URL.RawQuery, r.URL.Query().Get("tenant_id"), r.Header.Get("Content-Type"), string(b)}
		mu.Lock()
		last = s
		mu.Unlock()
		assert.Equal(t, "/api/v1/tenant_quotas", r.URL.Path)
		switch r.Method {
		case http.MethodPut:
			data, _ := json.Marshal(s.id)
			_, _ = fmt.Fprintf(w, `{"success":true,"data":{"tenant_id":%s,"requested_quota_bytes":5,"effective_quota_bytes":0,"charged_bytes":0,"admission_closed":false,"over_quota":false,"has_explicit_policy":true}}`, data)
		default:
			_, _ = io.WriteString(w, `{"success":true,"data":null}`)
		}
	})
	for _, id := range []string{"team-a", "a b", "a&tenant_id=b", "a+b", "été", "a/b?c#d", "100%", " sp ", "Team_A.x~y"} {
		t.Run(id, func(t *testing.T) {
			get := func() seen { mu.Lock(); defer mu.Unlock(); return last }
			tn, err := c.PutTenant(ctx, id, 5)
			require.NoError(t, err)
			assert.Equal(t, id, tn.ID)
			put := get()
			assert.Equal(t, seen{"PUT", put.rawQuery, id, "application/json", `{"requested_quota_bytes":5}`}, put)
			assert.NotContains(t, put.rawQuery, "+")
			assert.NotContains(t, put.rawQuery, " ")
			assert.Equal(t, 1, strings.Count(put.rawQuery, "="), put.rawQuery)

			require.NoError(t, c.DeleteTenant(ctx, id))
			del := get()
			assert.Equal(t, "DELETE", del.method)
			assert.Equal(t, id, del.id)
			assert.Empty(t, del.body)
		})
	}
	_, err := c.Tenants(ctx)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, seen{method: "GET"}, last)
}

func TestBadBaseURL(t *testing.T) {
	for _, base := range []string{"::nope", "mooncake:9003", "ftp://x", "http://", "http://x/?a=b"} {
		_, err := New(base).Health(context.Background())
		require.Error(t, err, base)
		assert.Contains(t, err.Error(), "GET /health: invalid base URL", base)
	}
	// A trailing slash is fine.
	f := storetest.NewFake(storetest.FakeOptions{})
	t.Cleanup(f.Close)
	_, err := New(f.URL() + "/").Health(context.Background())
	require.NoError(t, err)
}

func TestWithHTTPClient(t *testing.T) {
	var used atomic.Int32
	rt := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		used.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})
	f := storetest.NewFake(storetest.FakeOptions{})
	t.Cleanup(f.Close)
	hc := &http.Client{Transport: rt}
	_, err := New(f.URL(), WithHTTPClient(hc)).Health(context.Background())
	require.NoError(t, err)
	_, err = New(f.URL(), WithTransport(rt)).Health(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int32(2), used.Load())
	assert.Nil(t, hc.CheckRedirect, "the caller's http.Client is not modified")
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
