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
