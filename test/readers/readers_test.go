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
	Name     string         `json:"name"`
	Accepted bool           `json:"accepted"`
	Errors   []string       `json:"errors"`
	Read     map[string]any `json:"read"`
}

// harnessArgs are the arguments that select release r for harness.py: the release, where the
// table says its reader lives, and on vLLM-Ascend the vLLM it runs in.
func harnessArgs(dir string, r engines.Release) []string {
	args := []string{filepath.Join(repo(), "test", "readers", "harness.py"), "--readers", dir,
		"--release", r.Engine + "==" + r.Version, "--reader", r.Reader}
	if r.Base != "" {
		args = append(args, "--base", r.Base)
	}
	return args
}

// runHarness feeds cases to harness.py under release r, one process for all of them, and
// returns a verdict per case, in order. A harness that cannot run fails the test, naming the
// release.
func runHarness(t *testing.T, r engines.Release, cases []harnessCase) []verdict {
	t.Helper()
	dir := readersDir(t)
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "venv", "bin", "python"), append(harnessArgs(dir, r), "-")...)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("test/readers/harness.py could not run %s %s: %v\n%s", r.Engine, r.Version, err, stderr.String())
	}
	var vs []verdict
	if err := json.Unmarshal(stdout.Bytes(), &vs); err != nil || len(vs) != len(cases) {
		t.Fatalf("test/readers/harness.py printed no verdict per case for %s %s (%v):\n%s%s", r.Engine, r.Version, err, stdout.String(), stderr.String())
	}
	return vs
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

// runAll runs every case under every release the table supports of the case's engine; a
// rejection names the release and the golden.
func runAll(t *testing.T, cases []harnessCase) {
	t.Helper()
	for _, e := range engines.All() {
		var mine []harnessCase
		for _, c := range cases {
			if c.Engine == e.ID {
				mine = append(mine, c)
			}
		}
		for _, r := range e.Releases() {
			if !r.Supported {
				continue
			}
			t.Run(e.ID+"-"+r.Version, func(t *testing.T) {
				t.Parallel()
				vs := runHarness(t, r, mine)
				for i, v := range vs {
					if !v.Accepted {
						t.Errorf("%s %s rejects what %s configures:\n%s", e.Name, r.Version, mine[i].Name, strings.Join(v.Errors, "\n"))
					}
				}
				t.Logf("%d containers accepted by %s %s", len(vs), e.Name, r.Version)
			})
		}
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
		name    string
		c       harnessCase
		release engines.Release // the engine's pin when empty
		accept  bool
		reason  []string // substrings of the rejection: the reader, and its own words
	}{
		{name: "SGLang 0.5.21 rejects fp4_e2m1, which it dropped from --kv-cache-dtype",
			c: withArg(sglang, "--kv-cache-dtype", "fp4_e2m1"), release: release(t, engines.SGLang, "0.5.21"),
			reason: []string{"ServerArgs argparse", "invalid choice: 'fp4_e2m1'"}},
		{name: "SGLang 0.5.20 still accepts fp4_e2m1",
			c: withArg(sglang, "--kv-cache-dtype", "fp4_e2m1"), release: release(t, engines.SGLang, "0.5.20"), accept: true},
		{name: "vLLM 0.33.0 rejects a dtype outside CacheDType at config time",
			c:       withArg(withClientConfig(t, vllm, standalone), "--kv-cache-dtype", "fp4_e2m1"),
			release: release(t, engines.VLLM, "0.33.0"),
			reason:  []string{"--kv-cache-dtype", "fp4_e2m1", "_validate_cache_dtype"}},
		{name: "vLLM 0.31.0 reads the file from its moved reader and still rejects it without mode",
			c:       withClientConfig(t, vllm, func(m map[string]any) { delete(m, "mode") }),
			release: release(t, engines.VLLM, "0.31.0"),
			reason:  []string{"vllm/distributed/mooncake_store.py", "embedded mode requires global_segment_size > 0"}},
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
			r := tc.release
			if r.Version == "" {
				r = pin(t, tc.c.Engine)
			}
			v := runHarness(t, r, []harnessCase{tc.c})[0]
			text := strings.Join(v.Errors, "\n")
			if v.Accepted != tc.accept {
				t.Fatalf("%s %s: accepted=%v, want %v\n%s", r.Engine, r.Version, v.Accepted, tc.accept, text)
			}
			for _, want := range tc.reason {
				if !strings.Contains(text, want) {
					t.Errorf("rejection does not say %q:\n%s", want, text)
				}
			}
			if !tc.accept && !strings.Contains(text, tc.c.Name) {
				t.Errorf("rejection does not name the golden container %q:\n%s", tc.c.Name, text)
			}
		})
	}
}

// pin is the release of engine id the reference was written against.
func pin(t *testing.T, id string) engines.Release {
	t.Helper()
	e, _ := engines.ByID(id)
	for _, r := range e.Releases() {
		if r.Pin {
			return r
		}
	}
	t.Fatalf("engines/releases.json marks no pin for %s", id)
	return engines.Release{}
}

func release(t *testing.T, e engines.Engine, version string) engines.Release {
	t.Helper()
	v := e.LookupRelease(version)
	if v.Release == nil || v.Status == engines.ReleaseNewer {
		t.Fatalf("engines/releases.json has no %s %s", e.Name, version)
	}
	return *v.Release
}

// releaseFacts are what harness.py --facts measures of a release from its own code.
type releaseFacts struct {
	Reader        string              `json:"reader"`
	Dtypes        []string            `json:"dtypes"`
	DtypesChecked string              `json:"dtypesChecked"`
	Flags         map[string][]string `json:"flags"`
	Base          string              `json:"base"`
	Client        *struct {
		Version string `json:"version"`
		Source  string `json:"source"`
	} `json:"client"`
}

// Every row of the support table is what its release's own code says: where the reader lives,
// the --kv-cache-dtype spellings and where they are checked, the flags injection writes and
// refuses with their other spellings, and on vLLM-Ascend the vLLM and the Mooncake client its
// image is built from. The table is never typed from memory.
func TestSupportTableIsWhatEachReleaseSays(t *testing.T) {
	dir := readersDir(t)
	for _, e := range engines.All() {
		flags := e.JudgedFlags()
		for _, r := range e.Releases() {
			t.Run(e.ID+"-"+r.Version, func(t *testing.T) {
				t.Parallel()
				var stderr bytes.Buffer
				cmd := exec.Command(filepath.Join(dir, "venv", "bin", "python"),
					append(harnessArgs(dir, r), "--facts", "--flags="+strings.Join(flags, ","))...)
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("test/readers/harness.py --facts for %s %s: %v\n%s", e.Name, r.Version, err, stderr.String())
				}
				var f releaseFacts
				require.NoError(t, json.Unmarshal(out, &f), "%s", out)
				where := fmt.Sprintf("engines/releases.json's %s %s", e.Name, r.Version)
				assert.Equal(t, f.Reader, r.Reader, "%s: reader", where)
				assert.Equal(t, f.Dtypes, r.Dtypes, "%s: dtypes", where)
				assert.Equal(t, f.DtypesChecked, r.DtypesChecked, "%s: dtypesChecked", where)
				assert.Equal(t, normalize(f.Flags), normalize(r.Flags), "%s: flags", where)
				if r.Supported {
					assert.ElementsMatch(t, flags, keys(r.Flags), "%s: a supported release has every flag injection writes or refuses", where)
				}
				if e.ID != engines.VLLMAscend.ID && f.Client != nil {
					// A wheel's METADATA (unpacked by caches built since it was kept) would
					// name a Mooncake requirement.
					assert.Contains(t, r.Client.Source, f.Client.Source, "%s: client.source", where)
					if f.Client.Version != "" {
						assert.Equal(t, f.Client.Version, r.Client.Version, "%s: client", where)
					}
				}
				if e.ID == engines.VLLMAscend.ID {
					assert.Equal(t, f.Base, r.Base, "%s: base", where)
					require.NotNil(t, f.Client, "%s: its Dockerfile pins no Mooncake client", where)
					assert.Equal(t, f.Client.Version, r.Client.Version, "%s: client", where)
					assert.Contains(t, r.Client.Source, f.Client.Source, "%s: client.source", where)
				}
			})
		}
	}
}

func normalize(m map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range m {
		if v == nil {
			v = []string{}
		}
		out[k] = v
	}
	return out
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
