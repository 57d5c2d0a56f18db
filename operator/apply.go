package operator

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/vocab"
)

// FieldManager is the one server-side-apply field manager of everything the operator writes.
const FieldManager = "kvcache-operator"

// Applier applies rendered children with server-side apply under FieldManager.
type Applier struct {
	Client client.Client
	// OnDrift, when set, is told about a child whose live object no longer holds a field the
	// operator sets (path names the first one found), just before it is applied again.
	OnDrift func(desired generator.Object, path string)
}

// Apply server-side-applies desired unless the live object (read from the cache) already is
// what an apply would leave; see ApplyOver.
func (a Applier) Apply(ctx context.Context, desired generator.Object) (bool, error) {
	gvk := desired.GetObjectKind().GroupVersionKind()
	// Read the typed object, so the cache shares the informer the controller watches with.
	ro, err := a.Client.Scheme().New(gvk)
	if err != nil {
		return false, err
	}
	live := ro.(client.Object)
	switch err := a.Client.Get(ctx, client.ObjectKeyFromObject(desired), live); {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return false, fmt.Errorf("read %s %s: %w", gvk.Kind, desired.GetName(), err)
	}
	return a.ApplyOver(ctx, desired, live)
}

// ApplyOver server-side-applies desired over live (what the reconcile read; nil when absent)
// unless live already is what an apply would leave: it carries desired's applied hash (the
// render did not change) and every field desired sets has that value live. The second test is
// what undoes drift: a `kubectl scale` of the leader or an edited member env leaves the hash in
// place but not the value, and the watch on the children runs the reconcile that puts it back.
// Steady state sends no request at all. The applied hash is the render's own
// (generator.AppliedHash), taken again here because a reconcile may hold a field back (the
// leader's replicas during a rollout). ApplyOver reports whether it wrote.
func (a Applier) ApplyOver(ctx context.Context, desired generator.Object, live client.Object) (bool, error) {
	h, err := generator.AppliedHash(desired)
	if err != nil {
		return false, err
	}
	obj, err := appliedConfig(desired, h)
	if err != nil {
		return false, err
	}
	if live != nil && live.GetAnnotations()[vocab.AnnotationAppliedHash] == h {
		path, err := Drift(obj.Object, live)
		if err != nil {
			return false, err
		}
		if path == "" {
			return false, nil
		}
		if a.OnDrift != nil {
			a.OnDrift(desired, path)
		}
	}
	if err := a.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("apply %s %s/%s: %w", desired.GetObjectKind().GroupVersionKind().Kind, desired.GetNamespace(), desired.GetName(), err)
	}
	return true, nil
}

// appliedConfig is the apply configuration sent for desired: its fields, no status, and the
// applied hash.
func appliedConfig(desired generator.Object, hash string) (*unstructured.Unstructured, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: u}
	delete(obj.Object, "status")
	unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[vocab.AnnotationAppliedHash] = hash
	obj.SetAnnotations(ann)
	obj.SetGroupVersionKind(desired.GetObjectKind().GroupVersionKind())
	return obj, nil
}

// Drift compares an apply configuration with the live typed object and returns the path of the
// first field the configuration sets whose live value differs ("" when there is none). Fields
// the configuration does not set (defaults, other managers' fields, status) are not looked at.
// Lists the API merges by a key (containers, env, ports, volumes) are matched by that key, the
// key read from the typed object's patch metadata; other lists are compared item by item and
// must have the same length.
func Drift(applied map[string]any, live client.Object) (string, error) {
	l, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
	if err != nil {
		return "", err
	}
	var m strategicpatch.LookupPatchMeta
	if pm, err := strategicpatch.NewPatchMetaFromStruct(live); err == nil {
		m = pm
	}
	// apiVersion and kind name the object (a typed object read back does not carry them).
	fields := make(map[string]any, len(applied))
	for k, v := range applied {
		if k != "apiVersion" && k != "kind" {
			fields[k] = v
		}
	}
	return driftMap(fields, l, m, ""), nil
}

func driftMap(d, l map[string]any, m strategicpatch.LookupPatchMeta, path string) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := path + "." + k
		dv := d[k]
		lv, ok := l[k]
		if !ok {
			if empty(dv) {
				continue
			}
			return p
		}
		if r := driftValue(dv, lv, m, k, p); r != "" {
			return r
		}
	}
	return ""
}

// driftValue compares the value of field k (of the struct m describes).
func driftValue(d, l any, m strategicpatch.LookupPatchMeta, k, path string) string {
	switch dv := d.(type) {
	case nil:
		return ""
	case map[string]any:
		lv, ok := l.(map[string]any)
		if !ok {
			if len(dv) == 0 {
				return ""
			}
			return path
		}
		var sub strategicpatch.LookupPatchMeta
		if m != nil {
			if s, _, err := m.LookupPatchMetadataForStruct(k); err == nil {
				sub = s
			}
		}
		return driftMap(dv, lv, sub, path)
	case []any:
		lv, _ := l.([]any)
		var elem strategicpatch.LookupPatchMeta
		key := ""
		if m != nil {
			if s, pm, err := m.LookupPatchMetadataForSlice(k); err == nil {
				elem, key = s, pm.GetPatchMergeKey()
			}
		}
		return driftList(dv, lv, elem, key, path)
	default:
		if !reflect.DeepEqual(d, l) {
			return path
		}
		return ""
	}
}

func driftList(d, l []any, elem strategicpatch.LookupPatchMeta, key, path string) string {
	if key != "" && allMapsWith(d, key) {
		for _, di := range d {
			dm := di.(map[string]any)
			k := dm[key]
			at := fmt.Sprintf("%s[%s=%v]", path, key, k)
			var match map[string]any
			for _, li := range l {
				if lm, ok := li.(map[string]any); ok && reflect.DeepEqual(lm[key], k) {
					match = lm
					break
				}
			}
			if match == nil {
				return at
			}
			if r := driftMap(dm, match, elem, at); r != "" {
				return r
			}
		}
		return ""
	}
	if len(d) != len(l) {
		return path
	}
	for i := range d {
		at := fmt.Sprintf("%s[%d]", path, i)
		dm, dIsMap := d[i].(map[string]any)
		lm, lIsMap := l[i].(map[string]any)
		switch {
		case dIsMap && lIsMap:
			if r := driftMap(dm, lm, elem, at); r != "" {
				return r
			}
		case !reflect.DeepEqual(d[i], l[i]):
			return at
		}
	}
	return ""
}

func allMapsWith(items []any, key string) bool {
	for _, i := range items {
		m, ok := i.(map[string]any)
		if !ok || m[key] == nil {
			return false
		}
	}
	return true
}

// empty reports whether an applied value says nothing: null, {} or [].
func empty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}

// FieldPath turns a Drift path into the form kubectl explain reads ("spec.replicas").
func FieldPath(p string) string { return strings.TrimPrefix(p, ".") }
