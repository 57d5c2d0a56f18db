package rules

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Verdict is what the rules found: the refusals (none: admitted) and the warnings a user is
// shown either way.
type Verdict struct {
	Errors   field.ErrorList
	Warnings []string
}

func (v *Verdict) refuse(errs ...*field.Error) { v.Errors = append(v.Errors, errs...) }

func (v *Verdict) warn(w ...string) { v.Warnings = append(v.Warnings, w...) }

// keepsNoLedger reports whether a backend is managed with multi-tenancy off: its master keeps no
// tenant ledger, so ceilings are not enforced and every write lands in the default tenant.
func keepsNoLedger(b *kvv1.KVCacheBackend) bool {
	m := b.Spec.Connection.Managed
	return m != nil && !m.Leader.MultiTenancyEnabled()
}

// object is a kind of this API as the rules handle it: copied, then defaulted as the API server
// defaults it.
type object[T any] interface {
	*T
	DeepCopy() *T
	Default()
}

// defaulted returns defaulted copies of obj and old (nil on create), and whether an update
// leaves spec as it was: such an update (labels, annotations, finalizers) is admitted without
// judging the object again, so a controller can always remove its finalizer even when an object
// a rule reads is gone or a rule has tightened since.
func defaulted[T any, P object[T]](old, obj P, spec func(P) any) (o, n P, unchanged bool) {
	n = obj.DeepCopy()
	n.Default()
	if old == nil {
		return nil, n, false
	}
	o = old.DeepCopy()
	o.Default()
	return o, n, equality.Semantic.DeepEqual(spec(o), spec(n))
}
