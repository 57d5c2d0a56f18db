package rules

import (
	"k8s.io/apimachinery/pkg/api/equality"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
)

// Setting judges a Setting created (old nil) or updated: its name is in the catalog and its
// value fits it. It reads nothing else.
func Setting(old, obj *kvv1.Setting) Verdict {
	s := obj.DeepCopy()
	s.Default()
	if old != nil {
		old = old.DeepCopy()
		old.Default()
		if equality.Semantic.DeepEqual(old.Spec, s.Spec) {
			return Verdict{}
		}
	}
	return Verdict{Errors: validation.ValidateSetting(s)}
}
