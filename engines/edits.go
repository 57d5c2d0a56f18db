package engines

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	gomodpatch "gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Patch is what injecting a fragment changes in a Pod, as JSON patch operations (RFC 6902) on
// the Pod with paths from its root (/metadata/annotations/..., /spec/...). It is the one form of
// the change: the admission webhook answers with it as is, `kvcache inject` applies it under a
// workload's pod template path (Apply with a prefix), and a typed Pod is changed through the
// same operations (ApplyToPod), so every path makes exactly the same change.
//
// Every operation addresses one annotation key (or the annotations object when the Pod has
// none), the Pod's volumes, or the target container's env, volumeMounts or args, and inside
// those lists only the entries injection writes: a field the compiled Pod type does not know
// (an API server newer than this build) is never touched.
type Patch []gomodpatch.JsonPatchOperation

// Edits computes the patch that gives container ci of pod the fragment f, and sets the
// annotations extra too (injection's record), by the engine's rules: annotations set; an
// injected variable written in place over the first entry of its name, later entries of that
// name removed; default variables appended only when the container does not declare them;
// volumes and mounts appended; the fragment's args appended, then the engine's tail
// (ManagedTail), decided from the container's command and args as the process receives them
// ($(NAME) expanded from the env as these edits leave it). command and resources never change.
// pod is not modified; a Pod that already carries everything gets an empty patch.
func (e Engine) Edits(pod *corev1.Pod, ci int, f *Fragment, extra map[string]string) Patch {
	var p Patch
	ann := make(map[string]string, len(f.Annotations)+len(extra))
	for k, v := range f.Annotations {
		ann[k] = v
	}
	for k, v := range extra {
		ann[k] = v
	}
	p = p.annotations(pod.Annotations, ann)
	p = appendTo(p, "/spec/volumes", len(pod.Spec.Volumes), f.Volumes)
	c := &pod.Spec.Containers[ci]
	base := "/spec/containers/" + strconv.Itoa(ci)
	p = p.env(base+"/env", c.Env, f.Env, f.DefaultEnv)
	p = appendTo(p, base+"/volumeMounts", len(c.VolumeMounts), f.VolumeMounts)
	argv := Texts(NewEnvironment(f.EnvOf(c), c.EnvFrom).Expand(slices.Concat(c.Command, c.Args)))
	args := append(slices.Clone(f.Args), e.ManagedTail(argv)...)
	return appendTo(p, base+"/args", len(c.Args), args)
}

// annotations sets every key of want whose value differs, one key at a time, so the Pod's other
// annotations are never rewritten.
func (p Patch) annotations(have, want map[string]string) Patch {
	const path = "/metadata/annotations"
	if len(want) == 0 {
		return p
	}
	if len(have) == 0 {
		return append(p, gomodpatch.NewOperation("add", path, want))
	}
	keys := make([]string, 0, len(want))
	for k, v := range want {
		if old, ok := have[k]; !ok || old != v {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		// "add" on an existing member replaces its value (RFC 6902, 4.1).
		p = append(p, gomodpatch.NewOperation("add", path+"/"+escape(k), want[k]))
	}
	return p
}

// appendTo appends items to the list at path, which holds n entries, or adds the whole list when
// it holds none (absent, null or empty).
func appendTo[T any](p Patch, path string, n int, items []T) Patch {
	switch {
	case len(items) == 0:
		return p
	case n == 0:
		return append(p, gomodpatch.NewOperation("add", path, items))
	}
	for _, v := range items {
		p = append(p, gomodpatch.NewOperation("add", path+"/-", v))
	}
	return p
}

// env writes each injected variable over the first entry of its name (when it differs),
// removes later entries of that name, appends the others, then appends the default variables
// the container does not declare. The operations address the list as it is after the ones
// before them, as RFC 6902 applies them.
func (p Patch) env(path string, have []corev1.EnvVar, write, defaults []corev1.EnvVar) Patch {
	cur := slices.Clone(have)
	var added []corev1.EnvVar
	for _, v := range write {
		i := slices.IndexFunc(cur, func(x corev1.EnvVar) bool { return x.Name == v.Name })
		if i < 0 {
			added = append(added, v)
			continue
		}
		if !sameEnv(cur[i], v) {
			p = append(p, gomodpatch.NewOperation("replace", path+"/"+strconv.Itoa(i), v))
			cur[i] = v
		}
		for j := len(cur) - 1; j > i; j-- {
			if cur[j].Name == v.Name {
				p = append(p, gomodpatch.NewOperation("remove", path+"/"+strconv.Itoa(j), nil))
				cur = slices.Delete(cur, j, j+1)
			}
		}
	}
	for _, v := range defaults {
		declared := func(x corev1.EnvVar) bool { return x.Name == v.Name }
		if !slices.ContainsFunc(cur, declared) && !slices.ContainsFunc(added, declared) {
			added = append(added, v)
		}
	}
	return appendTo(p, path, len(cur), added)
}

func sameEnv(a, b corev1.EnvVar) bool {
	if a.Name != b.Name || a.Value != b.Value {
		return false
	}
	if a.ValueFrom == nil || b.ValueFrom == nil {
		return a.ValueFrom == b.ValueFrom
	}
	return equality.Semantic.DeepEqual(a.ValueFrom, b.ValueFrom)
}

// escape writes a member name as a JSON pointer token (RFC 6901): annotation keys carry "/".
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// Apply applies the patch to a JSON document whose Pod (or pod template: metadata and spec)
// sits at the JSON pointer prefix ("" for a Pod; "/spec/template" for a Deployment's).
func (p Patch) Apply(doc []byte, prefix string) ([]byte, error) {
	if len(p) == 0 {
		return doc, nil
	}
	ops := make(Patch, len(p))
	for i, op := range p {
		ops[i] = op
		ops[i].Path = prefix + op.Path
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	decoded, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, err
	}
	out, err := decoded.Apply(doc)
	if err != nil {
		return nil, fmt.Errorf("apply the injection patch at %q: %w", prefix, err)
	}
	return out, nil
}

// ApplyToPod returns a copy of pod with the patch applied.
func (p Patch) ApplyToPod(pod *corev1.Pod) (*corev1.Pod, error) {
	if len(p) == 0 {
		return pod.DeepCopy(), nil
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	if doc, err = p.Apply(doc, ""); err != nil {
		return nil, err
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(doc, out); err != nil {
		return nil, err
	}
	return out, nil
}
