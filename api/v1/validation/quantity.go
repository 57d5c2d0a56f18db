package validation

import (
	"fmt"
	"math"
	"math/big"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// byteCount refuses a byte quantity that is not a whole number of bytes, or one past what a
// byte count holds (2^63-1 bytes, just under 8Ei, which a larger binary quantity is clamped to). A quantity keeps a fraction ("100m" is a
// tenth of a byte), which the render would round up to a 1-byte segment or write into a memory
// request as "134217728100m"; and it keeps any size ("1e30", "10Ei"), which the store's flags,
// the ledger and memory requests cannot (it would be written as 0, clamped, or as a 31-digit
// request). example is a quantity to suggest.
func byteCount(p *field.Path, q resource.Quantity, example string) *field.Error {
	d := q.AsDec() // q is a copy: the caller's quantity keeps its representation
	whole := new(big.Int).Set(d.UnscaledBig())
	switch scale := int64(d.Scale()); {
	case scale > 0:
		unit := new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil)
		var rem big.Int
		if whole.QuoRem(whole, unit, &rem); rem.Sign() != 0 {
			return field.Invalid(p, q.String(), fmt.Sprintf("is not a whole number of bytes (the suffix m is a thousandth: 100m is a tenth of a byte); write whole bytes, with a binary suffix, e.g. %s", example))
		}
	case scale < 0:
		whole.Mul(whole, new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil))
	}
	// Parsing clamps a binary quantity past int64 (10Ei) to exactly 2^63-1: that is no real size.
	if !whole.IsInt64() || whole.Int64() == math.MaxInt64 {
		return field.Invalid(p, q.String(), fmt.Sprintf("is more bytes than a byte count holds (under 2^63-1, just under 8Ei; a larger quantity such as 10Ei reads as 2^63-1); write the size in bytes with a binary suffix, e.g. %s", example))
	}
	return nil
}
