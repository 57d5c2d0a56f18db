package operator

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"
)

func TestObservationsExportWhatWasReadAndForgetWhatIsGone(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	m.Observed("mooncake-dram", BackendFigures{Up: true, CapacityBytes: ptr.To[int64](256 << 20), UsedBytes: ptr.To[int64](1 << 20),
		MembersRegistered: ptr.To[int64](1), MembersExpected: ptr.To[int64](2)})
	m.Observed("external", BackendFigures{}) // did not answer: up 0, nothing else known
	m.BindingObserved(BindingFigures{Namespace: "team-a", Name: "chat", Pool: "shared-dram", Domain: "team-a-chat", UsedBytes: ptr.To[int64](1 << 10),
		EffectiveBytes: ptr.To[int64](128 << 20), EvictedBytes: ptr.To[int64](512 << 10), CacheInUse: ptr.To(false), DriftedPods: 2})
	// A Binding's next figures replace its last ones.
	m.BindingObserved(BindingFigures{Namespace: "team-a", Name: "chat", Pool: "shared-dram", Domain: "team-a-chat", UsedBytes: ptr.To[int64](1 << 20),
		EffectiveBytes: ptr.To[int64](128 << 20), EvictedBytes: ptr.To[int64](512 << 10), CacheInUse: ptr.To(true), DriftedPods: 2})
	m.BindingObserved(BindingFigures{Namespace: "team-b", Name: "idle", Pool: "shared-dram", Domain: "default"}) // CacheInUse Unknown: absent
	names := []string{"kvcache_store_up", "kvcache_backend_capacity_bytes", "kvcache_backend_used_bytes", "kvcache_backend_members_registered",
		"kvcache_backend_members_expected", "kvcache_binding_used_bytes", "kvcache_binding_effective_quota_bytes", "kvcache_binding_evicted_bytes_total",
		"kvcache_binding_cache_in_use", "kvcache_binding_drifted_pods"}
	want := `
# HELP kvcache_backend_capacity_bytes Bytes the backend's members registered with the master (master_total_capacity_bytes), as last read.
# TYPE kvcache_backend_capacity_bytes gauge
kvcache_backend_capacity_bytes{backend="mooncake-dram"} 2.68435456e+08
# HELP kvcache_backend_members_expected Member Pods of a managed store, each of which should register a segment.
# TYPE kvcache_backend_members_expected gauge
kvcache_backend_members_expected{backend="mooncake-dram"} 2
# HELP kvcache_backend_members_registered Member segments registered with the master (of a managed store: member Pods whose segment the master lists).
# TYPE kvcache_backend_members_registered gauge
kvcache_backend_members_registered{backend="mooncake-dram"} 1
# HELP kvcache_backend_used_bytes Bytes allocated to objects on the backend's master (master_allocated_bytes), as last read.
# TYPE kvcache_backend_used_bytes gauge
kvcache_backend_used_bytes{backend="mooncake-dram"} 1.048576e+06
# HELP kvcache_binding_cache_in_use 1 while the Binding's CacheInUse condition is True, 0 while it is False (absent while Unknown: no Pod Ready, or nothing observable).
# TYPE kvcache_binding_cache_in_use gauge
kvcache_binding_cache_in_use{binding="chat",domain="team-a-chat",namespace="team-a",pool="shared-dram"} 1
# HELP kvcache_binding_drifted_pods Running Pods injected through the Binding whose configuration is no longer what injection writes now.
# TYPE kvcache_binding_drifted_pods gauge
kvcache_binding_drifted_pods{binding="chat",domain="team-a-chat",namespace="team-a",pool="shared-dram"} 2
kvcache_binding_drifted_pods{binding="idle",domain="default",namespace="team-b",pool="shared-dram"} 0
# HELP kvcache_binding_effective_quota_bytes The grant the store computed for the Binding's domain (the ceiling, cut in proportion when ceilings oversubscribe the store).
# TYPE kvcache_binding_effective_quota_bytes gauge
kvcache_binding_effective_quota_bytes{binding="chat",domain="team-a-chat",namespace="team-a",pool="shared-dram"} 1.34217728e+08
# HELP kvcache_binding_evicted_bytes_total Bytes the store evicted from the Binding's domain to admit the domain's own writes at its grant (the master's counter: it starts over with a new master).
# TYPE kvcache_binding_evicted_bytes_total counter
kvcache_binding_evicted_bytes_total{binding="chat",domain="team-a-chat",namespace="team-a",pool="shared-dram"} 524288
# HELP kvcache_binding_used_bytes Bytes the Binding's domain holds in the store (the tenant's charge), as last read.
# TYPE kvcache_binding_used_bytes gauge
kvcache_binding_used_bytes{binding="chat",domain="team-a-chat",namespace="team-a",pool="shared-dram"} 1.048576e+06
# HELP kvcache_store_up 1 when the backend's master answered its last read and serves, 0 when it did not answer or does not serve.
# TYPE kvcache_store_up gauge
kvcache_store_up{backend="external"} 0
kvcache_store_up{backend="mooncake-dram"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), names...))

	m.BackendGone("external")
	m.BindingGone("team-a", "chat")
	m.BindingGone("team-b", "idle")
	n, err := testutil.GatherAndCount(reg, names...)
	require.NoError(t, err)
	require.Equal(t, 5, n, "only mooncake-dram's five series are left")

	// A second manager in one process shares the first one's series.
	again, err := NewMetrics(reg)
	require.NoError(t, err)
	again.BackendGone("mooncake-dram")
	n, err = testutil.GatherAndCount(reg, names...)
	require.NoError(t, err)
	require.Zero(t, n)
}

// Each condition of a backend is a series per status, 1 for the one it has; the loss and
// failover counters start at 0 when a backend is first observed (so that an increase sees the
// first loss), and all of a deleted backend's series go.
func TestABackendsConditionsAndLossCountersAreExported(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	m.Observed("dram", BackendFigures{Up: true, Conditions: map[string]string{"NetworkPolicyEnforced": "False", "LeaderAvailable": "True"}})
	want := `
# HELP kvcache_backend_condition 1 for the status (True, False, Unknown) each condition of the backend has, 0 for the other two, as of its last reconcile: an alert asks for == 1.
# TYPE kvcache_backend_condition gauge
kvcache_backend_condition{backend="dram",condition="LeaderAvailable",status="False"} 0
kvcache_backend_condition{backend="dram",condition="LeaderAvailable",status="True"} 1
kvcache_backend_condition{backend="dram",condition="LeaderAvailable",status="Unknown"} 0
kvcache_backend_condition{backend="dram",condition="NetworkPolicyEnforced",status="False"} 1
kvcache_backend_condition{backend="dram",condition="NetworkPolicyEnforced",status="True"} 0
kvcache_backend_condition{backend="dram",condition="NetworkPolicyEnforced",status="Unknown"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "kvcache_backend_condition"))
	require.Equal(t, 2, testutil.CollectAndCount(m.lostObjects), "both causes at 0")
	require.Equal(t, 2, testutil.CollectAndCount(m.failovers), "both modes at 0")
	m.Lost("dram", "MemberLost", 3, 3<<20)
	require.InDelta(t, 3, testutil.ToFloat64(m.lostObjects.WithLabelValues("dram", "MemberLost")), 0)

	m.BackendGone("dram")
	for _, c := range []prometheus.Collector{m.lostObjects, m.lostBytes, m.failovers, m.failoverKept} {
		require.Equal(t, 0, testutil.CollectAndCount(c))
	}
	n, err := testutil.GatherAndCount(reg, "kvcache_backend_condition")
	require.NoError(t, err)
	require.Zero(t, n)
}
