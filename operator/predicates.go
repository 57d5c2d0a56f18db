package operator

import (
	"maps"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// IgnoreStatusUpdates passes every event except an update that changed nothing but status
// (and the bookkeeping every write moves): generation (spec), labels, finalizers and the
// deletion timestamp are what a controller that writes the object's status itself reacts to.
// Without it, each status write a reconcile makes would queue the same reconcile again, and
// that one would work from a cache that may not have seen the write yet.
func IgnoreStatusUpdates() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return true
			}
			return o.GetGeneration() != n.GetGeneration() ||
				!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
				!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
				!maps.Equal(o.GetLabels(), n.GetLabels())
		},
	}
}
