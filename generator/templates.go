package generator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"

	"github.com/kvcache-operator/kvcache/templates"
)

// Templates holds the parsed templates: the one template engine every render goes through. It is safe for concurrent use: rendering never mutates it.
type Templates struct {
	root  *template.Template
	names []string // renderable (non-partial) template names, sorted
}

// ParseTemplates parses every template under templates/. Call it once per process and share the
// result; parsing is the expensive part of rendering.
func ParseTemplates() (*Templates, error) {
	return parseTemplates(templates.FS)
}

func parseTemplates(fsys fs.FS) (*Templates, error) {
	e := &Templates{}
	root := template.New("").Option("missingkey=error")
	root.Funcs(e.funcMap(root))
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := path.Ext(p); ext != ".yaml" && ext != ".tpl" && ext != ".json" {
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if _, err := root.New(p).Parse(string(src)); err != nil {
			return fmt.Errorf("parse template %s: %w", p, err)
		}
		if !strings.HasPrefix(path.Base(p), "_") {
			e.names = append(e.names, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(e.names)
	e.root = root
	return e, nil
}

// nonDeterministic are functions sprig's hermetic set still carries that read the clock, the
// local time zone or randomness (keys, salts, IVs, shuffles).
var nonDeterministic = []string{
	"ago", "toDate", "mustToDate", "shuffle", "randInt", "bcrypt", "htpasswd", "encryptAES",
	"genPrivateKey", "genCA", "genCAWithKey", "genSelfSignedCert", "genSelfSignedCertWithKey",
	"genSignedCert", "genSignedCertWithKey",
}

// funcMap is sprig's hermetic set (no time, randomness or environment, so output is a pure
// function of the values) plus the Helm functions templates use. include and tpl close over the
// root template so partials resolve across files.
func (e *Templates) funcMap(root *template.Template) template.FuncMap {
	f := sprig.HermeticTxtFuncMap()
	for _, name := range nonDeterministic {
		delete(f, name)
	}
	f["toYaml"] = func(v any) (string, error) {
		b, err := yaml.Marshal(v)
		if err != nil {
			return "", err
		}
		return strings.TrimSuffix(string(b), "\n"), nil
	}
	f["toJson"] = func(v any) (string, error) {
		b, err := jsonMarshalCompact(v)
		return string(b), err
	}
	f["required"] = func(msg string, v any) (any, error) {
		if v == nil {
			return nil, fmt.Errorf("required: %s", msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, fmt.Errorf("required: %s", msg)
		}
		return v, nil
	}
	// include keeps no per-render state (Helm counts nesting per render): the engine is shared by
	// concurrent admissions, and a self-including template is a bug the snapshot tests catch.
	f["include"] = func(name string, data any) (string, error) {
		t := root.Lookup(name)
		if t == nil {
			return "", fmt.Errorf("include: template %q not found; have %v", name, definedNames(root))
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	f["tpl"] = func(text string, data any) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %w", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("tpl: %w", err)
		}
		return buf.String(), nil
	}
	return f
}

// Execute renders one template by its path (e.g. "store/leader-deployment.yaml") or partial
// name.
func (e *Templates) Execute(name string, data any) ([]byte, error) {
	t := e.root.Lookup(name)
	if t == nil {
		return nil, fmt.Errorf("requested template %q not found; have %v", name, e.names)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ExecuteDir renders every non-partial template under dir (e.g. "store") in name order and
// joins the outputs as one multi-document YAML stream.
func (e *Templates) ExecuteDir(dir string, data any) ([]byte, error) {
	var out bytes.Buffer
	prefix := dir + "/"
	found := false
	for _, n := range e.names {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		found = true
		b, err := e.Execute(n, data)
		if err != nil {
			return nil, err
		}
		out.WriteString("\n---\n")
		out.Write(b)
	}
	if !found {
		return nil, fmt.Errorf("no templates under %q; have %v", dir, e.names)
	}
	return out.Bytes(), nil
}

func definedNames(t *template.Template) []string {
	var names []string
	for _, d := range t.Templates() {
		names = append(names, d.Name())
	}
	sort.Strings(names)
	return names
}

// jsonMarshalCompact marshals without HTML escaping: the output is configuration, not markup,
// and an escaped "&" in a value would reach an engine as "\u0026".
func jsonMarshalCompact(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return escapeUnprintable(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// escapeUnprintable writes as \uXXXX the characters JSON leaves raw but YAML refuses in a
// stream (DEL and the C1 controls other than NEL): the JSON a template emits is parsed as YAML,
// and a value must never make the whole render fail. JSON's own escapes mean the same thing, so
// the value is unchanged. Such characters can only occur inside JSON strings.
func escapeUnprintable(b []byte) []byte {
	if !bytes.ContainsFunc(b, yamlUnprintable) {
		return b
	}
	var out bytes.Buffer
	for _, r := range string(b) {
		if yamlUnprintable(r) {
			fmt.Fprintf(&out, `\u%04x`, r)
			continue
		}
		out.WriteRune(r)
	}
	return out.Bytes()
}

// yamlUnprintable reports the runes above the C0 controls (which JSON escapes itself) outside
// YAML's printable set; the byte-order mark is refused inside a document as well.
func yamlUnprintable(r rune) bool {
	return r == 0x7f || (r >= 0x80 && r <= 0x9f && r != 0x85) || (r >= 0xd800 && r <= 0xdfff) || r == 0xfeff || r == 0xfffe || r == 0xffff
}
