package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

// An external store is observed through its Admin endpoint only: nothing is rendered, the
// endpoints are the declared ones, and capacity and members come from the store.
func TestExternalBackendIsObservedOnly(t *testing.T) {
	fake := fakeStore(t, "external", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.9.0.1:15400", 4<<30, "rdma")
	fake.MountSegment("10.9.0.2:15400", 4<<30, "rdma")
	b := &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "external"}, Spec: kvv1.KVCacheBackendSpec{
		Connection: kvv1.Connection{External: &kvv1.ExternalConnection{Endpoints: []kvv1.Endpoint{
			{Name: kvv1.EndpointClient, Address: "mooncake.store.example:50051"},
			{Name: kvv1.EndpointAdmin, Address: "mooncake.store.example:9003"},
		}}}}}
	create(t, b)
	got := eventuallyBackend(t, "external", "Ready", func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseReady })
	assert.Equal(t, "8Gi", got.Status.Capacity.Total.String())
	assert.Equal(t, []kvv1.Endpoint{{Name: kvv1.EndpointClient, Address: "mooncake.store.example:50051"}, {Name: kvv1.EndpointAdmin, Address: "mooncake.store.example:9003"}}, got.Status.Endpoints)
	assert.Equal(t, "2 segment(s) mounted", condition(got.Status.Conditions, kvv1.ConditionMembersMounted).Message)
	require.Len(t, got.Status.Members, 2)
	assert.Equal(t, "rdma", got.Status.Members[0].Protocol)
	time.Sleep(time.Second)
	ds := &appsv1.DeploymentList{}
	require.NoError(t, env.Client.List(context.Background(), ds, client.InNamespace(systemNamespace), client.MatchingLabels{"app.kubernetes.io/instance": "external"}))
	assert.Empty(t, ds.Items, "nothing is rendered for an external store")

	create(t, pool("external-pool", "external", "8Gi"))
	p := eventuallyPool(t, "external-pool", "the Client endpoint", func(p *kvv1.KVCachePool) bool { return p.Status.ClientEndpoint != "" })
	assert.Equal(t, "mooncake.store.example:50051", p.Status.ClientEndpoint)
}
