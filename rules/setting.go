package rules

import (
	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
)

// Setting judges a Setting created (old nil) or updated: its name is in the catalog and its
// value fits it. It reads nothing else.
func Setting(old, obj *kvv1.Setting) Verdict {
	_, s, unchanged := defaulted(old, obj, func(s *kvv1.Setting) any { return s.Spec })
	if unchanged {
		return Verdict{}
	}
	return Verdict{Errors: validation.ValidateSetting(s)}
}
