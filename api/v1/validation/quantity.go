package validation

import (
	"fmt"
	"math/big"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// wholeBytes refuses a byte quantity that is not a whole number of bytes: a quantity keeps a
// fraction ("100m" is a tenth of a byte), which the render would round up to a 1-byte segment or
// write into a memory request as "134217728100m". example is a quantity to suggest.
func wholeBytes(p *field.Path, q resource.Quantity, example string) *field.Error {
	d := q.AsDec() // q is a copy: the caller's quantity keeps its representation
	if scale := int64(d.Scale()); scale > 0 {
		unit := new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil)
		if new(big.Int).Rem(d.UnscaledBig(), unit).Sign() != 0 {
			return field.Invalid(p, q.String(), fmt.Sprintf("is not a whole number of bytes (the suffix m is a thousandth: 100m is a tenth of a byte); write whole bytes, with a binary suffix, e.g. %s", example))
		}
	}
	return nil
}
