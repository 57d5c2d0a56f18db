package operator_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/internal/golden"
)

// inputBackends are the KVCacheBackends of a snapshot input file.
func inputBackends(t *testing.T, path string) []*kvv1.KVCacheBackend {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*kvv1.KVCacheBackend
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, path)
		var tm metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal(doc, &tm), path)
		if tm.Kind != "KVCacheBackend" {
			continue
		}
		b := &kvv1.KVCacheBackend{}
		require.NoError(t, yaml.UnmarshalStrict(doc, b), path)
		out = append(out, b)
	}
}

// No false drift: every store the snapshots render, applied to a real API server (which
// defaults and normalises what it stores), reads back as what the operator applied, so the
// children are not applied again on every poll (no DriftReverted event, no request).
func TestEveryRenderedStoreReadsBackInSync(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(golden.Dir("store"), "*.input.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	var names []string
	for _, in := range inputs {
		for _, b := range inputBackends(t, in) {
			b.Name = "golden-" + b.Name
			b.ResourceVersion = ""
			if b.Spec.Connection.Managed == nil {
				continue // nothing is rendered for an external store
			}
			create(t, b)
			names = append(names, b.Name)
		}
	}
	require.NotEmpty(t, names)
	for _, n := range names {
		eventuallyBackend(t, n, "applied", func(b *kvv1.KVCacheBackend) bool { return b.Status.ObservedGeneration == b.Generation })
	}
	time.Sleep(2 * time.Second) // four polls: each would find drift again if there were any
	for _, n := range names {
		assert.Empty(t, eventNotes(t, "DriftReverted", n), "backend %s: a child read back differs from what was applied", n)
	}
}
