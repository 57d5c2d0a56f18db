package main

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// A field the API does not have is said on a line of its own, at the line it is written on, with
// the object it is in and, when one of the fields there is spelt nearly the same, that field.

// fieldPathStep matches one step of a strict decoder's field path: a name, or [index].
var fieldPathStep = regexp.MustCompile(`([^.\[\]]+)|\[(\d+)\]`)

// fieldPath splits "spec.members[0].capacityPerMembr" into its names and indexes.
func fieldPath(path string) []string {
	var steps []string
	for _, m := range fieldPathStep.FindAllStringSubmatch(path, -1) {
		if m[1] != "" {
			steps = append(steps, m[1])
		} else {
			steps = append(steps, "["+m[2]+"]")
		}
	}
	return steps
}

// fieldLine is the line (1-based, within raw) the field at path is written on; 0 when raw is not
// YAML or the path is not in it.
func fieldLine(raw []byte, path string) int {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(raw, &doc); err != nil || len(doc.Content) == 0 {
		return 0
	}
	n := doc.Content[0]
	line := 0
	for _, step := range fieldPath(path) {
		if i, ok := strings.CutPrefix(step, "["); ok {
			idx, _ := strconv.Atoi(strings.TrimSuffix(i, "]"))
			if n.Kind != yamlv3.SequenceNode || idx >= len(n.Content) {
				return 0
			}
			n = n.Content[idx]
			line = n.Line
			continue
		}
		if n.Kind != yamlv3.MappingNode {
			return 0
		}
		found := false
		for k := 0; k+1 < len(n.Content); k += 2 {
			if n.Content[k].Value == step {
				line, n, found = n.Content[k].Line, n.Content[k+1], true
				break
			}
		}
		if !found {
			return 0
		}
	}
	return line
}

// nearField is the field of obj's type, at the parent of path, spelt nearly as path's last name
// (at most two edits apart, case aside); "" when there is none.
func nearField(obj any, path string) string {
	steps := fieldPath(path)
	if len(steps) == 0 {
		return ""
	}
	t := reflect.TypeOf(obj)
	for _, step := range steps[:len(steps)-1] {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if strings.HasPrefix(step, "[") {
			continue
		}
		f, ok := jsonField(t, step)
		if !ok {
			return ""
		}
		t = f.Type
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	want := strings.ToLower(steps[len(steps)-1])
	best, bestD := "", 3
	for _, name := range jsonNames(t) {
		if d := editDistance(strings.ToLower(name), want); d < bestD {
			best, bestD = name, d
		}
	}
	return best
}

// jsonField is the field of struct t whose JSON name is name (embedded structs included).
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && tag == "" {
			if g, ok := jsonField(f.Type, name); ok {
				return g, true
			}
			continue
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// jsonNames are the JSON names of struct t's fields (embedded structs' included).
func jsonNames(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			out = append(out, jsonNames(f.Type)...)
		case tag != "" && tag != "-":
			out = append(out, tag)
		}
	}
	return out
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
