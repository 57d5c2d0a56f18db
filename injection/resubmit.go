package injection

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
)

// ReasonStale refuses a Pod submitted with the written keys when they are not what injection
// writes now.
const ReasonStale = "WrittenKeysStale"

// resubmitted admits, unchanged, a Pod that arrives already carrying what injection writes (the
// output of `kvcache inject` applied as is, or a manifest copied from a running Pod) when every
// written key is exactly what injection would write now for its Binding; otherwise it is refused
// as stale, naming what differs. The Pod is judged by taking off what injection adds (the two
// annotations, the projected volume and its mount, the appended arguments) and injecting the
// rest again with every check.
func (i *Injector) resubmitted(ctx context.Context, pod *corev1.Pod, namespace string, r objects.Reader, a annotations, container string, dtypeOwned bool) (Result, error) {
	diffs, res, err := i.writtenNow(ctx, pod, namespace, r, a, container, dtypeOwned)
	if err != nil {
		return Result{}, err
	}
	if len(diffs) > 0 {
		return Result{}, refuse(ReasonStale,
			"the Pod carries keys injection writes (the output of kvcache inject, or a manifest copied from a running Pod), and they are not what injection writes now for KVCachePoolBinding %s/%s: %s; re-run kvcache inject on the manifest, or drop the written keys (annotations %s and %s, and the injected env, args and volume) and let the webhook inject it",
			namespace, a.binding, strings.Join(diffs, "; "), vocab.AnnotationInjected, vocab.AnnotationClientConfig)
	}
	// Admitted unchanged: the Pod already carries everything.
	res.Patch = nil
	return res, nil
}

// Drift compares what a running Pod was injected with (master address, transport, tenant,
// dtype: every written key) with what injection writes now for its Binding, and describes each
// difference; none when they agree, or when the Pod was never injected. A Pod whose Binding no
// longer resolves, or that injection would refuse now, yields that *Refusal.
func (i *Injector) Drift(ctx context.Context, pod *corev1.Pod, namespace string, r objects.Reader) ([]string, error) {
	if !OptedIn(pod) || pod.Annotations[vocab.AnnotationInjected] == "" {
		return nil, nil
	}
	a, rf := readAnnotations(pod)
	if rf != nil {
		return nil, rf
	}
	c, rf := chooseContainer(pod, a.container)
	if rf != nil {
		return nil, rf
	}
	dtypeOwned, err := objects.DtypeOwned(ctx, r)
	if err != nil {
		return nil, readFailed(err)
	}
	diffs, _, err := i.writtenNow(ctx, pod, namespace, r, a, c.Name, dtypeOwned)
	return diffs, err
}

// writtenNow takes off what injection adds to pod, injects the rest again with every check, and
// names each written key of pod that differs from that.
func (i *Injector) writtenNow(ctx context.Context, pod *corev1.Pod, namespace string, r objects.Reader, a annotations, container string, dtypeOwned bool) ([]string, Result, error) {
	pre, rf, err := i.attach(ctx, r, namespace, a, dtypeOwned)
	if rf != nil {
		return nil, Result{}, rf
	}
	if err != nil {
		return nil, Result{}, err
	}
	base, argsMatch := strip(pod, container, a.engine, pre.frag)
	res, err := i.inject(ctx, base, namespace, r, a, containerByName(base, container), dtypeOwned, pre)
	if err != nil {
		return nil, Result{}, err
	}
	want, err := res.Apply(base)
	if err != nil {
		return nil, Result{}, err
	}
	diffs := writtenDiffs(pod, want, container, a.engine, pre.frag)
	if !argsMatch && !slices.Contains(diffs, argsDiffer) {
		diffs = append(diffs, argsDiffer)
	}
	return diffs, res, nil
}

// strip returns a copy of pod without what injection adds to it: the written annotations, the
// projected volume and injection's own mount of it, and the fragment's arguments and the tail at
// the end of the container's args (argsMatch is false when the args do not end with them).
// Everything else stays to be judged: a mount of the user's over the projection is refused as
// on a new Pod.
func strip(pod *corev1.Pod, container string, e engines.Engine, frag *engines.Fragment) (*corev1.Pod, bool) {
	base := pod.DeepCopy()
	delete(base.Annotations, vocab.AnnotationInjected)
	delete(base.Annotations, vocab.AnnotationClientConfig)
	for k := range frag.Annotations {
		delete(base.Annotations, k)
	}
	base.Spec.Volumes = slices.DeleteFunc(base.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vocab.ConfigVolume })
	c := containerByName(base, container)
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == vocab.ConfigVolume && path.Clean(m.MountPath) == vocab.ConfigMountPath
	})
	// A variable injection writes that a container may not declare itself (vLLM's
	// MOONCAKE_CONFIG_PATH, vLLM-Ascend's MOONCAKE_MASTER) would be refused as the user's own;
	// it is compared with what injection writes instead.
	c.Env = slices.DeleteFunc(c.Env, func(v corev1.EnvVar) bool {
		return slices.Contains(e.InjectedEnv, v.Name) && (slices.Contains(e.SourceEnv, v.Name) || slices.Contains(e.OverrideEnv, v.Name))
	})
	// The tail is decided from the arguments before it (a decode half gets another), so each
	// length it can have is tried: the args end with the fragment's and the tail those before
	// them earn.
	for tail := 0; tail <= maxTail; tail++ {
		n := len(c.Args) - tail - len(frag.Args)
		if n < 0 || !slices.Equal(c.Args[n:n+len(frag.Args)], frag.Args) {
			continue
		}
		argv := engines.Texts(engines.NewEnvironment(frag.EnvOf(c), c.EnvFrom).Expand(slices.Concat(c.Command, c.Args[:n])))
		if slices.Equal(c.Args[n+len(frag.Args):], e.ManagedTail(argv)) {
			c.Args = c.Args[:n]
			return base, true
		}
	}
	// Stale arguments: what injection appended once starts at the first flag it owns; the Pod is
	// refused either way, and the rest of it is still judged against what injection writes now.
	cut := len(c.Args)
	for _, f := range e.Owned(true) {
		if idx := e.Parser.Find(c.Args, f); len(idx) > 0 {
			cut = min(cut, idx[0])
		}
	}
	c.Args = c.Args[:cut]
	return base, false
}

// maxTail is the longest tail ManagedTail appends (--disaggregation-decode-retraction-backup
// cpu_tensor).
const maxTail = 2

// writtenDiffs names every written key of got that differs from want: the two annotations, each
// injected variable, the rest of env, the args, and the projected volume and mount (compared by
// what they project and where, since the API server defaults a volume's mode).
func writtenDiffs(got, want *corev1.Pod, container string, e engines.Engine, frag *engines.Fragment) []string {
	var diffs []string
	keys := []string{vocab.AnnotationInjected}
	for k := range frag.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if d := annotationDiff(k, got.Annotations[k], want.Annotations[k]); d != "" {
			diffs = append(diffs, d)
		}
	}
	gc, wc := containerByName(got, container), containerByName(want, container)
	injected := map[string]bool{}
	for _, v := range slices.Concat(frag.Env, frag.DefaultEnv) {
		injected[v.Name] = true
		gv, gn := envEntry(gc.Env, v.Name)
		wv, wn := envEntry(wc.Env, v.Name)
		if gn == 0 && slices.ContainsFunc(frag.DefaultEnv, func(d corev1.EnvVar) bool { return d.Name == v.Name }) {
			// A default is written only where the container has none, and a Pod runs as well
			// without it: a Pod injected before a default was added (a manifest kvcache inject
			// wrote, a running Pod) is neither stale nor drifted for lacking it.
			continue
		}
		if gn != wn || !equality.Semantic.DeepEqual(gv, wv) {
			diffs = append(diffs, fmt.Sprintf("env %s is %s, and injection writes %s", v.Name, envValue(gv, gn), envValue(wv, wn)))
		}
	}
	rest := func(env []corev1.EnvVar) []corev1.EnvVar {
		return slices.DeleteFunc(slices.Clone(env), func(v corev1.EnvVar) bool { return injected[v.Name] })
	}
	if !equality.Semantic.DeepEqual(rest(gc.Env), rest(wc.Env)) {
		diffs = append(diffs, "the container's other env entries differ")
	}
	if !slices.Equal(gc.Args, wc.Args) {
		diffs = append(diffs, argsDiffer)
	}
	if e.VLLMFamily() && !sameProjection(got, want, gc, wc) {
		diffs = append(diffs, "volume "+vocab.ConfigVolume+" or its mount differs")
	}
	return diffs
}

// argsDiffer is the stale finding for the container's arguments.
const argsDiffer = "the args do not end with the arguments injection appends"

// annotationDiff names what differs in a written annotation; for JSON documents, the keys.
func annotationDiff(key, got, want string) string {
	if got == want {
		return ""
	}
	if got == "" {
		return "annotation " + key + " is absent"
	}
	var g, w map[string]any
	if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return "annotation " + key + " differs"
	}
	var fields []string
	for k := range w {
		if gv, ok := g[k]; !ok {
			fields = append(fields, k+" absent")
		} else if !equality.Semantic.DeepEqual(gv, w[k]) {
			fields = append(fields, fmt.Sprintf("%s %s, now %s", k, compact(gv), compact(w[k])))
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			fields = append(fields, k+" not written now")
		}
	}
	sort.Strings(fields)
	if len(fields) == 0 {
		return "annotation " + key + " is spelled differently"
	}
	return fmt.Sprintf("annotation %s differs (%s)", key, strings.Join(fields, ", "))
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// envEntry returns the first entry named name and how many there are.
func envEntry(env []corev1.EnvVar, name string) (corev1.EnvVar, int) {
	var first corev1.EnvVar
	n := 0
	for _, v := range env {
		if v.Name == name {
			if n == 0 {
				first = v
			}
			n++
		}
	}
	return first, n
}

func envValue(v corev1.EnvVar, n int) string {
	switch {
	case n == 0:
		return "absent"
	case n > 1:
		return fmt.Sprintf("%d entries", n)
	case v.ValueFrom != nil && v.ValueFrom.FieldRef != nil:
		return "from " + v.ValueFrom.FieldRef.FieldPath
	case v.ValueFrom != nil:
		return "from a source"
	}
	return fmt.Sprintf("%q", v.Value)
}

// sameProjection reports whether both Pods project the same annotation to the same file at the
// same read-only mount.
func sameProjection(got, want *corev1.Pod, gc, wc *corev1.Container) bool {
	items := func(p *corev1.Pod) []string {
		for _, v := range p.Spec.Volumes {
			if v.Name != vocab.ConfigVolume || v.DownwardAPI == nil {
				continue
			}
			var out []string
			for _, it := range v.DownwardAPI.Items {
				if it.FieldRef != nil {
					out = append(out, it.Path+"="+it.FieldRef.FieldPath)
				}
			}
			return out
		}
		return nil
	}
	mount := func(c *corev1.Container) string {
		for _, m := range c.VolumeMounts {
			if m.Name == vocab.ConfigVolume {
				return fmt.Sprintf("%s:%t", strings.TrimSuffix(m.MountPath, "/"), m.ReadOnly)
			}
		}
		return ""
	}
	gi := items(got)
	return gi != nil && slices.Equal(gi, items(want)) && mount(gc) == mount(wc)
}
