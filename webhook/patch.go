package webhook

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// podPatch returns the JSON patch that turns the submitted Pod in into out, injection's output
// for it. It is built from what the engine merge adds and replaces, not from a diff of a
// re-encoded document: the request may carry fields the compiled Pod type does not know (an API
// server newer than this build), and a whole-document diff would remove them. Every operation
// addresses an annotation key (or the annotations object when there is none), the Pod's volumes,
// or a container's env, volumeMounts or args, and inside those lists only the entries injection
// writes; no other field or entry is touched. The indexes are the request's own: a JSON array
// decodes entry for entry, unknown fields or not.
//
// Merge changes those lists in three ways only: an env entry written in place (later entries of
// the same name dropped), entries appended, annotation keys set. A difference of another shape
// (an entry reordered or removed, a volume inserted) could only be carried by rewriting entries
// injection does not own, so it is an error: the admission fails (failurePolicy Fail keeps the
// Pod out) rather than admitting the Pod without what injection decided or without a user's
// field. Fields outside those lists are not compared: merge never changes them.
func podPatch(in, out *corev1.Pod) ([]jsonpatch.JsonPatchOperation, error) {
	var ops []jsonpatch.JsonPatchOperation
	ops = annotationOps(ops, in.Annotations, out.Annotations)
	if len(in.Spec.Containers) != len(out.Spec.Containers) {
		return nil, fmt.Errorf("injection changed the number of containers from %d to %d; a patch may only add to a container", len(in.Spec.Containers), len(out.Spec.Containers))
	}
	var err error
	if ops, err = appendOps(ops, "/spec/volumes", "", "volumes", in.Spec.Volumes, out.Spec.Volumes, volumeKey); err != nil {
		return nil, err
	}
	for i := range in.Spec.Containers {
		ic, oc := &in.Spec.Containers[i], &out.Spec.Containers[i]
		if ic.Name != oc.Name {
			return nil, fmt.Errorf("injection renamed container %d from %q to %q", i, ic.Name, oc.Name)
		}
		base := "/spec/containers/" + strconv.Itoa(i)
		if ops, err = envOps(ops, base+"/env", ic.Name, ic.Env, oc.Env); err != nil {
			return nil, err
		}
		if ops, err = appendOps(ops, base+"/volumeMounts", ic.Name, "volumeMounts", ic.VolumeMounts, oc.VolumeMounts, mountKey); err != nil {
			return nil, err
		}
		if ops, err = appendOps(ops, base+"/args", ic.Name, "args", ic.Args, oc.Args, argKey); err != nil {
			return nil, err
		}
	}
	return ops, nil
}

// annotationOps sets every annotation out has with another value than in, one key at a time, so
// the Pod's other annotations are never rewritten; a key out lacks is removed (its value is a
// string, so nothing unknown is lost with it).
func annotationOps(ops []jsonpatch.JsonPatchOperation, in, out map[string]string) []jsonpatch.JsonPatchOperation {
	const path = "/metadata/annotations"
	if len(in) == 0 {
		if len(out) > 0 {
			ops = append(ops, jsonpatch.NewOperation("add", path, out))
		}
		return ops
	}
	var set, removed []string
	for k, v := range out {
		if old, ok := in[k]; !ok || old != v {
			set = append(set, k)
		}
	}
	for k := range in {
		if _, ok := out[k]; !ok {
			removed = append(removed, k)
		}
	}
	sort.Strings(set)
	sort.Strings(removed)
	for _, k := range set {
		// "add" on an existing member replaces its value (RFC 6902, 4.1).
		ops = append(ops, jsonpatch.NewOperation("add", path+"/"+escape(k), out[k]))
	}
	for _, k := range removed {
		ops = append(ops, jsonpatch.NewOperation("remove", path+"/"+escape(k), nil))
	}
	return ops
}

// appendOps appends out's entries past in's to the list field at path (of container, or of the
// Pod when container is empty), or adds the whole list when the request has none (absent, null or
// empty). in must be a prefix of out, entry for entry by key.
func appendOps[T any](ops []jsonpatch.JsonPatchOperation, path, container, field string, in, out []T, key func(T) string) ([]jsonpatch.JsonPatchOperation, error) {
	if len(out) < len(in) {
		return nil, fmt.Errorf("injection removed entries of %s (%d of %d left); a patch may only append to it", owned(container, field), len(out), len(in))
	}
	for i := range in {
		if key(in[i]) != key(out[i]) {
			return nil, fmt.Errorf("injection changed entry %d of %s (%q became %q); a patch may only append to it", i, owned(container, field), key(in[i]), key(out[i]))
		}
	}
	if len(out) == len(in) {
		return ops, nil
	}
	if len(in) == 0 {
		return append(ops, jsonpatch.NewOperation("add", path, out)), nil
	}
	for _, v := range out[len(in):] {
		ops = append(ops, jsonpatch.NewOperation("add", path+"/-", v))
	}
	return ops, nil
}

func owned(container, field string) string {
	if container == "" {
		return "the Pod's " + field
	}
	return fmt.Sprintf("container %q's %s", container, field)
}

func volumeKey(v corev1.Volume) string     { return v.Name }
func mountKey(m corev1.VolumeMount) string { return m.Name + " at " + m.MountPath }
func argKey(a string) string               { return a }
func envKey(v corev1.EnvVar) string        { return v.Name }

// envOps writes the container's env the way merge does: an entry injection wrote is replaced in
// place (whole: injection owns it), a later entry of a name already written is removed, new
// entries are appended. Entries injection left alone are not touched.
func envOps(ops []jsonpatch.JsonPatchOperation, path, container string, in, out []corev1.EnvVar) ([]jsonpatch.JsonPatchOperation, error) {
	if len(in) == 0 {
		return appendOps(ops, path, container, "env", in, out, envKey)
	}
	next := 0 // the entry of out the next kept entry of in must match
	pos := 0  // the index that entry has in the partly patched list
	for _, v := range in {
		switch {
		case next < len(out) && out[next].Name == v.Name:
			if !sameEnv(v, out[next]) {
				ops = append(ops, jsonpatch.NewOperation("replace", path+"/"+strconv.Itoa(pos), out[next]))
			}
			next++
			pos++
		case slices.ContainsFunc(out[:next], func(w corev1.EnvVar) bool { return w.Name == v.Name }):
			ops = append(ops, jsonpatch.NewOperation("remove", path+"/"+strconv.Itoa(pos), nil))
		default:
			return nil, fmt.Errorf("injection removed or moved env %s of container %q; a patch may only write entries in place, drop later duplicates and append", v.Name, container)
		}
	}
	for _, v := range out[next:] {
		ops = append(ops, jsonpatch.NewOperation("add", path+"/-", v))
	}
	return ops, nil
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
