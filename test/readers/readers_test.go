package readers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	runtimeconv "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/vocab"
)

// repo is the repository's top directory, found from this file's place in it.
func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	setupOnce sync.Once
	setupDir  string
	setupErr  error
)

// readersDir runs hack/readers.sh once per test binary (a no-op when its cache is there) and
// returns the directory it prints. A failure FAILS the test, naming the script.
func readersDir(t *testing.T) string {
	t.Helper()
	setupOnce.Do(func() {
		var stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(repo(), "hack", "readers.sh"))
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			setupErr = fmt.Errorf("hack/readers.sh (fetches the vLLM, SGLang and vLLM-Ascend releases from PyPI and the readers' venv) failed: %w\n"+
				"run `hack/readers.sh` on this machine and read its output\n%s", err, stderr.String())
			return
		}
		setupDir = strings.TrimSpace(string(out))
		for _, p := range []string{"manifest.json", filepath.Join("venv", "bin", "python")} {
			if _, err := os.Stat(filepath.Join(setupDir, p)); err != nil {
				setupErr = fmt.Errorf("hack/readers.sh printed %q, which has no %s (%w): rerun `hack/readers.sh`", setupDir, p, err)
			}
		}
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return setupDir
}

// podInfo is what a container's fieldRef variables may read.
type podInfo struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Annotations map[string]string `json:"annotations"`
	Labels      map[string]string `json:"labels"`
}

// harnessCase is harness.py's input: one container as the engine in it would see it.
type harnessCase struct {
	Name    string            `json:"name"`
	Engine  string            `json:"engine"`
	Command []string          `json:"command"`
	Args    []string          `json:"args"`
	Env     []corev1.EnvVar   `json:"env"`
	Files   map[string]string `json:"files"`
	Pod     podInfo           `json:"pod"`
}

type verdict struct {
	Accepted bool           `json:"accepted"`
	Read     map[string]any `json:"read"`
	Stderr   string         `json:"-"`
}

// runHarness feeds one case to harness.py. Exit 0 is accepted, 1 rejected (stderr holds one
// line per rejection, naming the case, the reader and the reader's own error); anything else is
// the harness failing to run, which fails the test.
func runHarness(t *testing.T, c harnessCase) verdict {
	t.Helper()
	dir := readersDir(t)
	in, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "venv", "bin", "python"),
		filepath.Join(repo(), "test", "readers", "harness.py"), "--readers", dir, "-")
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 1) {
		t.Fatalf("test/readers/harness.py could not run %s: %v\n%s%s", c.Name, err, stderr.String(), stdout.String())
	}
	var v verdict
	if jerr := json.Unmarshal(stdout.Bytes(), &v); jerr != nil {
		t.Fatalf("test/readers/harness.py printed no verdict for %s (%v):\n%s%s", c.Name, jerr, stdout.String(), stderr.String())
	}
	v.Stderr = stderr.String()
	if v.Accepted != (err == nil) {
		t.Fatalf("test/readers/harness.py: verdict %v but exit %v for %s", v.Accepted, err, c.Name)
	}
	return v
}

// document is one YAML document of a golden file.
type document struct {
	file  string // relative to the repository
	index int
	obj   *unstructured.Unstructured
}

func (d document) label() string {
	return fmt.Sprintf("%s#%d %s %s", d.file, d.index, d.obj.GetKind(), d.obj.GetName())
}

func readDocuments(t *testing.T, pattern string, skip func(string) bool) []document {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repo(), pattern))
	if err != nil {
		t.Fatal(err)
	}
	var docs []document
	for _, f := range files {
		if skip != nil && skip(f) {
			continue
		}
		rel, _ := filepath.Rel(repo(), f)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for i := 0; ; i++ {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: document %d: %v", rel, i, err)
			}
			if len(m) == 0 {
				i--
				continue
			}
			docs = append(docs, document{file: rel, index: i, obj: &unstructured.Unstructured{Object: m}})
		}
	}
	if len(docs) == 0 {
		t.Fatalf("no golden documents match %s", pattern)
	}
	return docs
}

// podTemplate returns the Pod (or Pod template) a workload document runs, if it has one.
func podTemplate(t *testing.T, d document) (*corev1.PodTemplateSpec, bool) {
	t.Helper()
	var path []string
	switch d.obj.GetKind() {
	case "Pod":
		path = nil
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController", "PodTemplate":
		path = []string{"spec", "template"}
		if d.obj.GetKind() == "PodTemplate" {
			path = []string{"template"}
		}
	case "CronJob":
		path = []string{"spec", "jobTemplate", "spec", "template"}
	default:
		return nil, false
	}
	m := d.obj.Object
	if path != nil {
		var found bool
		var err error
		m, found, err = unstructured.NestedMap(d.obj.Object, path...)
		if err != nil || !found {
			t.Fatalf("%s: no %s: %v", d.label(), strings.Join(path, "."), err)
		}
	}
	var tpl corev1.PodTemplateSpec
	if err := runtimeconv.DefaultUnstructuredConverter.FromUnstructured(map[string]any{
		"metadata": m["metadata"], "spec": m["spec"],
	}, &tpl); err != nil {
		t.Fatalf("%s: not a Pod template: %v", d.label(), err)
	}
	if tpl.Namespace == "" {
		tpl.Namespace = d.obj.GetNamespace()
	}
	if tpl.Name == "" {
		tpl.Name = d.obj.GetName()
	}
	return &tpl, true
}

var annotationRef = regexp.MustCompile(`^metadata\.(annotations|labels)\['(.+)'\]$`)

// projectedFiles is what the kubelet writes at each path of c's downward-API volumes.
func projectedFiles(tpl *corev1.PodTemplateSpec, c corev1.Container) map[string]string {
	files := map[string]string{}
	volumes := map[string]corev1.Volume{}
	for _, v := range tpl.Spec.Volumes {
		volumes[v.Name] = v
	}
	field := func(f *corev1.ObjectFieldSelector) (string, bool) {
		if f == nil {
			return "", false
		}
		switch f.FieldPath {
		case "metadata.name":
			return tpl.Name, true
		case "metadata.namespace":
			return tpl.Namespace, true
		}
		m := annotationRef.FindStringSubmatch(f.FieldPath)
		if m == nil {
			return "", false
		}
		if m[1] == "annotations" {
			return tpl.Annotations[m[2]], true
		}
		return tpl.Labels[m[2]], true
	}
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok {
			continue
		}
		var items []corev1.DownwardAPIVolumeFile
		if v.DownwardAPI != nil {
			items = v.DownwardAPI.Items
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.DownwardAPI != nil {
					items = append(items, s.DownwardAPI.Items...)
				}
			}
		}
		for _, it := range items {
			if content, ok := field(it.FieldRef); ok {
				p := filepath.Join(vm.MountPath, it.Path)
				if vm.SubPath != "" {
					if it.Path != vm.SubPath {
						continue
					}
					p = vm.MountPath
				}
				files[p] = content
			}
		}
	}
	return files
}

func newCase(name, engine string, tpl *corev1.PodTemplateSpec, c corev1.Container) harnessCase {
	return harnessCase{
		Name:    name,
		Engine:  engine,
		Command: c.Command,
		Args:    c.Args,
		Env:     c.Env,
		Files:   projectedFiles(tpl, c),
		Pod:     podInfo{Name: tpl.Name, Namespace: tpl.Namespace, Annotations: tpl.Annotations, Labels: tpl.Labels},
	}
}

// injectedCases are the containers injection wrote into, one per golden document that carries
// an injection record: the one named by the container annotation, else the only one.
func injectedCases(t *testing.T) []harnessCase {
	t.Helper()
	var cases []harnessCase
	for _, d := range readDocuments(t, "snapshots/inject/*.injected.yaml", nil) {
		tpl, ok := podTemplate(t, d)
		if !ok {
			continue
		}
		raw, ok := tpl.Annotations[vocab.AnnotationInjected]
		if !ok {
			continue // not injected (unlabelled, or opted out); nothing an engine would read
		}
		var rec injection.Record
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			t.Fatalf("%s: %s is not an injection record: %v", d.label(), vocab.AnnotationInjected, err)
		}
		target := tpl.Annotations[vocab.AnnotationContainer]
		if target == "" {
			if len(tpl.Spec.Containers) != 1 {
				t.Fatalf("%s: injected, %d containers and no %s annotation: cannot tell which the engine's is",
					d.label(), len(tpl.Spec.Containers), vocab.AnnotationContainer)
			}
			target = tpl.Spec.Containers[0].Name
		}
		i := slices.IndexFunc(tpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == target })
		if i < 0 {
			t.Fatalf("%s: no container %q", d.label(), target)
		}
		c := tpl.Spec.Containers[i]
		cases = append(cases, newCase(d.label()+" container "+c.Name, rec.Engine, tpl, c))
	}
	return cases
}

// engineOf tells a rendered engine container's engine from what the engine itself reads: the
// connector named in --kv-transfer-config, or SGLang's entry point.
func engineOf(c corev1.Container) string {
	argv := append(slices.Clone(c.Command), c.Args...)
	for i, tok := range argv {
		v, ok := "", false
		if tok == "--kv-transfer-config" && i+1 < len(argv) {
			v, ok = argv[i+1], true
		} else if s, found := strings.CutPrefix(tok, "--kv-transfer-config="); found {
			v, ok = s, true
		}
		if ok {
			var kvt struct {
				Connector string `json:"kv_connector"`
			}
			if json.Unmarshal([]byte(v), &kvt) == nil {
				switch kvt.Connector {
				case "MooncakeStoreConnector":
					return "vllm"
				case "AscendStoreConnector":
					return "vllm-ascend"
				}
			}
		}
		if tok == "sglang.launch_server" || (filepath.Base(tok) == "sglang" && i+1 < len(argv) && argv[i+1] == "serve") {
			return "sglang"
		}
	}
	return ""
}

// cacheAttached: the container carries a store client configuration (the projected file, or
// SGLang's MOONCAKE_* variables, or a storage flag).
func cacheAttached(tpl *corev1.PodTemplateSpec, c corev1.Container) bool {
	if _, ok := tpl.Annotations[vocab.AnnotationClientConfig]; ok {
		return true
	}
	for _, e := range c.Env {
		if e.Name == "MOONCAKE_MASTER" || e.Name == "MOONCAKE_CONFIG_PATH" {
			return true
		}
	}
	return slices.ContainsFunc(c.Args, func(a string) bool {
		return a == "--hicache-storage-backend" || strings.HasPrefix(a, "--hicache-storage-backend=")
	})
}

func modelDeploymentCases(t *testing.T) []harnessCase {
	t.Helper()
	var cases []harnessCase
	inputs := func(f string) bool { return strings.HasSuffix(f, ".input.yaml") }
	for _, d := range readDocuments(t, "snapshots/modeldeployment/*.yaml", inputs) {
		if d.obj.GetKind() != "Deployment" {
			continue
		}
		tpl, _ := podTemplate(t, d)
		for _, c := range tpl.Spec.Containers {
			if !cacheAttached(tpl, c) {
				continue
			}
			engine := engineOf(c)
			if engine == "" {
				t.Fatalf("%s container %s: a cache is attached but neither a store connector nor SGLang's entry point is on its command line", d.label(), c.Name)
			}
			cases = append(cases, newCase(d.label()+" container "+c.Name, engine, tpl, c))
		}
	}
	return cases
}

// subtestName keeps a case's name readable as a subtest path (go test rewrites spaces).
func subtestName(c harnessCase) string {
	return strings.NewReplacer("snapshots/", "", " container ", "/", " ", "_").Replace(c.Name)
}

func runAll(t *testing.T, cases []harnessCase) {
	t.Helper()
	engines := map[string]int{}
	for _, c := range cases {
		engines[c.Engine]++
	}
	t.Logf("%d containers: %v", len(cases), engines)
	for _, c := range cases {
		t.Run(subtestName(c), func(t *testing.T) {
			t.Parallel()
			v := runHarness(t, c)
			if !v.Accepted {
				t.Errorf("a released engine rejects what %s configures:\n%s", c.Name, v.Stderr)
			}
			if flags, ok := v.Read["flags whose values were not checked"]; ok {
				t.Logf("%s passes flags whose values no reader here checks: %v", c.Name, flags)
			}
			read, _ := json.Marshal(v.Read)
			t.Logf("read: %s", read)
		})
	}
}

// Every container injection wrote into is accepted by its engine's readers.
func TestInjectedContainersAreAcceptedByTheEnginesOwnReaders(t *testing.T) {
	cases := injectedCases(t)
	requireEveryEngine(t, cases, "snapshots/inject")
	runAll(t, cases)
}

// Every cache-attached container of a rendered ModelDeployment role is accepted too.
func TestModelDeploymentContainersAreAcceptedByTheEnginesOwnReaders(t *testing.T) {
	cases := modelDeploymentCases(t)
	requireEveryEngine(t, cases, "snapshots/modeldeployment")
	runAll(t, cases)
}

// requireEveryEngine guards against a parse slip that finds nothing to check (a test that
// checks nothing passes).
func requireEveryEngine(t *testing.T, cases []harnessCase, where string) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.Engine] = true
	}
	for _, e := range []string{"vllm", "vllm-ascend", "sglang"} {
		if !seen[e] {
			t.Fatalf("%s: no container of engine %s found to check", where, e)
		}
	}
}

// goldenCase is the injected container of one inject golden, for the cases below to vary.
func goldenCase(t *testing.T, file string) harnessCase {
	t.Helper()
	for _, c := range injectedCases(t) {
		if strings.HasPrefix(c.Name, "snapshots/inject/"+file+"#") {
			return c
		}
	}
	t.Fatalf("snapshots/inject/%s has no injected container", file)
	return harnessCase{}
}

// withClientConfig rewrites the projected client-config file of c (both the file and the
// annotation it is projected from).
func withClientConfig(t *testing.T, c harnessCase, edit func(map[string]any)) harnessCase {
	t.Helper()
	out := c
	out.Files = map[string]string{}
	out.Pod.Annotations = map[string]string{}
	for k, v := range c.Pod.Annotations {
		out.Pod.Annotations[k] = v
	}
	raw, ok := c.Pod.Annotations[vocab.AnnotationClientConfig]
	if !ok {
		t.Fatalf("%s has no %s", c.Name, vocab.AnnotationClientConfig)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s: %s: %v", c.Name, vocab.AnnotationClientConfig, err)
	}
	edit(cfg)
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out.Pod.Annotations[vocab.AnnotationClientConfig] = string(b)
	for p, content := range c.Files {
		if content == raw {
			content = string(b)
		}
		out.Files[p] = content
	}
	return out
}

func withArg(c harnessCase, flag, value string) harnessCase {
	out := c
	out.Args = slices.Clone(c.Args)
	if i := slices.Index(out.Args, flag); i >= 0 && i+1 < len(out.Args) {
		out.Args[i+1] = value
	} else {
		out.Args = append(out.Args, flag, value)
	}
	return out
}

func withoutEnv(c harnessCase, name string) harnessCase {
	out := c
	out.Env = slices.DeleteFunc(slices.Clone(c.Env), func(e corev1.EnvVar) bool { return e.Name == name })
	return out
}

// The harness accepts the corrected vLLM file and rejects what a real engine rejects, each
// through the same function the golden cases use, so a check that cannot fail is caught here.
func TestHarnessVerdictsOnVariedGoldens(t *testing.T) {
	vllm := goldenCase(t, "vllm-server.injected.yaml")
	ascend := goldenCase(t, "vllm-ascend-cann.injected.yaml")
	sglang := goldenCase(t, "sglang-server.injected.yaml")
	standalone := func(m map[string]any) { m["mode"] = "standalone-store" }
	for _, tc := range []struct {
		name   string
		c      harnessCase
		accept bool
		reason []string // substrings of the rejection: the reader, and its own words
	}{
		{name: "vLLM accepts the file once it says mode standalone-store",
			c: withClientConfig(t, vllm, standalone), accept: true},
		{name: "vLLM rejects the file without mode: embedded mode needs a segment",
			c:      withClientConfig(t, vllm, func(m map[string]any) { delete(m, "mode") }),
			reason: []string{"MooncakeStoreConfig", "embedded mode requires global_segment_size > 0"}},
		{name: "vLLM rejects standalone-store with a segment",
			c:      withClientConfig(t, vllm, func(m map[string]any) { standalone(m); m["global_segment_size"] = 1 << 30 }),
			reason: []string{"MooncakeStoreConfig", "standalone-store mode requires global_segment_size == 0"}},
		{name: "vLLM rejects an unknown mode",
			c:      withClientConfig(t, vllm, func(m map[string]any) { m["mode"] = "client" }),
			reason: []string{"unknown Mooncake mode"}},
		{name: "vLLM rejects a zero local buffer",
			c:      withClientConfig(t, vllm, func(m map[string]any) { standalone(m); m["local_buffer_size"] = 0 }),
			reason: []string{"local_buffer_size must be > 0"}},
		{name: "vLLM rejects a dtype outside CacheDType",
			c:      withArg(withClientConfig(t, vllm, standalone), "--kv-cache-dtype", "fp4_e2m1"),
			reason: []string{"--kv-cache-dtype", "invalid choice: 'fp4_e2m1'"}},
		{name: "vLLM rejects an unknown kv_role",
			c:      withArg(withClientConfig(t, vllm, standalone), "--kv-transfer-config", `{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_store"}`),
			reason: []string{"KVTransferConfig", "kv_role"}},
		{name: "vLLM rejects an unknown key in --kv-transfer-config",
			c:      withArg(withClientConfig(t, vllm, standalone), "--kv-transfer-config", `{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both","tenant":"a"}`),
			reason: []string{"KVTransferConfig", "tenant"}},
		{name: "vLLM rejects a connector it does not register",
			c:      withArg(withClientConfig(t, vllm, standalone), "--kv-transfer-config", `{"kv_connector":"MooncakeStoreConnectorV2","kv_role":"kv_both"}`),
			reason: []string{"KVConnectorFactory", "not registered"}},
		{name: "vLLM-Ascend rejects a protocol other than ascend",
			c:      withClientConfig(t, ascend, func(m map[string]any) { m["protocol"] = "tcp" }),
			reason: []string{"MooncakeBackend", "does not support protocol 'tcp'"}},
		{name: "vLLM-Ascend rejects vLLM's connector name",
			c:      withArg(ascend, "--kv-transfer-config", `{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}`),
			reason: []string{"KVConnectorFactory", "AscendStoreConnector"}},
		{name: "vLLM-Ascend rejects a dtype its vLLM does not offer",
			c:      withArg(ascend, "--kv-cache-dtype", "nvfp4_4over6"),
			reason: []string{"--kv-cache-dtype", "invalid choice: 'nvfp4_4over6'"}},
		{name: "SGLang rejects fp8, which only vLLM spells that way",
			c:      withArg(sglang, "--kv-cache-dtype", "fp8"),
			reason: []string{"ServerArgs argparse", "invalid choice: 'fp8'"}},
		{name: "SGLang's argparse rejects a flag it does not have",
			c:      withArg(sglang, "--hicache-storage-backend-prefetch", "mooncake"),
			reason: []string{"ServerArgs argparse", "unrecognized arguments"}},
		{name: "SGLang rejects a Pod without MOONCAKE_MASTER",
			c:      withoutEnv(sglang, "MOONCAKE_MASTER"),
			reason: []string{"_load_config", "MOONCAKE_MASTER"}},
		{name: "SGLang rejects a segment size it cannot parse",
			c: func() harnessCase {
				c := sglang
				c.Env = slices.Clone(c.Env)
				for i := range c.Env {
					if c.Env[i].Name == "MOONCAKE_GLOBAL_SEGMENT_SIZE" {
						c.Env[i].Value = "4GiB"
					}
				}
				return c
			}(),
			reason: []string{"_load_config", "invalid literal for int()"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := runHarness(t, tc.c)
			if v.Accepted != tc.accept {
				t.Fatalf("accepted=%v, want %v\n%s", v.Accepted, tc.accept, v.Stderr)
			}
			for _, want := range tc.reason {
				if !strings.Contains(v.Stderr, want) {
					t.Errorf("rejection does not say %q:\n%s", want, v.Stderr)
				}
			}
			if !tc.accept && !strings.Contains(v.Stderr, tc.c.Name) {
				t.Errorf("rejection does not name the golden container %q:\n%s", tc.c.Name, v.Stderr)
			}
		})
	}
}

// The engines package keeps each engine's --kv-cache-dtype spellings, which admission refuses a
// Binding's dtype against; they are exactly the choices the released code defines.
func TestEnginesDtypeTablesAreTheReleasesChoices(t *testing.T) {
	facts := releaseFacts(t)
	for _, e := range engines.All() {
		t.Run(e.Name, func(t *testing.T) {
			var choices []string
			raw, _ := facts[e.ID]["kv_cache_dtype_choices"].([]any)
			for _, c := range raw {
				choices = append(choices, fmt.Sprint(c))
			}
			require.NotEmpty(t, choices, "no --kv-cache-dtype choices read for %s", e.ID)
			assert.Equal(t, choices, e.KVCacheDtypes, "engines.%s.KVCacheDtypes must list the choices of %s %v", e.Name, e.ID, facts[e.ID]["version"])
		})
	}
}

// releaseFacts runs harness.py --facts: what the released readers accept, read from their code.
func releaseFacts(t *testing.T) map[string]map[string]any {
	t.Helper()
	dir := readersDir(t)
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(dir, "venv", "bin", "python"),
		filepath.Join(repo(), "test", "readers", "harness.py"), "--readers", dir, "--facts")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("test/readers/harness.py --facts: %v\n%s", err, stderr.String())
	}
	var facts map[string]map[string]any
	if err := json.Unmarshal(out, &facts); err != nil {
		t.Fatalf("test/readers/harness.py --facts printed no JSON: %v\n%s", err, out)
	}
	return facts
}

// The facts the engines package encodes, as read from the releases; logged for review and
// checked for the one property every engine must have: a --kv-cache-dtype choice list.
func TestFactsAreReadFromTheReleases(t *testing.T) {
	dir := readersDir(t)
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(dir, "venv", "bin", "python"),
		filepath.Join(repo(), "test", "readers", "harness.py"), "--readers", dir, "--facts")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("test/readers/harness.py --facts: %v\n%s", err, stderr.String())
	}
	var facts map[string]map[string]any
	if err := json.Unmarshal(out, &facts); err != nil {
		t.Fatalf("test/readers/harness.py --facts printed no JSON: %v\n%s", err, out)
	}
	var names []string
	for _, e := range []string{"vllm", "vllm-ascend", "sglang"} {
		choices, _ := facts[e]["kv_cache_dtype_choices"].([]any)
		if len(choices) == 0 {
			t.Errorf("%s: no --kv-cache-dtype choices read", e)
		}
		names = append(names, fmt.Sprintf("%s %v: %v", e, facts[e]["version"], choices))
	}
	sort.Strings(names)
	t.Logf("--kv-cache-dtype choices:\n%s", strings.Join(names, "\n"))
}
