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
	// Args are appended to the container's args; the engine's tail follows them
	// (Engine.ManagedTail, decided from the container's own arguments).
	Args []string `json:"args,omitempty"`
}

// DeepCopy returns a copy sharing no memory with f, so a cached fragment is never changed
// through a Pod it was merged into.
func (f *Fragment) DeepCopy() *Fragment {
	out := &Fragment{Args: slices.Clone(f.Args)}
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

// EnvOf is the container's env as Edits leaves it: each variable of Env written over the first
// entry of its name (later entries of that name removed) or appended, then each of DefaultEnv
// the container does not declare appended. What the process reads, and what $(NAME) in its
// command and args reads, is this list.
func (f *Fragment) EnvOf(c *corev1.Container) []corev1.EnvVar {
	cur := slices.Clone(c.Env)
	var added []corev1.EnvVar
	for _, v := range f.Env {
		i := slices.IndexFunc(cur, func(x corev1.EnvVar) bool { return x.Name == v.Name })
		if i < 0 {
			added = append(added, v)
			continue
		}
		cur[i] = v
		cur = slices.Concat(cur[:i+1], slices.DeleteFunc(slices.Clone(cur[i+1:]), func(x corev1.EnvVar) bool { return x.Name == v.Name }))
	}
	for _, v := range f.DefaultEnv {
		declared := func(x corev1.EnvVar) bool { return x.Name == v.Name }
		if !slices.ContainsFunc(cur, declared) && !slices.ContainsFunc(added, declared) {
			added = append(added, v)
		}
	}
	return append(cur, added...)
}
