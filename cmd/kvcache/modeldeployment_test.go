package main

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/objects"
)

// TestModelDeploymentSnapshots renders each input as `kvcache render` does and pins the
// objects its ModelDeployments own (the store objects are pinned in snapshots/store).
func TestModelDeploymentSnapshots(t *testing.T) {
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	for _, c := range golden.Cases(t, golden.Dir("modeldeployment"), ".input.yaml", ".yaml") {
		t.Run(c.Name, func(t *testing.T) {
			data, err := os.ReadFile(c.Input)
			require.NoError(t, err)
			in, err := readAPIInput(splitDocuments(c.Input, data), "default")
			require.NoError(t, err)
			// Warnings (version skew, for the SGLang and Ascend inputs) are the validator tests'.
			opts := fileOptions(generator.DefaultSystemNamespace, r)
			require.NoError(t, in.validate(t.Context(), io.Discard, opts))
			objs, err := renderModelDeployments(t.Context(), r, in, objects.NewFiles(in.set, opts))
			require.NoError(t, err)
			generator.SortObjects(objs)
			out, err := generator.Marshal(objs, "yaml")
			require.NoError(t, err)
			golden.Assert(t, c.Golden, out)
		})
	}
}
