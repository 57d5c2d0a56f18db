package engines

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Fragment is what one engine's container receives, as the generator rendered it from the
// engine's template. Edits turns it into the changes a Pod receives.
type Fragment struct {
	// Annotations for the Pod (the vLLM family's client-config).
	Annotations map[string]string `json:"annotations,omitempty"`
	// Env is written in place: an injected variable replaces every same-named entry, leaving
	// one entry per name.
	Env []corev1.EnvVar `json:"env,omitempty"`
	// DefaultEnv is added only when the container does not declare the name (observability
	// toggles: they change no result, so a user's value is kept).
	DefaultEnv []corev1.EnvVar `json:"defaultEnv,omitempty"`
	// Volumes for the Pod and VolumeMounts for the container.
	Volumes      []corev1.Volume      `json:"volumes,omitempty"`
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`
	// Args are appended to the container's args.
	Args []string `json:"args,omitempty"`
	// TailArgs follow Args unless the container already names the flag in any spelling.
	TailArgs []string `json:"tailArgs,omitempty"`
}

// DeepCopy returns a copy sharing no memory with f, so a cached fragment is never changed
// through a Pod it was merged into.
func (f *Fragment) DeepCopy() *Fragment {
	out := &Fragment{Args: slices.Clone(f.Args), TailArgs: slices.Clone(f.TailArgs)}
	if f.Annotations != nil {
		out.Annotations = make(map[string]string, len(f.Annotations))
		for k, v := range f.Annotations {
			out.Annotations[k] = v
		}
	}
	for _, e := range f.Env {
		out.Env = append(out.Env, *e.DeepCopy())
	}
	for _, e := range f.DefaultEnv {
		out.DefaultEnv = append(out.DefaultEnv, *e.DeepCopy())
	}
	for _, v := range f.Volumes {
		out.Volumes = append(out.Volumes, *v.DeepCopy())
	}
	for _, m := range f.VolumeMounts {
		out.VolumeMounts = append(out.VolumeMounts, *m.DeepCopy())
	}
	return out
}
