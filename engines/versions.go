package engines

import (
	"regexp"
	"strings"
)

// bundledClients is the Mooncake client each engine release ships in its published image (the
// mooncake-transfer-engine wheel installed beside the engine). A client on another release line
// than the store's master starts healthy and then fails every write with RPC_FAIL (-900).
var bundledClients = map[string]map[string]string{
	VLLM.ID:       {"0.29.0": "0.3.13.post1"},
	SGLang.ID:     {"0.5.18": "0.3.12.post1"},
	VLLMAscend.ID: {"0.23.0": "0.3.11.post1"},
}

// BundledClient is the Mooncake client release engine e's release version ships, and whether
// this project knows it. A leading v in version is ignored.
func (e Engine) BundledClient(version string) (string, bool) {
	c, ok := bundledClients[e.ID][strings.TrimPrefix(version, "v")]
	return c, ok
}

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
