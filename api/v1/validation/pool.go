package validation

import (
	"fmt"
	"strings"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// objectName refuses a name the API server would refuse for an object of this API (a DNS-1123
// subdomain), and namespace one it would refuse for a namespace (a DNS-1123 label), so that
// render and check -f say it before an apply does. An empty name (generateName, a unit test) is
// not judged.
func objectName(name, namespace string) field.ErrorList {
	var errs field.ErrorList
	if name != "" {
		if msgs := utilvalidation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name, "must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters (a DNS-1123 subdomain): the API server refuses any other name"))
		}
	}
	if namespace != "" {
		if msgs := utilvalidation.IsDNS1123Label(namespace); len(msgs) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "namespace"), namespace, "must be lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters (a DNS-1123 label): no namespace has another name"))
		}
	}
	return errs
}

// ValidatePool checks a KVCachePool on its own.
func ValidatePool(p *kvv1.KVCachePool) field.ErrorList {
	errs := objectName(p.Name, "")
	bp := field.NewPath("spec", "backends")
	switch n := len(p.Spec.Backends); {
	case n == 0:
		errs = append(errs, field.Required(bp, "name exactly one KVCacheBackend"))
	case n > 1:
		errs = append(errs, field.Invalid(bp, p.Spec.Backends, fmt.Sprintf("a pool divides exactly one backend, %d are named; create one pool per backend", n)))
	case p.Spec.Backends[0] == "":
		errs = append(errs, field.Required(bp.Index(0), "name exactly one KVCacheBackend"))
	}
	if p.Spec.Quota.Total.Sign() <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "quota", "total"), p.Spec.Quota.Total.String(), "must be greater than zero, e.g. 16Gi"))
	} else if e := byteCount(field.NewPath("spec", "quota", "total"), p.Spec.Quota.Total, "16Gi"); e != nil {
		errs = append(errs, e)
	}
	return errs
}

// ValidateBinding checks a KVCachePoolBinding. pool is the pool it names when known (nil when
// not): the ceiling is then checked against the pool's total.
func ValidateBinding(b *kvv1.KVCachePoolBinding, pool *kvv1.KVCachePool) field.ErrorList {
	errs := objectName(b.Name, b.Namespace)
	spec := field.NewPath("spec")
	if b.Spec.PoolRef.Name == "" {
		errs = append(errs, field.Required(spec.Child("poolRef", "name"), "name the KVCachePool this Binding grants access to"))
	}
	cp := spec.Child("quota", "ceiling")
	ceiling := b.Spec.Quota.Ceiling
	if ceiling.Sign() <= 0 {
		errs = append(errs, field.Invalid(cp, ceiling.String(), "must be greater than zero, e.g. 8Gi"))
	} else if e := byteCount(cp, ceiling, "8Gi"); e != nil {
		errs = append(errs, e)
	} else if pool != nil && ceiling.Cmp(pool.Spec.Quota.Total) > 0 {
		errs = append(errs, field.Invalid(cp, ceiling.String(), fmt.Sprintf("exceeds the total %s of KVCachePool %s; lower the ceiling or raise the pool's spec.quota.total", pool.Spec.Quota.Total.String(), pool.Name)))
	}
	dp := spec.Child("domain")
	d := b.Spec.Domain
	if msgs := utilvalidation.IsDNS1123Label(d.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(dp.Child("name"), d.Name, "must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters): it is the store tenant engines write under"))
	}
	if d.BlockSize <= 0 {
		errs = append(errs, field.Invalid(dp.Child("blockSize"), d.BlockSize, "must be greater than zero: the engines' block size in tokens, e.g. 64"))
	}
	switch {
	case d.Dtype == "":
		errs = append(errs, field.Required(dp.Child("dtype"), "name the KV cache dtype the engines in this domain use, e.g. bfloat16"))
	case strings.ContainsAny(d.Dtype, " \t\n"):
		errs = append(errs, field.Invalid(dp.Child("dtype"), d.Dtype, "must be one word, e.g. bfloat16"))
	case strings.EqualFold(d.Dtype, "auto"):
		errs = append(errs, field.Invalid(dp.Child("dtype"), d.Dtype, "auto lets each engine pick its own dtype, so two workloads in the domain could write incompatible blocks; name one, e.g. bfloat16 or fp8"))
	case d.Dtype != strings.ToLower(d.Dtype):
		errs = append(errs, field.Invalid(dp.Child("dtype"), d.Dtype, fmt.Sprintf("must be lowercase, as engines spell it: use %s", strings.ToLower(d.Dtype))))
	}
	return errs
}

// ValidateSetting checks a Setting: its name must be in the catalog and its value must fit it.
func ValidateSetting(s *kvv1.Setting) field.ErrorList {
	catalog := kvv1.SettingCatalog()
	if _, ok := catalog[s.Name]; !ok {
		return field.ErrorList{field.NotSupported(field.NewPath("metadata", "name"), s.Name, []string{kvv1.SettingKVCacheBackendImage, kvv1.SettingKVCacheDtypeOwned})}
	}
	vp := field.NewPath("spec", "value")
	switch s.Name {
	case kvv1.SettingKVCacheDtypeOwned:
		if s.Spec.Value != "true" && s.Spec.Value != "false" {
			return field.ErrorList{field.NotSupported(vp, s.Spec.Value, []string{"true", "false"})}
		}
	case kvv1.SettingKVCacheBackendImage:
		if s.Spec.Value == "" {
			return field.ErrorList{field.Required(vp, "name the store image, e.g. "+kvv1.DefaultKVCacheBackendImage)}
		}
		if e := imageReference(vp, s.Spec.Value); e != nil {
			return field.ErrorList{e}
		}
	}
	return nil
}
