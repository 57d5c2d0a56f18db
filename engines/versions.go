package engines

import (
	"regexp"
	"strings"
)

// mooncakeRelease matches a Mooncake release at the start of a string: 0.3.13, 0.3.13.post1.
var mooncakeRelease = regexp.MustCompile(`^v?([0-9]+\.[0-9]+\.[0-9]+)`)

// MooncakeLine is the release line of a Mooncake version or image tag (0.3.13.post1 and
// 0.3.13.post1-cpu are both 0.3.13): clients and masters of one line speak the same protocol.
// ok is false when s names no release.
func MooncakeLine(s string) (string, bool) {
	m := mooncakeRelease.FindStringSubmatch(s)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// ImageTag is the tag of an image reference ("" without one).
func ImageTag(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon <= slash {
		return ""
	}
	return image[colon+1:]
}
