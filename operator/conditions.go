package operator

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetCondition sets condition t on conds, stamped with the generation it was computed from
// (observedGeneration): every controller sets its conditions through it, with a reason constant
// of the API (kvv1.Reason...). meta.SetStatusCondition keeps lastTransitionTime while the status
// stays, so a condition rewritten with the same status writes nothing new.
func SetCondition(conds *[]metav1.Condition, generation int64, t string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(conds, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: generation})
}

// SetConditionOnce is SetCondition for a state whose cause may read differently from poll to
// poll while nothing changed (an unreachable store: the resolver times out, then refuses the
// name): while the condition keeps its status and reason, the message first written stays, so
// a state that lasts costs no status write per poll.
func SetConditionOnce(conds *[]metav1.Condition, generation int64, t string, status metav1.ConditionStatus, reason, msg string) {
	if prev := meta.FindStatusCondition(*conds, t); prev != nil && prev.Status == status && prev.Reason == reason {
		msg = prev.Message
	}
	SetCondition(conds, generation, t, status, reason, msg)
}
