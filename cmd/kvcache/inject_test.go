package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/webhook"
)

// injectCase is one golden case of snapshots/inject: <name>.yaml is the input; the outcome is
// <name>.injected.yaml (with <name>.warnings.txt when there are warnings) or <name>.refused.txt.
type injectCase struct {
	name, dir string
}

func (c injectCase) path(suffix string) string { return filepath.Join(c.dir, c.name+suffix) }

func injectCases(t *testing.T) []injectCase {
	dir := golden.Dir("inject")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	inputs := map[string]bool{}
	var outputs []string
	for _, e := range entries {
		n := e.Name()
		switch {
		case n == "cluster.yaml", strings.HasSuffix(n, ".cluster.yaml"):
		case strings.HasSuffix(n, ".injected.yaml"), strings.HasSuffix(n, ".refused.txt"), strings.HasSuffix(n, ".warnings.txt"):
			outputs = append(outputs, n)
		case strings.HasSuffix(n, ".yaml"):
			inputs[strings.TrimSuffix(n, ".yaml")] = true
		default:
			t.Errorf("unexpected file %s in %s", n, dir)
		}
	}
	for _, o := range outputs {
		base, _, _ := strings.Cut(o, ".")
		if !inputs[base] {
			if golden.Updating() {
				_ = os.Remove(filepath.Join(dir, o))
				continue
			}
			t.Errorf("golden %s has no input %s.yaml: delete it or restore the input", o, base)
		}
	}
	var cases []injectCase
	for n := range inputs {
		cases = append(cases, injectCase{name: n, dir: dir})
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].name < cases[j].name })
	require.NotEmpty(t, cases)
	return cases
}

// assertGolden compares got with the golden at path, or requires the golden to be absent when
// got is empty (so an outcome that changed kind leaves no stale file).
func assertGolden(t *testing.T, path string, got string) {
	t.Helper()
	if got == "" {
		if golden.Updating() {
			_ = os.Remove(path)
			return
		}
		_, err := os.Stat(path)
		assert.True(t, os.IsNotExist(err), "%s exists but this case produced none: delete it (make snapshots)", path)
		return
	}
	golden.Assert(t, path, []byte(got))
}

// TestInjectionGoldens runs every case through `kvcache inject` and through the admission
// handler the webhook serves, and requires the two to agree on every Pod: the same injected
// Pod, the same refusal message, the same warnings.
func TestInjectionGoldens(t *testing.T) {
	for _, c := range injectCases(t) {
		t.Run(c.name, func(t *testing.T) {
			clusterFiles := []string{filepath.Join(c.dir, "cluster.yaml")}
			if _, err := os.Stat(c.path(".cluster.yaml")); err == nil {
				clusterFiles = append(clusterFiles, c.path(".cluster.yaml"))
			}
			args := []string{"inject", "-f", c.path(".yaml")}
			for _, f := range clusterFiles {
				args = append(args, "--cluster", f)
			}
			code, out, errOut := kvcache(t, "", args...)
			var refusals, warns []string
			for _, l := range strings.Split(strings.TrimSuffix(errOut, "\n"), "\n") {
				switch {
				case l == "":
				case strings.HasPrefix(l, "refused: "):
					refusals = append(refusals, l)
				case strings.HasPrefix(l, "warning: "):
					warns = append(warns, l)
				case strings.HasPrefix(l, "note: "):
					// Where the refused lookup read: asserted by TestInjectJSONAndUsage.
				default:
					t.Fatalf("unexpected stderr line: %q", l)
				}
			}
			switch code {
			case 0:
				assertGolden(t, c.path(".injected.yaml"), out)
				assertGolden(t, c.path(".refused.txt"), "")
			case exitInvalid:
				require.NotEmpty(t, refusals, "exit 1 must come with a refusal: %s", errOut)
				assert.Empty(t, out, "a refusal prints nothing on stdout")
				assertGolden(t, c.path(".refused.txt"), strings.Join(refusals, "\n")+"\n")
				assertGolden(t, c.path(".injected.yaml"), "")
			default:
				t.Fatalf("exit %d: %s", code, errOut)
			}
			warnText := ""
			if len(warns) > 0 {
				warnText = strings.Join(warns, "\n") + "\n"
			}
			assertGolden(t, c.path(".warnings.txt"), warnText)

			assertHandlerAgrees(t, c, clusterFiles, out, refusals, warns)
		})
	}
}

// assertHandlerAgrees sends every opted-in Pod of the input through the webhook's handler and
// compares its answer with the CLI's.
func assertHandlerAgrees(t *testing.T, c injectCase, clusterFiles []string, cliOut string, refusals, warns []string) {
	t.Helper()
	var clusterDocs []document
	for _, f := range clusterFiles {
		d, err := readInputs([]string{f}, nil)
		require.NoError(t, err)
		clusterDocs = append(clusterDocs, d...)
	}
	cluster, err := readAPIInput(clusterDocs, "default")
	require.NoError(t, err)
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	lookup := objects.NewFiles(cluster.set, fileOptions(generator.DefaultSystemNamespace, r))
	handler := webhook.NewPodMutator(injection.New(r), lookup)

	inDocs, err := readInputs([]string{c.path(".yaml")}, nil)
	require.NoError(t, err)
	var outDocs []document
	if cliOut != "" {
		outDocs = splitDocuments("cli output", []byte(cliOut))
		require.Len(t, outDocs, len(inDocs))
	}
	for i, d := range inDocs {
		pod, kind, name, ok := podOf(t, d)
		if !ok {
			continue
		}
		raw, err := json.Marshal(pod)
		require.NoError(t, err)
		outcome := handler.Admit(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create, Namespace: pod.Namespace,
			Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Object: runtime.RawExtension{Raw: raw},
		}})
		resp := outcome.Response
		prefix := "refused: " + kind + "/" + name + ": "
		if !resp.Allowed {
			require.NotNil(t, resp.Result)
			assert.EqualValues(t, 403, resp.Result.Code)
			assert.Contains(t, refusals, prefix+resp.Result.Message, "the handler's refusal must be the CLI's")
			continue
		}
		for _, r := range refusals {
			assert.False(t, strings.HasPrefix(r, prefix), "the CLI refused %s/%s and the handler admitted it", kind, name)
		}
		var handlerWarns []string
		for _, w := range resp.Warnings {
			handlerWarns = append(handlerWarns, "warning: "+kind+"/"+name+": "+w)
		}
		for _, w := range handlerWarns {
			assert.Contains(t, warns, w)
		}
		patched := raw
		if len(resp.Patches) > 0 {
			pb, err := json.Marshal(resp.Patches)
			require.NoError(t, err)
			p, err := jsonpatch.DecodePatch(pb)
			require.NoError(t, err)
			patched, err = p.Apply(raw)
			require.NoError(t, err)
		}
		var got corev1.Pod
		require.NoError(t, json.Unmarshal(patched, &got))
		if len(outDocs) == 0 {
			continue
		}
		want, _, _, ok := podOf(t, outDocs[i])
		require.True(t, ok)
		assert.Equal(t, want.Labels, got.Labels, "labels: handler vs CLI")
		assert.Equal(t, want.Annotations, got.Annotations, "annotations: handler vs CLI")
		assert.Equal(t, want.Spec, got.Spec, "spec: handler vs CLI")
	}
}

// podOf returns the Pod (or pod template as a Pod) a document holds, with its namespace.
func podOf(t *testing.T, d document) (*corev1.Pod, string, string, bool) {
	t.Helper()
	gvk, j, err := d.typeMeta()
	require.NoError(t, err)
	newObj, ok := podHolders[gvk.GroupKind()]
	if !ok {
		return nil, "", "", false
	}
	obj := newObj()
	require.NoError(t, d.decodeStrict(j, obj))
	m, spec := podTemplate(obj)
	top := obj.(metav1.Object)
	pod := &corev1.Pod{ObjectMeta: *m.DeepCopy(), Spec: *spec.DeepCopy()}
	pod.Namespace = top.GetNamespace()
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	return pod, gvk.Kind, top.GetName(), true
}

func TestInjectJSONAndUsage(t *testing.T) {
	dir := golden.Dir("inject")
	cluster := filepath.Join(dir, "cluster.yaml")
	code, out, errOut := kvcache(t, "", "inject", "-f", filepath.Join(dir, "cronjob-and-passthrough.yaml"), "--cluster", cluster, "-o", "json")
	require.Equal(t, 0, code, errOut)
	var list struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	assert.Equal(t, "List", list.Kind)
	require.Len(t, list.Items, 3, "every input document, in order")
	assert.Equal(t, "ConfigMap", list.Items[0]["kind"])
	assert.Equal(t, "CronJob", list.Items[1]["kind"])
	assert.Contains(t, out, `"kvcache.gpustack.ai/injected"`)

	code, out, errOut = kvcache(t, "", "inject", "--cluster", cluster)
	assert.Equal(t, exitUsage, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "-f FILE is required")

	code, _, errOut = kvcache(t, "", "inject", "-f", filepath.Join(dir, "vllm-server.yaml"), "--cluster", filepath.Join(dir, "vllm-server.yaml"))
	assert.Equal(t, exitUsage, code, "a Pod is not a cluster object")
	assert.Contains(t, errOut, "kind Pod (v1) is not an input here")

	code, out, errOut = kvcache(t, "", "inject", "-f", filepath.Join(dir, "vllm-server.yaml"))
	assert.Equal(t, exitInvalid, code, "without --cluster there is no Binding to resolve")
	assert.Empty(t, out)
	assert.Contains(t, errOut, `refused: Pod/bench: KVCachePoolBinding "team-a" not found in namespace "team-a"`)
	assert.Contains(t, errOut, "\nnote: kvcache inject read the cluster's objects from no --cluster file, not from a cluster: pass them with --cluster FILE (kubectl get kvcachepoolbindings,kvcachepools,kvcachebackends,settings -A -o yaml > cluster.yaml)\n",
		"offline, a missing Binding says where inject looked")
}

// The injection reference's Deployment names no namespace: like kubectl apply, inject takes it
// from -n, and without one from "default", where its Binding is not.
func TestInjectTakesTheNamespaceOfUnnamespacedDocumentsFromTheFlag(t *testing.T) {
	dir := golden.Dir("inject")
	raw, err := os.ReadFile(filepath.Join(dir, "walkthrough-deployment.yaml"))
	require.NoError(t, err)
	input := strings.Replace(string(raw), "  namespace: team-a\n", "", 1)
	require.NotContains(t, input, "namespace:")
	cluster := filepath.Join(dir, "cluster.yaml")

	code, out, errOut := kvcache(t, input, "inject", "-f", "-", "--cluster", cluster)
	assert.Equal(t, exitInvalid, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, `refused: Deployment/chat: KVCachePoolBinding "chat" not found in namespace "default"`)
	assert.Contains(t, errOut, "note: kvcache inject read the cluster's objects from the --cluster files alone, not from a cluster")

	for _, flag := range []string{"-n", "--namespace"} {
		code, out, errOut = kvcache(t, input, "inject", "-f", "-", "--cluster", cluster, flag, "team-a")
		require.Equal(t, 0, code, errOut)
		want, err := os.ReadFile(filepath.Join(dir, "walkthrough-deployment.injected.yaml"))
		require.NoError(t, err)
		assert.Equal(t, strings.Replace(string(want), "  namespace: team-a\n", "", 1), out, "the same injection as the namespaced document, and no namespace added")
	}
}

// injectInline runs one inline input through kvcache inject and the webhook's handler, as the
// golden cases are run, and returns the CLI's output.
func injectInline(t *testing.T, input string) string {
	t.Helper()
	c := injectCase{name: "inline", dir: t.TempDir()}
	require.NoError(t, os.WriteFile(c.path(".yaml"), []byte(input), 0o644))
	cluster := filepath.Join(golden.Dir("inject"), "cluster.yaml")
	code, out, errOut := kvcache(t, "", "inject", "-f", c.path(".yaml"), "--cluster", cluster)
	require.Equal(t, 0, code, errOut)
	assertHandlerAgrees(t, c, []string{cluster}, out, nil, nil)
	return out
}

// SGLang 0.5.23's --enable-hicache is --enable-hierarchical-cache: a container naming it gets
// neither the flag again nor, on a decode half, the retraction backup on top of it. (Not a
// golden: the readers test runs the pinned SGLang 0.5.18, which has no such alias.)
func TestInjectReadsEnableHicacheAsTheHierarchicalCache(t *testing.T) {
	for _, c := range []struct {
		name, args string
		tail       []string
	}{
		{"a server naming the alias", `["--model-path", "m", "--enable-hicache"]`, []string{}},
		{"a decode half naming a prefix of the alias", `["--model-path", "m", "--disaggregation-mode", "decode", "--enable-hic"]`, []string{}},
		{"a decode half naming neither", `["--model-path", "m", "--disaggregation-mode", "decode"]`, []string{"--disaggregation-decode-retraction-backup", "cpu_tensor"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := injectInline(t, `apiVersion: v1
kind: Pod
metadata:
  name: bench
  namespace: team-a
  labels: {kvcache.gpustack.ai/inject: "true"}
  annotations: {kvcache.gpustack.ai/binding: team-a, kvcache.gpustack.ai/engine: SGLang}
spec:
  containers:
    - name: server
      image: lmsysorg/sglang:v0.5.23
      command: ["python3", "-m", "sglang.launch_server"]
      args: `+c.args+"\n")
			pod, _, _, ok := podOf(t, splitDocuments("out", []byte(out))[0])
			require.True(t, ok)
			args := pod.Spec.Containers[0].Args
			i := slices.Index(args, "--hicache-storage-backend")
			require.GreaterOrEqual(t, i, 0)
			assert.Equal(t, c.tail, args[i+4:], "after --hicache-storage-backend mooncake --kv-cache-dtype bfloat16")
		})
	}
}

// kvcache inject -o json prints one List: the items of an input List are items of it.
func TestInjectJSONFlattensAListsItems(t *testing.T) {
	dir := golden.Dir("inject")
	code, out, errOut := kvcache(t, "", "inject", "-f", filepath.Join(dir, "list-of-workloads.yaml"), "--cluster", filepath.Join(dir, "cluster.yaml"), "-o", "json")
	require.Equal(t, 0, code, errOut)
	var list struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	assert.Equal(t, "List", list.Kind)
	require.Len(t, list.Items, 2)
	assert.Equal(t, "ConfigMap", list.Items[0]["kind"])
	assert.Equal(t, "Deployment", list.Items[1]["kind"])
	assert.Contains(t, out, `"kvcache.gpustack.ai/injected"`)
}
