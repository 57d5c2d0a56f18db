// Package store is the one client of a Mooncake master's admin HTTP API (the Admin
// endpoint, port 9003 on a managed store): health, Prometheus metrics, the segment listing and
// each segment's drain status, the tenant quota ledger, removing one tenant's objects, and drain
// jobs that move a segment's objects to the others. Every call has a timeout, follows no
// redirects and reads a bounded body; errors carry the store's error code when it gave one.
//
// It is a leaf: the operator, the binaries inside store Pods (member/) and the CLI import it, and
// it imports nothing of this module, so a store Pod's binary carries no controller. It also
// answers, once, which segments belong to a member (segments.go).
//
// The shapes here were measured on mooncake_master 0.3.13.post1 (hack/MOONCAKE_NOTES.md).
package store

import (
	"context"
	"errors"
	"fmt"
)

// Error codes of the store's JSON envelope that the operator acts on.
const (
	CodeObjectNotFound           = -704
	CodeUnavailableInCurrentMode = -1011 // multi-tenancy off: no ledger
	// CodeUnavailableInStatus: also a drain of a segment (or to a target) that is already
	// DRAINING or DRAINED, and a cancel of a job that has active units or has ended.
	CodeUnavailableInStatus = -1010
	CodePersistFail         = -1503
	CodeTenantNotRegistered = -1701
	CodeTenantNotEmpty      = -1702
	// CodeInvalidParams: also a drain of no segment, a duplicate one, a target that is a source,
	// max_concurrency 0, or a malformed job id.
	CodeInvalidParams = -600
	// CodeSegmentNotFound: a drain or status query naming a segment that is not mounted (the
	// name is segment_name, never te_endpoint).
	CodeSegmentNotFound = -101
	// CodeJobNotFound: a drain job the master does not know (jobs live in its memory only, so
	// none survives a restart).
	CodeJobNotFound = -1402
)

// Error is a failure the store reported in its envelope (or an HTTP status without one).
type Error struct {
	// Op is what was asked, e.g. "PUT /api/v1/tenant_quotas?tenant_id=team-a".
	Op string
	// HTTPStatus of the response.
	HTTPStatus int
	// Code and Message from the envelope; Code 0 when the response carried none.
	Code    int
	Message string
}

func (e *Error) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("%s: %s (%d, HTTP %d)", e.Op, e.Message, e.Code, e.HTTPStatus)
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.HTTPStatus, e.Message)
}

// HasCode reports whether err is a store Error with the given code.
func HasCode(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Health is GET /health. ServiceReady is the only verdict the master gives (status is constant).
type Health struct {
	ServiceReady bool   `json:"service_ready"`
	Role         string `json:"role"`
	HAState      string `json:"ha_state"`
	// ViewVersion is the election view a master in its etcd HA mode serves under (measured: the
	// etcd revision that created the view's key, new at every election, the same leader elected
	// again included); 0 (null) in the plain mode.
	ViewVersion int64 `json:"view_version"`
}

// Metrics are the figures the operator reads from GET /metrics.
type Metrics struct {
	// TotalCapacityBytes is master_total_capacity_bytes: the sum of mounted segments.
	TotalCapacityBytes int64
	// AllocatedBytes is master_allocated_bytes.
	AllocatedBytes int64
	// Tenants are the mooncake_tenant_quota_* series by tenant_id (multi-tenancy only).
	Tenants map[string]TenantMetrics
	// KeyCount is master_key_count: the objects the store holds, every tenant's. The master
	// counts objects nowhere else (not per segment, not per tenant), so objects lost between two
	// reads are the fall of KeyCount, less the evictions (EvictedKeys) and removals between them.
	// A drain moves objects without changing it.
	KeyCount int64
	// EvictedKeys is master_evicted_key_count: objects evicted since the master started.
	EvictedKeys int64
	// Segments are segment_allocated_bytes and segment_total_capacity_bytes by segment name
	// (the series of a segment exist while it is mounted). A drained segment's allocated bytes
	// keep their value from before the drain until it unmounts, so they count bytes moved away
	// twice in AllocatedBytes meanwhile: count losses from KeyCount and the tenants'
	// ChargedBytes, not from allocated bytes.
	Segments map[string]SegmentMetrics
	// CounterSum is the sum of every counter the master exposes. Counters only grow while one
	// master process runs (members ping it once a second) and start over from zero in a new
	// one, so a sum lower than the last one read means the master answering is a new process
	// that holds none of the old one's objects.
	CounterSum float64
}

// TenantMetrics are one tenant's mooncake_tenant_* figures. Measured on 0.3.13.post1: a put
// under the tenant raises ChargedBytes while the tenant is below its grant; at the grant the
// master evicts the tenant's own older objects (EvictedBytes rises, ChargedBytes stays at the
// grant), but only objects nobody read within default_kv_lease_ttl (a get leases an object):
// with none left to evict the put is refused with -1700 TENANT_QUOTA_EXCEEDED and Rejected
// rises, as it does for a value larger than the grant (after the master evicted what it
// could). A put of a key that exists, and every put under a tenant the ledger does not know
// (-1701), moves none of them: the master keeps no per-tenant put count.
type TenantMetrics struct {
	RequestedBytes int64
	EffectiveBytes int64
	ChargedBytes   int64
	// EvictedBytes is mooncake_tenant_evict_bytes_total: bytes evicted from the tenant to
	// admit its own writes, since the master started (0 until its first eviction).
	EvictedBytes int64
	// Rejected is mooncake_tenant_quota_reject_total summed over its reasons: puts refused for
	// the tenant's quota.
	Rejected float64
}

// SegmentMetrics are one mounted segment's series in /metrics.
type SegmentMetrics struct {
	AllocatedBytes int64
	CapacityBytes  int64
}

// A segment's status (Segment.Status, SegmentStatus). A segment turns DRAINING when a drain job
// naming it is created, and takes no new allocations from then on; DRAINED once no replica is
// left on it, or OK again when the job fails. A DRAINED segment stays DRAINED while its member
// runs: only a new mount (the member restarting) makes it OK again.
const (
	SegmentOK       = "OK"
	SegmentDraining = "DRAINING"
	SegmentDrained  = "DRAINED"
	// Reported by the master's code but not reachable for a member's own segment.
	SegmentGracefullyUnmounting = "GRACEFULLY_UNMOUNTING"
	SegmentUnmounting           = "UNMOUNTING"
)

// Segment is one entry of GET /get_segments_detail.
type Segment struct {
	Name      string `json:"segment_name"`
	ID        string `json:"segment_id"`
	ClientID  string `json:"client_id"`
	SizeBytes int64  `json:"size_bytes"`
	Protocol  string `json:"protocol"`
	// Status is one of the Segment* constants.
	Status     string `json:"status"`
	TEEndpoint string `json:"te_endpoint"`
	// UsedBytes reads 0 for a DRAINING or DRAINED segment even while objects are still on it:
	// read it before creating a drain.
	UsedBytes int64 `json:"allocator_used_bytes"`
}

// A drain job's status (DrainJob.Status). CREATED turns RUNNING within about half a second;
// PLANNING exists but was not observed.
const (
	DrainCreated   = "CREATED"
	DrainPlanning  = "PLANNING"
	DrainRunning   = "RUNNING"
	DrainSucceeded = "SUCCEEDED"
	DrainFailed    = "FAILED"
	DrainCanceled  = "CANCELED"
)

// DrainJob is a drain job as the master reports it: one unit is one object replica on a drained
// segment. SUCCEEDED means no replica is left to move, not that every one moved: a job whose
// source member died turns SUCCEEDED with FailedUnits > 0 after the master's task timeout, the
// lost objects never counted. FAILED means some units could not move (no room elsewhere; each
// is tried 3 times): what moved stays moved, the rest stays on the segment, which is OK again.
type DrainJob struct {
	ID string `json:"job_id"`
	// Status is one of the Drain* constants.
	Status         string   `json:"status_name"`
	Segments       []string `json:"segments"`
	SucceededUnits int64    `json:"succeeded_units"`
	FailedUnits    int64    `json:"failed_units"`
	// BlockedUnits wait for a lease: an object read within default_kv_lease_ttl moves once its
	// lease expires.
	BlockedUnits  int64  `json:"blocked_units"`
	ActiveUnits   int64  `json:"active_units"`
	MigratedBytes int64  `json:"migrated_bytes"`
	Message       string `json:"message"`
	// CreatedAtMs and UpdatedAtMs are the master's clock, milliseconds since the epoch.
	CreatedAtMs int64 `json:"created_at_ms_epoch"`
	UpdatedAtMs int64 `json:"last_updated_at_ms_epoch"`
}

// Done reports whether the job has ended (SUCCEEDED, FAILED or CANCELED).
func (j DrainJob) Done() bool {
	return j.Status == DrainSucceeded || j.Status == DrainFailed || j.Status == DrainCanceled
}

// Tenant is one ledger entry of /api/v1/tenant_quotas.
type Tenant struct {
	ID                  string `json:"tenant_id"`
	RequestedQuotaBytes int64  `json:"requested_quota_bytes"`
	EffectiveQuotaBytes int64  `json:"effective_quota_bytes"`
	ChargedBytes        int64  `json:"charged_bytes"`
	AdmissionClosed     bool   `json:"admission_closed"`
	OverQuota           bool   `json:"over_quota"`
	HasExplicitPolicy   bool   `json:"has_explicit_policy"`
}

// Admin is what the operator asks a master. A Client implements it over HTTP; tests may
// substitute their own.
type Admin interface {
	// Endpoint names the master asked (the admin endpoint's base URL): what was read from one
	// master is never taken for another's.
	Endpoint() string
	Health(ctx context.Context) (Health, error)
	Metrics(ctx context.Context) (Metrics, error)
	// Segments lists mounted segments. A master older than 0.3.12 answers 404: ErrNotSupported.
	Segments(ctx context.Context) ([]Segment, error)
	// Tenants lists the ledger. Without multi-tenancy: an *Error with CodeUnavailableInCurrentMode.
	Tenants(ctx context.Context) ([]Tenant, error)
	// PutTenant creates or updates a ledger entry's requested quota.
	PutTenant(ctx context.Context, id string, requestedBytes int64) (Tenant, error)
	// DeleteTenant removes a ledger entry: CodeObjectNotFound when absent, CodeTenantNotEmpty
	// while the tenant still owns objects.
	DeleteTenant(ctx context.Context, id string) error
	// RemoveTenantObjects removes the tenant's objects that nobody holds a lease on and returns
	// how many it removed. Leased objects (read within default_kv_lease_ttl) stay, unreported:
	// call again once the leases expired. An id that would need percent-encoding is refused
	// (ErrTenantNotAddressable) before anything is sent.
	RemoveTenantObjects(ctx context.Context, tenant string) (int64, error)

	// SegmentStatus is one segment's status (a Segment* constant); CodeSegmentNotFound when it
	// is not mounted.
	SegmentStatus(ctx context.Context, segment string) (string, error)
	// CreateDrain starts moving every object replica on segments to targets (empty: every other
	// segment that takes allocations), at most maxConcurrency at a time (0: the master's default,
	// 4). The segments turn DRAINING at once.
	CreateDrain(ctx context.Context, segments, targets []string, maxConcurrency int) (DrainJob, error)
	// Drain reads a drain job; CodeJobNotFound when the master does not know it.
	Drain(ctx context.Context, jobID string) (DrainJob, error)
	// CancelDrain cancels a job whose units are not active (the segments turn OK again);
	// CodeUnavailableInStatus while units are active or once the job has ended.
	CancelDrain(ctx context.Context, jobID string) error
}

// ErrNotSupported is returned for an endpoint the master does not have.
var ErrNotSupported = errors.New("not supported by this master")

// ErrTenantNotAddressable is wrapped by RemoveTenantObjects' refusal of a tenant id that the
// master's remove_all cannot match (see the method).
var ErrTenantNotAddressable = errors.New("tenant id cannot be addressed by remove_all")
