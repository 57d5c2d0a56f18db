package validation

import (
	"fmt"
	"regexp"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// imageReference refuses a string the container runtime would not read as an image reference
// (the same grammar containerd and the kubelet parse), so an image is only ever an image: a
// value holding spaces, newlines or YAML never reaches a rendered Pod.
func imageReference(p *field.Path, image string) *field.Error {
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		return field.Invalid(p, image, fmt.Sprintf("is not an image reference (%v); write [registry/]repository[:tag][@digest], e.g. %s", err, exampleImage))
	}
	return nil
}

const exampleImage = "gpustack/mirrored-mooncake:0.3.13.post1-cpu"

// engineVersion is what an engine version may hold: it becomes the tag of the default engine
// image, so it has a tag's grammar (a leading v is dropped first).
var engineVersion = regexp.MustCompile(`^v?[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
