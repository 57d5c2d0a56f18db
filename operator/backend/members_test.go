package backend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The lease a warm store's new master grants on what it kept is the masters' last
// -default_kv_lease_ttl, in the forms the master accepts.
func TestLeaseTTL(t *testing.T) {
	leader := func(args ...string) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Args: args}}
		return d
	}
	for _, c := range []struct {
		name string
		d    *appsv1.Deployment
		want time.Duration
	}{
		{"as rendered", leader("-rpc_port=50051", "-default_kv_lease_ttl=5m"), 5 * time.Minute},
		{"extraArgs after it win", leader("-default_kv_lease_ttl=5m", "-enable_ha=true", "-default_kv_lease_ttl=15s"), 15 * time.Second},
		{"raw milliseconds", leader("-default_kv_lease_ttl=2500"), 2500 * time.Millisecond},
		{"milliseconds", leader("-default_kv_lease_ttl=750ms"), 750 * time.Millisecond},
		{"hours", leader("-default_kv_lease_ttl=1h"), time.Hour},
		{"not given: the master's default", leader("-rpc_port=50051"), 5 * time.Second},
		{"no leader rendered", nil, 5 * time.Second},
	} {
		assert.Equal(t, c.want, leaseTTL(c.d), c.name)
	}
}
