package policyprobe

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

func TestEnforcedSaysWhatWasMeasured(t *testing.T) {
	var conds []metav1.Condition
	assert.False(t, setEnforced(&conds, 1, "", nil), "a policy and no measurement yet: nothing known")
	assert.Empty(t, conds)

	assert.True(t, setEnforced(&conds, 1, "", &probe{address: "10.0.0.5:50051", verdict: probeNotEnforced, detail: "its node refused it"}))
	c := meta.FindStatusCondition(conds, kvv1.ConditionNetworkPolicyEnforced)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, kvv1.ReasonPolicyNotEnforced, c.Reason)
	assert.Equal(t, "the manager's probe connection to the serving master's RPC port (10.0.0.5:50051), which the store's NetworkPolicy does not admit it to, was answered (its node refused it): the cluster's network plugin does not enforce NetworkPolicy, so every Pod can reach this store and name any tenant", c.Message)

	assert.True(t, setEnforced(&conds, 1, "", &probe{address: "10.0.0.6:50051", verdict: probeNotEnforced, detail: "the master accepted it"}))
	assert.Contains(t, meta.FindStatusCondition(conds, kvv1.ConditionNetworkPolicyEnforced).Message, "10.0.0.5:50051", "the same verdict keeps its first message: no write per probe")

	assert.True(t, setEnforced(&conds, 2, "", &probe{address: "10.0.0.6:50051", verdict: probeEnforced, detail: "it went unanswered"}))
	c = meta.FindStatusCondition(conds, kvv1.ConditionNetworkPolicyEnforced)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, int64(2), c.ObservedGeneration)

	assert.False(t, setEnforced(&conds, 2, "", &probe{verdict: probeUnknown, detail: "no route"}), "a probe that proves nothing changes nothing")
	assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(conds, kvv1.ConditionNetworkPolicyEnforced).Status)

	assert.True(t, setEnforced(&conds, 3, "spec.connection.managed.networkPolicy.enabled is false", nil))
	c = meta.FindStatusCondition(conds, kvv1.ConditionNetworkPolicyEnforced)
	assert.Equal(t, kvv1.ReasonPolicyDisabled, c.Reason)
	assert.Equal(t, "the store renders no NetworkPolicy (spec.connection.managed.networkPolicy.enabled is false): every Pod the cluster's network lets through can reach it and name any tenant", c.Message)
}
