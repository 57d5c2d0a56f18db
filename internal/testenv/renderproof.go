package testenv

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// Kubectl runs the real kubectl against the cluster under test, with stdin, and returns its
// standard output.
type Kubectl func(stdin []byte, args ...string) ([]byte, error)

// RenderMatchesApplied proves that what `kvcache render` printed (a multi-document YAML stream)
// is what the operator applied: the stream is server-side applied as a dry run under the
// operator's field manager (forcing conflicts, as the operator does), so the API server answers
// with each object as it would store it after that apply. A field the render sets with another
// value than the live one, a field the operator owns live that the render lacks (the apply
// would remove it), or an object that does not exist yet all show as a difference between that
// answer and the stored object. It returns the objects compared (kind/namespace/name) and every
// difference, with its field path.
func RenderMatchesApplied(kubectl Kubectl, fieldManager string, printed []byte) (compared, diffs []string, err error) {
	out, err := kubectl(printed, "apply", "--server-side", "--dry-run=server", "--field-manager="+fieldManager, "--force-conflicts", "-o", "json", "-f", "-")
	if err != nil {
		return nil, nil, fmt.Errorf("dry-run apply of the render: %w", err)
	}
	after, err := items(out)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range after {
		kind, _ := a["kind"].(string)
		md, _ := a["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		name, _ := md["name"].(string)
		id := kind + "/" + ns + "/" + name
		compared = append(compared, id)
		resource := strings.ToLower(kind)
		if g := group(a); g != "" {
			resource += "." + g
		}
		args := []string{"get", resource, name, "-o", "json"}
		if ns != "" {
			args = append(args, "-n", ns)
		}
		liveJSON, err := kubectl(nil, args...)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%s: not applied (%v)", id, err))
			continue
		}
		var live map[string]any
		if err := json.Unmarshal(liveJSON, &live); err != nil {
			return nil, nil, err
		}
		for _, d := range diff("", scrub(live), scrub(a)) {
			diffs = append(diffs, id+": "+d)
		}
	}
	sort.Strings(compared)
	sort.Strings(diffs)
	return compared, diffs, nil
}

// group is the API group of an object ("" for the core group).
func group(o map[string]any) string {
	v, _ := o["apiVersion"].(string)
	if g, _, ok := strings.Cut(v, "/"); ok {
		return g
	}
	return ""
}

// items reads kubectl's JSON output: one object or a List of them.
func items(out []byte) ([]map[string]any, error) {
	var o map[string]any
	if err := json.Unmarshal(out, &o); err != nil {
		return nil, fmt.Errorf("kubectl's output: %w", err)
	}
	if o["kind"] != "List" {
		return []map[string]any{o}, nil
	}
	var list []map[string]any
	for _, it := range o["items"].([]any) {
		list = append(list, it.(map[string]any))
	}
	return list, nil
}

// scrub drops what an apply moves by itself (resourceVersion, managedFields, the observed
// status) so that only the object's content is compared.
func scrub(o map[string]any) map[string]any {
	c := map[string]any{}
	for k, v := range o {
		c[k] = v
	}
	delete(c, "status")
	if md, ok := c["metadata"].(map[string]any); ok {
		m := map[string]any{}
		for k, v := range md {
			m[k] = v
		}
		delete(m, "resourceVersion")
		delete(m, "managedFields")
		c["metadata"] = m
	}
	return c
}

// diff lists the paths where a and b differ.
func diff(path string, a, b any) []string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: live %s, render %s", orRoot(path), short(a), short(b))}
		}
		var out []string
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			out = append(out, diff(path+"."+k, av[k], bv[k])...)
		}
		return out
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return []string{fmt.Sprintf("%s: live %s, render %s", orRoot(path), short(a), short(b))}
		}
		var out []string
		for i := range av {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(a, b) {
		return []string{fmt.Sprintf("%s: live %s, render %s", orRoot(path), short(a), short(b))}
	}
	return nil
}

func orRoot(p string) string {
	if p == "" {
		return "."
	}
	return strings.TrimPrefix(p, ".")
}

func short(v any) string {
	if v == nil {
		return "absent"
	}
	b, _ := json.Marshal(v)
	if len(b) > 120 {
		return string(b[:117]) + "..."
	}
	return string(b)
}
