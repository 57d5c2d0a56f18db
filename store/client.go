package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Defaults of a Client.
const (
	// DefaultTimeout bounds every call (connect, request and reading the body).
	DefaultTimeout = 5 * time.Second
	// DefaultBodyLimit caps every response body. A bare master's /metrics is ~30 KiB; one
	// segment or tenant adds a few hundred bytes.
	DefaultBodyLimit int64 = 4 << 20
)

// Paths of the admin API (hack/MOONCAKE_NOTES.md §3).
const (
	pathHealth         = "/health"
	pathMetrics        = "/metrics"
	pathSegmentsDetail = "/get_segments_detail"
	pathTenantQuotas   = "/api/v1/tenant_quotas"
	pathRemoveAll      = "/api/v1/remove_all"
	pathSegmentStatus  = "/api/v1/segments/status"
	pathDrainJobs      = "/api/v1/drain_jobs"
	pathDrainQuery     = "/api/v1/drain_jobs/query"
	pathDrainCancel    = "/api/v1/drain_jobs/cancel"
)

// Metric names read from /metrics.
const (
	metricTotalCapacity   = "master_total_capacity_bytes"
	metricAllocated       = "master_allocated_bytes"
	metricKeyCount        = "master_key_count"
	metricEvictedKeys     = "master_evicted_key_count"
	metricSegAllocated    = "segment_allocated_bytes"
	metricSegCapacity     = "segment_total_capacity_bytes"
	labelSegment          = "segment"
	metricTenantRequested = "mooncake_tenant_quota_requested_bytes"
	metricTenantEffective = "mooncake_tenant_quota_effective_bytes"
	metricTenantCharged   = "mooncake_tenant_quota_charged_bytes"
	// The master creates these two counters for a tenant on its first eviction / refusal.
	metricTenantEvicted  = "mooncake_tenant_evict_bytes_total"
	metricTenantRejected = "mooncake_tenant_quota_reject_total"
	labelTenantID        = "tenant_id"
)

// ErrRedirect is wrapped by the error of a call answered with a 3xx: the Client never follows
// redirects (the admin API has none; one would mean something else answered).
var ErrRedirect = errors.New("redirect not followed")

// ErrBodyTooLarge is wrapped by the error of a call whose response exceeded the body limit.
var ErrBodyTooLarge = errors.New("response body exceeds the limit")

// Client is the HTTP implementation of Admin. It is safe for concurrent use.
type Client struct {
	base     *url.URL
	baseErr  error
	endpoint string
	hc       *http.Client
	timeout  time.Duration
	limit    int64
}

var _ Admin = (*Client)(nil)

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send through a copy of hc (its Transport, Jar and Timeout).
// Its CheckRedirect is replaced: redirects are never followed.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			cp := *hc
			c.hc = &cp
		}
	}
}

// WithTransport makes the Client send through rt.
func WithTransport(rt http.RoundTripper) Option {
	return func(c *Client) {
		if rt != nil {
			c.hc = &http.Client{Transport: rt}
		}
	}
}

// WithTimeout bounds every call (default DefaultTimeout). d <= 0 keeps the default.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithBodyLimit caps every response body in bytes (default DefaultBodyLimit). n <= 0 keeps the
// default. A larger body is an error wrapping ErrBodyTooLarge, never a truncated parse.
func WithBodyLimit(n int64) Option {
	return func(c *Client) {
		if n > 0 {
			c.limit = n
		}
	}
}

// New returns a Client of the master whose admin endpoint is baseURL, e.g.
// "http://mooncake-dram-leader.gpustack-system.svc:9003". An unusable baseURL is reported by
// every call.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{
		endpoint: baseURL,
		hc:       &http.Client{Transport: http.DefaultTransport},
		timeout:  DefaultTimeout,
		limit:    DefaultBodyLimit,
	}
	for _, o := range opts {
		o(c)
	}
	c.hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	switch {
	case err != nil:
		c.baseErr = fmt.Errorf("invalid base URL %q: %w", baseURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		c.baseErr = fmt.Errorf("invalid base URL %q: scheme must be http or https", baseURL)
	case u.Host == "":
		c.baseErr = fmt.Errorf("invalid base URL %q: no host", baseURL)
	case u.RawQuery != "" || u.Fragment != "":
		c.baseErr = fmt.Errorf("invalid base URL %q: has a query or fragment", baseURL)
	default:
		c.base = u
	}
	return c
}

// Endpoint implements Admin: the base URL New was given.
func (c *Client) Endpoint() string { return c.endpoint }

// response is what a call got back, read in full (within the limit).
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request and reads the bounded body. op is "METHOD path?query", the prefix of
// every error. A 3xx is an error; any other status is returned for the caller to judge.
func (c *Client) do(ctx context.Context, method, op, pathQuery string, body []byte) (*response, error) {
	if c.baseErr != nil {
		return nil, fmt.Errorf("%s: %w", op, c.baseErr)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+pathQuery, rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if pathQuery == pathMetrics {
		req.Header.Set("Accept", "text/plain;version=0.0.4")
	} else {
		req.Header.Set("Accept", "application/json")
	}

	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, unwrapURLError(err))
	}
	defer func() { _ = resp.Body.Close() }()

	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		loc := resp.Header.Get("Location")
		if loc == "" {
			loc = "(no Location)"
		}
		return nil, fmt.Errorf("%s: HTTP %d to %q: %w", op, resp.StatusCode, loc, ErrRedirect)
	}
	if resp.ContentLength > c.limit {
		return nil, fmt.Errorf("%s: Content-Length %d: %w of %d bytes", op, resp.ContentLength, ErrBodyTooLarge, c.limit)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the body: %w", op, unwrapURLError(err))
	}
	if int64(len(data)) > c.limit {
		return nil, fmt.Errorf("%s: %w of %d bytes", op, ErrBodyTooLarge, c.limit)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// unwrapURLError drops *url.Error's "Get \"http://...\":" prefix: the op already names the call.
// The cause (context.DeadlineExceeded, *net.OpError, ...) stays reachable through errors.Is/As.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

// statusError is the *Error of a non-2xx response that carried no envelope: Code 0, the body's
// text (bounded) as the message.
func statusError(op string, r *response) *Error {
	msg := strings.TrimSpace(string(r.body))
	if !utf8.ValidString(msg) {
		msg = strings.ToValidUTF8(msg, "?")
	}
	const maxMsg = 512
	if len(msg) > maxMsg {
		msg = msg[:maxMsg] + "…"
	}
	if msg == "" {
		msg = http.StatusText(r.status)
	}
	return &Error{Op: op, HTTPStatus: r.status, Message: msg}
}

func ok2xx(status int) bool { return status >= 200 && status < 300 }

// Health implements Admin: GET /health.
func (c *Client) Health(ctx context.Context) (Health, error) {
	const op = http.MethodGet + " " + pathHealth
	r, err := c.do(ctx, http.MethodGet, op, pathHealth, nil)
	if err != nil {
		return Health{}, err
	}
	if !ok2xx(r.status) {
		return Health{}, statusError(op, r)
	}
	var h Health
	if err := json.Unmarshal(r.body, &h); err != nil {
		return Health{}, fmt.Errorf("%s: decoding the body: %w", op, err)
	}
	return h, nil
}

// Metrics implements Admin: GET /metrics, parsed with the Prometheus text parser. Series the
// master does not expose leave zero values; Tenants is empty (not nil) without multi-tenancy.
func (c *Client) Metrics(ctx context.Context) (Metrics, error) {
	const op = http.MethodGet + " " + pathMetrics
	r, err := c.do(ctx, http.MethodGet, op, pathMetrics, nil)
	if err != nil {
		return Metrics{}, err
	}
	if !ok2xx(r.status) {
		return Metrics{}, statusError(op, r)
	}
	m, err := ParseMetrics(r.body)
	if err != nil {
		return Metrics{}, fmt.Errorf("%s: %w", op, err)
	}
	return m, nil
}

// ParseMetrics extracts the operator's figures from a master's Prometheus text exposition.
func ParseMetrics(text []byte) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return Metrics{}, fmt.Errorf("parsing the exposition: %w", err)
	}
	m := Metrics{Tenants: map[string]TenantMetrics{}, Segments: map[string]SegmentMetrics{}}
	m.TotalCapacityBytes = unlabelled(families[metricTotalCapacity])
	m.AllocatedBytes = unlabelled(families[metricAllocated])
	m.KeyCount = unlabelled(families[metricKeyCount])
	m.EvictedKeys = unlabelled(families[metricEvictedKeys])
	perSegment := func(name string, set func(*SegmentMetrics, int64)) {
		mf := families[name]
		for _, metric := range mf.GetMetric() {
			seg, ok := labelValue(metric, labelSegment)
			if !ok {
				continue
			}
			if v, ok := sampleValue(mf.GetType(), metric); ok {
				sm := m.Segments[seg]
				set(&sm, toBytes(v))
				m.Segments[seg] = sm
			}
		}
	}
	perSegment(metricSegAllocated, func(s *SegmentMetrics, v int64) { s.AllocatedBytes = v })
	perSegment(metricSegCapacity, func(s *SegmentMetrics, v int64) { s.CapacityBytes = v })

	// perTenant hands each sample of a family to set; the samples of one tenant under several
	// other labels (reject_total has a reason) are each handed over.
	perTenant := func(name string, set func(*TenantMetrics, float64)) {
		mf := families[name]
		if mf == nil {
			return
		}
		for _, metric := range mf.GetMetric() {
			id, ok := labelValue(metric, labelTenantID)
			if !ok {
				continue
			}
			v, ok := sampleValue(mf.GetType(), metric)
			if !ok || math.IsNaN(v) {
				continue
			}
			tm := m.Tenants[id]
			set(&tm, v)
			m.Tenants[id] = tm
		}
	}
	perTenant(metricTenantRequested, func(t *TenantMetrics, v float64) { t.RequestedBytes = toBytes(v) })
	perTenant(metricTenantEffective, func(t *TenantMetrics, v float64) { t.EffectiveBytes = toBytes(v) })
	perTenant(metricTenantCharged, func(t *TenantMetrics, v float64) { t.ChargedBytes = toBytes(v) })
	perTenant(metricTenantEvicted, func(t *TenantMetrics, v float64) { t.EvictedBytes = toBytes(v) })
	perTenant(metricTenantRejected, func(t *TenantMetrics, v float64) {
		if v > 0 {
			t.Rejected += v
		}
	})
	for _, mf := range families {
		if mf.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, metric := range mf.GetMetric() {
			if v := metric.GetCounter().GetValue(); v > 0 && !math.IsInf(v, 0) {
				m.CounterSum += v
			}
		}
	}
	return m, nil
}

// unlabelled is the value of a family's unlabelled sample (the master's global gauges); 0 when
// the family is absent.
func unlabelled(mf *dto.MetricFamily) int64 {
	if mf == nil {
		return 0
	}
	for _, metric := range mf.GetMetric() {
		if len(metric.GetLabel()) != 0 {
			continue
		}
		if v, ok := sampleValue(mf.GetType(), metric); ok {
			return toBytes(v)
		}
	}
	return 0
}

func labelValue(metric *dto.Metric, name string) (string, bool) {
	for _, lp := range metric.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue(), true
		}
	}
	return "", false
}

func sampleValue(t dto.MetricType, metric *dto.Metric) (float64, bool) {
	switch t {
	case dto.MetricType_GAUGE:
		return metric.GetGauge().GetValue(), metric.GetGauge() != nil
	case dto.MetricType_COUNTER:
		return metric.GetCounter().GetValue(), metric.GetCounter() != nil
	case dto.MetricType_UNTYPED:
		return metric.GetUntyped().GetValue(), metric.GetUntyped() != nil
	default:
		return 0, false
	}
}

// toBytes converts a sample to a byte count: NaN and negatives are 0, and values at or above
// 2^63 (a quota of 2^63-1 is legal and is printed as 9.223372036854776e+18) saturate.
func toBytes(v float64) int64 {
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v >= math.MaxInt64: // the constant rounds to 2^63 as a float64
		return math.MaxInt64
	default:
		return int64(v)
	}
}

// segmentsDetail is GET /get_segments_detail. Unknown fields (base_address, size_human,
// allocator_usage_percent printed as "0E0", ...) are ignored.
type segmentsDetail struct {
	TotalSegments int       `json:"total_segments"`
	Segments      []Segment `json:"segments"`
}

// Segments implements Admin: GET /get_segments_detail; a 404 (masters before 0.3.12) is an
// error wrapping ErrNotSupported.
func (c *Client) Segments(ctx context.Context) ([]Segment, error) {
	const op = http.MethodGet + " " + pathSegmentsDetail
	r, err := c.do(ctx, http.MethodGet, op, pathSegmentsDetail, nil)
	if err != nil {
		return nil, err
	}
	if r.status == http.StatusNotFound {
		return nil, fmt.Errorf("%s: HTTP 404: %w", op, ErrNotSupported)
	}
	if !ok2xx(r.status) {
		return nil, statusError(op, r)
	}
	var d segmentsDetail
	if err := json.Unmarshal(r.body, &d); err != nil {
		return nil, fmt.Errorf("%s: decoding the body: %w", op, err)
	}
	if d.Segments == nil {
		d.Segments = []Segment{}
	}
	return d.Segments, nil
}

// envelope is the tenant API's JSON envelope.
type envelope struct {
	Success      *bool           `json:"success"`
	Data         json.RawMessage `json:"data"`
	ErrorCode    int             `json:"error_code"`
	ErrorMessage string          `json:"error_message"`
}

// callEnvelope performs a tenant API call and returns the envelope's data of a success. A
// failure envelope is an *Error with its code; a non-2xx response without an envelope (the
// plain "404 Not Found") is an *Error with Code 0.
func (c *Client) callEnvelope(ctx context.Context, method, pathQuery string, body []byte) (json.RawMessage, error) {
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := c.callJSON(ctx, "tenant API", method, pathQuery, body, &env); err != nil {
		return nil, err
	}
	return env.Data, nil
}

// callJSON performs an admin API call whose answer carries "success" (the tenant API's
// envelope, or the drain and remove_all answers, whose fields sit beside it) and decodes a
// success into out. Failures are reported as callEnvelope's; api names the API in the error of
// a 2xx that is not such an answer.
func (c *Client) callJSON(ctx context.Context, api, method, pathQuery string, body []byte, out any) error {
	op := method + " " + pathQuery
	r, err := c.do(ctx, method, op, pathQuery, body)
	if err != nil {
		return err
	}
	var env envelope
	if err := json.Unmarshal(r.body, &env); err != nil || env.Success == nil {
		if !ok2xx(r.status) {
			return statusError(op, r)
		}
		if err == nil {
			err = errors.New(`no "success" field`)
		}
		return fmt.Errorf("%s: HTTP %d: not a %s envelope: %w", op, r.status, api, err)
	}
	if !*env.Success {
		msg := env.ErrorMessage
		if msg == "" {
			msg = http.StatusText(r.status)
		}
		return &Error{Op: op, HTTPStatus: r.status, Code: env.ErrorCode, Message: msg}
	}
	if !ok2xx(r.status) {
		return &Error{Op: op, HTTPStatus: r.status, Message: "success envelope with a failure status"}
	}
	if err := json.Unmarshal(r.body, out); err != nil {
		return fmt.Errorf("%s: decoding the body: %w", op, err)
	}
	return nil
}

// tenantQuery is "?tenant_id=<id>" (see query).
func tenantQuery(id string) string { return query("tenant_id", id) }

// query is "?<key>=<value>" with every byte of value outside RFC 3986's unreserved set
// percent-encoded (a space is %20, never '+', whatever the server's decoder thinks of '+').
func query(key, value string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.WriteString("?" + key + "=")
	for i := 0; i < len(value); i++ {
		ch := value[i]
		if unreserved(ch) {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&0xF])
	}
	return b.String()
}

func unreserved(ch byte) bool {
	return 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' ||
		ch == '-' || ch == '.' || ch == '_' || ch == '~'
}

// Tenants implements Admin: GET /api/v1/tenant_quotas (sorted by tenant_id by the master).
func (c *Client) Tenants(ctx context.Context) ([]Tenant, error) {
	data, err := c.callEnvelope(ctx, http.MethodGet, pathTenantQuotas, nil)
	if err != nil {
		return nil, err
	}
	tenants := []Tenant{}
	if len(data) != 0 && string(data) != "null" {
		if err := json.Unmarshal(data, &tenants); err != nil {
			return nil, fmt.Errorf("%s %s: decoding data: %w", http.MethodGet, pathTenantQuotas, err)
		}
	}
	return tenants, nil
}

// PutTenant implements Admin: PUT /api/v1/tenant_quotas?tenant_id=<id> with
// {"requested_quota_bytes":N}; the master answers the tenant's new snapshot.
func (c *Client) PutTenant(ctx context.Context, id string, requestedBytes int64) (Tenant, error) {
	pq := pathTenantQuotas + tenantQuery(id)
	body, err := json.Marshal(struct {
		RequestedQuotaBytes int64 `json:"requested_quota_bytes"`
	}{requestedBytes})
	if err != nil {
		return Tenant{}, fmt.Errorf("%s %s: %w", http.MethodPut, pq, err)
	}
	data, err := c.callEnvelope(ctx, http.MethodPut, pq, body)
	if err != nil {
		return Tenant{}, err
	}
	if len(data) == 0 || string(data) == "null" {
		return Tenant{}, fmt.Errorf("%s %s: success without a snapshot", http.MethodPut, pq)
	}
	var t Tenant
	if err := json.Unmarshal(data, &t); err != nil {
		return Tenant{}, fmt.Errorf("%s %s: decoding data: %w", http.MethodPut, pq, err)
	}
	return t, nil
}

// DeleteTenant implements Admin: DELETE /api/v1/tenant_quotas?tenant_id=<id> (data is null).
func (c *Client) DeleteTenant(ctx context.Context, id string) error {
	_, err := c.callEnvelope(ctx, http.MethodDelete, pathTenantQuotas+tenantQuery(id), nil)
	return err
}

// RemoveTenantObjects implements Admin: POST /api/v1/remove_all?tenant_id=<id>, never with
// force: a forced removal frees objects that a read in flight is still copying, and that reader
// then gets another key's bytes (measured). The master reads tenant_id without percent-decoding
// it, so an id that needs encoding would match no tenant and remove nothing while reporting
// success; and with no tenant_id at all it removes every tenant's objects. Both are refused here.
func (c *Client) RemoveTenantObjects(ctx context.Context, tenant string) (int64, error) {
	op := http.MethodPost + " " + pathRemoveAll
	if tenant == "" {
		return 0, fmt.Errorf("%s: empty tenant id: %w (without one the master removes every tenant's objects); name the tenant", op, ErrTenantNotAddressable)
	}
	for i := 0; i < len(tenant); i++ {
		if !unreserved(tenant[i]) {
			return 0, fmt.Errorf("%s: tenant id %q: %w: the master matches tenant_id without percent-decoding it, so only ids of letters, digits, '-', '.', '_' and '~' can be targeted (a Binding's domain, a DNS-1123 label, always can)", op, tenant, ErrTenantNotAddressable)
		}
	}
	var out struct {
		RemovedCount *int64 `json:"removed_count"`
	}
	pq := pathRemoveAll + tenantQuery(tenant)
	if err := c.callJSON(ctx, "remove_all", http.MethodPost, pq, nil, &out); err != nil {
		return 0, err
	}
	if out.RemovedCount == nil {
		return 0, fmt.Errorf("%s %s: success without removed_count", http.MethodPost, pq)
	}
	return *out.RemovedCount, nil
}

// SegmentStatus implements Admin: GET /api/v1/segments/status?segment=<name>.
func (c *Client) SegmentStatus(ctx context.Context, segment string) (string, error) {
	var out struct {
		StatusName string `json:"status_name"`
	}
	pq := pathSegmentStatus + query("segment", segment)
	if err := c.callJSON(ctx, "segment status", http.MethodGet, pq, nil, &out); err != nil {
		return "", err
	}
	if out.StatusName == "" {
		return "", fmt.Errorf("%s %s: success without status_name", http.MethodGet, pq)
	}
	return out.StatusName, nil
}

// CreateDrain implements Admin: POST /api/v1/drain_jobs with {"segments", "target_segments",
// "max_concurrency"}. The job returned carries its id, status CREATED and segments.
func (c *Client) CreateDrain(ctx context.Context, segments, targets []string, maxConcurrency int) (DrainJob, error) {
	req := struct {
		Segments       []string `json:"segments"`
		TargetSegments []string `json:"target_segments,omitempty"`
		MaxConcurrency int      `json:"max_concurrency,omitempty"`
	}{segments, targets, maxConcurrency}
	if req.Segments == nil {
		req.Segments = []string{} // the master's answer to no segment, not a decoding error
	}
	body, err := json.Marshal(req)
	if err != nil {
		return DrainJob{}, fmt.Errorf("%s %s: %w", http.MethodPost, pathDrainJobs, err)
	}
	var out struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	if err := c.callJSON(ctx, "drain API", http.MethodPost, pathDrainJobs, body, &out); err != nil {
		return DrainJob{}, err
	}
	if out.JobID == "" {
		return DrainJob{}, fmt.Errorf("%s %s: success without job_id", http.MethodPost, pathDrainJobs)
	}
	return DrainJob{ID: out.JobID, Status: out.Status, Segments: slices.Clone(segments)}, nil
}

// Drain implements Admin: GET /api/v1/drain_jobs/query?job_id=<id>.
func (c *Client) Drain(ctx context.Context, jobID string) (DrainJob, error) {
	pq := pathDrainQuery + query("job_id", jobID)
	var j DrainJob
	if err := c.callJSON(ctx, "drain API", http.MethodGet, pq, nil, &j); err != nil {
		return DrainJob{}, err
	}
	if j.ID == "" || j.Status == "" {
		return DrainJob{}, fmt.Errorf("%s %s: success without job_id or status_name", http.MethodGet, pq)
	}
	return j, nil
}

// CancelDrain implements Admin: POST /api/v1/drain_jobs/cancel?job_id=<id>.
func (c *Client) CancelDrain(ctx context.Context, jobID string) error {
	var out struct{}
	return c.callJSON(ctx, "drain API", http.MethodPost, pathDrainCancel+query("job_id", jobID), nil, &out)
}
