// Package golden compares rendered output with golden files under snapshots/ and discovers
// snapshot cases. `go test ./... -update` (make snapshots) rewrites the goldens; without it a
// missing, stale or orphaned golden fails the test.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/pmezard/go-difflib/difflib"
)

var update = flag.Bool("update", false, "rewrite golden files under snapshots/ with the current output")

// Updating reports whether the test run rewrites goldens.
func Updating() bool { return *update }

// Dir returns the absolute path of snapshots/<sub> in this repository.
func Dir(sub string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "snapshots", sub)
}

// Case is one snapshot case: an input file and the golden its output is compared with.
type Case struct {
	Name   string
	Input  string
	Golden string
}

// Cases discovers every "<case><inputSuffix>" file in dir and pairs it with
// "<case><goldenSuffix>". It fails the test for a golden whose input is gone, so a deleted case
// cannot leave a stale file that nothing checks.
func Cases(t *testing.T, dir, inputSuffix, goldenSuffix string) []Case {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read snapshot dir: %v", err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	var cases []Case
	for n := range names {
		if strings.HasSuffix(n, inputSuffix) {
			c := strings.TrimSuffix(n, inputSuffix)
			cases = append(cases, Case{Name: c, Input: filepath.Join(dir, n), Golden: filepath.Join(dir, c+goldenSuffix)})
		}
	}
	for n := range names {
		if strings.HasSuffix(n, goldenSuffix) && !strings.HasSuffix(n, inputSuffix) {
			c := strings.TrimSuffix(n, goldenSuffix)
			if !names[c+inputSuffix] {
				if *update {
					_ = os.Remove(filepath.Join(dir, n))
					continue
				}
				t.Errorf("golden %s has no input %s: delete it or restore the input", n, c+inputSuffix)
			}
		}
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].Name < cases[j].Name })
	if len(cases) == 0 {
		t.Fatalf("no snapshot inputs (*%s) in %s", inputSuffix, dir)
	}
	return cases
}

// Assert compares got with the golden file, or rewrites it under -update.
func Assert(t *testing.T, golden string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatalf("write golden: %v", err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if os.IsNotExist(err) {
		t.Fatalf("golden %s is missing: run `make snapshots`, then review it", golden)
	}
	if err != nil {
		t.Fatalf("read golden: %v", err)
	}
	if !bytes.Equal(want, got) {
		diff, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
			A: difflib.SplitLines(string(want)), B: difflib.SplitLines(string(got)),
			FromFile: golden, ToFile: "got", Context: 3,
		})
		t.Errorf("output differs from %s (run `make snapshots` if the change is intended, then review the diff):\n%s", golden, diff)
	}
}
