package validation

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// The exploit of a template that pasted an image unquoted: a newline and a YAML mapping.
const injectedImage = "evil:1\n          securityContext: {privileged: true}"

func TestImagesAreImageReferences(t *testing.T) {
	const detail = "write [registry/]repository[:tag][@digest], e.g. gpustack/mirrored-mooncake:0.3.13.post1-cpu"
	for _, c := range []struct {
		name  string
		errs  func() []string
		wants []string
	}{
		{
			name: "a backend image with a newline and YAML is refused",
			errs: func() []string {
				b := walkthroughBackend()
				b.Spec.Image = injectedImage
				return errStrings(ValidateBackend(b, chartContext()))
			},
			wants: []string{`spec.image: Invalid value: "evil:1\n          securityContext: {privileged: true}": is not an image reference (invalid reference format); ` + detail},
		},
		{
			name: "a member group image with capitals is refused",
			errs: func() []string {
				b := walkthroughBackend()
				b.Spec.Connection.Managed.Members[0].Image = "gpustack/Mooncake:1"
				return errStrings(ValidateBackend(b, chartContext()))
			},
			wants: []string{`spec.connection.managed.members[0].image: Invalid value: "gpustack/Mooncake:1": is not an image reference (invalid reference format: repository name (gpustack/Mooncake) must be lowercase); ` + detail},
		},
		{
			name: "registry, port, path, tag and digest pass",
			errs: func() []string {
				b := walkthroughBackend()
				b.Spec.Image = "registry.example:5000/team/mooncake:0.3.13.post1-cpu@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
				return errStrings(ValidateBackend(b, chartContext()))
			},
		},
		{
			name: "a ModelDeployment role image with a newline is refused",
			errs: func() []string {
				md := walkthroughDeployment()
				md.Spec.Roles[0].Image = injectedImage
				return errStrings(ValidateModelDeployment(md))
			},
			wants: []string{`spec.roles[0].image: Invalid value: "evil:1\n          securityContext: {privileged: true}": is not an image reference (invalid reference format); ` + detail},
		},
		{
			name: "an engine version that is no tag is refused: it becomes the default image's tag",
			errs: func() []string {
				md := walkthroughDeployment()
				md.Spec.Engine.Version = "0.29.0\nprivileged: true"
				return errStrings(ValidateModelDeployment(md))
			},
			wants: []string{`spec.engine.version: Invalid value: "0.29.0\nprivileged: true": must be a version such as 0.29.0 (letters, digits, '.', '_' and '-'): it becomes the engine image's tag`},
		},
		{
			name: "an engine version with a leading v passes",
			errs: func() []string {
				md := walkthroughDeployment()
				md.Spec.Engine.Version = "v0.29.0"
				return errStrings(ValidateModelDeployment(md))
			},
		},
		{
			name: "the store image Setting must be an image reference",
			errs: func() []string {
				s := &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: kvv1.SettingKVCacheBackendImage}, Spec: kvv1.SettingSpec{Value: "mooncake latest"}}
				return errStrings(ValidateSetting(s))
			},
			wants: []string{`spec.value: Invalid value: "mooncake latest": is not an image reference (invalid reference format); ` + detail},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.wants, c.errs())
		})
	}
}
