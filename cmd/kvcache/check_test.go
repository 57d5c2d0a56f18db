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
					assert.Regexp(t, `check: (1 finding|\d+ findings) failed`, errOut)
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
