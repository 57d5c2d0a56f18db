package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/golden"
)

// Offline check: every admission rule and the injection of every opted-in Pod over manifests,
// one finding per line, as a table and as JSON, pinned as goldens; exit 1 when a finding fails.
// A case's <case>.cluster.yaml is what the cluster already holds (--cluster).
func TestCheckSnapshots(t *testing.T) {
	dir := golden.Dir("check")
	for _, format := range []struct{ output, suffix string }{{"table", ".table.txt"}, {"json", ".json"}} {
		for _, c := range golden.Cases(t, dir, ".input.yaml", format.suffix) {
			t.Run(c.Name+"/"+format.output, func(t *testing.T) {
				args := []string{"check", "-f", c.Input, "-o", format.output}
				if cluster := filepath.Join(dir, c.Name+".cluster.yaml"); fileExists(cluster) {
					args = append(args, "--cluster", cluster)
				}
				code, out, errOut := kvcache(t, "", args...)
				golden.Assert(t, c.Golden, []byte(out))
				failed := strings.Contains(out, "FAIL")
				if format.output == "json" {
					var r struct {
						Findings []struct{ Level string } `json:"findings"`
					}
					require.NoError(t, json.Unmarshal([]byte(out), &r))
					failed = false
					for _, f := range r.Findings {
						failed = failed || f.Level == "FAIL"
					}
				}
				if failed {
					assert.Equal(t, exitInvalid, code, "a FAIL exits 1")
					assert.Regexp(t, `^error: (1 finding|\d+ findings) failed\n$`, errOut)
				} else {
					assert.Equal(t, 0, code, errOut)
				}
			})
		}
	}
}

func TestCheckUsage(t *testing.T) {
	code, _, errOut := kvcache(t, "", "check", "-f", "x.yaml", "-o", "wide")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `--output "wide": use table, json or yaml`)
	code, _, errOut = kvcache(t, "", "check", "-n", "a", "-A")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "-n and -A are exclusive")
	code, _, errOut = kvcache(t, "", "check", "--cluster", "x.yaml")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "give the manifests with -f")
	code, _, errOut = kvcache(t, "", "check", "-f", "x.yaml", "--live", "--cluster", "y.yaml")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--live and --cluster both describe the cluster the manifests meet: give one")
	code, _, errOut = kvcache(t, "", "check", "--live")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--live judges manifests against the live cluster: give them with -f")
	code, _, errOut = kvcache(t, "", "check", "-f", filepath.Join(golden.Dir("check"), "walkthrough.input.yaml"), "--live", "--kubeconfig", os.DevNull)
	assert.Equal(t, exitUsage, code, errOut)
	assert.Contains(t, errOut, "no cluster to check")
	code, _, errOut = kvcache(t, "", "check", "--kubeconfig", os.DevNull)
	assert.Equal(t, exitUsage, code, errOut)
	assert.Contains(t, errOut, "no cluster to check")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// -f reads as kubectl's does: a comma-separated list and a directory (the manifests directly
// in it, by name) give what the files one by one give.
func TestFileArgumentsReadListsAndDirectories(t *testing.T) {
	src := filepath.Join(golden.Dir("check"), "walkthrough.input.yaml")
	raw, err := os.ReadFile(src)
	require.NoError(t, err)
	docs := strings.Split(string(raw), "\n---\n")
	require.Greater(t, len(docs), 2)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml")
	require.NoError(t, os.WriteFile(a, []byte(strings.Join(docs[:2], "\n---\n")), 0o600))
	require.NoError(t, os.WriteFile(b, []byte(strings.Join(docs[2:], "\n---\n")), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a manifest"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "nested"), 0o700))

	code, want, errOut := kvcache(t, "", "check", "-f", src)
	require.Equal(t, 0, code, errOut)
	for _, args := range [][]string{{"-f", a + "," + b}, {"-f", dir}, {"-f", a, "-f", b}} {
		code, out, errOut := kvcache(t, "", append([]string{"check"}, args...)...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		assert.Equal(t, want, out, "%v", args)
	}
	code, _, errOut = kvcache(t, "", "check", "-f", filepath.Join(dir, "nested"))
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "nested holds no manifest (.yaml, .yml, .json files directly in it)")
	code, _, errOut = kvcache(t, "", "check", "-f", a+",,"+b)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "names an empty file: separate files with one comma")
}
