package operator

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultUsageRefresh is how often a usage figure that keeps changing is rewritten in status.
// Usage (bytes a tenant, pool or store holds) changes with every write an engine makes, so
// writing it on every poll would make steady state write every object every poll; the store's
// own /metrics carries the figure as it moves.
const DefaultUsageRefresh = 5 * time.Minute

// UsageRefreshOr is d, or DefaultUsageRefresh when d is zero.
func UsageRefreshOr(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultUsageRefresh
	}
	return d
}

// Usage is a usage figure in status with the time it was read from the store.
type Usage struct {
	Bytes *resource.Quantity
	At    *metav1.Time
}

// RefreshUsage decides which usage figure status carries after a read: the one just read
// (with now) when it appeared or disappeared, crossed zero (whether anything is cached is what
// conditions act on), or when the one in status is older than refresh; otherwise the one in
// status, unchanged. A figure equal to the one in status keeps its time, so nothing is written.
func RefreshUsage(prev Usage, read *resource.Quantity, now time.Time, refresh time.Duration) Usage {
	switch {
	case read == nil:
		return Usage{}
	case prev.Bytes == nil || prev.At == nil:
		return Usage{Bytes: read, At: &metav1.Time{Time: now}}
	case prev.Bytes.Cmp(*read) == 0:
		return prev
	case prev.Bytes.IsZero() != read.IsZero():
		return Usage{Bytes: read, At: &metav1.Time{Time: now}}
	case now.Sub(prev.At.Time) >= refresh:
		return Usage{Bytes: read, At: &metav1.Time{Time: now}}
	}
	return prev
}
