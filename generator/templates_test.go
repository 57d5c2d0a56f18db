package generator

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func engineOf(t *testing.T, files map[string]string) (*Templates, error) {
	t.Helper()
	fsys := fstest.MapFS{}
	for n, s := range files {
		fsys[n] = &fstest.MapFile{Data: []byte(s)}
	}
	return parseTemplates(fsys)
}

func TestEngineSpeaksHelmsDialect(t *testing.T) {
	e, err := engineOf(t, map[string]string{
		"x/_partials.tpl": `{{- define "x.name" -}}{{ .Name | lower }}{{- end }}`,
		"x/obj.yaml": `name: {{ include "x.name" . }}
upper: {{ .Name | upper | quote }}
list:
  {{- toYaml .List | nindent 2 }}
tpl: {{ tpl "{{ .Name }}-suffix" . }}
json: {{ toJson .Map }}
req: {{ required "Name is required" .Name }}`,
	})
	require.NoError(t, err)
	out, err := e.Execute("x/obj.yaml", map[string]any{
		"Name": "Store", "List": []string{"a", "b"}, "Map": map[string]string{"k": "a&b"},
	})
	require.NoError(t, err)
	assert.Equal(t, `name: store
upper: "STORE"
list:
  - a
  - b
tpl: Store-suffix
json: {"k":"a&b"}
req: Store`, string(out))
}

func TestEngineRefusesMissingKeysAndNamesTemplates(t *testing.T) {
	e, err := engineOf(t, map[string]string{
		"x/a.yaml":   `v: {{ .Missing }}`,
		"x/b.yaml":   `v: {{ include "nope" . }}`,
		"x/c.yaml":   `v: {{ required "spec.image is required" .Image }}`,
		"x/_p.tpl":   `{{ define "x.p" }}p{{ end }}`,
		"x/d.txt":    `not a template`,
		"y/only.yml": `ignored: true`,
	})
	require.NoError(t, err)

	_, err = e.Execute("x/a.yaml", map[string]any{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `map has no entry for key "Missing"`)

	_, err = e.Execute("x/b.yaml", map[string]any{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `include: template "nope" not found; have [`)

	_, err = e.Execute("x/c.yaml", map[string]any{"Image": ""})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "required: spec.image is required")

	_, err = e.Execute("x/zzz.yaml", nil)
	assert.EqualError(t, err, `requested template "x/zzz.yaml" not found; have [x/a.yaml x/b.yaml x/c.yaml]`)

	_, err = e.ExecuteDir("nowhere", nil)
	assert.EqualError(t, err, `no templates under "nowhere"; have [x/a.yaml x/b.yaml x/c.yaml]`)
}

// Output must be a pure function of the values: functions that read the clock, randomness or
// the environment do not exist in this engine, so a template using one fails to parse.
func TestEngineIsHermetic(t *testing.T) {
	for _, fn := range []string{"now", "randAlphaNum 5", `env "HOME"`, "uuidv4", `expandenv "$HOME"`, `genPrivateKey "rsa"`, "randInt 1 9", `shuffle "abc"`, `bcrypt "x"`, `toDate "2006" "2024"`} {
		_, err := engineOf(t, map[string]string{"x/a.yaml": "v: {{ " + fn + " }}"})
		require.Error(t, err, fn)
		assert.Contains(t, err.Error(), "not defined", fn)
	}
}

func TestEngineRendersTheShippedTemplates(t *testing.T) {
	e, err := ParseTemplates()
	require.NoError(t, err)
	assert.Contains(t, e.names, "store/leader-deployment.yaml")
	for _, n := range e.names {
		assert.NotContains(t, n, "/_", "partials render nothing on their own")
	}
}
