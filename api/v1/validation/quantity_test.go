package validation

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestWholeBytesRefusesOnlyAFractionOfAByte(t *testing.T) {
	for q, fraction := range map[string]bool{
		"8Gi": false, "1": false, "1000m": false, "1.5Ki": false, "0.5Ki": false, "1e3": false, "1.000": false,
		"100m": true, "1500m": true, "1.5": true, "1e-3": true, "8589934591.5": true,
	} {
		quantity := resource.MustParse(q)
		before := quantity.String()
		err := wholeBytes(field.NewPath("spec", "x"), quantity, "8Gi")
		assert.Equal(t, fraction, err != nil, q)
		assert.Equal(t, before, quantity.String(), "the quantity judged keeps its spelling")
	}
}
