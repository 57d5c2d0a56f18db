package policyprobe

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator"
)

// setEnforced sets NetworkPolicyEnforced on conds, computed at generation from why the store
// renders no NetworkPolicy ("" when it renders one) and the last measurement (nil: none, as while
// no master serves). It reports whether it set anything: with a policy and no measurement nothing
// is known, and the condition stays as it was.
func setEnforced(conds *[]metav1.Condition, generation int64, whyNone string, last *probe) bool {
	if whyNone != "" {
		operator.SetCondition(conds, generation, kvv1.ConditionNetworkPolicyEnforced, metav1.ConditionFalse, kvv1.ReasonPolicyDisabled,
			"the store renders no NetworkPolicy ("+whyNone+"): every Pod the cluster's network lets through can reach it and name any tenant")
		return true
	}
	if last == nil {
		return false
	}
	switch last.verdict {
	case probeEnforced:
		operator.SetConditionOnce(conds, generation, kvv1.ConditionNetworkPolicyEnforced, metav1.ConditionTrue, kvv1.ReasonPolicyEnforced,
			fmt.Sprintf("the manager's probe connection to the serving master's RPC port (%s), which the store's NetworkPolicy does not admit it to, %s: the cluster enforces the policy", last.address, last.detail))
	case probeNotEnforced:
		operator.SetConditionOnce(conds, generation, kvv1.ConditionNetworkPolicyEnforced, metav1.ConditionFalse, kvv1.ReasonPolicyNotEnforced,
			fmt.Sprintf("the manager's probe connection to the serving master's RPC port (%s), which the store's NetworkPolicy does not admit it to, was answered (%s): the cluster's network plugin does not enforce NetworkPolicy, so every Pod can reach this store and name any tenant", last.address, last.detail))
	default:
		return false
	}
	return true
}
