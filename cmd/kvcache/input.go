package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// document is one object of an input stream, with where it came from: a YAML document, or an
// item of a List document (kind List, as kubectl get -o yaml prints several objects, and as
// kubectl apply accepts them).
type document struct {
	source string // file name, or "stdin"
	index  int    // 1-based position in its stream
	line   int    // line of the stream where the document starts
	raw    []byte
	// list is the List this object is an item of (nil for a document of its own), item its
	// index there.
	list *listDocument
	item int
}

// listDocument is a List as written, whose items are documents of their own.
type listDocument struct {
	raw   []byte         // the List's document, as written
	obj   map[string]any // the List, decoded
	items int            // how many items it holds
}

func (d document) String() string {
	if d.list != nil {
		return fmt.Sprintf("%s: document %d (line %d), items[%d]", d.source, d.index, d.line, d.item)
	}
	return fmt.Sprintf("%s: document %d (line %d)", d.source, d.index, d.line)
}

// readInputs reads every -f value ("-" is stdin) and splits each into documents. A file that
// cannot be read, or that holds no document at all, is a usage error.
func readInputs(files []string, stdin io.Reader) ([]document, error) {
	files, err := expandFiles(files)
	if err != nil {
		return nil, err
	}
	var docs []document
	for _, f := range files {
		var data []byte
		var err error
		name := f
		if f == "-" {
			name = "stdin"
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(f)
		}
		if err != nil {
			return nil, usageErrorf("cannot read %s: %v", name, err)
		}
		d := splitDocuments(name, data)
		if len(d) == 0 {
			return nil, usageErrorf("%s: no objects: the file is empty (or holds only comments or an empty List); give it at least one manifest", name)
		}
		docs = append(docs, d...)
	}
	return docs, nil
}

// manifestExtensions are the files a directory given to -f contributes, as kubectl reads them.
var manifestExtensions = []string{".yaml", ".yml", ".json"}

// expandFiles reads -f as kubectl does: a value that is no path may list files separated by
// commas, and a directory stands for the manifests directly in it (.yaml, .yml, .json, by name;
// its subdirectories are not read).
func expandFiles(values []string) ([]string, error) {
	var out []string
	for _, v := range values {
		names := []string{v}
		if _, err := os.Stat(v); err != nil && v != "-" {
			names = strings.Split(v, ",") // a path that exists is itself, commas and all
		}
		for _, n := range names {
			if n == "" {
				return nil, usageErrorf("-f %q names an empty file: separate files with one comma", v)
			}
			st, err := os.Stat(n)
			if n == "-" || err != nil || !st.IsDir() {
				out = append(out, n) // read (or its error said) in order
				continue
			}
			entries, err := os.ReadDir(n)
			if err != nil {
				return nil, usageErrorf("cannot read directory %s: %v", n, err)
			}
			var found []string
			for _, e := range entries {
				if !e.IsDir() && slices.Contains(manifestExtensions, filepath.Ext(e.Name())) {
					found = append(found, filepath.Join(n, e.Name()))
				}
			}
			if len(found) == 0 {
				return nil, usageErrorf("directory %s holds no manifest (%s files directly in it)", n, strings.Join(manifestExtensions, ", "))
			}
			out = append(out, found...) // ReadDir sorts by name
		}
	}
	return out, nil
}

var separator = regexp.MustCompile(`^---(\s.*)?$`)

// splitDocuments splits a YAML stream at "---" lines, keeping each document's first line so
// errors can point into the file. Documents holding only comments and blank lines are dropped.
// A List's items become documents of their own (a List with no items yields none).
func splitDocuments(source string, data []byte) []document {
	var docs []document
	lines := strings.SplitAfter(string(data), "\n")
	start, index := 1, 0
	var cur bytes.Buffer
	flush := func() {
		if hasContent(cur.Bytes()) {
			index++
			d := document{source: source, index: index, line: start, raw: append([]byte(nil), cur.Bytes()...)}
			docs = append(docs, d.listItems()...)
		}
		cur.Reset()
	}
	for i, l := range lines {
		if separator.MatchString(strings.TrimRight(l, "\r\n")) {
			flush()
			start = i + 2
			continue
		}
		cur.WriteString(l)
	}
	flush()
	return docs
}

// listItems is the document's items when it is a List (any kind named <Kind>List with an items
// array, as kubectl reads them), each as JSON, which is YAML; otherwise the document itself. A
// document that does not parse is returned as it is, for its reader to report.
func (d document) listItems() []document {
	j, err := d.toJSON()
	if err != nil {
		return []document{d}
	}
	var obj map[string]any
	if sigsjson.UnmarshalCaseSensitivePreserveInts(j, &obj) != nil {
		return []document{d}
	}
	kind, _ := obj["kind"].(string)
	items, ok := obj["items"].([]any)
	if !ok || !strings.HasSuffix(kind, "List") {
		return []document{d}
	}
	l := &listDocument{raw: d.raw, obj: obj, items: len(items)}
	out := make([]document, 0, len(items))
	for i, it := range items {
		raw, err := json.Marshal(it)
		if err != nil {
			return []document{d}
		}
		out = append(out, document{source: d.source, index: d.index, line: d.line, raw: append(raw, '\n'), list: l, item: i})
	}
	return out
}

func hasContent(doc []byte) bool {
	for _, l := range strings.Split(string(doc), "\n") {
		t := strings.TrimSpace(l)
		if t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// toJSON converts a document to JSON, rewriting the parser's line numbers to lines of the file.
func (d document) toJSON() ([]byte, error) {
	j, err := yaml.YAMLToJSONStrict(d.raw)
	if err != nil {
		msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
			n, _ := strconv.Atoi(strings.TrimPrefix(m, "line "))
			return fmt.Sprintf("line %d", n+d.line-1)
		})
		return nil, fmt.Errorf("%s: YAML syntax error: %s", d, strings.TrimPrefix(msg, "error converting YAML to JSON: "))
	}
	return j, nil
}

// typeMeta reads a document's apiVersion and kind.
func (d document) typeMeta() (schema.GroupVersionKind, []byte, error) {
	j, err := d.toJSON()
	if err != nil {
		return schema.GroupVersionKind{}, nil, err
	}
	var tm metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s: not a Kubernetes object: %w", d, err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s: apiVersion and kind are required", d)
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s: apiVersion %q: %w", d, tm.APIVersion, err)
	}
	return gv.WithKind(tm.Kind), j, nil
}

// decodeStrict decodes JSON into obj, refusing unknown and duplicate fields with their full
// path (e.g. unknown field "spec.connection.managed.members[0].capacity").
func (d document) decodeStrict(j []byte, obj any) error {
	strict, err := sigsjson.UnmarshalStrict(j, obj)
	if err != nil {
		return fmt.Errorf("%s: %w", d, err)
	}
	if len(strict) > 0 {
		type located struct {
			line int
			msg  string
		}
		found := make([]located, len(strict))
		for i, e := range strict {
			found[i].line, found[i].msg = d.fieldError(j, obj, e.Error())
		}
		// In the order they are written (the decoder finds them in its own order).
		slices.SortStableFunc(found, func(a, b located) int { return a.line - b.line })
		msgs := make([]string, len(found))
		for i, f := range found {
			msgs[i] = f.msg
		}
		// One error line each: the first is tagged where the message is printed.
		return fmt.Errorf("%s", strings.Join(msgs, "\nerror: "))
	}
	return nil
}

var unknownField = regexp.MustCompile(`^unknown field "(.+)"$`)

// fieldError says a strict decoder's complaint about one field on a line of its own: where it is
// written (the field's own line when the document is YAML of its own), in which object, and for
// an unknown field the one spelt nearly the same, if any; line is the line of the file.
func (d document) fieldError(j []byte, obj any, msg string) (line int, _ string) {
	where := d.String()
	line = d.line
	m := unknownField.FindStringSubmatch(msg)
	if m != nil && d.list == nil {
		if l := fieldLine(d.raw, m[1]); l > 0 {
			line = d.line + l - 1
			where = fmt.Sprintf("%s: line %d", d.source, line)
		}
	}
	var meta struct {
		Kind     string            `json:"kind"`
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if json.Unmarshal(j, &meta) == nil && meta.Kind != "" {
		name := meta.Metadata.Name
		if meta.Metadata.Namespace != "" {
			name = meta.Metadata.Namespace + "/" + name
		}
		where += ": " + meta.Kind + " " + name
	}
	if m != nil {
		if near := nearField(obj, m[1]); near != "" {
			steps := fieldPath(m[1])
			parent := strings.TrimSuffix(m[1], steps[len(steps)-1])
			msg += fmt.Sprintf(" (did you mean %s%s?)", parent, near)
		}
	}
	return line, where + ": " + msg
}

// namespaceFlag is a flag that names a namespace: a value no namespace can have (not a DNS-1123
// label) is refused when the flag is parsed, naming the flag, instead of being rendered into
// objects the API server refuses.
type namespaceFlag struct{ v *string }

func newNamespaceFlag(v *string, def string) *namespaceFlag {
	*v = def
	return &namespaceFlag{v}
}

func (f *namespaceFlag) String() string { return *f.v }

func (f *namespaceFlag) Type() string { return "namespace" }

func (f *namespaceFlag) Set(s string) error {
	if msgs := utilvalidation.IsDNS1123Label(s); len(msgs) > 0 {
		return fmt.Errorf("%q is not a namespace name: %s", s, strings.Join(msgs, "; "))
	}
	*f.v = s
	return nil
}
