package engines

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMooncakeLinesAndImageTags(t *testing.T) {
	for in, want := range map[string]string{"0.3.13.post1": "0.3.13", "0.3.13.post1-cpu": "0.3.13", "v0.3.12": "0.3.12"} {
		got, ok := MooncakeLine(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, got, in)
	}
	_, ok := MooncakeLine("latest")
	assert.False(t, ok)
	for in, want := range map[string]string{
		"gpustack/mirrored-mooncake:0.3.13.post1-cpu":      "0.3.13.post1-cpu",
		"registry:5000/mooncake":                           "",
		"registry:5000/mooncake:1@sha256:abc":              "1",
		"docker.io/gpustack/mirrored-mooncake@sha256:abcd": "",
	} {
		assert.Equal(t, want, ImageTag(in), in)
	}
}
