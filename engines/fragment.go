package engines

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Fragment is what one engine's container receives, as the generator rendered it from the
// engine's template. Merge applies it.
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

// Merge applies a fragment to container c of pod (both modified in place) by the engine's
// rules: annotations set, env written in place with one entry per name, default env only when
// absent, volumes and mounts added, args appended with the tail flags last unless the
// container's argv already names them. command and resources are never touched.
func (e Engine) Merge(pod *corev1.Pod, c *corev1.Container, f *Fragment) {
	if len(f.Annotations) > 0 && pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for k, v := range f.Annotations {
		pod.Annotations[k] = v
	}
	for _, v := range f.Env {
		c.Env = setEnv(c.Env, v)
	}
	for _, v := range f.DefaultEnv {
		if !slices.ContainsFunc(c.Env, func(x corev1.EnvVar) bool { return x.Name == v.Name }) {
			c.Env = append(c.Env, v)
		}
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, f.Volumes...)
	c.VolumeMounts = append(c.VolumeMounts, f.VolumeMounts...)
	argv := append(slices.Clone(c.Command), c.Args...)
	c.Args = append(c.Args, f.Args...)
	for _, t := range f.TailArgs {
		if len(e.Parser.Find(argv, t)) == 0 {
			c.Args = append(c.Args, t)
		}
	}
}

// setEnv writes v over the first entry of its name and drops later duplicates, or appends it.
func setEnv(env []corev1.EnvVar, v corev1.EnvVar) []corev1.EnvVar {
	out := env[:0:0]
	written := false
	for _, x := range env {
		if x.Name != v.Name {
			out = append(out, x)
			continue
		}
		if !written {
			out = append(out, v)
			written = true
		}
	}
	if !written {
		out = append(out, v)
	}
	return out
}
