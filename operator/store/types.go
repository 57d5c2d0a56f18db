// Package store is the operator's client of a Mooncake master's admin HTTP API (the Admin
// endpoint, port 9003 on a managed store): health, Prometheus metrics, the segment listing and
// the tenant quota ledger. Every call has a timeout, follows no redirects and reads a bounded
// body; errors carry the store's error code when it gave one.
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
	CodeUnavailableInStatus      = -1010
	CodePersistFail              = -1503
	CodeTenantNotRegistered      = -1701
	CodeTenantNotEmpty           = -1702
	CodeInvalidParams            = -600
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
}

// Metrics are the figures the operator reads from GET /metrics.
type Metrics struct {
	// TotalCapacityBytes is master_total_capacity_bytes: the sum of mounted segments.
	TotalCapacityBytes int64
	// AllocatedBytes is master_allocated_bytes.
	AllocatedBytes int64
	// Tenants are the mooncake_tenant_quota_* series by tenant_id (multi-tenancy only).
	Tenants map[string]TenantMetrics
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

// Segment is one entry of GET /get_segments_detail.
type Segment struct {
	Name       string `json:"segment_name"`
	ID         string `json:"segment_id"`
	ClientID   string `json:"client_id"`
	SizeBytes  int64  `json:"size_bytes"`
	Protocol   string `json:"protocol"`
	Status     string `json:"status"`
	TEEndpoint string `json:"te_endpoint"`
	UsedBytes  int64  `json:"allocator_used_bytes"`
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
}

// ErrNotSupported is returned for an endpoint the master does not have.
var ErrNotSupported = errors.New("not supported by this master")
