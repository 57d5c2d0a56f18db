package generator

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Marshal writes objects as a review-friendly, byte-stable stream: multi-document YAML (format
// "yaml") or a v1 List (format "json"). Map keys are sorted; fields that only say "unset" on a
// rendered object (a null creationTimestamp, an empty status) are dropped.
func Marshal(objs []Object, format string) ([]byte, error) {
	items := make([]any, 0, len(objs))
	for _, o := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
		delete(u, "status")
		PruneUnset(u)
		items = append(items, u)
	}
	switch format {
	case "", "yaml":
		var buf bytes.Buffer
		for _, it := range items {
			b, err := yaml.Marshal(it)
			if err != nil {
				return nil, err
			}
			buf.WriteString("---\n")
			buf.Write(b)
		}
		return buf.Bytes(), nil
	case "json":
		list := map[string]any{"apiVersion": "v1", "kind": "List", "items": items}
		b, err := json.MarshalIndent(list, "", "    ")
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil
	default:
		return nil, fmt.Errorf("unknown output format %q: use yaml or json", format)
	}
}

// PruneUnset removes what a typed object carries only because Go structs cannot be absent: an
// empty status, null creationTimestamps at any depth (pod templates carry one too) and empty
// container resources. (Marshal also drops the status of rendered objects: the cluster writes
// it.)
func PruneUnset(u map[string]any) {
	if s, ok := u["status"].(map[string]any); ok && len(s) == 0 {
		delete(u, "status")
	}
	pruneUnset(u)
}

func pruneUnset(v any) {
	switch t := v.(type) {
	case map[string]any:
		if ts, ok := t["creationTimestamp"]; ok && ts == nil {
			delete(t, "creationTimestamp")
		}
		for _, k := range []string{"resources", "strategy"} {
			if r, ok := t[k].(map[string]any); ok && len(r) == 0 {
				delete(t, k)
			}
		}
		for _, c := range t {
			pruneUnset(c)
		}
	case []any:
		for _, c := range t {
			pruneUnset(c)
		}
	}
}
