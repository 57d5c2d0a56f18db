package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitDocumentsReadsAListsItemsAsDocuments(t *testing.T) {
	for _, c := range []struct {
		name  string
		input string
		want  []string // each document's String()
	}{
		{"plain documents", "a: 1\n---\nb: 2\n", []string{"in: document 1 (line 1)", "in: document 2 (line 3)"}},
		{"a List's items, in order", "apiVersion: v1\nkind: List\nitems:\n- {kind: A}\n- {kind: B}\n---\nc: 3\n",
			[]string{"in: document 1 (line 1), items[0]", "in: document 1 (line 1), items[1]", "in: document 2 (line 7)"}},
		{"a typed list is a List too", `{"apiVersion": "v1", "kind": "PodList", "items": [{"kind": "Pod"}]}`, []string{"in: document 1 (line 1), items[0]"}},
		{"an empty List holds no object", "kind: List\nitems: []\n", nil},
		{"a kind named List without items is an object", "kind: List\n", []string{"in: document 1 (line 1)"}},
		{"items without a List kind are an object's field", "kind: Thing\nitems: [{a: 1}]\n", []string{"in: document 1 (line 1)"}},
		{"a document that does not parse is left for its reader to report", "kind: List\nitems: [\n", []string{"in: document 1 (line 1)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, d := range splitDocuments("in", []byte(c.input)) {
				got = append(got, d.String())
			}
			assert.Equal(t, c.want, got)
		})
	}
}

// FuzzReadDocumentsPassesThroughUnchanged: whatever the stream, splitting it never panics, and
// what kvcache inject prints for documents it leaves alone splits into the same documents again
// (a List stays a List, item by item).
func FuzzReadDocumentsPassesThroughUnchanged(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n- {apiVersion: v1, kind: ConfigMap}\n",
		"kind: List\nitems: []\n---\nkind: List\nitems: [{kind: A}]\n---\n# c\nkind: B\n",
		`{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","spec":{"n":1}}]}`,
		"kind: List\nitems: [1, null, \"x\", {a: [1, 2]}]\n",
		"--- # a\nkind: List\nitems:\n- kind: A\n--- \nkind: C\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		docs := splitDocuments("fuzz", []byte(data))
		outs := make([]outDoc, len(docs))
		for i, d := range docs {
			if d.list != nil {
				require.Less(t, d.item, d.list.items)
			}
			outs[i] = outDoc{raw: d.raw, list: d.list}
		}
		out, err := marshalDocs(outs, "yaml")
		require.NoError(t, err)
		again := splitDocuments("again", out)
		require.Len(t, again, len(docs))
		for i := range docs {
			assert.Equal(t, string(bytes.TrimRight(docs[i].raw, "\n")), string(bytes.TrimRight(again[i].raw, "\n")))
			assert.Equal(t, docs[i].list != nil, again[i].list != nil)
		}
	})
}

// A field the API does not have is said on a line of its own, at the line it is written on, in
// the object it is in, with the field spelt nearly the same; every line is an error line.
func TestUnknownFieldsAreNamedWithTheirObjectAndLine(t *testing.T) {
	manifest := `apiVersion: worker.gpustack.ai/v1
kind: KVCachePool
metadata: {name: p}
spec:
  backends: [b]
  quota: {total: 8Gi}
---
# the grant
apiVersion: worker.gpustack.ai/v1
kind: KVCachePoolBinding
metadata: {name: t, namespace: team-a}
spec:
  poolRef: {name: p}
  quota:
    ceilling: 8Gi
  domain: {blockSize: 64, dtype: bfloat16, colour: blue}
`
	code, out, errOut := kvcache(t, manifest, "render", "-f", "-")
	assert.Equal(t, exitUsage, code)
	assert.Empty(t, out)
	assert.Equal(t, `error: stdin: line 15: KVCachePoolBinding team-a/t: unknown field "spec.quota.ceilling" (did you mean spec.quota.ceiling?)
error: stdin: line 16: KVCachePoolBinding team-a/t: unknown field "spec.domain.colour"
`, errOut)
}
