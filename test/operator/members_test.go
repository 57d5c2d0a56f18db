package operator_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/check"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// A member that runs but never registers its segment: the backend reports it, and `kvcache
// check` names the node the store has no memory from (nodes the groups do not select, and a
// cordoned one, are not counted).
func TestCheckNamesTheNodeWhoseMemberDidNotMount(t *testing.T) {
	ctx := context.Background()
	for _, n := range []struct {
		name   string
		labels map[string]string
		cordon bool
	}{
		{"node-0", map[string]string{"kvcache-test/pool": "dram"}, false},
		{"node-1", map[string]string{"kvcache-test/pool": "dram"}, false},
		{"node-2", map[string]string{"kvcache-test/pool": "other"}, false},
		{"node-3", map[string]string{"kvcache-test/pool": "dram"}, true},
	} {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: n.labels}, Spec: corev1.NodeSpec{Unschedulable: n.cordon}})
	}
	fake := fakeStore(t, "check-members", storetest.FakeOptions{MultiTenancy: true})
	b := walkthroughBackend("check-members")
	b.Spec.Connection.Managed.Members[0].NodeSelector = map[string]string{"kvcache-test/pool": "dram"}
	create(t, b)
	rollOutLeader(t, "check-members")
	memberPod(t, "check-members", 0, 0, "10.9.0.10") // on node-0
	memberPod(t, "check-members", 0, 1, "10.9.0.11") // on node-1: runs, never registers
	fake.MountSegment("10.9.0.10:15400", 8<<30, "tcp")
	eventuallyBackend(t, "check-members", "one member of two registered", func(b *kvv1.KVCacheBackend) bool {
		return len(b.Status.Members) == 1 && b.Status.Members[0].Node == "node-0"
	})

	r, err := generator.NewRenderer()
	require.NoError(t, err)
	members := func() check.Finding {
		t.Helper()
		report, err := check.Live(ctx, env.Client, check.LiveOptions{SystemNamespace: systemNamespace, Injector: injection.New(r)})
		require.NoError(t, err)
		for _, f := range report.Findings {
			if f.Check == "backend.members" && f.Object == "KVCacheBackend/check-members" {
				return f
			}
		}
		require.FailNow(t, "no backend.members finding", "%+v", report.Findings)
		return check.Finding{}
	}
	f := members()
	assert.Equal(t, check.Fail, f.Level)
	assert.Contains(t, f.Message, "1 of the 2 nodes the member groups select have a member registered with the store; none on node-1.")
	assert.Contains(t, f.Fix, "kubectl -n "+systemNamespace+" get pods -l app.kubernetes.io/instance=check-members -o wide")

	// Once it registers, the check passes.
	fake.MountSegment("10.9.0.11:15400", 8<<30, "tcp")
	eventuallyBackend(t, "check-members", "both members registered", func(b *kvv1.KVCacheBackend) bool { return len(b.Status.Members) == 2 })
	f = members()
	assert.Equal(t, check.Pass, f.Level, f.Message)
	assert.Equal(t, "2 members registered, one per selected node.", f.Message)
}
