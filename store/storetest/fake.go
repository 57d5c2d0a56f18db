// Package storetest provides Fake, an in-process stand-in for a Mooncake master's admin HTTP
// API (the metrics port, 9003 on a managed store), so controller tests (envtest) can run without
// the real binary.
//
// Fake emulates the behaviour measured on mooncake_master 0.3.13.post1 and written down in
// hack/MOONCAKE_NOTES.md (§3 the admin API and its envelope, status and error codes; §2 the
// tenant policy file the master persists and rebuilds from; §6 restarts), refined where
// store/realstore_test.go checked the real binary: the effective quota is the requested
// quota when the requests fit the mounted capacity, otherwise a largest-remainder split of the
// capacity in proportion to the requests (each share floored, the bytes left over handed out one
// by one in decreasing order of the dropped fractions, ties by tenant_id), so the effective
// quotas sum to exactly the capacity; 0 for everyone while nothing is mounted.
//
// Its counters behave as the real master's: they start over from zero when the master restarts
// (members re-mount through remount_segment), and master_ping_requests_total grows by one per
// mounted segment per second, as each member pings once a second.
//
// A tenant's eviction and rejection counters (mooncake_tenant_evict_bytes_total,
// mooncake_tenant_quota_reject_total) appear once they moved, as on the real master; Evict and
// Reject move them, as the data path would.
//
// Objects are counted per tenant (SetObjects; SetCharged is one object), and some may be leased
// (LeaseObjects), as a read leases them: POST /api/v1/remove_all?tenant_id= removes a tenant's
// unleased objects and answers how many, matching tenant_id without percent-decoding it and
// every tenant without one, as the real master does; force=true removes leased ones too.
//
// Drain jobs (POST /api/v1/drain_jobs, its query and cancel) are validated as the real master
// validates them, and their segments turn DRAINING at once. The fake moves nothing by itself: a
// job stays CREATED with no unit active (cancellable, as the real master's is until its first
// planning round, within half a second) until SetDrain moves it on: RUNNING with active units
// (no longer cancellable), SUCCEEDED (its segments DRAINED) or FAILED (its segments OK again).
// A DRAINING or DRAINED segment's allocator_used_bytes reads 0, as on the real master. Jobs live
// in memory only: Restart forgets them (JOB_NOT_FOUND) and the re-mounted segments are OK.
//
// What it does not emulate: the RPC data path (keys, eviction, lease expiry), placement of
// objects on segments (the allocated bytes are spread over the segments in name order), HA,
// the /metrics series
// the operator does not read beyond a representative few, and the timing of a real restart
// (members re-mount at once here, 0.2–1.7 s on the real master).
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// FakeOptions configure a Fake.
type FakeOptions struct {
	// MultiTenancy is -enable_multi_tenants=true. Off, the tenant API answers 409/-1011 to
	// everything and /metrics has no mooncake_tenant_* series.
	MultiTenancy bool
	// Tenants is the seed policy file: tenant -> requested quota bytes (each > 0, names valid as
	// the master requires). Ignored without MultiTenancy.
	Tenants map[string]int64
	// NoSegmentsDetail emulates a master older than 0.3.12: /get_segments_detail answers 404.
	// The zero value is a master that has it.
	NoSegmentsDetail bool
	// ReadOnlyPolicy emulates the policy file on a read-only mount (a ConfigMap volume): every
	// PUT and DELETE of a tenant answers 500/-1503 PERSISTENT_FAIL and changes nothing.
	ReadOnlyPolicy bool
	// Clock is the fake's time (time.Now when nil): master_ping_requests_total advances with it.
	Clock func() time.Time
}

// Error codes and messages of the master's envelope (hack/MOONCAKE_NOTES.md §3).
const (
	codeSegmentNotFound          = -101
	codeInvalidParams            = -600
	codeObjectNotFound           = -704
	codeUnavailableInStatus      = -1010
	codeUnavailableInCurrentMode = -1011
	codeJobNotFound              = -1402
	codePersistFail              = -1503
	codeTenantNotEmpty           = -1702
)

// Fake is an in-process fake master. All methods are safe for concurrent use.
type Fake struct {
	opts FakeOptions

	mu       sync.Mutex
	addr     string           // host:port, fixed for the Fake's life
	srv      *httptest.Server // nil while down
	closed   bool             // Close was called
	policy   map[string]int64 // the in-memory ledger's explicit policies
	file     map[string]int64 // the persisted policy file
	charged  map[string]int64 // bytes of objects per tenant (the data path)
	objects  map[string]int64 // objects per tenant with charged bytes; absent: 1
	leased   map[string]lease // the leased part of a tenant's objects
	evicted  map[string]int64 // mooncake_tenant_evict_bytes_total per tenant
	rejected map[string]int64 // mooncake_tenant_quota_reject_total{reason="quota_exceeded"}
	segments map[string]segment
	jobs     map[string]*drainJob
	jobOrder []string
	seq      uint64
	mounts   uint64
	unmounts uint64
	remounts uint64
	requests []string
	now      func() time.Time
}

type segment struct {
	name, protocol  string
	size            int64
	id, clientID    string
	baseAddr, teEnd string
	// pingingSince is when the member started pinging this master process.
	pingingSince time.Time
	status       string // OK, DRAINING or DRAINED
}

type lease struct{ n, bytes int64 }

// drainJob is a drain job as the fake keeps it.
type drainJob struct {
	id              string
	segments        []string
	status          string
	created, update time.Time
	p               DrainProgress
	message         string
}

// DrainProgress is where SetDrain moves a drain job: its status (RUNNING, SUCCEEDED or FAILED)
// and unit counts, as the real master reports them (a running job has active units, up to its
// max_concurrency).
type DrainProgress struct {
	Status                             string
	Succeeded, Failed, Blocked, Active int64
	MigratedBytes                      int64
}

// NewFake starts a fake master listening on 127.0.0.1 (a random port). Stop it with Close.
func NewFake(opts FakeOptions) *Fake {
	f := &Fake{
		opts:     opts,
		policy:   map[string]int64{},
		file:     map[string]int64{},
		charged:  map[string]int64{},
		objects:  map[string]int64{},
		leased:   map[string]lease{},
		evicted:  map[string]int64{},
		rejected: map[string]int64{},
		segments: map[string]segment{},
		jobs:     map[string]*drainJob{},
		now:      opts.Clock,
	}
	if f.now == nil {
		f.now = time.Now
	}
	if opts.MultiTenancy {
		for id, q := range opts.Tenants {
			if !validTenantID(id) || q <= 0 {
				// The real master aborts on such a policy file (hack/MOONCAKE_NOTES.md §2).
				panic(fmt.Sprintf("storetest: seed policy tenant %q quota %d: the real master would abort", id, q))
			}
			f.file[id] = q
		}
	}
	f.policy = clone(f.file)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("storetest: listen: %v", err))
	}
	f.addr = ln.Addr().String()
	f.srv = f.start(ln)
	return f
}

func (f *Fake) start(ln net.Listener) *httptest.Server {
	s := httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	_ = s.Listener.Close()
	s.Listener = ln
	s.Start()
	return s
}

// URL is the admin endpoint, e.g. "http://127.0.0.1:41234". It does not change across SetDown
// and Restart.
func (f *Fake) URL() string { return "http://" + f.addr }

// Close stops the fake for good.
func (f *Fake) Close() {
	f.mu.Lock()
	f.closed = true
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// SetDown with true takes the master away the way a killed master goes: the listener is closed, so
// connections are refused (no 503: nothing answers on a dead master's port). In-flight requests
// finish first. SetDown(false) listens on the same address again with the state unchanged (use
// Restart for a master that lost its objects).
func (f *Fake) SetDown(down bool) {
	if down {
		f.mu.Lock()
		srv := f.srv
		f.srv = nil
		f.mu.Unlock()
		if srv != nil {
			srv.Close()
		}
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv != nil || f.closed {
		return
	}
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port was ours a moment ago; retry a transient EADDRINUSE
		if ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", f.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		panic(fmt.Sprintf("storetest: listening again on %s: %v", f.addr, err))
	}
	f.srv = f.start(ln)
}

// Restart emulates the master killed and started again on the same address: every object and
// every drain job is lost (all charged bytes 0) and the ledger is rebuilt from the policy file (the seed plus every
// successful PUT/DELETE, which the master persists, or what ReplacePolicyFile put there).
// Members re-mount their segments (same names and ids), here at once.
//
// Its counters start over: the members' re-mounts count as remount_segment requests and their
// pings start again from zero.
func (f *Fake) Restart() {
	f.SetDown(true)
	f.mu.Lock()
	f.charged, f.objects, f.leased = map[string]int64{}, map[string]int64{}, map[string]lease{}
	f.evicted, f.rejected = map[string]int64{}, map[string]int64{}
	f.jobs, f.jobOrder = map[string]*drainJob{}, nil
	f.policy = clone(f.file)
	f.remountAll()
	f.mu.Unlock()
	f.SetDown(false)
}

// remountAll is every member mounting its segment again on a new master, whose counters start
// over. f.mu is held.
func (f *Fake) remountAll() {
	f.mounts, f.unmounts, f.remounts = 0, 0, uint64(len(f.segments))
	for name, s := range f.segments {
		s.pingingSince = f.now()
		s.status = segOK
		f.segments[name] = s
	}
}

// FailOverWarm emulates a warm store's failover: a standby that replayed the operation log takes
// over on the same address with every object, but without the drain jobs (measured: it knows
// none, and the segments they drained list OK again). Members re-mount their segments at once;
// the counters start over.
func (f *Fake) FailOverWarm() {
	f.SetDown(true)
	f.mu.Lock()
	f.jobs, f.jobOrder = map[string]*drainJob{}, nil
	f.remountAll()
	f.mu.Unlock()
	f.SetDown(false)
}

// ReplacePolicyFile replaces the persisted policy file (tenant -> quota bytes). The running
// ledger does not change: the master reads the file only at start (Restart).
func (f *Fake) ReplacePolicyFile(tenants map[string]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.file = clone(tenants)
}

// PolicyFile is the persisted policy file's content (tenant -> quota bytes).
func (f *Fake) PolicyFile() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return clone(f.file)
}

// MountSegment registers a member's segment (name like "10.0.0.7:13001", protocol "tcp" or
// "rdma"), as mc_store_rest_server does when it starts. Mounting an existing name replaces it.
func (f *Fake) MountSegment(name string, sizeBytes int64, protocol string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	f.mounts++
	host := name
	if h, _, err := net.SplitHostPort(name); err == nil {
		host = h
	}
	f.segments[name] = segment{
		name:         name,
		protocol:     protocol,
		size:         sizeBytes,
		id:           fmt.Sprintf("%d-%d", 4126188289888747822+f.seq, 10971623050882768307-f.seq),
		clientID:     fmt.Sprintf("%d-%d", 2325650249956618608+f.seq, 7305679565105749951-f.seq),
		baseAddr:     fmt.Sprintf("0x%x", 0x7fda75000000+f.seq<<32),
		teEnd:        net.JoinHostPort(host, strconv.FormatUint(15000+f.seq, 10)),
		pingingSince: f.now(),
		status:       segOK, // a new mount is OK, whatever the name's last status was
	}
}

// UnmountSegment removes a segment, as a member stopping gracefully does.
func (f *Fake) UnmountSegment(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.segments[name]; ok {
		f.unmounts++
		delete(f.segments, name)
	}
}

// SetCharged sets the bytes of objects a tenant owns, as one object (0 empties it). A tenant
// with bytes cannot be deleted (409/-1702). Bytes of a tenant without a policy make it listed
// with has_explicit_policy false, as the master lists such leftovers. Without multi-tenancy the
// bytes only count in master_allocated_bytes.
func (f *Fake) SetCharged(tenant string, bytes int64) { f.SetObjects(tenant, 1, bytes) }

// SetObjects sets how many objects a tenant owns and their bytes (either <= 0 empties it), none
// of them leased.
func (f *Fake) SetObjects(tenant string, n, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.leased, tenant)
	if n <= 0 || bytes <= 0 {
		delete(f.charged, tenant)
		delete(f.objects, tenant)
		return
	}
	f.charged[tenant], f.objects[tenant] = bytes, n
}

// LeaseObjects marks n of a tenant's objects, holding bytes, as leased (read within the lease
// TTL): remove_all without force leaves them. n <= 0 lets every lease expire. It is clamped to
// what the tenant owns.
func (f *Fake) LeaseObjects(tenant string, n, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 || bytes <= 0 {
		delete(f.leased, tenant)
		return
	}
	f.leased[tenant] = lease{n: min(n, f.objectCount(tenant)), bytes: min(bytes, f.charged[tenant])}
}

// DrainJobs are the ids of the drain jobs the master knows, oldest first.
func (f *Fake) DrainJobs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.jobOrder)
}

// SetDrain moves a drain job on: its units and status. SUCCEEDED makes its segments DRAINED,
// FAILED makes them OK again (what fit moved; the fake keeps no placement, so the bytes stay
// where they were counted). It panics on an unknown job: the test asked for a job that is not.
func (f *Fake) SetDrain(id string, p DrainProgress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok {
		panic(fmt.Sprintf("storetest: SetDrain of unknown drain job %q (have %v)", id, f.jobOrder))
	}
	j.p, j.status, j.update = p, p.Status, f.now()
	switch p.Status {
	case drainSucceeded:
		j.message = "Drain job finished successfully"
		f.setSegmentStatus(j.segments, segDrained)
	case drainFailed:
		j.message = "Drain job failed: unrecoverable units remain"
		f.setSegmentStatus(j.segments, segOK)
	default:
		j.message = "Drain job running"
	}
}

func (f *Fake) setSegmentStatus(names []string, status string) {
	for _, n := range names {
		if s, ok := f.segments[n]; ok {
			s.status = status
			f.segments[n] = s
		}
	}
}

// Evict counts bytes evicted from a tenant's own objects to admit its writes at its grant, as
// the master's data path does (mooncake_tenant_evict_bytes_total). The charge is left to
// SetCharged.
func (f *Fake) Evict(tenant string, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if bytes > 0 {
		f.evicted[tenant] += bytes
	}
}

// Reject counts one put refused for the tenant's quota (a value larger than its grant).
func (f *Fake) Reject(tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rejected[tenant]++
}

// Requests is the log of requests served, oldest first, each "METHOD path" or
// "METHOD path?query" (the query as sent, still escaped).
func (f *Fake) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// ResetRequests empties the request log.
func (f *Fake) ResetRequests() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = nil
}

func clone(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// validTenantID is the master's rule (hack/MOONCAKE_NOTES.md §2): non-empty, no leading '_', no
// control characters; spaces, slashes, dots, colons and non-ASCII are fine.
func validTenantID(id string) bool {
	if id == "" || strings.HasPrefix(id, "_") {
		return false
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// ---- state views (f.mu held) ----

func (f *Fake) capacity() int64 {
	var c int64
	for _, s := range f.segments {
		c += s.size
	}
	return c
}

func (f *Fake) objectCount(tenant string) int64 {
	if f.charged[tenant] <= 0 {
		return 0
	}
	if n, ok := f.objects[tenant]; ok {
		return n
	}
	return 1
}

func (f *Fake) allocated() int64 {
	var a int64
	for _, b := range f.charged {
		a += b
	}
	return a
}

func (f *Fake) sortedSegments() []segment {
	segs := make([]segment, 0, len(f.segments))
	for _, s := range f.segments {
		segs = append(segs, s)
	}
	slices.SortFunc(segs, func(a, b segment) int { return strings.Compare(a.name, b.name) })
	return segs
}

// segmentUsed spreads the allocated bytes over the segments in name order (the fake keeps no
// placement), so the per-segment figures add up to master_allocated_bytes.
func (f *Fake) segmentUsed() map[string]int64 {
	left := f.allocated()
	used := map[string]int64{}
	for _, s := range f.sortedSegments() {
		u := min(left, s.size)
		used[s.name] = u
		left -= u
	}
	return used
}

// tenantSnapshot is one ledger entry as the master prints it (field order included).
type tenantSnapshot struct {
	TenantID            string `json:"tenant_id"`
	RequestedQuotaBytes int64  `json:"requested_quota_bytes"`
	EffectiveQuotaBytes int64  `json:"effective_quota_bytes"`
	ChargedBytes        int64  `json:"charged_bytes"`
	AdmissionClosed     bool   `json:"admission_closed"`
	OverQuota           bool   `json:"over_quota"`
	HasExplicitPolicy   bool   `json:"has_explicit_policy"`
}

// ledger lists the tenants sorted by id: every explicit policy plus tenants with objects.
func (f *Fake) ledger() []tenantSnapshot {
	ids := map[string]bool{}
	for id := range f.policy {
		ids[id] = true
	}
	for id := range f.charged {
		ids[id] = true
	}
	effective := EffectiveQuotas(f.policy, f.capacity())
	out := make([]tenantSnapshot, 0, len(ids))
	for id := range ids {
		req, explicit := f.policy[id]
		t := tenantSnapshot{
			TenantID:            id,
			RequestedQuotaBytes: req,
			EffectiveQuotaBytes: effective[id],
			ChargedBytes:        f.charged[id],
			HasExplicitPolicy:   explicit,
		}
		t.OverQuota = (!explicit && t.ChargedBytes > 0) || t.ChargedBytes > t.EffectiveQuotaBytes
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b tenantSnapshot) int { return strings.Compare(a.TenantID, b.TenantID) })
	return out
}

func (f *Fake) snapshot(id string) (tenantSnapshot, bool) {
	for _, t := range f.ledger() {
		if t.TenantID == id {
			return t, true
		}
	}
	return tenantSnapshot{}, false
}

// EffectiveQuotas computes the master's effective quotas of the given requests (tenant ->
// requested bytes) for a mounted capacity: the requests themselves when their sum fits, else a
// largest-remainder proportional split of exactly the capacity (ties by tenant_id); all 0 when
// the capacity is 0 and anything is requested.
func EffectiveQuotas(requested map[string]int64, capacity int64) map[string]int64 {
	out := make(map[string]int64, len(requested))
	sum := new(big.Int)
	for _, r := range requested {
		sum.Add(sum, big.NewInt(r))
	}
	if sum.Cmp(big.NewInt(capacity)) <= 0 {
		for id, r := range requested {
			out[id] = r
		}
		return out
	}
	type share struct {
		id   string
		base int64
		rem  *big.Int
	}
	shares := make([]share, 0, len(requested))
	var assigned int64
	for id, r := range requested {
		q, m := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(capacity), big.NewInt(r)), sum, new(big.Int))
		shares = append(shares, share{id: id, base: q.Int64(), rem: m})
		assigned += q.Int64()
	}
	slices.SortFunc(shares, func(a, b share) int {
		if c := b.rem.Cmp(a.rem); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	left := capacity - assigned
	for _, s := range shares {
		if left > 0 {
			s.base++
			left--
		}
		out[s.id] = s.base
	}
	return out
}

// ---- HTTP ----

const (
	ctJSON = "application/json; charset=utf-8"
	ctText = "text/plain; version=0.0.4"
)

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())

	get := r.Method == http.MethodGet
	switch {
	case r.URL.Path == "/health" && get:
		writeBody(w, http.StatusOK, ctJSON,
			`{"status":"ok","role":"leader","ha_state":"serving","service_ready":true,"leader_address":null,"view_version":null}`)
	case r.URL.Path == "/role" && get:
		writeBody(w, http.StatusOK, "text/plain", "leader")
	case r.URL.Path == "/ha_status" && get:
		writeBody(w, http.StatusOK, "text/plain", "serving")
	case r.URL.Path == "/metrics" && get:
		writeBody(w, http.StatusOK, ctText, f.metricsText())
	case r.URL.Path == "/get_all_segments" && get:
		var b strings.Builder
		for _, s := range f.sortedSegments() {
			b.WriteString(s.name + "\n")
		}
		writeBody(w, http.StatusOK, ctText, b.String())
	case r.URL.Path == "/get_segments_detail" && get && !f.opts.NoSegmentsDetail:
		writeBody(w, http.StatusOK, ctJSON, f.segmentsDetail())
	case r.URL.Path == "/api/v1/tenant_quotas" &&
		(r.Method == http.MethodGet || r.Method == http.MethodPut || r.Method == http.MethodDelete):
		f.tenantQuotas(w, r)
	case r.URL.Path == "/api/v1/remove_all" && r.Method == http.MethodPost:
		f.removeAll(w, r)
	case r.URL.Path == "/api/v1/segments/status" && get:
		f.segmentStatus(w, r)
	case r.URL.Path == "/api/v1/drain_jobs" && r.Method == http.MethodPost:
		f.createDrain(w, r)
	case r.URL.Path == "/api/v1/drain_jobs/query" && get:
		f.queryDrain(w, r)
	case r.URL.Path == "/api/v1/drain_jobs/cancel" && r.Method == http.MethodPost:
		f.cancelDrain(w, r)
	default:
		notFound(w)
	}
}

// writeBody answers like cinatra: the given Content-Type (none when empty) and the body.
func writeBody(w http.ResponseWriter, status int, contentType, body string) {
	if contentType == "" {
		w.Header()["Content-Type"] = nil // no sniffed type: the master sends none
	} else {
		w.Header().Set("Content-Type", contentType)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func notFound(w http.ResponseWriter) { writeBody(w, http.StatusNotFound, "", "404 Not Found") }

func writeEnvelopeError(w http.ResponseWriter, status, code int, msg string) {
	b, _ := json.Marshal(struct {
		Success      bool   `json:"success"`
		ErrorCode    int    `json:"error_code"`
		ErrorMessage string `json:"error_message"`
	}{false, code, msg})
	writeBody(w, status, ctJSON, string(b))
}

func writeEnvelopeData(w http.ResponseWriter, data any) {
	b, err := json.Marshal(struct {
		Success bool `json:"success"`
		Data    any  `json:"data"`
	}{true, data})
	if err != nil {
		panic(err)
	}
	writeBody(w, http.StatusOK, ctJSON, string(b))
}

const (
	msgMissingTenant = "Missing or invalid tenant_id"
	msgQuotaRange    = "Tenant quota must be in [1, 2^63 - 1] bytes"
)

func (f *Fake) tenantQuotas(w http.ResponseWriter, r *http.Request) {
	if !f.opts.MultiTenancy {
		writeEnvelopeError(w, http.StatusConflict, codeUnavailableInCurrentMode, "UNAVAILABLE_IN_CURRENT_MODE")
		return
	}
	q := r.URL.Query()
	id := q.Get("tenant_id") // the first one, as the master takes it
	switch r.Method {
	case http.MethodGet:
		if id == "" {
			writeEnvelopeData(w, f.ledger())
			return
		}
		if !validTenantID(id) {
			writeEnvelopeError(w, http.StatusBadRequest, codeInvalidParams, "Invalid tenant_id")
			return
		}
		t, ok := f.snapshot(id)
		if !ok {
			writeEnvelopeError(w, http.StatusNotFound, codeObjectNotFound, "OBJECT_NOT_FOUND")
			return
		}
		writeEnvelopeData(w, t)

	case http.MethodPut:
		if !validTenantID(id) {
			writeEnvelopeError(w, http.StatusBadRequest, codeInvalidParams, msgMissingTenant)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		quota, msg := parseQuotaBody(body)
		if msg != "" {
			writeEnvelopeError(w, http.StatusBadRequest, codeInvalidParams, msg)
			return
		}
		if f.opts.ReadOnlyPolicy {
			writeEnvelopeError(w, http.StatusInternalServerError, codePersistFail, "PERSISTENT_FAIL")
			return
		}
		f.policy[id] = quota
		f.file = clone(f.policy)
		t, _ := f.snapshot(id)
		writeEnvelopeData(w, t)

	case http.MethodDelete:
		if !validTenantID(id) {
			writeEnvelopeError(w, http.StatusBadRequest, codeInvalidParams, msgMissingTenant)
			return
		}
		if _, ok := f.policy[id]; !ok {
			writeEnvelopeError(w, http.StatusNotFound, codeObjectNotFound, "OBJECT_NOT_FOUND")
			return
		}
		if f.charged[id] > 0 {
			writeEnvelopeError(w, http.StatusConflict, codeTenantNotEmpty, "TENANT_NOT_EMPTY")
			return
		}
		if f.opts.ReadOnlyPolicy {
			writeEnvelopeError(w, http.StatusInternalServerError, codePersistFail, "PERSISTENT_FAIL")
			return
		}
		delete(f.policy, id)
		f.file = clone(f.policy)
		writeEnvelopeData(w, nil)
	}
}

// labelEscaper escapes a label value as the text exposition format wants: only \, " and LF.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

var unsignedInt = regexp.MustCompile(`^[0-9]+$`)

// parseQuotaBody reads {"requested_quota_bytes": <uint>} the way the master does: other keys are
// ignored, a missing field is 0, and only an unsigned integer literal parses. It returns the
// quota or the master's error message.
func parseQuotaBody(body []byte) (int64, string) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return 0, "Invalid JSON body: Unexpected end of buffer. Expected:"
	}
	if trimmed[0] != '{' {
		return 0, "Invalid JSON body: Expected these: {"
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return 0, "Invalid JSON body: " + err.Error()
	}
	raw, ok := fields["requested_quota_bytes"]
	if !ok {
		return 0, msgQuotaRange
	}
	lit := string(bytes.TrimSpace(raw))
	if !unsignedInt.MatchString(lit) {
		return 0, "Invalid JSON body: Failed to parse number"
	}
	v, err := strconv.ParseUint(lit, 10, 64)
	if err != nil {
		return 0, "Invalid JSON body: Failed to parse number"
	}
	if v == 0 || v > math.MaxInt64 {
		return 0, msgQuotaRange
	}
	return int64(v), ""
}

// formatPercent prints a double the way the master's JSON writer does: "0E0",
// "4.0978193283081055E-6" (shortest round-trip mantissa, exponent without '+' or padding).
func formatPercent(v float64) string {
	s := strconv.FormatFloat(v, 'E', -1, 64) // "4.0978193283081055E-06", "0E+00"
	mant, exp, _ := strings.Cut(s, "E")
	e, err := strconv.Atoi(exp)
	if err != nil {
		return s
	}
	return mant + "E" + strconv.Itoa(e)
}

func (f *Fake) segmentsDetail() string {
	used := f.segmentUsed()
	var b strings.Builder
	segs := f.sortedSegments()
	fmt.Fprintf(&b, `{"total_segments":%d,"segments":[`, len(segs))
	for i, s := range segs {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(s.name)
		te, _ := json.Marshal(s.teEnd)
		proto, _ := json.Marshal(s.protocol)
		u := used[s.name]
		if s.status != segOK { // the real master reads 0 for a draining or drained segment
			u = 0
		}
		pct := 0.0
		if s.size > 0 {
			pct = float64(u) / float64(s.size) * 100
		}
		fmt.Fprintf(&b, `{"segment_name":%s,"segment_id":"%s","client_id":"%s","base_address":"%s",`+
			`"size_bytes":%d,"size_human":"%.2f GiB","te_endpoint":%s,"protocol":%s,"status":"%s",`+
			`"allocator_used_bytes":%d,"allocator_capacity_bytes":%d,"allocator_usage_percent":%s}`,
			name, s.id, s.clientID, s.baseAddr, s.size, float64(s.size)/(1<<30), te, proto, s.status,
			u, s.size, formatPercent(pct))
	}
	b.WriteString("]}")
	return b.String()
}

// metricsText renders /metrics with the real master's names, HELP texts and layout (a
// representative subset of the ~133 families; the tenant block, as the master prints it, has
// all HELP/TYPE lines first and then the samples tenant by tenant).
func (f *Fake) metricsText() string {
	var b strings.Builder
	gauge := func(name, help string, v int64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	label := func(v string) string { return `"` + labelEscaper.Replace(v) + `"` }

	allocated := f.allocated()
	gauge("master_allocated_bytes", "Total memory bytes currently allocated across all segments", allocated)
	gauge("master_total_capacity_bytes", "Total memory capacity across all mounted segments", f.capacity())
	if segs := f.sortedSegments(); len(segs) > 0 {
		used := f.segmentUsed()
		b.WriteString("# HELP segment_allocated_bytes Total memory bytes currently allocated of the segment\n# TYPE segment_allocated_bytes gauge\n")
		for _, s := range segs {
			fmt.Fprintf(&b, "segment_allocated_bytes{segment=%s} %d\n", label(s.name), used[s.name])
		}
		b.WriteString("# HELP segment_total_capacity_bytes Total memory capacity of the mounted segment\n# TYPE segment_total_capacity_bytes gauge\n")
		for _, s := range segs {
			fmt.Fprintf(&b, "segment_total_capacity_bytes{segment=%s} %d\n", label(s.name), s.size)
		}
	}
	gauge("master_nof_allocated_bytes", "Total nof ssd bytes currently allocated across all segments", 0)
	gauge("master_total_nof_capacity_bytes", "Total nof ssd capacity across all mounted segments", 0)
	gauge("master_allocated_file_size_bytes", "Total bytes currently allocated for file storage in 3fs/nfs", 0)
	gauge("master_total_file_capacity_bytes", "Total capacity for file storage in 3fs/nfs", 0)
	var keys int64
	for id := range f.charged {
		keys += f.objectCount(id)
	}
	gauge("master_key_count", "Total number of keys managed by the master", keys)
	gauge("master_soft_pin_key_count", "Total number of soft-pinned keys managed by the master", 0)
	gauge("master_active_clients", "Total number of active clients", int64(len(f.segments)))
	if keys > 0 { // the histogram appears once a key exists; a tenant's objects are of one size here
		b.WriteString("# HELP master_value_size_bytes Distribution of object value sizes\n# TYPE master_value_size_bytes histogram\n")
		for _, le := range []int64{4096, 65536, 262144, 1048576, 4194304, 16777216, 67108864} {
			var n int64
			for id, v := range f.charged {
				if c := f.objectCount(id); c > 0 && v/c <= le {
					n += c
				}
			}
			fmt.Fprintf(&b, "master_value_size_bytes_bucket{le=\"%d.000000\"} %d\n", le, n)
		}
		fmt.Fprintf(&b, "master_value_size_bytes_bucket{le=\"+Inf\"} %d\nmaster_value_size_bytes_sum %d\nmaster_value_size_bytes_count %d\n",
			keys, allocated, keys)
	}
	counter("master_mount_segment_requests_total", "Total number of MountSegment requests received", f.mounts)
	counter("master_mount_segment_failures_total", "Total number of failed MountSegment requests", 0)
	counter("master_remount_segment_requests_total", "Total number of RemountSegment requests received", f.remounts)
	counter("master_remount_segment_failures_total", "Total number of failed RemountSegment requests", 0)
	counter("master_unmount_segment_requests_total", "Total number of UnmountSegment requests received", f.unmounts)
	counter("master_unmount_segment_failures_total", "Total number of failed UnmountSegment requests", 0)
	var pings uint64
	for _, s := range f.segments {
		pings += uint64(f.now().Sub(s.pingingSince) / time.Second)
	}
	counter("master_ping_requests_total", "Total number of ping requests received", pings)
	counter("master_ping_failures_total", "Total number of failed ping requests", 0)
	counter("master_evicted_key_count", "Total number of keys evicted", 0)

	if !f.opts.MultiTenancy {
		return b.String()
	}
	type fam struct{ name, help string }
	fams := []fam{
		{"mooncake_tenant_quota_requested_bytes", "Requested tenant quota policy in bytes"},
		{"mooncake_tenant_quota_effective_bytes", "Effective tenant quota in bytes"},
		{"mooncake_tenant_quota_charged_bytes", "Tenant quota charge in bytes"},
		{"mooncake_tenant_quota_admission_closed", "Tenant quota admission-closed flag"},
		{"mooncake_tenant_quota_over_quota", "Tenant over-quota flag"},
		{"mooncake_tenant_quota_explicit_policy", "Tenant explicit policy flag"},
	}
	for _, fm := range fams {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", fm.name, fm.help, fm.name)
	}
	b01 := func(v bool) int64 {
		if v {
			return 1
		}
		return 0
	}
	var reqSum, effSum int64
	for _, t := range f.ledger() {
		vals := []int64{t.RequestedQuotaBytes, t.EffectiveQuotaBytes, t.ChargedBytes,
			b01(t.AdmissionClosed), b01(t.OverQuota), b01(t.HasExplicitPolicy)}
		for i, fm := range fams {
			fmt.Fprintf(&b, "%s{tenant_id=%s} %d\n", fm.name, label(t.TenantID), vals[i])
		}
		if reqSum+t.RequestedQuotaBytes >= reqSum { // saturate rather than wrap
			reqSum += t.RequestedQuotaBytes
		} else {
			reqSum = math.MaxInt64
		}
		effSum += t.EffectiveQuotaBytes
	}
	// The lazily created counters, in tenant order.
	lazy := func(name, help string, by map[string]int64, extra string) {
		ids := make([]string, 0, len(by))
		for id := range by {
			ids = append(ids, id)
		}
		if len(ids) == 0 {
			return
		}
		slices.Sort(ids)
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
		for _, id := range ids {
			fmt.Fprintf(&b, "%s{tenant_id=%s%s} %d\n", name, label(id), extra, by[id])
		}
	}
	lazy("mooncake_tenant_quota_reject_total", "Total number of tenant quota admission rejects", f.rejected, `,reason="quota_exceeded"`)
	lazy("mooncake_tenant_evict_bytes_total", "Total bytes evicted by tenant-scoped quota eviction", f.evicted, "")
	gauge("mooncake_tenant_quota_allocatable_capacity_bytes", "Global tenant quota allocatable capacity in bytes", f.capacity())
	gauge("mooncake_tenant_quota_requested_bytes_sum", "Global requested tenant quota sum in bytes", reqSum)
	gauge("mooncake_tenant_quota_effective_bytes_sum", "Global effective tenant quota sum in bytes", effSum)
	return b.String()
}

// Segment and drain job statuses, with the numbers the master prints beside their names.
const (
	segOK       = "OK"
	segDraining = "DRAINING"
	segDrained  = "DRAINED"

	drainCreated   = "CREATED"
	drainRunning   = "RUNNING"
	drainSucceeded = "SUCCEEDED"
	drainFailed    = "FAILED"
	drainCanceled  = "CANCELED"
)

var (
	segmentStatusNumber = map[string]int{segOK: 1, segDraining: 2, segDrained: 3}
	drainStatusNumber   = map[string]int{drainCreated: 0, "PLANNING": 1, drainRunning: 2, drainSucceeded: 3, drainFailed: 4, drainCanceled: 5}
	jobIDPattern        = regexp.MustCompile(`^[0-9]+-[0-9]+$`)
)

// rawQuery is the first value of key in the query string as sent, not percent-decoded: the
// master reads remove_all's tenant_id and force that way.
func rawQuery(r *http.Request, key string) string {
	for _, kv := range strings.Split(r.URL.RawQuery, "&") {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// removeAll is POST /api/v1/remove_all: a tenant's unleased objects (every tenant's without
// tenant_id), leased ones too with force=true or force=1; an unknown or invalid tenant removes 0.
func (f *Fake) removeAll(w http.ResponseWriter, r *http.Request) {
	tenant := rawQuery(r, "tenant_id")
	force := rawQuery(r, "force")
	forced := force == "true" || force == "1"
	var removed int64
	for id := range f.charged {
		if tenant != "" && id != tenant {
			continue
		}
		n, l := f.objectCount(id), f.leased[id]
		if forced {
			l = lease{}
		}
		removed += n - l.n
		if l.n == 0 {
			delete(f.charged, id)
			delete(f.objects, id)
			delete(f.leased, id)
			continue
		}
		f.charged[id], f.objects[id] = l.bytes, l.n
	}
	writeBody(w, http.StatusOK, ctJSON, fmt.Sprintf(`{"success":true,"removed_count":%d}`, removed))
}

func (f *Fake) segmentStatus(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("segment") // decoded, as the master decodes it
	if name == "" {
		writeEnvelopeError(w, http.StatusBadRequest, codeInvalidParams, "Missing segment query parameter")
		return
	}
	s, ok := f.segments[name]
	if !ok {
		writeEnvelopeError(w, http.StatusNotFound, codeSegmentNotFound, "SEGMENT_NOT_FOUND")
		return
	}
	b, _ := json.Marshal(struct {
		Success      bool   `json:"success"`
		Segment      string `json:"segment"`
		Status       int    `json:"status"`
		StatusName   string `json:"status_name"`
		ErrorCode    int    `json:"error_code"`
		ErrorMessage string `json:"error_message"`
	}{true, name, segmentStatusNumber[s.status], s.status, 0, ""})
	writeBody(w, http.StatusOK, ctJSON, string(b))
}

// createDrain is POST /api/v1/drain_jobs, checked in the master's order: the request's shape
// (-600), then each source's existence (-101) and status (-1010), then each target's.
func (f *Fake) createDrain(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		writeEnvelopeError(w, http.StatusBadRequest, codeInvalidParams, "Invalid JSON body: Unexpected end of buffer. Expected:")
		return
	}
	if trimmed[0] != '{' {
		writeEnvelopeError(w, http.StatusBadRequest, codeInvalidParams, "Invalid JSON body: Expected these: {")
		return
	}
	var req struct { // unknown keys are ignored, as the master ignores them
		Segments       []string `json:"segments"`
		TargetSegments []string `json:"target_segments"`
		MaxConcurrency *int64   `json:"max_concurrency"`
	}
	if err := json.Unmarshal(trimmed, &req); err != nil {
		writeEnvelopeError(w, http.StatusBadRequest, codeInvalidParams, "Invalid JSON body: "+err.Error())
		return
	}
	concurrency := int64(4) // the master's default
	if req.MaxConcurrency != nil {
		concurrency = *req.MaxConcurrency
	}
	fail := func(status, code int, msg string) { writeEnvelopeError(w, status, code, msg) }
	seen := map[string]bool{}
	dup := false
	for _, s := range req.Segments {
		dup = dup || seen[s]
		seen[s] = true
	}
	if len(req.Segments) == 0 || concurrency <= 0 || dup {
		fail(http.StatusBadRequest, codeInvalidParams, "INVALID_PARAMS")
		return
	}
	for _, s := range req.Segments {
		seg, ok := f.segments[s]
		if !ok {
			fail(http.StatusNotFound, codeSegmentNotFound, "SEGMENT_NOT_FOUND")
			return
		}
		if seg.status != segOK {
			fail(http.StatusConflict, codeUnavailableInStatus, "UNAVAILABLE_IN_CURRENT_STATUS")
			return
		}
	}
	for _, t := range req.TargetSegments {
		seg, ok := f.segments[t]
		switch {
		case seen[t]:
			fail(http.StatusBadRequest, codeInvalidParams, "INVALID_PARAMS")
			return
		case !ok:
			fail(http.StatusNotFound, codeSegmentNotFound, "SEGMENT_NOT_FOUND")
			return
		case seg.status != segOK:
			fail(http.StatusConflict, codeUnavailableInStatus, "UNAVAILABLE_IN_CURRENT_STATUS")
			return
		}
	}
	f.seq++
	j := &drainJob{
		id:       fmt.Sprintf("%d-%d", 1101725150691577454+f.seq, 8035271609663295380-f.seq),
		segments: slices.Clone(req.Segments),
		status:   drainCreated,
		created:  f.now(),
		message:  "Drain job created",
	}
	j.update = j.created
	j.p = DrainProgress{Status: drainCreated}
	f.jobs[j.id] = j
	f.jobOrder = append(f.jobOrder, j.id)
	f.setSegmentStatus(j.segments, segDraining)
	writeBody(w, http.StatusOK, ctJSON, fmt.Sprintf(`{"success":true,"job_id":"%s","status":"CREATED","error_code":0,"error_message":""}`, j.id))
}

// job answers the job named by ?job_id=, or writes the master's error and returns nil.
func (f *Fake) job(w http.ResponseWriter, r *http.Request) *drainJob {
	id := r.URL.Query().Get("job_id")
	if !jobIDPattern.MatchString(id) {
		writeEnvelopeError(w, http.StatusBadRequest, codeInvalidParams, "Missing or invalid job_id")
		return nil
	}
	j, ok := f.jobs[id]
	if !ok {
		writeEnvelopeError(w, http.StatusNotFound, codeJobNotFound, "JOB_NOT_FOUND")
		return nil
	}
	return j
}

func (f *Fake) queryDrain(w http.ResponseWriter, r *http.Request) {
	j := f.job(w, r)
	if j == nil {
		return
	}
	b, err := json.Marshal(struct {
		Success        bool     `json:"success"`
		JobID          string   `json:"job_id"`
		Type           int      `json:"type"`
		TypeName       string   `json:"type_name"`
		Status         int      `json:"status"`
		StatusName     string   `json:"status_name"`
		CreatedAt      int64    `json:"created_at_ms_epoch"`
		UpdatedAt      int64    `json:"last_updated_at_ms_epoch"`
		Segments       []string `json:"segments"`
		SucceededUnits int64    `json:"succeeded_units"`
		FailedUnits    int64    `json:"failed_units"`
		BlockedUnits   int64    `json:"blocked_units"`
		ActiveUnits    int64    `json:"active_units"`
		MigratedBytes  int64    `json:"migrated_bytes"`
		Message        string   `json:"message"`
		ErrorCode      int      `json:"error_code"`
		ErrorMessage   string   `json:"error_message"`
	}{true, j.id, 0, "DRAIN", drainStatusNumber[j.status], j.status, j.created.UnixMilli(), j.update.UnixMilli(), j.segments,
		j.p.Succeeded, j.p.Failed, j.p.Blocked, j.p.Active, j.p.MigratedBytes, j.message, 0, ""})
	if err != nil {
		panic(err)
	}
	writeBody(w, http.StatusOK, ctJSON, string(b))
}

// cancelDrain is refused while units are active (measured: always, once a job runs) and once the
// job has ended.
func (f *Fake) cancelDrain(w http.ResponseWriter, r *http.Request) {
	j := f.job(w, r)
	if j == nil {
		return
	}
	if j.p.Active > 0 || j.status == drainSucceeded || j.status == drainFailed || j.status == drainCanceled {
		writeEnvelopeError(w, http.StatusConflict, codeUnavailableInStatus, "UNAVAILABLE_IN_CURRENT_STATUS")
		return
	}
	j.status, j.p.Status, j.update, j.message = drainCanceled, drainCanceled, f.now(), "Drain job canceled"
	f.setSegmentStatus(j.segments, segOK)
	writeBody(w, http.StatusOK, ctJSON, fmt.Sprintf(`{"success":true,"job_id":"%s","status":"CANCELED","error_code":0,"error_message":""}`, j.id))
}
