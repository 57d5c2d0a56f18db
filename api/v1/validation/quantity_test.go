package validation

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestByteCountRefusesAFractionOfAByte(t *testing.T) {
	for q, fraction := range map[string]bool{
		"8Gi": false, "1": false, "1000m": false, "1.5Ki": false, "0.5Ki": false, "1e3": false, "1.000": false,
		"100m": true, "1500m": true, "1.5": true, "1e-3": true, "8589934591.5": true,
	} {
		quantity := resource.MustParse(q)
		before := quantity.String()
		err := byteCount(field.NewPath("spec", "x"), quantity, "8Gi")
		assert.Equal(t, fraction, err != nil, q)
		assert.Equal(t, before, quantity.String(), "the quantity judged keeps its spelling")
	}
}

// A byte count past int64 would be rendered as 0, clamped, or as a 31-digit memory request: it
// is refused with the limit; the largest that fits passes.
func TestByteCountRefusesMoreThanAByteCountHolds(t *testing.T) {
	for q, tooLarge := range map[string]bool{
		"7Ei": false, "9223372036854775806": false, "1Pi": false,
		"8Ei": true, "10Ei": true, "1e30": true, "9223372036854775807": true, "9223372036854775808": true,
	} {
		quantity := resource.MustParse(q)
		err := byteCount(field.NewPath("spec", "quota", "total"), quantity, "16Gi")
		assert.Equal(t, tooLarge, err != nil, q)
		if tooLarge && err != nil {
			assert.Contains(t, err.Error(), "spec.quota.total: Invalid value: \""+quantity.String()+"\": is more bytes than a byte count holds (under 2^63-1, just under 8Ei", q)
		}
	}
}
